// Chrome JSON trace-event export, opened by Perfetto UI (ui.perfetto.dev) and chrome://tracing.
// Per run and device one process ("NAME / device D") with:
//   - two counter tracks, "live total bytes" and "live activation bytes" ("ph":"C", one numeric
//     arg "bytes"), from the planner's downsampled timelines (a few thousand points at most);
//   - one async slice ("ph":"b"/"e", same pid, cat and id) per allocation lifetime, the largest
//     max_slices of them; never-freed allocations end at the last event of the trace;
//   - trace markers as async slices (cat "marker"); an unmatched begin is an instant event;
//   - kernels as complete events ("ph":"X") on one thread per stream, at most max_kernels;
//   - "M" metadata events naming processes and threads.
// Timestamps are microseconds since the first record of each run's trace.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/trace.h"
#include "planner/analysis.h"

namespace moeprof::reports {

struct PerfettoOptions {
  size_t max_slices = 20000;   // allocation slices per run (largest by bytes)
  size_t max_kernels = 20000;  // kernel slices per run (first ones in time)
};

struct PerfettoRun {
  std::string name;
  const Trace* trace = nullptr;                  // markers, kernels, time origin
  const planner::RunAnalysis* analysis = nullptr;  // lifetimes (keep_lifetimes) and timelines
};

std::string perfetto_json(const std::vector<PerfettoRun>& runs, const PerfettoOptions& opts = {});
Status write_perfetto(const std::string& path, const std::vector<PerfettoRun>& runs, const PerfettoOptions& opts = {});

}  // namespace moeprof::reports
