// The per-allocation memory timeline of a run (runs[].memory_timeline in the JSON report): what
// the HTML page draws as stacked bands, one per allocation, on an x axis of forward progress.
// docs/report.md ("memory_timeline") describes the keys.
//
// - Allocations of the peak device, from the planner's lifetimes (analysed with keep_lifetimes):
//   alloc and free replay positions, bytes, category, name, scope, shape, dtype, up to four user
//   frames (innermost first, one string joined by newlines), and times in ns since the device's first event. The largest `max_allocations` are
//   listed one by one; the others are summed per panel (activation categories, the rest) into a
//   step series that is exact at the activation peak.
// - The x axis: forward progress in layers when the activation allocations carry layer scopes
//   ("layer.N/...", also "layers.N", "blk.N", "block.N", "h.N"): layer k starts at x = k (its
//   first activation allocation), the set-up before layer 0 takes x in [-1, 0) and what follows
//   the last layer [L, L + 1). Two runs of one model are then aligned layer by layer whatever
//   their set-up took. Without layer scopes, x is the time in ms since the first event.
#pragma once

#include <cstddef>

#include <nlohmann/json.hpp>

#include "planner/analysis.h"

namespace moeprof::reports {

struct TimelineOptions {
  size_t max_allocations = 6000;  // listed one by one (the largest); the rest are summarized
  size_t summary_points = 1500;   // points of each summarized series (min and max per bucket, peak exact)
};

// The memory_timeline object of a run, or null when the run has no lifetimes (analysed without
// keep_lifetimes) or no device.
nlohmann::ordered_json memory_timeline_json(const planner::RunAnalysis& run, const TimelineOptions& opts = {});

// Layer index of a scope ("layer.12/moe" -> 12; "model/layers.3/attn" -> 3), -1 without one;
// *label receives the component ("layer.12").
long layer_of_scope(std::string_view scope, std::string* label = nullptr);

}  // namespace moeprof::reports
