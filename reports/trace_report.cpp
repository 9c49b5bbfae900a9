#include "reports/trace_report.h"

#include <fmt/format.h>

#include "core/version.h"
#include "planner/categories.h"
#include "reports/format.h"

namespace moeprof::reports {

using nlohmann::ordered_json;

const std::array<TraceView, kNumTraceViews>& trace_views() {
  static constexpr uint32_t kNotGraph = planner::all_categories_except(Category::kGraph);
  static const std::array<TraceView, kNumTraceViews> kViews = {{
      {"all", ~0u, ~0u},
      {"program", kNotGraph, ~0u},
      {"stream_ordered", kNotGraph, planner::mem_kind_bit(MemKind::kStreamOrdered)},
      {"device_sync", kNotGraph, planner::mem_kind_bit(MemKind::kDevice)},
  }};
  return kViews;
}

TracedFile analyze_traced_file(const std::string& path, const Trace& t) {
  TracedFile f;
  f.path = path;
  f.meta = t.meta;
  f.records = t.records.size();
  f.dropped_records = t.dropped_records;
  f.truncated = t.truncated;
  f.truncation_note = t.truncation_note;
  for (const TraceRecord& r : t.records) {
    f.kernels += r.kind == EventKind::kKernel;
    f.uses += r.kind == EventKind::kUse;
  }
  // Traced programs: categories inferred (planner/categories.h), so "activation" means what it
  // means for the executor: transient allocations.
  planner::InferredCategories inferred;
  const bool infer = planner::should_infer_categories(t, planner::CategoryInference::kAuto);
  if (infer) inferred = planner::infer_categories(t, {});
  for (size_t i = 0; i < kNumTraceViews; ++i) {
    planner::AnalyzeOptions opt;
    if (infer) opt.record_categories = &inferred.by_record;
    opt.timeline_points = 0;
    opt.live_set_limit = 1;
    opt.handoff_limit = 0;
    opt.keep_lifetimes = true;  // bytes live at the end, scoped allocations
    opt.category_mask = trace_views()[i].category_mask;
    opt.mem_kind_mask = trace_views()[i].mem_kind_mask;
    f.views[i] = planner::analyze(t, opt);
  }
  return f;
}

namespace {

uint64_t live_end_bytes(const planner::RunAnalysis& a, uint16_t device) {
  uint64_t b = 0;
  for (const planner::Lifetime& l : a.lifetimes)
    if (l.device == device && !l.freed()) b += l.bytes;
  return b;
}

uint64_t device_peak(const planner::RunAnalysis& a, uint16_t device) {
  const planner::DeviceAnalysis* d = a.device(device);
  return d != nullptr ? d->peak_total_bytes : 0;
}

uint64_t first_ts(const planner::RunAnalysis& a) {
  uint64_t t0 = UINT64_MAX;
  for (const planner::Lifetime& l : a.lifetimes) t0 = std::min(t0, l.t_alloc);
  return t0 == UINT64_MAX ? 0 : t0;
}

ordered_json view_json(const planner::RunAnalysis& a, const TracedFile& f) {
  uint64_t allocs = 0, frees = 0, alloc_bytes = 0, scoped = 0;
  for (const auto& d : a.devices) {
    allocs += d.allocations;
    frees += d.frees;
    alloc_bytes += d.churn_bytes;
  }
  for (const planner::Lifetime& l : a.lifetimes)
    if (l.scope_id != StrId::kNone || l.name_id != StrId::kNone) ++scoped;
  const uint64_t t0 = first_ts(a);
  ordered_json j;
  j["allocs"] = allocs;
  j["frees"] = frees;
  j["alloc_bytes"] = alloc_bytes;
  j["kernels"] = f.kernels;
  if (f.uses > 0) j["uses"] = f.uses;
  j["allocs_with_scope"] = scoped;
  j["peak_bytes"] = a.peak_total_bytes;
  j["peak_activation_bytes"] = a.peak_activation_bytes;
  const planner::Anomalies& an = a.anomalies;
  j["anomalies"] = {{"unknown_frees", an.unknown_frees},       {"double_frees", an.double_frees},
                    {"null_frees", an.null_frees},             {"never_freed", an.never_freed},
                    {"never_freed_bytes", an.never_freed_bytes}, {"zero_size_allocs", an.zero_size_allocs},
                    {"alloc_over_live", an.alloc_over_live},   {"free_size_mismatches", an.free_size_mismatches}};
  ordered_json devs = ordered_json::array();
  for (const auto& d : a.devices) {
    ordered_json cats = ordered_json::object();
    for (int c = 0; c < kNumCategories; ++c)
      if (d.peak_by_category.bytes[static_cast<size_t>(c)] > 0)
        cats[std::string(category_name(static_cast<Category>(c)))] = d.peak_by_category.bytes[static_cast<size_t>(c)];
    ordered_json scopes = ordered_json::object();
    for (const auto& s : d.scopes)
      scopes[s.scope.empty() ? "(none)" : s.scope] = {
          {"high_water_bytes", s.high_water_bytes}, {"alloc_bytes", s.allocated_bytes}, {"allocs", s.allocations}};
    ordered_json dj = {{"device", d.device},
                       {"peak_bytes", d.peak_total_bytes},
                       {"peak_ts", d.peak_total_ts},
                       {"peak_time_ns", d.peak_total_ts >= t0 ? d.peak_total_ts - t0 : 0},
                       {"peak_activation_bytes", d.peak_activation_bytes},
                       {"peak_by_category", cats},
                       {"allocs", d.allocations},
                       {"frees", d.frees},
                       {"alloc_bytes", d.churn_bytes},
                       {"live_end_bytes", live_end_bytes(a, d.device)},
                       {"pool_reserved_peak_bytes", d.pool_reserved_peak_bytes},
                       {"graph_mem_peak_bytes", d.graph_mem_peak_bytes},
                       {"scopes", scopes}};
    if (f.uses > 0) {
      dj["has_uses"] = d.has_uses;
      dj["held_after_last_use_bytes"] = d.held_after_last_use_bytes;
      dj["never_used_at_peak_bytes"] = d.never_used_at_peak_bytes;
      dj["handoff_count"] = d.handoff_count;
      dj["handoff_bytes"] = d.handoff_bytes;
    }
    devs.push_back(std::move(dj));
  }
  j["devices"] = devs;
  return j;
}

}  // namespace

ordered_json make_trace_report(const std::vector<TracedFile>& files) {
  ordered_json doc;
  doc["schema_version"] = kTraceReportVersion;
  doc["kind"] = "trace_report";
  doc["generator"] = std::string("moeprof ") + kVersion;
  doc["traces"] = ordered_json::array();
  for (const TracedFile& f : files) {
    ordered_json j;
    j["path"] = f.path;
    j["name"] = f.meta.name;
    j["pid"] = f.meta.pid;
    j["records"] = f.records;
    j["dropped_records"] = f.dropped_records;
    j["truncated"] = f.truncated;
    if (f.truncated) j["truncation_note"] = f.truncation_note;
    for (size_t i = 0; i < kNumTraceViews; ++i) j[trace_views()[i].key] = view_json(f.views[i], f);
    ordered_json extra = ordered_json::object();
    for (const auto& [k, v] : f.meta.extra) extra[k] = v;
    j["extra"] = extra;
    doc["traces"].push_back(std::move(j));
  }
  return doc;
}

std::string trace_report_text(const TracedFile& f) {
  const auto& all = f.views[0];
  uint64_t allocs = 0, frees = 0, scoped = 0;
  for (const auto& d : all.devices) {
    allocs += d.allocations;
    frees += d.frees;
  }
  for (const planner::Lifetime& l : all.lifetimes)
    if (l.scope_id != StrId::kNone || l.name_id != StrId::kNone) ++scoped;
  std::string out;
  if (f.truncated) out += fmt::format("  {}: WARNING: trace incomplete: {}\n", f.path, f.truncation_note);
  out += fmt::format("  {}: {} (pid {})\n", f.path, f.meta.name, f.meta.pid ? std::to_string(f.meta.pid) : "?");
  out += fmt::format("    records {}, allocs {}, frees {}, kernels {}, dropped {}, attributed {}/{}\n", with_commas_u(f.records),
                     with_commas_u(allocs), with_commas_u(frees), with_commas_u(f.kernels), with_commas_u(f.dropped_records),
                     with_commas_u(scoped), with_commas_u(allocs));
  const planner::Anomalies& an = all.anomalies;
  if (an.total() + an.null_frees > 0)
    out += fmt::format("    anomalies: unknown frees {}, double frees {}, null frees {}, alloc over live {}\n", an.unknown_frees,
                       an.double_frees, an.null_frees, an.alloc_over_live);
  const uint64_t t0 = first_ts(all);
  for (const auto& d : all.devices) {
    out += fmt::format(
        "    device {}: peak {} at {} (program {}: stream-ordered alone {}, cudaMalloc alone {}), live at end {}, "
        "pool reserved peak {}, graph memory {} (allocation) / {} (attribute)\n",
        d.device, format_bytes(d.peak_total_bytes), format_duration_ns(d.peak_total_ts >= t0 ? d.peak_total_ts - t0 : 0),
        format_bytes(device_peak(f.views[1], d.device)), format_bytes(device_peak(f.views[2], d.device)),
        format_bytes(device_peak(f.views[3], d.device)), format_bytes(live_end_bytes(all, d.device)),
        format_bytes(d.pool_reserved_peak_bytes), format_bytes(d.peak_by_category[Category::kGraph]),
        format_bytes(d.graph_mem_peak_bytes));
  }
  if (f.uses > 0) {
    out += fmt::format("    uses: {} kernel-use events\n", with_commas_u(f.uses));
    for (const auto& d : f.views[1].devices)  // the program's own allocations
      out += fmt::format("    device {} at the activation peak ({}): {} held after its last use, {} never used; {} hand-offs ({})\n",
                         d.device, format_bytes(d.peak_activation_bytes), format_bytes(d.held_after_last_use_bytes),
                         format_bytes(d.never_used_at_peak_bytes), d.handoff_count, format_bytes(d.handoff_bytes));
  }
  auto note = f.meta.extra.find("allocator_note");
  if (note != f.meta.extra.end()) out += fmt::format("    note: {}\n", note->second);
  return out;
}

}  // namespace moeprof::reports
