// Streaming analysis: traces too large for memory (tens of millions of events, several ranks) read
// frame by frame and replayed as they arrive, with state in proportion to what is live (open
// allocations, the scope table, per-device counters, the live set at each device's peak), not to
// the number of events. Figures equal analyze()'s on the same trace (tests/reports/stream_test.cpp),
// hand-offs included (searched as the replay goes: planner/handoff_stream.h), except: the
// timeline's buckets adapt to a time range not known in advance; lifetimes and the event index are
// not kept (what-if and arena plans use analyze()).
//
// Order: records are replayed in (timestamp, seq, position) order. Input already in that order
// goes straight through; out-of-order records are sorted in a bounded window (the tracer's skew is
// far below it): first a small one, then, when a record came later than it allows, the whole input
// again through the full window; a record later than that makes the whole input go through an
// external sort (sorted runs in temporary files, then a k-way merge).
// Several inputs are merged as the ranks of one run: inputs that each name one distinct device
// keep their devices; otherwise input i's devices are shifted past those of inputs 0..i-1
// (core/trace_merge.h, rank_device_offsets).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "planner/analysis.h"
#include "planner/categories.h"

namespace moeprof::planner {

struct StreamOptions {
  AnalyzeOptions analyze;            // keep_lifetimes and keep_event_index are ignored
  size_t reorder_window = size_t{1} << 20;  // records held for sorting at most (72 bytes each)
  // The first pass holds only this many (they stay in the CPU's caches); a record later than it
  // allows restarts the pass with reorder_window, and one later than that, with the external sort.
  size_t initial_window = size_t{1} << 16;
  bool parallel = true;              // one reader thread per input decodes frames ahead of the replay
  std::string temp_dir;              // external-sort runs ("" = the system temporary directory)
  // Category inference as in reports::load_run (planner/categories.h): a first pass finds the
  // persistent allocations (state: what is open, and the frees after the latest work).
  CategoryInference categories = CategoryInference::kKeep;
  std::vector<CategoryRule> category_rules;
};

struct StreamStats {
  uint64_t records = 0, bytes_read = 0;
  bool external_sort = false;
  uint64_t max_lateness = 0;         // the most records a late record was placed before
  size_t window = 0;                 // the reordering window of the pass that finished (0: external sort)
  uint32_t restarts = 0;             // passes restarted because a record came later than their window allowed
  uint64_t prefetched = 0;           // events replayed with hints given ahead (once the live set outgrows the caches)
};

Result<RunAnalysis> analyze_stream(const std::vector<std::string>& paths, const StreamOptions& opt,
                                   StreamStats* stats = nullptr);

}  // namespace moeprof::planner
