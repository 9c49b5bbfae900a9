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
#include "planner/address_map.h"
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

// True when `mode` asks for inference on this trace: infer always; auto with rules given, or for
// a CUPTI trace or an imported snapshot with at least one unknown allocation; keep never.
bool should_infer_categories(const Trace& trace, CategoryInference mode, bool has_rules = false);

struct InferredCategories {
  std::vector<Category> by_record;  // per record index; meaningful for kAlloc records
  // Allocations given each category, by the reason: rule, library (communication/workspace),
  // persistent, transient.
  uint64_t by_rule = 0, by_library = 0, driver = 0, persistent = 0, transient = 0;
  // decide_category's answers from library frames and scopes, per stack id and per scope id
  // (0: not yet known, else 1 + the category): found once per stack and scope, not per allocation.
  std::vector<uint8_t> library_by_stack, library_by_scope;
};

// Which allocations get a category: with kInfer every one (the recorded category ignored);
// otherwise those of unknown category get the whole decision (rules, then inference), and the
// others keep theirs unless a rule matches them (rules override recorded categories).
InferredCategories infer_categories(const Trace& trace, const std::vector<CategoryRule>& rules,
                                    CategoryInference mode = CategoryInference::kAuto);

// The same inference for a trace read as a stream (planner/stream.cpp), in two passes.
// Pass 1 feeds every record to PersistenceScan: work() each record as it comes (only timestamps
// matter), replayed() the allocations and frees in replay order with their index n in the input.
// State: the open allocations and the frees after the latest work so far, never the whole trace.
// After the last record, persistent() holds the indices of the allocations rule 5 calls persistent.
// Pass 2 calls decide_category for each allocation of unknown category.
class PersistenceScan {
 public:
  void work(const TraceRecord& r);
  void replayed(const TraceRecord& r, uint64_t n);
  std::vector<uint64_t> persistent() const;  // sorted
  bool any_unknown() const { return any_unknown_; }

 private:
  struct Open {
    uint64_t n, alloc_ts;
  };
  struct LateFree {
    uint64_t free_ts, n, alloc_ts;
    bool operator>(const LateFree& o) const { return free_ts > o.free_ts; }
  };
  // The work as seen so far by one definition (uses and kernels; allocations), and the frees not
  // (yet) before its end.
  struct Span {
    uint64_t begin = UINT64_MAX, end = 0;
    bool any = false;
    std::vector<LateFree> late;  // a min-heap by free_ts
    void advance(uint64_t ts);
    void freed(const LateFree& f);
  };
  AddressMap open_;            // (device, address) -> 1 + index into slab_
  std::vector<Open> slab_, never_freed_;
  std::vector<uint32_t> spare_;
  Span kernels_, allocs_;
  bool any_unknown_ = false;
};

// The decision for one allocation of unknown category: rules, library frames, driver memory, then
// persistent (weights) or transient (activation); counted in *out. `shell` gives the strings and
// stacks the rules and frames are read from.
Category decide_category(const TraceRecord& r, bool cupti, bool persistent, const std::vector<CategoryRule>& rules,
                         const RunAnalysis& shell, InferredCategories* out);
// The category of an allocation whose category is recorded: the first rule that matches it, else
// the recorded one (counted in out->by_rule when a rule applies).
Category rule_category(const TraceRecord& r, const std::vector<CategoryRule>& rules, const RunAnalysis& shell,
                       InferredCategories* out);
// Whether the allocation gets the whole decision (decide_category) rather than rules only.
inline bool decides_category(const TraceRecord& r, CategoryInference mode) {
  return mode == CategoryInference::kInfer || r.category == Category::kUnknown;
}

// One line saying how categories were inferred (RunAnalysis::categories_note).
std::string categories_note(const InferredCategories& c);

// should_infer_categories from the metadata and whether any allocation has category unknown.
bool should_infer_categories(const RunMeta& meta, bool any_unknown, CategoryInference mode, bool has_rules = false);

}  // namespace moeprof::planner
