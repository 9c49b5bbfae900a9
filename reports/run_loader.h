// Reading a trace and analysing it in one call: what the plan/compare/report/export commands do.
#pragma once

#include <string>

#include "core/status.h"
#include "core/trace.h"
#include "planner/analysis.h"
#include "planner/categories.h"

namespace moeprof::reports {

struct LoadedRun {
  Trace trace;                   // empty when streamed
  planner::RunAnalysis analysis;
  bool streamed = false;         // planner::analyze_stream: no lifetimes, no records
};

// How categories are read: inferred for traced programs unless kept (planner/categories.h).
struct CategoryOptions {
  planner::CategoryInference mode = planner::CategoryInference::kAuto;
  std::vector<planner::CategoryRule> rules;
};

// read_trace + planner::analyze. The run name is the trace's meta name, else its file stem;
// `name_override` (when not empty) wins. Errors are read_trace's (kBadInput naming file and offset).
Result<LoadedRun> load_run(const std::string& path, const planner::AnalyzeOptions& opts = {},
                           const std::string& name_override = "", const CategoryOptions& categories = {});

// How a run is read (docs/planner.md, "Streaming"): in memory (every record, then analyze) or as a
// stream (planner::analyze_stream: memory in proportion to what is live, the same figures). auto
// streams unless the command needs every lifetime in memory (needs_memory), or would show something
// drawn from every lifetime (prefers_memory: the report's per-allocation timeline) and the inputs are
// smaller than auto_bytes in all. A streamed hand-off search that had to stop (a trace whose used
// buffers stay live to the end with many allocations of their size after: planner/handoff_stream.h)
// is redone in memory under auto when the inputs are smaller than auto_bytes.
enum class StreamMode { kAuto, kOn, kOff };
inline constexpr uint64_t kStreamAutoBytes = uint64_t{1} << 30;  // 1 GiB, about 16.8M records

struct LoadOptions {
  planner::AnalyzeOptions analyze;
  std::string name;               // the run's name (empty: the trace's meta name, else the file stem)
  CategoryOptions categories;
  StreamMode stream = StreamMode::kAuto;
  // What the command does that needs every record in memory (e.g. "--what-if"); empty if nothing.
  // With it, auto reads in memory and --stream on is an error naming it.
  std::string needs_memory;
  // What the command would draw from every lifetime and can do without (e.g. the report's
  // per-allocation timeline); empty if nothing. With it, auto reads in memory below auto_bytes.
  std::string prefers_memory;
  uint64_t auto_bytes = kStreamAutoBytes;
};

// One run from one trace or from the traces of its ranks (merged as rank_device_offsets says).
Result<LoadedRun> load_run(const std::vector<std::string>& paths, const LoadOptions& opts);

// A run argument: a trace file, or its ranks' trace files joined by commas ("r0.mtrace,r1.mtrace").
std::vector<std::string> split_run_argument(const std::string& arg);

}  // namespace moeprof::reports
