// Comparison of two analysed runs.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "core/checked.h"
#include "planner/analysis.h"
#include "planner/stacks.h"
#include "planner/whatif.h"

namespace moeprof::planner {

Comparison compare(const RunAnalysis& baseline, const RunAnalysis& candidate, size_t group_limit) {
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
  c.baseline_churn_bytes = baseline.churn_bytes;
  c.candidate_churn_bytes = candidate.churn_bytes;
  c.baseline_allocations = baseline.allocations;
  c.candidate_allocations = candidate.allocations;
  c.churn_delta = delta(baseline.churn_bytes, candidate.churn_bytes);
  c.allocations_delta = delta(baseline.allocations, candidate.allocations);

  CategoryBytes cb, cc;
  if (!baseline.devices.empty()) cb = baseline.devices[baseline.peak_device].live_at_activation_peak;
  if (!candidate.devices.empty()) cc = candidate.devices[candidate.peak_device].live_at_activation_peak;
  for (size_t i = 0; i < static_cast<size_t>(kNumCategories); ++i) c.category_deltas[i] = delta(cb.bytes[i], cc.bytes[i]);
  c.baseline_live_at_peak = cb;
  c.candidate_live_at_peak = cc;

  struct HighWater {
    uint64_t total = 0, activation = 0;
  };
  std::map<std::string, std::pair<HighWater, HighWater>> scopes;
  for (const auto& d : baseline.devices) {
    for (const auto& s : d.scopes) {
      auto& hw = scopes[s.scope].first;
      hw.total = std::max(hw.total, s.high_water_bytes);
      hw.activation = std::max(hw.activation, s.activation_high_water_bytes);
    }
  }
  for (const auto& d : candidate.devices) {
    for (const auto& s : d.scopes) {
      auto& hw = scopes[s.scope].second;
      hw.total = std::max(hw.total, s.high_water_bytes);
      hw.activation = std::max(hw.activation, s.activation_high_water_bytes);
    }
  }
  for (const auto& [name, hw] : scopes) {
    ScopeDelta sd;
    sd.scope = name;
    sd.baseline_high_water_bytes = hw.first.total;
    sd.candidate_high_water_bytes = hw.second.total;
    sd.delta = delta(hw.first.total, hw.second.total);
    sd.baseline_activation_high_water_bytes = hw.first.activation;
    sd.candidate_activation_high_water_bytes = hw.second.activation;
    sd.activation_delta = delta(hw.first.activation, hw.second.activation);
    c.scope_deltas.push_back(std::move(sd));
  }
  auto mag = [](int64_t d) { return d < 0 ? -static_cast<uint64_t>(d) : static_cast<uint64_t>(d); };
  std::stable_sort(c.scope_deltas.begin(), c.scope_deltas.end(), [&](const ScopeDelta& a, const ScopeDelta& b) {
    if (mag(a.activation_delta) != mag(b.activation_delta)) return mag(a.activation_delta) > mag(b.activation_delta);
    return mag(a.delta) > mag(b.delta);  // stable: equal magnitudes keep name order
  });

  // Multiset difference of (scope, name, frame, bytes). Each run's groups are sorted by (label,
  // bytes), its labels by their strings: the two label lists are merged once into one order
  // (strings compared per distinct label, not per group), and the groups then by integers. Only
  // the first group_limit entries of each side are turned into strings.
  const AllocGroups& ba = baseline.alloc_groups;
  const AllocGroups& ca = candidate.alloc_groups;
  std::vector<uint32_t> brank(ba.labels.size()), crank(ca.labels.size());
  {
    auto key = [](const AllocLabel& l) { return std::tie(l.scope, l.name, l.frame); };
    size_t i = 0, j = 0;
    uint32_t r = 0;
    while (i < ba.labels.size() || j < ca.labels.size()) {
      if (j == ca.labels.size() || (i < ba.labels.size() && key(ba.labels[i]) < key(ca.labels[j]))) {
        brank[i++] = r++;
      } else if (i == ba.labels.size() || key(ca.labels[j]) < key(ba.labels[i])) {
        crank[j++] = r++;
      } else {
        brank[i++] = crank[j++] = r++;
      }
    }
  }
  auto more = [group_limit](const AllocGroups& run, const AllocGroupCount& g, uint64_t count, std::vector<AllocGroupDelta>* list,
                            uint64_t* groups, uint64_t* bytes) {
    ++*groups;
    *bytes += g.bytes * count;
    if (list->size() < group_limit) {
      const AllocLabel& l = run.labels[g.label];
      list->push_back(AllocGroupDelta{l.scope, l.name, l.frame, g.bytes, count});
    }
  };
  auto only_b = [&](const AllocGroupCount& g, uint64_t count) {
    more(ba, g, count, &c.only_in_baseline, &c.only_in_baseline_groups, &c.only_in_baseline_bytes);
  };
  auto only_c = [&](const AllocGroupCount& g, uint64_t count) {
    more(ca, g, count, &c.only_in_candidate, &c.only_in_candidate_groups, &c.only_in_candidate_bytes);
  };
  const auto& bg = ba.groups;
  const auto& cg = ca.groups;
  auto bkey = [&](size_t i) { return std::pair<uint32_t, uint64_t>(brank[bg[i].label], bg[i].bytes); };
  auto ckey = [&](size_t j) { return std::pair<uint32_t, uint64_t>(crank[cg[j].label], cg[j].bytes); };
  size_t i = 0, j = 0;
  while (i < bg.size() || j < cg.size()) {
    if (j == cg.size() || (i < bg.size() && bkey(i) < ckey(j))) {
      only_b(bg[i], bg[i].count);
      ++i;
    } else if (i == bg.size() || ckey(j) < bkey(i)) {
      only_c(cg[j], cg[j].count);
      ++j;
    } else {
      if (bg[i].count > cg[j].count) {
        only_b(bg[i], bg[i].count - cg[j].count);
      } else if (cg[j].count > bg[i].count) {
        only_c(cg[j], cg[j].count - bg[i].count);
      }
      ++i;
      ++j;
    }
  }
  c.live_at_peak_diff = diff_live_at_peak(baseline, candidate);
  return c;
}

std::string_view live_change_name(LiveChange c) {
  switch (c) {
    case LiveChange::kFreed: return "freed";
    case LiveChange::kNotAllocated: return "not allocated";
    case LiveChange::kMoved: return "moved";
    case LiveChange::kResized: return "resized";
    case LiveChange::kAdded: return "added";
    case LiveChange::kNew: return "new";
  }
  return "?";
}

LiveDiff diff_live_at_peak(const RunAnalysis& baseline, const RunAnalysis& candidate) {
  LiveDiff out;
  static const std::vector<LiveEntry> kNone;
  const auto& bl = baseline.devices.empty() ? kNone : baseline.devices[baseline.peak_device].live_set_at_activation_peak;
  const auto& cl = candidate.devices.empty() ? kNone : candidate.devices[candidate.peak_device].live_set_at_activation_peak;
  for (const auto& e : bl) out.baseline_bytes += e.bytes;
  for (const auto& e : cl) out.candidate_bytes += e.bytes;
  std::vector<bool> bdone(bl.size()), cdone(cl.size());
  std::vector<std::string> bfam(bl.size()), cfam(cl.size());
  for (size_t i = 0; i < bl.size(); ++i) bfam[i] = family_scope(bl[i].scope);
  for (size_t j = 0; j < cl.size(); ++j) cfam[j] = family_scope(cl[j].scope);
  // What a tensor is known by: its name, else (traced programs) its innermost user frame, as in
  // AllocGroup; unnamed tensors without a stack are all alike.
  auto frame_of = [](const RunAnalysis& run, const LiveEntry& e) {
    if (!e.name.empty() || e.stack_id == StackId::kNone) return std::string();
    auto f = user_frames(run, e.stack_id, 1);
    return f.empty() ? std::string() : f.front();
  };
  std::vector<std::string> bframe(bl.size()), cframe(cl.size());
  for (size_t i = 0; i < bl.size(); ++i) bframe[i] = frame_of(baseline, bl[i]);
  for (size_t j = 0; j < cl.size(); ++j) cframe[j] = frame_of(candidate, cl[j]);
  auto row = [&](LiveChange ch, const LiveEntry* b, const LiveEntry* c) {
    LiveDiffRow r;
    r.change = ch;
    const LiveEntry& e = b ? *b : *c;
    r.name = e.name;
    r.shape = (c ? *c : *b).shape;
    r.category = e.category;
    r.dtype = e.dtype;
    if (b) {
      r.baseline_scope = b->scope;
      r.baseline_bytes = b->bytes;
      r.baseline_held_after_last_use = b->held_after_last_use;
    }
    if (c) {
      r.candidate_scope = c->scope;
      r.candidate_bytes = c->bytes;
    }
    r.delta = static_cast<int64_t>(r.candidate_bytes) - static_cast<int64_t>(r.baseline_bytes);
    if (b && b->stack_id != StackId::kNone) r.stack = user_frames(baseline, b->stack_id, 3);
    else if (c && c->stack_id != StackId::kNone) r.stack = user_frames(candidate, c->stack_id, 3);
    out.rows.push_back(std::move(r));
  };
  // Passes from the strictest match to the loosest; each pairs what the earlier ones left, in
  // live-set order (largest first).
  auto pass = [&](auto key_b, auto key_c, LiveChange ch, bool emit) {
    std::map<std::string, std::vector<size_t>> open;  // key -> unmatched candidate entries, reversed
    for (size_t j = cl.size(); j-- > 0;)
      if (!cdone[j]) open[key_c(j)].push_back(j);
    for (size_t i = 0; i < bl.size(); ++i) {
      if (bdone[i]) continue;
      auto it = open.find(key_b(i));
      if (it == open.end() || it->second.empty()) continue;
      const size_t j = it->second.back();
      it->second.pop_back();
      bdone[i] = cdone[j] = true;
      if (emit) {
        row(ch, &bl[i], &cl[j]);
      } else {
        ++out.unchanged_tensors;
        out.unchanged_bytes += bl[i].bytes;
      }
    }
  };
  auto k = [](const LiveEntry& e, const std::string& frame, const std::string& scope, bool bytes) {
    std::string s = e.name + '\n' + frame + '\n' + scope + '\n' + std::to_string(static_cast<int>(e.category));
    if (bytes) s += '\n' + std::to_string(e.bytes);
    return s;
  };
  pass([&](size_t i) { return k(bl[i], bframe[i], bl[i].scope, true); }, [&](size_t j) { return k(cl[j], cframe[j], cl[j].scope, true); },
       LiveChange::kMoved, false);
  pass([&](size_t i) { return k(bl[i], bframe[i], bfam[i], true); }, [&](size_t j) { return k(cl[j], cframe[j], cfam[j], true); },
       LiveChange::kMoved, true);
  pass([&](size_t i) { return k(bl[i], bframe[i], bfam[i], false); }, [&](size_t j) { return k(cl[j], cframe[j], cfam[j], false); },
       LiveChange::kResized, true);
  // Tensors a run allocates at all, by (scope family, name, frame): every label has a group.
  auto allocated = [](const RunAnalysis& run) {
    std::set<std::tuple<std::string, std::string, std::string>> s;
    for (const auto& l : run.alloc_groups.labels) s.emplace(family_scope(l.scope), l.name, l.frame);
    return s;
  };
  const auto in_candidate = allocated(candidate), in_baseline = allocated(baseline);
  for (size_t i = 0; i < bl.size(); ++i)
    if (!bdone[i])
      row(in_candidate.count({bfam[i], bl[i].name, bframe[i]}) ? LiveChange::kFreed : LiveChange::kNotAllocated, &bl[i], nullptr);
  for (size_t j = 0; j < cl.size(); ++j)
    if (!cdone[j]) row(in_baseline.count({cfam[j], cl[j].name, cframe[j]}) ? LiveChange::kAdded : LiveChange::kNew, nullptr, &cl[j]);
  for (const auto& r : out.rows) out.delta += r.delta;
  std::stable_sort(out.rows.begin(), out.rows.end(), [](const LiveDiffRow& a, const LiveDiffRow& b) {
    const uint64_t ma = a.delta < 0 ? -static_cast<uint64_t>(a.delta) : static_cast<uint64_t>(a.delta);
    const uint64_t mb = b.delta < 0 ? -static_cast<uint64_t>(b.delta) : static_cast<uint64_t>(b.delta);
    if (ma != mb) return ma > mb;
    if (a.baseline_bytes + a.candidate_bytes != b.baseline_bytes + b.candidate_bytes)
      return a.baseline_bytes + a.candidate_bytes > b.baseline_bytes + b.candidate_bytes;
    return std::tie(a.name, a.baseline_scope, a.candidate_scope) < std::tie(b.name, b.baseline_scope, b.candidate_scope);
  });
  return out;
}

}  // namespace moeprof::planner
