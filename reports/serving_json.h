// The `serving` object of a run in the JSON report (docs/report.md, "serving"): the figures a
// serving run (`moeprof run --workload`) writes into its trace's metadata (extra["serving"], the
// executor's own accounting) plus the KV pool's occupancy over the steps, from the trace's counter
// records (kv_pool.tokens_used), one point per step (its highest value), at most `max_points`
// points (the highest value of each range of steps).
#pragma once

#include <cstddef>
#include <optional>

#include <nlohmann/json.hpp>

#include "planner/analysis.h"

namespace moeprof::reports {

// None when the run is not a serving run (or its summary does not parse).
std::optional<nlohmann::ordered_json> serving_json(const planner::RunAnalysis& run, size_t max_points = 1000);

}  // namespace moeprof::reports
