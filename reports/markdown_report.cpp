// Markdown rendering of a report: a runs table, the live set at the peak, then the comparison.
#include <fmt/format.h>

#include "reports/format.h"
#include "reports/json_report.h"
#include "reports/markdown_report.h"
#include "reports/serving_report.h"
#include "reports/text_report.h"

namespace moeprof::reports {

using nlohmann::ordered_json;

namespace {

// The unit policy (docs/metrics.md, "Units"): decimal units, the exact count beside any rounded figure.
std::string bytes_cell(uint64_t b) { return b < 1000 ? format_bytes(b) : fmt::format("{} ({})", format_bytes(b), format_exact_bytes(b)); }
std::string delta_cell(int64_t d) {
  const uint64_t mag = d < 0 ? -static_cast<uint64_t>(d) : static_cast<uint64_t>(d);
  return mag < 1000 ? format_delta_bytes(d) : fmt::format("{} ({}{})", format_delta_bytes(d), d < 0 ? "-" : "+", format_exact_bytes(mag));
}
std::string scope_name(const std::string& s) { return s.empty() ? "(unscoped)" : s; }

std::string count_cell(uint64_t v) { return with_commas_u(v); }

}  // namespace

std::string comparison_markdown(const ordered_json& c) {
  const std::string a = json_str(c, "baseline"), b = json_str(c, "candidate");
  std::string out = fmt::format("## Comparison: B = {} against A = {}\n\nChanges are B - A (negative: B uses less).\n\n", md_cell(b), md_cell(a));
  if (c.contains("warnings") && c["warnings"].is_array())
    for (const auto& w : c["warnings"])
      if (w.is_string()) out += fmt::format("> **warning**: {}\n\n", md_cell(w.get<std::string>()));
  out += fmt::format("| figure | A: {} | B: {} | B - A | % |\n|---|---:|---:|---:|---:|\n", md_cell(a), md_cell(b));
  // A run with no allocation has no figure to show: "none recorded", never 0 B.
  const bool none_a = c.contains("baseline_allocations") && json_u64(c, "baseline_allocations") == 0,
             none_b = c.contains("candidate_allocations") && json_u64(c, "candidate_allocations") == 0;
  auto row = [&](const std::string& what, uint64_t va, uint64_t vb, int64_t d) {
    if (none_a || none_b) {
      out += fmt::format("| {} | {} | {} | - | - |\n", what, none_a ? "none recorded" : bytes_cell(va), none_b ? "none recorded" : bytes_cell(vb));
      return;
    }
    out += fmt::format("| {} | {} | {} | {} | {} |\n", what, bytes_cell(va), bytes_cell(vb), delta_cell(d), format_percent(d, va));
  };
  row("peak activation", json_u64(c, "baseline_peak_activation_bytes"), json_u64(c, "candidate_peak_activation_bytes"),
      json_i64(c, "peak_activation_delta_bytes"));
  row("peak total", json_u64(c, "baseline_peak_total_bytes"), json_u64(c, "candidate_peak_total_bytes"), json_i64(c, "peak_total_delta_bytes"));
  row("churn", json_u64(c, "baseline_churn_bytes"), json_u64(c, "candidate_churn_bytes"), json_i64(c, "churn_delta_bytes"));
  const int64_t da = json_i64(c, "allocations_delta");
  out += fmt::format("| allocations | {} | {} | {}{} | {} |\n", count_cell(json_u64(c, "baseline_allocations")),
                     count_cell(json_u64(c, "candidate_allocations")), da > 0 ? "+" : "", with_commas(da),
                     format_percent(json_i64(c, "allocations_delta"), json_u64(c, "baseline_allocations")));
  if (c.contains("live_at_peak_delta_by_category") && c.contains("baseline_live_at_peak_by_category")) {
    for (const auto& [cat, v] : c["live_at_peak_delta_by_category"].items()) {
      const uint64_t va = json_u64(c["baseline_live_at_peak_by_category"], cat.c_str());
      const uint64_t vb = json_u64(c["candidate_live_at_peak_by_category"], cat.c_str());
      if (va || vb) row("live at the activation peak: " + cat, va, vb, v.get<int64_t>());
    }
  }
  if (c.contains("live_at_peak_diff") && c["live_at_peak_diff"].is_object()) {
    const auto& d = c["live_at_peak_diff"];
    out += "\n### Live at the peak, tensor by tensor\n\n";
    out += fmt::format("{} tensor(s) ({}) are live at both peaks unchanged; these rows are the rest and sum to the change of the peak.\n\n",
                       with_commas_u(json_u64(d, "unchanged_tensors")), format_bytes(json_u64(d, "unchanged_bytes")));
    out += "| change | tensor | scope in A | scope in B | shape | A | B | B - A |\n|---|---|---|---|---|---:|---:|---:|\n";
    for (const auto& r : d["rows"]) {
      auto cell = [&](const char* key) { return json_u64(r, key) ? bytes_cell(json_u64(r, key)) : std::string("-"); };
      out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n", json_str(r, "change"), md_cell(entry_label(r)),
                         md_cell(json_str(r, "baseline_scope").empty() ? "-" : json_str(r, "baseline_scope")),
                         md_cell(json_str(r, "candidate_scope").empty() ? "-" : json_str(r, "candidate_scope")), md_cell(json_str(r, "shape")),
                         cell("baseline_bytes"), cell("candidate_bytes"), delta_cell(json_i64(r, "delta_bytes")));
    }
    out += fmt::format("| **sum** | | | | | {} | {} | **{}** |\n",
                       bytes_cell(json_u64(d, "baseline_bytes") - json_u64(d, "unchanged_bytes")),
                       bytes_cell(json_u64(d, "candidate_bytes") - json_u64(d, "unchanged_bytes")), delta_cell(json_i64(d, "delta_bytes")));
  }
  if (c.contains("scope_deltas") && !c["scope_deltas"].empty()) {
    out += "\n| scope | activation high-water A | activation high-water B | B - A | high-water (all categories) B - A |\n"
           "|---|---:|---:|---:|---:|\n";
    for (const auto& s : c["scope_deltas"]) {
      out += fmt::format("| {} | {} | {} | {} | {} |\n", md_cell(scope_name(json_str(s, "scope"))),
                         bytes_cell(json_u64(s, "baseline_activation_high_water_bytes")),
                         bytes_cell(json_u64(s, "candidate_activation_high_water_bytes")), delta_cell(json_i64(s, "activation_delta_bytes")),
                         delta_cell(json_i64(s, "delta_bytes")));
    }
  }
  for (const auto& [key, who] : {std::pair{"only_in_baseline", "A"}, std::pair{"only_in_candidate", "B"}}) {
    if (!c.contains(key) || c[key].empty()) continue;
    out += fmt::format("\nAllocations only {} makes ({} in all):\n\n", who, format_bytes(json_u64(c, (std::string(key) + "_bytes").c_str())));
    out += "| scope | name | bytes | how many more |\n|---|---|---:|---:|\n";
    for (const auto& g : c[key]) {
      out += fmt::format("| {} | {} | {} | {} |\n", md_cell(scope_name(json_str(g, "scope"))), md_cell(entry_label(g)),
                         bytes_cell(json_u64(g, "bytes")), count_cell(json_u64(g, "count")));
    }
  }
  return out;
}

std::string report_markdown(const ordered_json& report) {
  std::string out = "# moeprof memory report\n\n";
  out += fmt::format("Generated by {}; schema version {}.\n\n", json_str(report, "generator"), json_i64(report, "schema_version"));
  out += "## Runs\n\n";
  out += "| run | mode | model | tokens | TP | backend | peak activation | peak total | churn | allocations | anomalies |\n";
  out += "|---|---|---|---:|---|---|---:|---:|---:|---:|---:|\n";
  for (const auto& r : report["runs"]) {
    const bool none = json_u64(r, "allocations") == 0;  // no peak to show: "none recorded", never 0 B
    auto fig = [&](const char* key) { return none ? std::string("none recorded") : bytes_cell(json_u64(r, key)); };
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", md_cell(json_str(r, "name")),
                       md_cell(json_str(r, "mode")), md_cell(or_dash(json_str(r, "model"))), json_i64(r, "tokens") > 0 ? with_commas(json_i64(r, "tokens")) : "-",
                       md_cell(run_tp_label(r).empty() ? "-" : run_tp_label(r)), md_cell(json_str(r, "backend")), fig("peak_activation_bytes"),
                       fig("peak_total_bytes"), fig("churn_bytes"), with_commas_u(json_u64(r, "allocations")),
                       with_commas_u(r.contains("anomalies") ? json_u64(r["anomalies"], "total") : 0));
  }
  for (const auto& r : report["runs"]) {
    for (const auto& w : run_warnings(r)) out += fmt::format("\n> **warning**: {}\n", md_cell(w));
    std::vector<std::string> notes = run_notes(r);
    if (r.value("streamed", false)) notes.push_back(streamed_note());
    for (const auto& n : notes) out += fmt::format("\n> **{}**: {}\n", md_cell(json_str(r, "name")), md_cell(n));
  }
  for (const auto& r : report["runs"]) {
    const auto& live = r["live_at_peak"];
    out += fmt::format("\n## Live at the activation peak: {}\n\n", md_cell(json_str(r, "name")));
    if (json_u64(r, "allocations") == 0) {
      out += "No allocation recorded: nothing was live.\n";
      continue;
    }
    out += fmt::format("{} of activation memory live ({} in total).\n\n", bytes_cell(json_u64(live, "activation_bytes")),
                       format_bytes(json_u64(live, "total_bytes")));
    out += "| category | live at peak | own high-water |\n|---|---:|---:|\n";
    if (live.contains("by_category")) {
      for (const auto& [cat, v] : live["by_category"].items()) {
        uint64_t hw = r["peak_by_category"].contains(cat) ? r["peak_by_category"][cat].get<uint64_t>() : 0;
        if (v.get<uint64_t>() == 0 && hw == 0) continue;
        out += fmt::format("| {} | {} | {} |\n", cat, bytes_cell(v.get<uint64_t>()), bytes_cell(hw));
      }
    }
    if (live.contains("top") && !live["top"].empty()) {
      out += "\n| allocation | scope | shape | dtype | category | bytes |\n|---|---|---|---|---|---:|\n";
      for (const auto& e : live["top"]) {
        out += fmt::format("| {} | {} | {} | {} | {} | {} |\n", md_cell(entry_label(e)), md_cell(scope_name(json_str(e, "scope"))),
                           md_cell(json_str(e, "shape")), json_str(e, "dtype"), json_str(e, "category"), bytes_cell(json_u64(e, "bytes")));
      }
      if (json_u64(live, "omitted_entries"))
        out += fmt::format("\n{} smaller allocation{} ({}) not listed.\n", with_commas_u(json_u64(live, "omitted_entries")),
                           json_u64(live, "omitted_entries") == 1 ? "" : "s",
                           format_bytes(json_u64(live, "omitted_bytes")));
    }
  }
  for (const auto& r : report["runs"]) out += serving_markdown(r);
  if (report.contains("comparisons") && report["comparisons"].is_array()) {
    for (const auto& c : report["comparisons"]) out += "\n" + comparison_markdown(c);
  } else if (report.contains("comparison") && report["comparison"].is_object()) {
    out += "\n" + comparison_markdown(report["comparison"]);
  }
  return out;
}

}  // namespace moeprof::reports
