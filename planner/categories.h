// Inferred categories for traced programs (docs/metrics.md, "Inferred categories"). A program
// traced by CUPTI or imported from a PyTorch snapshot has every allocation in category unknown, so
// "peak activation" would be the whole program. Inference gives each unknown allocation one of:
//   1. a user rule's category (`<category> SELECTOR` lines, selectors as in what-if rules);
//   2. communication: allocated from NCCL (a native frame in libnccl, or a Python frame in
//      torch/distributed), or in a scope naming nccl;
//   3. workspace: allocated from a math library (a native frame in libcublas/libcublasLt/libcudnn/
//      libcufft/libcusparse);
//   4. workspace: CUDA driver memory with no API call of the program behind it (CUPTI traces:
//      correlation id 0, no thread), e.g. kernel modules' static data loaded lazily;
//   5. weights ("persistent"): live through at least the second half of the work and still live at
//      its end; the work runs from the trace's first to its last use or kernel (without either,
//      from its first to its last allocation). Weights, buffers and caches that live across the
//      forward, also when the program's teardown frees them before the trace ends; not an output
//      kept from one iteration while the next one runs;
//   6. activation (transient): everything else, i.e. freed while the work went on.
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
  uint64_t by_rule = 0, by_library = 0, driver = 0, persistent = 0, transient = 0;
};

InferredCategories infer_categories(const Trace& trace, const std::vector<CategoryRule>& rules);

}  // namespace moeprof::planner
