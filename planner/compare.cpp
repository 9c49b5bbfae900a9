// Comparison of two analysed runs.
#include <algorithm>
#include <map>
#include <tuple>

#include "core/checked.h"
#include "planner/analysis.h"

namespace moeprof::planner {

Comparison compare(const RunAnalysis& baseline, const RunAnalysis& candidate) {
  Comparison c;
  c.baseline_name = baseline.meta.name;
  c.candidate_name = candidate.meta.name;
  c.baseline_peak_activation_bytes = baseline.peak_activation_bytes;
  c.candidate_peak_activation_bytes = candidate.peak_activation_bytes;
  c.baseline_peak_total_bytes = baseline.peak_total_bytes;
  c.candidate_peak_total_bytes = candidate.peak_total_bytes;
  // Exact for figures within the byte limit (analyses refuse larger ones: core/checked.h).
  auto delta = [](uint64_t b, uint64_t a) { return bytes_delta(b, a); };
  c.peak_activation_delta = delta(baseline.peak_activation_bytes, candidate.peak_activation_bytes);
  c.peak_total_delta = delta(baseline.peak_total_bytes, candidate.peak_total_bytes);
  c.churn_delta = delta(baseline.churn_bytes, candidate.churn_bytes);
  c.allocations_delta = delta(baseline.allocations, candidate.allocations);

  CategoryBytes cb, cc;
  if (!baseline.devices.empty()) cb = baseline.devices[baseline.peak_device].live_at_activation_peak;
  if (!candidate.devices.empty()) cc = candidate.devices[candidate.peak_device].live_at_activation_peak;
  for (size_t i = 0; i < static_cast<size_t>(kNumCategories); ++i) c.category_deltas[i] = delta(cb.bytes[i], cc.bytes[i]);

  std::map<std::string, std::pair<uint64_t, uint64_t>> scopes;
  for (const auto& d : baseline.devices) {
    for (const auto& s : d.scopes) scopes[s.scope].first = std::max(scopes[s.scope].first, s.high_water_bytes);
  }
  for (const auto& d : candidate.devices) {
    for (const auto& s : d.scopes) scopes[s.scope].second = std::max(scopes[s.scope].second, s.high_water_bytes);
  }
  for (const auto& [name, hw] : scopes) {
    c.scope_deltas.push_back(ScopeDelta{name, hw.first, hw.second, delta(hw.first, hw.second)});
  }
  std::stable_sort(c.scope_deltas.begin(), c.scope_deltas.end(), [](const ScopeDelta& a, const ScopeDelta& b) {
    const uint64_t ma = a.delta < 0 ? -static_cast<uint64_t>(a.delta) : static_cast<uint64_t>(a.delta);
    const uint64_t mb = b.delta < 0 ? -static_cast<uint64_t>(b.delta) : static_cast<uint64_t>(b.delta);
    return ma > mb;  // stable: equal magnitudes keep name order
  });

  // Multiset difference of (scope, name, bytes); both lists are sorted by that key.
  const auto& bg = baseline.alloc_groups;
  const auto& cg = candidate.alloc_groups;
  size_t i = 0, j = 0;
  auto key = [](const AllocGroup& g) { return std::tie(g.scope, g.name, g.bytes); };
  while (i < bg.size() || j < cg.size()) {
    if (j == cg.size() || (i < bg.size() && key(bg[i]) < key(cg[j]))) {
      c.only_in_baseline.push_back(AllocGroupDelta{bg[i].scope, bg[i].name, bg[i].bytes, bg[i].count});
      ++i;
    } else if (i == bg.size() || key(cg[j]) < key(bg[i])) {
      c.only_in_candidate.push_back(AllocGroupDelta{cg[j].scope, cg[j].name, cg[j].bytes, cg[j].count});
      ++j;
    } else {
      if (bg[i].count > cg[j].count) {
        c.only_in_baseline.push_back(AllocGroupDelta{bg[i].scope, bg[i].name, bg[i].bytes, bg[i].count - cg[j].count});
      } else if (cg[j].count > bg[i].count) {
        c.only_in_candidate.push_back(AllocGroupDelta{cg[j].scope, cg[j].name, cg[j].bytes, cg[j].count - bg[i].count});
      }
      ++i;
      ++j;
    }
  }
  return c;
}

}  // namespace moeprof::planner
