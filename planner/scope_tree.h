// Scope tree (internal to the planner): every distinct scope path and each of its '/'-prefixes
// is a node; chain(scope) lists the nodes an allocation in that scope counts toward, exact scope
// first. Memory is bounded by the trace's strings: a node's path is stored once, and only the
// first kMaxScopeDepth components of a path make prefix nodes (a deeper path counts toward its
// exact node and those prefixes; docs/metrics.md).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/trace.h"

namespace moeprof::planner {

inline constexpr uint32_t kMaxScopeDepth = 64;

uint32_t scope_depth(std::string_view s);

class ScopeTree {
 public:
  explicit ScopeTree(const std::vector<std::string>& strings) : strings_(strings) {}

  // [begin, end) into chain_nodes().
  std::pair<uint32_t, uint32_t> chain(StrId scope);
  const std::vector<uint32_t>& chain_nodes() const { return chain_nodes_; }
  size_t num_nodes() const { return names_.size(); }
  const std::string& name(uint32_t n) const { return names_[n]; }

 private:
  uint32_t node(std::string_view path);
  const std::vector<std::string>& strings_;
  std::vector<std::pair<uint32_t, uint32_t>> chain_of_;
  std::vector<uint32_t> chain_nodes_;
  std::deque<std::string> names_;                         // stable addresses: index_ keys view them
  std::unordered_map<std::string_view, uint32_t> index_;
};

}  // namespace moeprof::planner
