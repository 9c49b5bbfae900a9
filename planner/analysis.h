// Trace replay: allocation lifetimes, live bytes over time, peaks and the live set at the peak,
// per-category and per-scope high-water marks, churn, anomalies, reuse findings, and the
// comparison of two runs. CPU only; depends on the trace model (core/trace.h) alone.
//
// Definitions (docs/metrics.md is the reference):
// - Replay order: records sorted stably by (timestamp_ns, seq, position in the file). Only kAlloc,
//   kFree and kUse (and kPoolReserve / kGraphMem for their own peaks) take part; other kinds are
//   ignored. Live allocations are keyed by (device, address). AnalyzeOptions can restrict the
//   replay to some categories / memory kinds (the rest is left out as if absent).
// - An "instant" is one replayed event; live bytes are measured after each event. A peak is the
//   first instant (in replay order) at which the maximum is reached.
// - Peak activation memory = the peak of live bytes summed over the categories for which
//   counts_as_activation() is true (activation, workspace, communication, unknown).
// - Run-level figures are the maximum over devices (one device = one TP rank).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/trace.h"

namespace moeprof::planner {

inline constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

// Bytes per category (indexed by static_cast<int>(Category)).
struct CategoryBytes {
  std::array<uint64_t, kNumCategories> bytes{};

  uint64_t& operator[](Category c) { return bytes[static_cast<size_t>(c)]; }
  uint64_t operator[](Category c) const { return bytes[static_cast<size_t>(c)]; }
  uint64_t total() const;
  // Sum over the categories for which counts_as_activation() is true.
  uint64_t activation() const;
};

// One allocation, from its kAlloc to its kFree (or the end of the trace). What a use reads and
// writes comes first (kUseFields bytes), and a lifetime is 96 B aligned to 32:
// in a replay's table, a use touches one cache line and an allocation or a free two (at 104 B,
// unaligned, a lifetime spanned two or three lines and its use fields one or two).
struct alignas(32) Lifetime {
  uint64_t bytes = 0;
  uint64_t last_use = 0;             // timestamp of the last kUse; meaningful iff uses > 0
  uint32_t last_use_index = 0;       // position of the last kUse; meaningful iff uses > 0
  uint32_t uses = 0;                 // number of kUse events that hit this allocation
  uint16_t device = 0;
  Category category = Category::kUnknown;
  DType dtype = DType::kUnknown;
  MemKind mem_kind = MemKind::kHost;
  bool data_dependent = false;       // the alloc record's kFlagDataDependent
  uint32_t alloc_index = 0;          // position of the alloc in replay order (all replayed events)
  uint32_t free_index = 0;           // position of the free; UINT32_MAX = never freed
  uint64_t seq = 0;
  uint64_t address = 0;
  uint64_t t_alloc = 0;              // timestamp_ns of the alloc
  uint64_t t_free = kNever;          // timestamp_ns of the free; kNever = never freed
  StrId name_id{};                   // ids into RunAnalysis::strings (same ids as the trace)
  StrId scope_id{};
  StrId shape_id{};
  StackId stack_id{};
  uint32_t stream = 0;

  static constexpr size_t kUseFields = 24;  // bytes, last_use, last_use_index, uses
  bool freed() const { return t_free != kNever; }
  bool used() const { return uses > 0; }
};
static_assert(offsetof(Lifetime, uses) + sizeof(uint32_t) == Lifetime::kUseFields);
static_assert(sizeof(Lifetime) == 96, "a lifetime is three half lines");

// An allocation live at a peak (strings resolved).
struct LiveEntry {
  std::string name, scope, shape;
  Category category = Category::kUnknown;
  DType dtype = DType::kUnknown;
  uint64_t bytes = 0;
  uint64_t address = 0;
  uint64_t t_alloc = 0;
  uint64_t last_use = 0;             // 0 with uses == 0
  uint32_t uses = 0;
  bool held_after_last_use = false;  // had uses, and the last one was before the peak instant
  StackId stack_id{};                // call stack at allocation (ids of RunAnalysis::stacks' trace)
  uint32_t alloc_index = 0;          // replay position of the allocation
};

// High-water marks of one scope. Scopes are '/'-separated paths; every allocation counts toward
// its exact scope and each of its prefixes ("layer.3/moe/experts" counts toward
// "layer.3/moe/experts", "layer.3/moe" and "layer.3"). Unscoped allocations have scope "".
struct ScopeStat {
  std::string scope;
  uint32_t depth = 0;                          // number of '/'-separated components (0 for "")
  uint64_t high_water_bytes = 0;               // max live bytes in this scope subtree, all categories
  uint64_t activation_high_water_bytes = 0;    // same, activation categories only
  uint64_t live_at_activation_peak_bytes = 0;  // this subtree's share of the device's activation peak
  uint64_t allocated_bytes = 0;                // churn in this subtree
  uint64_t allocations = 0;
};

// A reuse finding: `alloc` was allocated while `dead` (same device, same size) was still live but
// already past its last use. Each dead buffer is offered to at most one later allocation.
struct Handoff {
  uint32_t alloc_lifetime = 0;  // indices into RunAnalysis::lifetimes' numbering (all devices)
  uint32_t dead_lifetime = 0;
  uint64_t bytes = 0;
  std::string alloc_name, alloc_scope, dead_name, dead_scope;
  bool at_activation_peak = false;  // both live at the device's activation peak
};

struct DeviceAnalysis {
  uint16_t device = 0;
  uint64_t peak_total_bytes = 0, peak_total_ts = 0;
  uint64_t peak_activation_bytes = 0, peak_activation_ts = 0;
  uint32_t peak_total_index = 0, peak_activation_index = 0;  // replay positions of the peaks
  CategoryBytes live_at_activation_peak;
  CategoryBytes live_at_total_peak;
  CategoryBytes peak_by_category;   // each category's own high-water mark
  CategoryBytes churn_by_category;  // bytes allocated in total, per category
  std::vector<LiveEntry> live_set_at_activation_peak;  // activation categories; bytes desc, then t_alloc
  // The whole live set's size, also when AnalyzeOptions::live_set_limit lists only its first
  // entries (their bytes add up to live_at_activation_peak.activation()).
  uint64_t live_set_entries = 0;
  std::vector<ScopeStat> scopes;                        // sorted by scope name
  uint64_t churn_bytes = 0, allocations = 0, frees = 0;
  uint64_t pool_reserved_peak_bytes = 0;  // max kPoolReserve bytes (summed over pools)
  // The same per kind of pool (a kPoolReserve record's mem_kind: the kind of the tensors it holds;
  // kStreamOrdered = cudaMallocAsync pools, kSymmetric = the NCCL symmetric pool).
  std::array<uint64_t, kMaxMemKind + 1> pool_reserved_peak_by_kind{};
  uint64_t graph_mem_peak_bytes = 0;      // max kGraphMem bytes
  // Downsampled (timestamp_ns, live bytes) after events; at most AnalyzeOptions::timeline_points
  // points; each time bucket keeps its min and max sample, so the peak is always present.
  std::vector<std::pair<uint64_t, uint64_t>> timeline_total, timeline_activation;

  // Reuse findings (meaningful when the trace has kUse events: has_uses).
  bool has_uses = false;
  uint64_t held_after_last_use_bytes = 0;  // at the activation peak, activation categories
  uint64_t never_used_at_peak_bytes = 0;   // at the activation peak: live, no uses at all
  uint64_t handoff_count = 0, handoff_bytes = 0;
  uint64_t handoff_bytes_at_activation_peak = 0;
  std::vector<Handoff> handoffs;  // first AnalyzeOptions::handoff_limit findings, replay order
};

struct Anomalies {
  uint64_t unknown_frees = 0;         // free of an address never allocated on that device
  uint64_t double_frees = 0;          // free of an address whose allocation was already freed
  uint64_t never_freed = 0;           // allocations live at the end of the trace
  uint64_t never_freed_bytes = 0;
  uint64_t zero_size_allocs = 0;
  uint64_t null_frees = 0;            // free of address 0 with nothing live there (a no-op, like free(nullptr))
  uint64_t alloc_over_live = 0;       // alloc at a live address: the old one is ended there
  uint64_t free_size_mismatches = 0;  // free with bytes != 0 that differ from the alloc's
  uint64_t unknown_uses = 0;          // kUse at an address with no live allocation
  uint64_t total() const {
    return unknown_frees + double_frees + zero_size_allocs + alloc_over_live + free_size_mismatches;
  }
};

// Allocations grouped by (scope, name, frame, bytes): the multiset compare() matches runs by.
// An unnamed allocation with a call stack (a traced program) is known by its innermost user frame
// (planner/stacks.h, "forward (model.py:42)"); `frame` is "" for named ones and those with no stack.
struct AllocGroup {
  std::string scope, name, frame;
  uint64_t bytes = 0;
  uint64_t count = 0;
};
// The groups as the analysis keeps them: each distinct (scope, name, frame) once, as a label, and
// per group only (label, bytes, count), 16 B. A trace whose sizes do not repeat has one group per
// allocation; only what a report lists is turned into strings (compare()).
struct AllocLabel {
  std::string scope, name, frame;
};
struct AllocGroupCount {
  uint64_t bytes = 0;
  uint32_t label = 0;  // index into AllocGroups::labels
  uint32_t count = 0;  // at most the replayed events (< 2^32)
};
struct AllocGroups {
  std::vector<AllocLabel> labels;        // distinct, sorted by (scope, name, frame)
  std::vector<AllocGroupCount> groups;   // distinct, sorted by (label, bytes): the order of (scope, name, frame, bytes)
  bool empty() const { return groups.empty(); }
  size_t size() const { return groups.size(); }
  // Every group with its strings, in order (tests, small runs).
  std::vector<AllocGroup> expand() const;
};

// A use by an op or the end of a marker range, at a replay position (AnalyzeOptions::keep_event_index).
// For a marker, `pos` is the number of replayed events before it.
struct OpEvent {
  uint32_t pos = 0;
  uint16_t device = 0;
  StrId name{};  // the op (kUse) or the marker's name
};

// A counter the trace records (EventKind::kCounter, e.g. a serving run's "kv_pool.tokens_used"):
// every sample of one (device, counter name), in record order.
struct CounterPoint {
  uint64_t ts = 0;     // timestamp_ns of the record
  uint64_t step = 0;   // the record's step (its address field)
  uint64_t value = 0;  // the record's value (its bytes field)
};
struct CounterSeries {
  std::string name;
  uint16_t device = 0;
  uint64_t max_value = 0;
  std::vector<CounterPoint> points;
};

struct RunAnalysis {
  RunMeta meta;
  std::vector<DeviceAnalysis> devices;  // sorted by device id
  // Run level = max over devices. peak_device: index into `devices` with the largest activation peak.
  uint64_t peak_activation_bytes = 0, peak_total_bytes = 0, churn_bytes = 0, allocations = 0;
  size_t peak_device = 0;
  Anomalies anomalies;                  // summed over devices
  uint64_t dropped_records = 0;
  bool truncated = false;
  std::string truncation_note;
  uint64_t replayed_events = 0;         // kAlloc + kFree + kUse + kPoolReserve + kGraphMem
  bool reordered = false;               // input was not in replay order and was sorted
  // Not empty when a figure would exceed the byte limit (2^63-1, core/checked.h) or the trace is
  // too long to replay: the figures are then meaningless, and every front end refuses the trace
  // with this message (bad input).
  std::string limit_error;
  std::vector<std::string> strings;     // the trace's string table (ids used by Lifetime)
  StackTable stacks;                    // the trace's call stacks (Lifetime::stack_id)
  AllocGroups alloc_groups;              // empty unless AnalyzeOptions::alloc_groups
  // All lifetimes in alloc replay order, when AnalyzeOptions::keep_lifetimes. Handoff indices
  // refer to this numbering (which is also used when lifetimes are not kept).
  std::vector<Lifetime> lifetimes;
  bool handoffs_computed = true;        // AnalyzeOptions::findings, and the search ran to the end
  std::string handoffs_note;            // why a search asked for did not run to the end ("" when it did)
  bool streamed = false;                // analyze_stream (planner/stream.h): no lifetimes kept
  // Timestamp of the first replayed event (before any filter): the start of the trace, from which
  // reports measure times ("78.8 ms"); 0 when nothing was replayed.
  uint64_t start_ts = 0;
  std::string categories_note;          // how categories were inferred ("" = the trace's own)
  // Transient allocations of one family (name or innermost user frame, scope pattern) whose size
  // grows from one occurrence to the next, e.g. a buffer re-allocated larger every step.
  struct Growth {
    std::string label, scope;
    uint64_t occurrences = 0, first_bytes = 0, last_bytes = 0;
  };
  std::vector<Growth> growth;
  // The trace's counters (kCounter records), in order of their first sample. Not replayed: they
  // take no replay position and never change a memory figure.
  std::vector<CounterSeries> counters;
  // With AnalyzeOptions::keep_event_index: the timestamp of every replay position, every use by an
  // op and every marker end, in replay order (what-if rules locate "after op X" with them).
  std::vector<uint64_t> position_ts;
  std::vector<OpEvent> op_uses, marker_ends;
  // How many entries the replay's tables held at the end: each grows with the distinct names,
  // scopes, sizes, addresses or with what is live at once, never with the number of events
  // (tests/reports/stream_test.cpp checks it).
  struct ReplayTables {
    uint64_t scope_nodes = 0;       // scope paths and their prefixes
    uint64_t scope_counters = 0;    // (device, scope node) counters
    uint64_t scope_chains = 0;      // (device, scope id) pairs
    uint64_t growth_groups = 0;     // (name or innermost frame, scope family)
    uint64_t alloc_groups = 0;      // (scope, name or stack, bytes), with AnalyzeOptions::alloc_groups
    uint64_t addresses = 0;         // (device, address) allocation states
    uint64_t lifetime_slots = 0;    // lifetimes held: all when kept, else the most open at once
    uint64_t handoff_held = 0;      // the most allocations and buffers the hand-off search held at once (streamed)
    bool handoff_thread = false;    // the streamed hand-off search ran in a thread of its own
  } tables;

  const std::string& str(StrId id) const { return index_of(id) < strings.size() ? strings[index_of(id)] : strings.at(0); }
  const DeviceAnalysis* device(uint16_t id) const;
};

// Every allocation of every device has its lifetime (analyze() with keep_lifetimes).
inline bool has_every_lifetime(const RunAnalysis& run) {
  uint64_t n = 0;
  for (const auto& d : run.devices) n += d.allocations;
  return run.lifetimes.size() == n;
}

// Open allocations from which the streamed replay's tables outgrow the caches of the 2-core
// machine: the replay gives hints ahead (Replayer::prefetching) and the hand-off search runs in a
// thread of its own (AnalyzeOptions::handoff_thread_slots). bench/stream at 1e7 events: 16,384
// open allocations (4 devices x 4,096) ran in half the time with both; 8,192 (4 x 2,048) ran 15
// to 30% slower with both from the start, so below this they stay off.
inline constexpr size_t kManyLiveSlots = 12288;

struct AnalyzeOptions {
  size_t timeline_points = 2000;  // per timeline; 0 = no timeline
  bool keep_lifetimes = true;
  size_t live_set_limit = 0;      // entries listed per device, the largest (0 = all); counts are complete
  size_t handoff_limit = 100;     // handoffs listed per device (counts are always complete)
  // Which allocations take part (docs/metrics.md, "Filters"): bit i of category_mask = Category i,
  // bit i of mem_kind_mask = MemKind i (out-of-range values count as kUnknown / kOther). An alloc
  // outside either mask is ignored, and so are the free and the uses that follow it at the same
  // (device, address) until an allocation that takes part is made there: they are not counted as
  // anomalies. Ignored records are left out of the replay as if absent (they take no replay
  // position and do not count in replayed_events); a device with no remaining record does not
  // appear. kPoolReserve and kGraphMem records are never filtered. Default: everything.
  uint32_t category_mask = ~0u;
  uint32_t mem_kind_mask = ~0u;
  // Hand-off findings need every lifetime in memory until the end; without them (and without
  // keep_lifetimes) the replay keeps only what is live, and RunAnalysis::handoffs_computed is false.
  bool findings = true;
  // The streamed analysis searches hand-offs as it goes (planner/handoff_stream.h): allocations wait
  // while their best candidate may still be used. Waiting allocations and the freed buffers held for
  // them (about 40 B each) are at most this many; past it the search stops (handoffs_computed false,
  // handoffs_note says why) rather than grow with the trace.
  size_t handoff_max_waiting = size_t{1} << 21;
  // From this many open allocations on (the search's slot table outgrowing the caches), the
  // streamed search runs in a thread of its own beside the replay (planner/handoff_stream.h); 0:
  // from the start; SIZE_MAX: never. Where std::thread::hardware_concurrency() reports one hardware
  // thread (it does not see CPU quotas), or no thread can be started, it never runs.
  size_t handoff_thread_slots = kManyLiveSlots;
  bool keep_event_index = false;
  // RunAnalysis::alloc_groups, the (scope, name, frame, bytes) multiset that compare() matches runs
  // by: one entry (16 B) per distinct size of each (scope, name), so up to one per allocation in a
  // trace whose sizes vary. Commands that compare nothing (plan, a report of one run) leave it off.
  bool alloc_groups = true;
  // Per record index: the category the replay uses for that allocation instead of the record's
  // (planner/categories.h infers them for traced programs); nullptr = the records' own.
  const std::vector<Category>* record_categories = nullptr;
};

// Mask helpers: category_bit(Category::kGraph), mem_kind_bit(MemKind::kStreamOrdered).
// all_categories_except(Category::kGraph) = every category but the graph one.
constexpr uint32_t category_bit(Category c) { return 1u << static_cast<uint32_t>(c); }
constexpr uint32_t mem_kind_bit(MemKind k) { return 1u << static_cast<uint32_t>(k); }
constexpr uint32_t all_categories_except(Category c) { return ~category_bit(c); }

RunAnalysis analyze(const Trace& trace, const AnalyzeOptions& opt = {});

// Comparison of two runs. Deltas are candidate - baseline.
struct ScopeDelta {
  std::string scope;
  uint64_t baseline_high_water_bytes = 0, candidate_high_water_bytes = 0;  // all categories, max over devices
  int64_t delta = 0;
  uint64_t baseline_activation_high_water_bytes = 0, candidate_activation_high_water_bytes = 0;
  int64_t activation_delta = 0;
};

// The live-at-peak diff: the activation allocations live at each run's activation peak (on its
// peak device), matched tensor by tensor. Matching, in order: the same (scope, name, category,
// bytes) is unchanged (no row); the same tensor in another instance of its scope family
// (family_scope: "layer.3/moe" ~ "layer.4/moe") with the same bytes is `kMoved`; with other bytes
// `kResized`. What is left of the baseline's set is `kFreed` (the candidate allocates the tensor,
// but it is not live at the candidate's peak) or `kNotAllocated` (the candidate never allocates
// it); what is left of the candidate's set is `kAdded` (the baseline allocates it, not live at its
// peak) or `kNew`. The rows' deltas sum to the peak activation delta of the peak devices.
enum class LiveChange : uint8_t { kFreed, kNotAllocated, kMoved, kResized, kAdded, kNew };
std::string_view live_change_name(LiveChange c);

struct LiveDiffRow {
  LiveChange change = LiveChange::kFreed;
  std::string name, baseline_scope, candidate_scope, shape;  // a scope is "" on the side that lacks it
  Category category = Category::kUnknown;
  DType dtype = DType::kUnknown;
  uint64_t baseline_bytes = 0, candidate_bytes = 0;
  int64_t delta = 0;  // candidate_bytes - baseline_bytes
  bool baseline_held_after_last_use = false;
  std::vector<std::string> stack;  // innermost user frames (of whichever side has them)
};

struct LiveDiff {
  std::vector<LiveDiffRow> rows;  // largest |delta| first, then moved rows; ties by name and scope
  uint64_t unchanged_tensors = 0, unchanged_bytes = 0;
  uint64_t baseline_bytes = 0, candidate_bytes = 0;  // the live sets' sums (= each peak device's activation peak)
  int64_t delta = 0;                                 // sum of the rows' deltas = candidate_bytes - baseline_bytes
};

LiveDiff diff_live_at_peak(const RunAnalysis& baseline, const RunAnalysis& candidate);
struct AllocGroupDelta {
  std::string scope, name, frame;  // frame: as AllocGroup::frame
  uint64_t bytes = 0;
  uint64_t count = 0;  // how many more of these the run that has them holds
};
struct Comparison {
  std::string baseline_name, candidate_name;
  uint64_t baseline_peak_activation_bytes = 0, candidate_peak_activation_bytes = 0;
  uint64_t baseline_peak_total_bytes = 0, candidate_peak_total_bytes = 0;
  int64_t peak_activation_delta = 0;
  int64_t peak_total_delta = 0;
  uint64_t baseline_churn_bytes = 0, candidate_churn_bytes = 0;
  uint64_t baseline_allocations = 0, candidate_allocations = 0;
  int64_t churn_delta = 0;
  int64_t allocations_delta = 0;
  // Live-at-activation-peak per category, on each run's peak device.
  std::array<int64_t, kNumCategories> category_deltas{};
  CategoryBytes baseline_live_at_peak, candidate_live_at_peak;
  // Scopes in either run, by |activation delta| desc, then |delta| desc, then name.
  std::vector<ScopeDelta> scope_deltas;
  // The multiset difference of the allocation groups, in (scope, name, frame, bytes) order: the
  // first `group_limit` entries of each side (compare()); the totals count every entry.
  std::vector<AllocGroupDelta> only_in_baseline, only_in_candidate;
  uint64_t only_in_baseline_groups = 0, only_in_candidate_groups = 0;  // entries in all
  uint64_t only_in_baseline_bytes = 0, only_in_candidate_bytes = 0;    // sum of bytes x count over them
  LiveDiff live_at_peak_diff;
};

// group_limit: how many entries of each only_in_* list are kept (the rest only counted); a report
// that lists N needs N.
Comparison compare(const RunAnalysis& baseline, const RunAnalysis& candidate, size_t group_limit = SIZE_MAX);

}  // namespace moeprof::planner
