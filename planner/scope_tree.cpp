#include "planner/scope_tree.h"

#include <algorithm>
#include <limits>

namespace moeprof::planner {

uint32_t scope_depth(std::string_view s) {
  if (s.empty()) return 0;
  return static_cast<uint32_t>(std::count(s.begin(), s.end(), '/') + 1);
}

std::pair<uint32_t, uint32_t> ScopeTree::chain(StrId scope) {
  constexpr uint32_t kUnset = std::numeric_limits<uint32_t>::max();
  const uint32_t id = index_of(scope);
  if (id >= chain_of_.size()) chain_of_.resize(std::max<size_t>(id + 1, strings_.size()), {kUnset, 0});
  auto& c = chain_of_[id];
  if (c.first != kUnset) return c;
  std::string_view s = id < strings_.size() ? std::string_view(strings_[id]) : std::string_view();
  const auto begin = static_cast<uint32_t>(chain_nodes_.size());
  if (s.empty()) {
    chain_nodes_.push_back(node(""));
  } else {
    // Exact scope, then shorter prefixes, the longest of at most kMaxScopeDepth components.
    // Empty components ("a//b") are kept as written.
    chain_nodes_.push_back(node(s));
    std::vector<size_t> cuts;  // ends of the prefixes, shortest first
    for (size_t i = 1; i < s.size() && cuts.size() < kMaxScopeDepth; ++i)
      if (s[i] == '/') cuts.push_back(i);
    for (auto it = cuts.rbegin(); it != cuts.rend(); ++it) chain_nodes_.push_back(node(s.substr(0, *it)));
  }
  c = {begin, static_cast<uint32_t>(chain_nodes_.size())};
  return c;
}

uint32_t ScopeTree::node(std::string_view path) {
  auto it = index_.find(path);
  if (it != index_.end()) return it->second;
  const auto id = static_cast<uint32_t>(names_.size());
  names_.emplace_back(path);
  index_.emplace(std::string_view(names_.back()), id);
  return id;
}

}  // namespace moeprof::planner
