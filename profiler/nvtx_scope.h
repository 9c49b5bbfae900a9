// NVTX range stacks -> moeprof scopes. Pure string handling, no CUPTI.
//
// An allocation made while NVTX ranges "prefill", "layer.3", "moe" are pushed on the allocating
// thread gets scope "prefill/layer.3/moe" (flag kFlagInferredScope). A range named
//   moeprof.tensor:<scope>/<name>|<category>      e.g. "moeprof.tensor:layer.3/moe/w13|weights"
// (pushed by moeprof's CUDA backend around each allocation) is a tag, not a scope level: the
// innermost tag on the stack sets the allocation's scope, name and category exactly.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/trace.h"

namespace moeprof::profiler {

inline constexpr std::string_view kTensorTagPrefix = "moeprof.tensor:";

struct TensorTag {
  std::string scope;  // everything before the last '/' ("" when there is none)
  std::string name;   // after the last '/'
  Category category = Category::kUnknown;
  bool category_known = false;  // false: no '|' or an unknown category name (then kUnknown)
};

// Parses "moeprof.tensor:<scope>/<name>|<category>". Returns false if `range` is not a tag.
bool parse_tensor_tag(std::string_view range, TensorTag* out);

// Formats a tag range name (used by moeprof's own backend and by tests).
std::string format_tensor_tag(std::string_view scope, std::string_view name, Category category);

struct ResolvedScope {
  std::string path;  // non-tag ranges joined with '/', outermost first
  bool tagged = false;
  TensorTag tag;     // valid iff tagged (the innermost tag)
};

ResolvedScope resolve_scope(const std::vector<std::string>& stack);

}  // namespace moeprof::profiler
