#include "profiler/nvtx_scope.h"

namespace moeprof::profiler {

bool parse_tensor_tag(std::string_view range, TensorTag* out) {
  if (range.substr(0, kTensorTagPrefix.size()) != kTensorTagPrefix) return false;
  std::string_view body = range.substr(kTensorTagPrefix.size());
  TensorTag t;
  size_t bar = body.rfind('|');
  if (bar != std::string_view::npos) {
    std::string_view cat = body.substr(bar + 1);
    t.category_known = parse_category(cat, &t.category);
    if (!t.category_known) t.category = Category::kUnknown;
    body = body.substr(0, bar);
  }
  size_t slash = body.rfind('/');
  if (slash == std::string_view::npos) {
    t.name = std::string(body);
  } else {
    t.scope = std::string(body.substr(0, slash));
    t.name = std::string(body.substr(slash + 1));
  }
  *out = std::move(t);
  return true;
}

std::string format_tensor_tag(std::string_view scope, std::string_view name, Category category) {
  std::string s(kTensorTagPrefix);
  if (!scope.empty()) {
    s += scope;
    s += '/';
  }
  s += name;
  s += '|';
  s += category_name(category);
  return s;
}

ResolvedScope resolve_scope(const std::vector<std::string>& stack) {
  ResolvedScope r;
  for (const std::string& range : stack) {
    TensorTag tag;
    if (parse_tensor_tag(range, &tag)) {
      r.tagged = true;
      r.tag = std::move(tag);  // the innermost tag wins
      continue;
    }
    if (range.empty()) continue;
    if (!r.path.empty()) r.path += '/';
    r.path += range;
  }
  return r;
}

}  // namespace moeprof::profiler
