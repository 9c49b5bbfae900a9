// Chrome JSON trace-event export (the Trace Event Format), opened by Perfetto UI (ui.perfetto.dev)
// and chrome://tracing. Per run and device one process ("NAME / device D") with:
//   - counter tracks in bytes ("ph":"C", one numeric arg "bytes", so Perfetto names them
//     "<name> bytes"): "total", "activation memory" (the activation categories, what the peak
//     activation measures) and "category <name>" for each category that allocated, exact at every
//     alloc and free (thinned to min and max per bucket beyond max_counter_points, peaks kept);
//   - the peaks as process-scoped instants ("ph":"i","s":"p", cat "peak", args.bytes);
//   - the allocations, the largest max_slices, as complete events ("ph":"X") grouped by scope: one
//     thread per scope and lane, named by the scope ("layer.3/attn", "layer.3/attn (2)"),
//     overlapping lifetimes on separate lanes; a slice is named by the allocation's name, else its
//     innermost user frame, else its category and size; args: bytes, size, scope, shape, dtype, category;
//     never-freed allocations end at the last event of the trace;
//   - trace markers as async slices (cat "marker"); an unmatched begin is an instant event;
//   - kernels as complete events on one thread per stream, at most max_kernels;
//   - "M" metadata events naming processes and threads.
// Timestamps are microseconds since the first record of each run's trace. scripts/validate_trace_events.py
// checks every export the tests make against the format.
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
  size_t max_counter_points = 4000;  // samples per counter track
};

struct PerfettoRun {
  std::string name;
  const Trace* trace = nullptr;                  // markers, kernels, time origin
  const planner::RunAnalysis* analysis = nullptr;  // lifetimes (keep_lifetimes) and timelines
};

std::string perfetto_json(const std::vector<PerfettoRun>& runs, const PerfettoOptions& opts = {});
Status write_perfetto(const std::string& path, const std::vector<PerfettoRun>& runs, const PerfettoOptions& opts = {});

}  // namespace moeprof::reports
