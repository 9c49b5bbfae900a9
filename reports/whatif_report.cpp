#include "reports/whatif_report.h"

#include <fmt/format.h>

#include "planner/stacks.h"
#include "reports/format.h"
#include "reports/json_report.h"

namespace moeprof::reports {

using nlohmann::ordered_json;

namespace {

ordered_json pairs(const std::vector<std::pair<uint64_t, uint64_t>>& v, uint64_t t0) {
  ordered_json a = ordered_json::array();
  for (auto [t, b] : v) a.push_back(ordered_json::array({t >= t0 ? t - t0 : 0, b}));
  return a;
}

uint64_t first_ts(const planner::RunAnalysis& run) { return run.position_ts.empty() ? 0 : run.position_ts.front(); }

}  // namespace

ordered_json what_if_json(const planner::WhatIfResult& w, const planner::RunAnalysis& run, size_t top_entries) {
  ordered_json j;
  j["has_uses"] = w.has_uses;
  if (!w.note.empty()) j["note"] = w.note;
  ordered_json rules = ordered_json::array();
  for (const auto& r : w.rules)
    rules.push_back({{"rule", r.rule},         {"origin", r.origin},       {"matched", r.matched}, {"unmatched", r.unmatched},
                     {"applied", r.applied},   {"no_uses", r.no_uses},     {"no_anchor", r.no_anchor},
                     {"no_donor", r.no_donor}, {"unsafe", r.unsafe},       {"bytes_removed", r.bytes_removed}});
  j["rules"] = rules;
  j["measured_peak_activation_bytes"] = w.measured_peak_activation_bytes;
  j["predicted_peak_activation_bytes"] = w.predicted_peak_activation_bytes;
  j["measured_peak_total_bytes"] = w.measured_peak_total_bytes;
  j["predicted_peak_total_bytes"] = w.predicted_peak_total_bytes;
  j["liveness_bound_bytes"] = w.liveness_bound_bytes;
  const uint64_t t0 = first_ts(run);
  ordered_json devs = ordered_json::array();
  for (const auto& d : w.devices) {
    ordered_json dj;
    dj["device"] = d.device;
    dj["measured_peak_activation_bytes"] = d.measured_peak_activation_bytes;
    dj["predicted_peak_activation_bytes"] = d.predicted_peak_activation_bytes;
    dj["measured_peak_total_bytes"] = d.measured_peak_total_bytes;
    dj["predicted_peak_total_bytes"] = d.predicted_peak_total_bytes;
    dj["liveness_bound_bytes"] = d.liveness_bound_bytes;
    dj["predicted_peak_time_ns"] = d.predicted_peak_ts >= t0 ? d.predicted_peak_ts - t0 : 0;
    ordered_json top = ordered_json::array();
    for (size_t i = 0; i < d.live_set_at_predicted_peak.size() && i < top_entries; ++i)
      top.push_back(live_entry_json(d.live_set_at_predicted_peak[i], run));
    dj["live_at_predicted_peak"] = top;
    dj["timeline_activation"] = pairs(d.timeline_activation, t0);
    devs.push_back(std::move(dj));
  }
  j["devices"] = devs;
  ordered_json fixes = ordered_json::array();
  for (const auto& f : w.fixes) {
    ordered_json tensors = ordered_json::array();
    for (const auto& t : f.tensors) {
      ordered_json tj = {{"role", t.role}, {"name", t.name}, {"scope", t.scope}, {"shape", t.shape}, {"bytes", t.bytes}, {"count", t.count}};
      if (!t.stack.empty()) tj["stack"] = t.stack;
      tensors.push_back(std::move(tj));
    }
    fixes.push_back({{"rule", f.rule},
                     {"rules", f.rules},
                     {"bytes_saved_at_peak", f.bytes_saved_at_peak},
                     {"cumulative_peak_activation_bytes", f.cumulative_peak_activation_bytes},
                     {"churn_saved_bytes", f.churn_saved_bytes},
                     {"tensors", tensors}});
  }
  j["fixes"] = fixes;
  return j;
}

std::string what_if_text(const planner::WhatIfResult& w, size_t top_entries) {
  std::string out;
  if (!w.note.empty()) out += "note: " + w.note + "\n";
  if (!w.rules.empty()) {
    out += "what-if rules:\n";
    for (const auto& r : w.rules) {
      out += fmt::format("  {}  ({}): matched {}, applied {}", r.rule, r.origin, r.matched, r.applied);
      if (r.no_uses) out += fmt::format(", {} without uses", r.no_uses);
      if (r.no_anchor) out += fmt::format(", {} without a later anchor", r.no_anchor);
      if (r.no_donor) out += fmt::format(", {} without a dead buffer to take", r.no_donor);
      if (r.unsafe) out += fmt::format(", {} UNSAFE (freed before a later use)", r.unsafe);
      out += "\n";
      if (!r.unmatched.empty()) out += fmt::format("  warning: the rule at {} matched nothing: {}\n", r.origin, r.unmatched);
    }
  }
  out += fmt::format("  peak activation  measured {:>14}  predicted {:>14}  ({}, {})\n", format_bytes(w.measured_peak_activation_bytes),
                     format_bytes(w.predicted_peak_activation_bytes),
                     format_change_bytes(w.measured_peak_activation_bytes, w.predicted_peak_activation_bytes),
                     format_exact_bytes(w.predicted_peak_activation_bytes));
  out += fmt::format("  peak total       measured {:>14}  predicted {:>14}\n", format_bytes(w.measured_peak_total_bytes),
                     format_bytes(w.predicted_peak_total_bytes));
  if (w.has_uses)
    out += fmt::format("  liveness bound   {:>14} ({}): every allocation freed right after its last use\n",
                       format_bytes(w.liveness_bound_bytes), format_exact_bytes(w.liveness_bound_bytes));
  if (!w.rules.empty()) {
    for (const auto& d : w.devices) {
      if (d.live_set_at_predicted_peak.empty()) continue;
      out += fmt::format("\nlive at the predicted peak (device {}):\n", d.device);
      for (size_t i = 0; i < d.live_set_at_predicted_peak.size() && i < top_entries; ++i) {
        const auto& e = d.live_set_at_predicted_peak[i];
        out += fmt::format("  {:>12}  {:<28} {:<36} {}\n", format_bytes(e.bytes), e.name, e.scope, e.shape);
      }
      break;  // the first device with a live set; JSON has them all
    }
  }
  if (!w.fixes.empty()) {
    out += "\nranked fixes (each lowers the peak left by the ones above it):\n";
    size_t n = 0;
    for (const auto& f : w.fixes) {
      out += fmt::format("  {}. {:<64} saves {:>12} at the peak -> {}\n", ++n, f.rules.front(), format_bytes(f.bytes_saved_at_peak),
                         format_bytes(f.cumulative_peak_activation_bytes));
      for (size_t i = 1; i < f.rules.size(); ++i) out += fmt::format("     + {}\n", f.rules[i]);
      for (const auto& t : f.tensors) {
        out += fmt::format("       {}: {} x {} {} {} ({})", t.role, t.count, t.name.empty() ? "(unnamed)" : t.name, t.scope,
                           t.shape, format_bytes(t.bytes));
        if (!t.stack.empty()) out += "  at " + t.stack.front();
        out += "\n";
      }
    }
  }
  return out;
}

ordered_json prediction_json(const planner::WhatIfResult& w, const planner::RunAnalysis& candidate, const std::string& rules_path) {
  ordered_json p;
  p["rules_file"] = rules_path;
  ordered_json rules = ordered_json::array();
  for (const auto& r : w.rules) rules.push_back(r.rule);
  p["rules"] = rules;
  p["predicted_peak_activation_bytes"] = w.predicted_peak_activation_bytes;
  p["measured_peak_activation_bytes"] = candidate.peak_activation_bytes;
  p["predicted_peak_total_bytes"] = w.predicted_peak_total_bytes;
  p["measured_peak_total_bytes"] = candidate.peak_total_bytes;
  const uint64_t pr = w.predicted_peak_activation_bytes, me = candidate.peak_activation_bytes;
  p["error_bytes"] = pr >= me ? static_cast<int64_t>(pr - me) : -static_cast<int64_t>(me - pr);
  p["error_pct"] = me ? 100.0 * (static_cast<double>(pr) - static_cast<double>(me)) / static_cast<double>(me) : 0.0;
  p["liveness_bound_bytes"] = w.liveness_bound_bytes;
  return p;
}

std::string prediction_text(const ordered_json& p) {
  const uint64_t pr = p["predicted_peak_activation_bytes"].get<uint64_t>(), me = p["measured_peak_activation_bytes"].get<uint64_t>();
  return fmt::format("predicted by {} ({} rules): peak activation {} predicted, {} measured ({}, {:+.3f}%)\n",
                     p["rules_file"].get<std::string>(), p["rules"].size(), format_exact_bytes(pr), format_exact_bytes(me),
                     format_change_bytes(me, pr), p["error_pct"].get<double>());
}

}  // namespace moeprof::reports
