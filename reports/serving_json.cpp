#include "reports/serving_json.h"

#include <algorithm>

namespace moeprof::reports {

using nlohmann::ordered_json;

std::optional<ordered_json> serving_json(const planner::RunAnalysis& run, size_t max_points) {
  auto it = run.meta.extra.find("serving");
  if (it == run.meta.extra.end()) return std::nullopt;
  ordered_json j = ordered_json::parse(it->second, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  // The occupancy: the highest tokens_used of each step, then of each range of steps.
  std::vector<std::pair<uint64_t, uint64_t>> per_step;
  uint64_t peak = 0;
  const uint16_t device = run.devices.empty() ? 0 : run.devices[run.peak_device].device;
  for (const planner::CounterSeries& c : run.counters) {
    if (c.name != "kv_pool.tokens_used" || c.device != device) continue;
    for (const planner::CounterPoint& p : c.points) {
      if (!per_step.empty() && per_step.back().first == p.step)
        per_step.back().second = std::max(per_step.back().second, p.value);
      else
        per_step.emplace_back(p.step, p.value);
      peak = std::max(peak, p.value);
    }
  }
  ordered_json points = ordered_json::array();
  max_points = std::max<size_t>(max_points, 1);
  const size_t per_bucket = (per_step.size() + max_points - 1) / max_points;
  for (size_t i = 0; i < per_step.size(); i += std::max<size_t>(per_bucket, 1)) {
    uint64_t v = 0;
    const size_t end = std::min(per_step.size(), i + std::max<size_t>(per_bucket, 1));
    for (size_t k = i; k < end; ++k) v = std::max(v, per_step[k].second);
    points.push_back(ordered_json::array({per_step[i].first, v}));
  }
  j["kv_pool_occupancy"] = {{"counter", "kv_pool.tokens_used"},
                            {"steps", per_step.size()},
                            {"steps_per_point", std::max<size_t>(per_bucket, 1)},
                            {"peak_tokens", peak},
                            {"points", points}};
  return j;
}

}  // namespace moeprof::reports
