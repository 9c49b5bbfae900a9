// `moeprof trace --report` / `--json` / `--out-json`: each trace written by a traced program, replayed by
// the planner in four views (four sets of allocations taking part, AnalyzeOptions masks), as one
// versioned JSON document (docs/report.schema.json, $defs/trace_report) and as text. The driver
// reports the memory it reserves for CUDA graphs as one allocation at address 0 (category graph);
// the program's own allocations are every other category.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/trace.h"
#include "planner/analysis.h"

namespace moeprof::reports {

inline constexpr int kTraceReportVersion = 1;

struct TraceView {
  const char* key;  // JSON key
  uint32_t category_mask, mem_kind_mask;
};
inline constexpr size_t kNumTraceViews = 4;
// all (everything), program (all but CUDA-graph memory), stream_ordered (cudaMallocAsync/pools),
// device_sync (cudaMalloc/cuMemAlloc).
const std::array<TraceView, kNumTraceViews>& trace_views();

struct TracedFile {
  std::string path;
  RunMeta meta;
  uint64_t records = 0, dropped_records = 0, kernels = 0, uses = 0;
  bool truncated = false;
  std::string truncation_note;
  std::array<planner::RunAnalysis, kNumTraceViews> views;
};

// Replays `trace` in every view.
TracedFile analyze_traced_file(const std::string& path, const Trace& trace);

// {"schema_version": 1, "kind": "trace_report", "generator": ..., "traces": [...]}.
nlohmann::ordered_json make_trace_report(const std::vector<TracedFile>& files);

// The text summary of one file (several lines, each starting with two spaces).
std::string trace_report_text(const TracedFile& f);

}  // namespace moeprof::reports
