#include "reports/json_report.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/dtype.h"
#include "core/version.h"
#include "planner/stacks.h"
#include "reports/memory_timeline.h"
#include "reports/serving_json.h"

namespace moeprof::reports {

using nlohmann::ordered_json;

namespace {

ordered_json category_object(const planner::CategoryBytes& b) {
  ordered_json j = ordered_json::object();
  for (int i = 0; i < kNumCategories; ++i) j[std::string(category_name(static_cast<Category>(i)))] = b.bytes[i];
  return j;
}

// Per-category maximum over devices (run-level figures are maxima over devices, i.e. per rank).
planner::CategoryBytes max_over_devices(const planner::RunAnalysis& run,
                                        planner::CategoryBytes planner::DeviceAnalysis::*field) {
  planner::CategoryBytes out;
  for (const auto& d : run.devices) {
    for (int i = 0; i < kNumCategories; ++i) out.bytes[i] = std::max(out.bytes[i], (d.*field).bytes[i]);
  }
  return out;
}

}  // namespace

ordered_json live_entry_json(const planner::LiveEntry& e, const planner::RunAnalysis& run) {
  ordered_json j;
  j["name"] = e.name;
  j["scope"] = e.scope;
  j["shape"] = e.shape;
  j["dtype"] = std::string(dtype_name(e.dtype));
  j["category"] = std::string(category_name(e.category));
  j["bytes"] = e.bytes;
  j["uses"] = e.uses;
  j["held_after_last_use"] = e.held_after_last_use;
  if (e.stack_id != StackId::kNone) j["stack"] = planner::user_frames(run, e.stack_id, 3);
  return j;
}

namespace {

ordered_json live_at_peak_json(const planner::RunAnalysis& run, const ReportOptions& opts) {
  ordered_json j;
  if (run.devices.empty()) {
    j["device"] = nullptr;
    j["timestamp_ns"] = nullptr;
    j["time_ns"] = nullptr;
    j["activation_bytes"] = 0;
    j["total_bytes"] = 0;
    j["by_category"] = category_object({});
    j["entries"] = 0;
    j["top"] = ordered_json::array();
    j["omitted_entries"] = 0;
    j["omitted_bytes"] = 0;
    return j;
  }
  const auto& d = run.devices[run.peak_device];
  j["device"] = d.device;
  j["timestamp_ns"] = d.peak_activation_ts;
  j["time_ns"] = d.peak_activation_ts >= run.start_ts ? d.peak_activation_ts - run.start_ts : 0;  // since the trace's start
  j["activation_bytes"] = d.live_at_activation_peak.activation();
  j["total_bytes"] = d.live_at_activation_peak.total();
  j["by_category"] = category_object(d.live_at_activation_peak);
  // The analysis may list only the first entries (AnalyzeOptions::live_set_limit): the count is
  // the whole set's, and its bytes are the activation bytes live at the peak.
  const auto& listed = d.live_set_at_activation_peak;
  const size_t shown = std::min(listed.size(), opts.top_entries);
  j["entries"] = d.live_set_entries;
  ordered_json top = ordered_json::array();
  uint64_t shown_bytes = 0;
  for (size_t i = 0; i < shown; ++i) {
    top.push_back(live_entry_json(listed[i], run));
    shown_bytes += listed[i].bytes;
  }
  j["top"] = top;
  j["omitted_entries"] = d.live_set_entries - shown;
  j["omitted_bytes"] = d.live_at_activation_peak.activation() - shown_bytes;
  return j;
}

ordered_json scopes_json(const planner::RunAnalysis& run, const ReportOptions& opts, size_t* total) {
  // Merge devices: per scope, the maximum of each figure over devices.
  std::map<std::string, planner::ScopeStat> merged;
  for (const auto& d : run.devices) {
    for (const auto& s : d.scopes) {
      auto [it, fresh] = merged.emplace(s.scope, s);
      if (fresh) continue;
      auto& m = it->second;
      m.high_water_bytes = std::max(m.high_water_bytes, s.high_water_bytes);
      m.activation_high_water_bytes = std::max(m.activation_high_water_bytes, s.activation_high_water_bytes);
      m.live_at_activation_peak_bytes = std::max(m.live_at_activation_peak_bytes, s.live_at_activation_peak_bytes);
      m.allocated_bytes = std::max(m.allocated_bytes, s.allocated_bytes);
      m.allocations = std::max(m.allocations, s.allocations);
    }
  }
  std::vector<planner::ScopeStat> v;
  for (auto& [k, s] : merged) v.push_back(s);
  std::stable_sort(v.begin(), v.end(), [](const planner::ScopeStat& a, const planner::ScopeStat& b) {
    if (a.activation_high_water_bytes != b.activation_high_water_bytes)
      return a.activation_high_water_bytes > b.activation_high_water_bytes;
    if (a.high_water_bytes != b.high_water_bytes) return a.high_water_bytes > b.high_water_bytes;
    return a.scope < b.scope;
  });
  *total = v.size();
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < v.size() && i < opts.top_scopes; ++i) {
    ordered_json j;
    j["scope"] = v[i].scope;
    j["depth"] = v[i].depth;
    j["high_water_bytes"] = v[i].high_water_bytes;
    j["activation_high_water_bytes"] = v[i].activation_high_water_bytes;
    j["live_at_activation_peak_bytes"] = v[i].live_at_activation_peak_bytes;
    j["allocated_bytes"] = v[i].allocated_bytes;
    j["allocations"] = v[i].allocations;
    out.push_back(j);
  }
  return out;
}

ordered_json anomalies_json(const planner::Anomalies& a) {
  ordered_json j;
  j["total"] = a.total();
  j["unknown_frees"] = a.unknown_frees;
  j["double_frees"] = a.double_frees;
  j["zero_size_allocs"] = a.zero_size_allocs;
  j["alloc_over_live"] = a.alloc_over_live;
  j["free_size_mismatches"] = a.free_size_mismatches;
  j["null_frees"] = a.null_frees;
  j["unknown_uses"] = a.unknown_uses;
  j["never_freed"] = a.never_freed;
  j["never_freed_bytes"] = a.never_freed_bytes;
  return j;
}

ordered_json reuse_json(const planner::RunAnalysis& run, const ReportOptions& opts) {
  ordered_json j;
  if (run.devices.empty()) return nullptr;
  const auto& d = run.devices[run.peak_device];
  j["device"] = d.device;
  j["has_uses"] = d.has_uses;
  j["held_after_last_use_bytes"] = d.held_after_last_use_bytes;
  j["never_used_at_peak_bytes"] = d.never_used_at_peak_bytes;
  j["handoffs_computed"] = run.handoffs_computed;  // false: not searched to the end (handoffs_note says why)
  if (!run.handoffs_computed) j["handoffs_note"] = run.handoffs_note;
  j["handoff_count"] = d.handoff_count;
  j["handoff_bytes"] = d.handoff_bytes;
  j["handoff_bytes_at_activation_peak"] = d.handoff_bytes_at_activation_peak;
  ordered_json list = ordered_json::array();
  for (size_t i = 0; i < d.handoffs.size() && i < opts.list_limit; ++i) {
    const auto& h = d.handoffs[i];
    ordered_json e;
    e["bytes"] = h.bytes;
    e["alloc_name"] = h.alloc_name;
    e["alloc_scope"] = h.alloc_scope;
    e["dead_name"] = h.dead_name;
    e["dead_scope"] = h.dead_scope;
    e["at_activation_peak"] = h.at_activation_peak;
    list.push_back(e);
  }
  j["handoffs"] = list;
  return j;
}

ordered_json timeline_json(const planner::RunAnalysis& run) {
  if (run.devices.empty()) return nullptr;
  const auto& d = run.devices[run.peak_device];
  auto pairs = [](const std::vector<std::pair<uint64_t, uint64_t>>& v) {
    ordered_json a = ordered_json::array();
    for (const auto& [t, b] : v) a.push_back(ordered_json::array({t, b}));
    return a;
  };
  ordered_json j;
  j["device"] = d.device;
  j["total"] = pairs(d.timeline_total);
  j["activation"] = pairs(d.timeline_activation);
  return j;
}

ordered_json alloc_groups_json(const std::vector<planner::AllocGroupDelta>& v, size_t limit) {
  ordered_json a = ordered_json::array();
  for (size_t i = 0; i < v.size() && i < limit; ++i) {
    ordered_json e;
    e["scope"] = v[i].scope;
    e["name"] = v[i].name;
    if (!v[i].frame.empty()) e["frame"] = v[i].frame;  // an unnamed allocation's innermost user frame
    e["bytes"] = v[i].bytes;
    e["count"] = v[i].count;
    a.push_back(e);
  }
  return a;
}

}  // namespace

ordered_json live_diff_json(const planner::LiveDiff& d) {
  ordered_json j;
  j["baseline_bytes"] = d.baseline_bytes;
  j["candidate_bytes"] = d.candidate_bytes;
  j["delta_bytes"] = d.delta;
  j["unchanged_tensors"] = d.unchanged_tensors;
  j["unchanged_bytes"] = d.unchanged_bytes;
  ordered_json rows = ordered_json::array();
  for (const auto& r : d.rows) {
    ordered_json e;
    e["change"] = std::string(planner::live_change_name(r.change));
    e["name"] = r.name;
    e["baseline_scope"] = r.baseline_scope;
    e["candidate_scope"] = r.candidate_scope;
    e["shape"] = r.shape;
    e["dtype"] = std::string(dtype_name(r.dtype));
    e["category"] = std::string(category_name(r.category));
    e["baseline_bytes"] = r.baseline_bytes;
    e["candidate_bytes"] = r.candidate_bytes;
    e["delta_bytes"] = r.delta;
    e["baseline_held_after_last_use"] = r.baseline_held_after_last_use;
    if (!r.stack.empty()) e["stack"] = r.stack;
    rows.push_back(std::move(e));
  }
  j["rows"] = rows;
  return j;
}

std::vector<std::string> unique_run_names(const std::vector<planner::RunAnalysis>& runs) {
  std::vector<std::string> names;
  std::set<std::string> used;
  for (size_t i = 0; i < runs.size(); ++i) {
    std::string base = runs[i].meta.name;
    if (base.empty()) base = runs[i].meta.mode;
    if (base.empty()) base = "run" + std::to_string(i + 1);
    std::string name = base;
    for (int k = 2; used.count(name); ++k) name = base + "-" + std::to_string(k);
    used.insert(name);
    names.push_back(name);
  }
  return names;
}

ordered_json make_run_json(const planner::RunAnalysis& run, const std::string& name, const ReportOptions& opts) {
  const RunMeta& m = run.meta;
  ordered_json j;
  j["name"] = name;
  j["mode"] = m.mode;
  j["model"] = m.model;
  j["tokens"] = m.tokens;
  j["layers"] = m.layers;
  j["tp_size"] = m.tp_size;
  j["tp_rank"] = m.tp_rank;
  j["backend"] = m.backend;
  j["device_name"] = m.device_name;
  j["recorded_by"] = m.moeprof_version.empty() ? "" : "moeprof " + m.moeprof_version;
  j["peak_activation_bytes"] = run.peak_activation_bytes;
  j["peak_total_bytes"] = run.peak_total_bytes;
  j["churn_bytes"] = run.churn_bytes;
  j["allocations"] = run.allocations;
  j["peak_by_category"] = category_object(max_over_devices(run, &planner::DeviceAnalysis::peak_by_category));
  j["churn_by_category"] = category_object(max_over_devices(run, &planner::DeviceAnalysis::churn_by_category));
  j["live_at_peak"] = live_at_peak_json(run, opts);
  size_t nscopes = 0;
  j["scopes"] = scopes_json(run, opts, &nscopes);
  j["scopes_total"] = nscopes;
  ordered_json devices = ordered_json::array();
  for (const auto& d : run.devices) {
    ordered_json dj;
    dj["device"] = d.device;
    dj["peak_activation_bytes"] = d.peak_activation_bytes;
    dj["peak_activation_ts_ns"] = d.peak_activation_ts;
    dj["peak_total_bytes"] = d.peak_total_bytes;
    dj["peak_total_ts_ns"] = d.peak_total_ts;
    dj["churn_bytes"] = d.churn_bytes;
    dj["allocations"] = d.allocations;
    dj["frees"] = d.frees;
    dj["pool_reserved_peak_bytes"] = d.pool_reserved_peak_bytes;
    dj["graph_mem_peak_bytes"] = d.graph_mem_peak_bytes;
    devices.push_back(dj);
  }
  j["devices"] = devices;
  j["anomalies"] = anomalies_json(run.anomalies);
  j["reuse"] = reuse_json(run, opts);
  j["dropped_records"] = run.dropped_records;
  j["truncated"] = run.truncated;
  j["truncation_note"] = run.truncation_note;
  j["reordered"] = run.reordered;
  j["streamed"] = run.streamed;
  j["start_timestamp_ns"] = run.start_ts;
  if (!run.categories_note.empty()) j["categories_inferred"] = run.categories_note;
  if (!run.growth.empty()) {
    ordered_json g = ordered_json::array();
    for (const auto& x : run.growth)
      g.push_back({{"label", x.label}, {"scope", x.scope}, {"occurrences", x.occurrences}, {"first_bytes", x.first_bytes},
                   {"last_bytes", x.last_bytes}});
    j["growth"] = g;
  }
  ordered_json extra = ordered_json::object();
  for (const auto& [k, v] : m.extra)
    if (k != "serving") extra[k] = v;  // a serving run's figures: the `serving` object below
  j["extra"] = extra;
  if (auto s = serving_json(run)) j["serving"] = std::move(*s);
  if (opts.include_timeline) j["timeline"] = timeline_json(run);
  if (opts.include_memory_timeline && !run.lifetimes.empty()) j["memory_timeline"] = memory_timeline_json(run, opts.memory_timeline);
  return j;
}

ordered_json make_comparison_json(const planner::Comparison& c, const ReportOptions& opts) {
  ordered_json j;
  j["baseline"] = c.baseline_name;
  j["candidate"] = c.candidate_name;
  j["baseline_peak_activation_bytes"] = c.baseline_peak_activation_bytes;
  j["candidate_peak_activation_bytes"] = c.candidate_peak_activation_bytes;
  j["peak_activation_delta_bytes"] = c.peak_activation_delta;
  j["baseline_peak_total_bytes"] = c.baseline_peak_total_bytes;
  j["candidate_peak_total_bytes"] = c.candidate_peak_total_bytes;
  j["peak_total_delta_bytes"] = c.peak_total_delta;
  j["baseline_churn_bytes"] = c.baseline_churn_bytes;
  j["candidate_churn_bytes"] = c.candidate_churn_bytes;
  j["churn_delta_bytes"] = c.churn_delta;
  j["baseline_allocations"] = c.baseline_allocations;
  j["candidate_allocations"] = c.candidate_allocations;
  j["allocations_delta"] = c.allocations_delta;
  ordered_json cat = ordered_json::object();
  for (int i = 0; i < kNumCategories; ++i) cat[std::string(category_name(static_cast<Category>(i)))] = c.category_deltas[i];
  j["live_at_peak_delta_by_category"] = cat;
  j["baseline_live_at_peak_by_category"] = category_object(c.baseline_live_at_peak);
  j["candidate_live_at_peak_by_category"] = category_object(c.candidate_live_at_peak);
  ordered_json scopes = ordered_json::array();
  size_t nonzero = 0;
  for (const auto& s : c.scope_deltas) {
    if (s.delta == 0 && s.activation_delta == 0) continue;
    if (nonzero++ >= opts.list_limit) continue;
    ordered_json e;
    e["scope"] = s.scope;
    e["baseline_high_water_bytes"] = s.baseline_high_water_bytes;
    e["candidate_high_water_bytes"] = s.candidate_high_water_bytes;
    e["delta_bytes"] = s.delta;
    e["baseline_activation_high_water_bytes"] = s.baseline_activation_high_water_bytes;
    e["candidate_activation_high_water_bytes"] = s.candidate_activation_high_water_bytes;
    e["activation_delta_bytes"] = s.activation_delta;
    scopes.push_back(e);
  }
  j["scope_deltas"] = scopes;
  j["scope_deltas_omitted"] = nonzero - scopes.size();
  j["only_in_baseline"] = alloc_groups_json(c.only_in_baseline, opts.list_limit);
  j["only_in_baseline_bytes"] = c.only_in_baseline_bytes;
  j["only_in_candidate"] = alloc_groups_json(c.only_in_candidate, opts.list_limit);
  j["only_in_candidate_bytes"] = c.only_in_candidate_bytes;
  j["live_at_peak_diff"] = live_diff_json(c.live_at_peak_diff);
  return j;
}

Result<ordered_json> make_report(const std::vector<planner::RunAnalysis>& runs, const ReportOptions& opts) {
  std::vector<std::string> names = unique_run_names(runs);
  ordered_json doc;
  doc["schema_version"] = kReportSchemaVersion;
  doc["generator"] = opts.generator.empty() ? std::string("moeprof ") + kVersion : opts.generator;
  ordered_json arr = ordered_json::array();
  for (size_t i = 0; i < runs.size(); ++i) arr.push_back(make_run_json(runs[i], names[i], opts));
  doc["runs"] = arr;

  auto compare_named = [&](size_t b, size_t c) {
    planner::Comparison cmp = planner::compare(runs[b], runs[c], opts.list_limit);
    cmp.baseline_name = names[b];
    cmp.candidate_name = names[c];
    return make_comparison_json(cmp, opts);
  };
  doc["comparison"] = nullptr;
  if (!opts.compare_baseline.empty()) {
    auto it = std::find(names.begin(), names.end(), opts.compare_baseline);
    if (it == names.end()) return Status::bad_input("--compare-baseline " + opts.compare_baseline + ": no run with that name");
    size_t b = static_cast<size_t>(it - names.begin());
    ordered_json all = ordered_json::array();
    for (size_t c = 0; c < runs.size(); ++c) {
      if (c != b) all.push_back(compare_named(b, c));
    }
    if (!all.empty()) doc["comparison"] = all[0];
    if (all.size() > 1) doc["comparisons"] = all;
  } else if (runs.size() == 2) {
    doc["comparison"] = compare_named(0, 1);
  }
  return doc;
}

Status write_json_report(const std::string& path, const std::vector<planner::RunAnalysis>& runs,
                         const ReportOptions& opts) {
  MOEPROF_ASSIGN_OR_RETURN(ordered_json doc, make_report(runs, opts));
  return write_text_file(path, report_text(doc));
}

}  // namespace moeprof::reports
