// A small, self-contained replay of a trace: live bytes per device over time (records sorted by
// timestamp, then correlation id), peaks, per-scope allocated bytes. Used by `moeprof trace
// --report` and the profiler tests; the full analysis is planner::analyze (planner/analysis.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/trace.h"

namespace moeprof::profiler {

struct DeviceSummary {
  uint16_t device = 0;
  uint64_t peak_bytes = 0;       // max live bytes (allocs minus frees) over the replay
  uint64_t peak_ts = 0;
  uint64_t allocs = 0, frees = 0;
  uint64_t alloc_bytes = 0;      // churn
  uint64_t live_end_bytes = 0;   // still live at the end of the trace
  uint64_t pool_reserved_peak_bytes = 0;  // max over time of the sum of pool reserved sizes
  uint64_t graph_mem_bytes = 0;  // last kGraphMem value
};

struct TaggedAlloc {
  std::string scope, name;
  Category category = Category::kUnknown;
  uint64_t bytes = 0;
  uint16_t device = 0;
  bool inferred = false;  // scope from NVTX ranges (kFlagInferredScope)
};

struct TraceSummary {
  uint64_t records = 0, allocs = 0, frees = 0, kernels = 0, pool_records = 0, graph_records = 0;
  uint64_t unknown_frees = 0;      // frees of addresses with no live allocation
  uint64_t allocs_with_tid = 0;    // attribution joined
  uint64_t allocs_with_scope = 0;  // scope or name set
  uint64_t peak_bytes = 0;         // max over devices
  std::vector<DeviceSummary> devices;             // sorted by device
  std::map<std::string, uint64_t> scope_alloc_bytes;  // exact scope -> bytes allocated ("" = none)
  std::map<std::string, uint64_t> scope_allocs;       // exact scope -> number of allocations
  std::vector<TaggedAlloc> named;                      // allocations with a name (tags), file order
};

struct SummaryOptions {
  int mem_kind = -1;  // >= 0: only allocations/frees of this MemKind take part
};

TraceSummary summarize_trace(const Trace& trace, const SummaryOptions& opt = {});

}  // namespace moeprof::profiler
