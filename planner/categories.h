// Inferred categories for traced programs (docs/metrics.md, "Inferred categories"). A program
// traced by CUPTI or imported from a PyTorch snapshot has every allocation in category unknown, so
// "peak activation" would be the whole program. Inference gives each unknown allocation one of:
//   1. a user rule's category (`<category> SELECTOR` lines, selectors as in what-if rules);
//   2. communication: allocated from NCCL (a native frame in libnccl, or a Python frame in
//      torch/distributed), or in a scope naming nccl;
//   3. workspace: allocated from a math library (a native frame in libcublas/libcublasLt/libcudnn/
//      libcufft/libcusparse);
//   4. weights ("persistent"): still live at the end of the trace (weights, buffers, caches that
//      live across the forward);
//   5. activation (transient): everything else, i.e. freed during the trace.
// Peak activation of a traced program then means what it means for the executor.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/trace.h"
#include "planner/whatif.h"

namespace moeprof::planner {

enum class CategoryInference { kAuto, kInfer, kKeep };  // auto: infer for traced and imported programs

struct CategoryRule {
  Category category = Category::kUnknown;
  Selector selector;
  std::string origin;  // "FILE:LINE"
};

// One rule per line, '#' comments: "<category> SELECTOR", e.g. "weights name=*.weight".
Result<std::vector<CategoryRule>> parse_category_rules(std::string_view text, const std::string& source);
Result<std::vector<CategoryRule>> load_category_rules(const std::string& path);

// True when `mode` asks for inference on this trace (auto: a CUPTI trace or an imported snapshot
// with at least one unknown allocation).
bool should_infer_categories(const Trace& trace, CategoryInference mode);

struct InferredCategories {
  std::vector<Category> by_record;  // per record index; meaningful for kAlloc records
  // Allocations given each category, by the reason: rule, library (communication/workspace),
  // persistent, transient.
  uint64_t by_rule = 0, by_library = 0, persistent = 0, transient = 0;
};

InferredCategories infer_categories(const Trace& trace, const std::vector<CategoryRule>& rules);

}  // namespace moeprof::planner
