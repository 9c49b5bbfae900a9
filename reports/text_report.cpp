#include "reports/text_report.h"

#include <algorithm>
#include <array>
#include <cstdint>

#include <fmt/format.h>

#include "core/utf8.h"
#include "reports/format.h"
#include "reports/report_file.h"

namespace moeprof::reports {

using nlohmann::ordered_json;

namespace {

std::string scope_name(const std::string& s) { return s.empty() ? "(unscoped)" : s; }

// A string of the report shown in a text table: control characters as \xNN (a name with a newline
// or a tab had broken its row), the whole string kept.
std::string text_str(const ordered_json& j, const char* key) { return printable(json_str(j, key), SIZE_MAX); }
std::string text_label(const ordered_json& e) { return printable(entry_label(e), SIZE_MAX); }

// "-539.0 MB (-538,968,064 B)"; exact alone below 1 kB.
std::string change_exact(int64_t d) {
  const uint64_t mag = d < 0 ? -static_cast<uint64_t>(d) : static_cast<uint64_t>(d);
  if (mag < 1000) return format_delta_bytes(d);
  return fmt::format("{} ({}{})", format_delta_bytes(d), d < 0 ? "-" : "+", format_exact_bytes(mag));
}
std::string bytes_exact(uint64_t b) { return b < 1000 ? format_bytes(b) : fmt::format("{} ({})", format_bytes(b), format_exact_bytes(b)); }

}  // namespace

std::string comparison_text(const ordered_json& c, const std::string& a_file, const std::string& b_file) {
  const std::string a = text_str(c, "baseline"), b = text_str(c, "candidate");
  std::string out;
  // Warnings first (a failed, truncated or empty run: its figures are lower bounds).
  if (c.contains("warnings") && c["warnings"].is_array())
    for (const auto& w : c["warnings"])
      if (w.is_string()) out += "warning: " + w.get<std::string>() + "\n";
  out += fmt::format("A: run {} ({})\nB: run {} ({})\nchanges are B - A (negative: B uses less)\n\n", a, a_file, b, b_file);
  // The headline table: the columns as wide as their widest cell, so large figures never run together.
  std::vector<std::array<std::string, 5>> rows = {{"", "A", "B", "B - A", "%"}};
  // A run with no allocation has no figure: "none recorded", never 0 B, and no change to show.
  const bool none_a = c.contains("baseline_allocations") && json_u64(c, "baseline_allocations") == 0,
             none_b = c.contains("candidate_allocations") && json_u64(c, "candidate_allocations") == 0;
  auto row = [&](const std::string& what, uint64_t va, uint64_t vb, int64_t d) {
    if (none_a || none_b)
      rows.push_back({what, none_a ? "none recorded" : format_bytes(va), none_b ? "none recorded" : format_bytes(vb), "-", "-"});
    else
      rows.push_back({what, format_bytes(va), format_bytes(vb), change_exact(d), format_percent(d, va)});
  };
  row("peak activation", json_u64(c, "baseline_peak_activation_bytes"), json_u64(c, "candidate_peak_activation_bytes"),
      json_i64(c, "peak_activation_delta_bytes"));
  row("peak total", json_u64(c, "baseline_peak_total_bytes"), json_u64(c, "candidate_peak_total_bytes"), json_i64(c, "peak_total_delta_bytes"));
  row("churn", json_u64(c, "baseline_churn_bytes"), json_u64(c, "candidate_churn_bytes"), json_i64(c, "churn_delta_bytes"));
  const int64_t da = json_i64(c, "allocations_delta");
  rows.push_back({"allocations", with_commas_u(json_u64(c, "baseline_allocations")), with_commas_u(json_u64(c, "candidate_allocations")),
                  (da > 0 ? "+" : "") + with_commas(da), format_percent(da, json_u64(c, "baseline_allocations"))});
  if (c.contains("live_at_peak_delta_by_category") && c.contains("baseline_live_at_peak_by_category")) {
    for (const auto& [cat, v] : c["live_at_peak_delta_by_category"].items()) {
      const uint64_t va = json_u64(c["baseline_live_at_peak_by_category"], cat.c_str());
      const uint64_t vb = json_u64(c["candidate_live_at_peak_by_category"], cat.c_str());
      if (va || vb) row("live at the activation peak: " + cat, va, vb, v.get<int64_t>());
    }
  }
  std::array<size_t, 5> w = {42, 16, 16, 30, 8};
  for (const auto& r : rows)
    for (size_t k = 0; k < w.size(); ++k) w[k] = std::max(w[k], r[k].size());
  for (const auto& r : rows)
    out += fmt::format("  {:<{}} {:>{}} {:>{}} {:>{}} {:>{}}\n", r[0], w[0], r[1], w[1], r[2], w[2], r[3], w[3], r[4], w[4]);
  if (c.contains("live_at_peak_diff") && c["live_at_peak_diff"].is_object()) {
    const auto& d = c["live_at_peak_diff"];
    out += fmt::format("\nlive at the peak, tensor by tensor ({} tensor(s), {}, unchanged at both peaks):\n",
                       with_commas_u(json_u64(d, "unchanged_tensors")), format_bytes(json_u64(d, "unchanged_bytes")));
    size_t wname = 26, wscope = 28, wa = 12, wb = 12, wd = 30;
    auto cell = [&](const nlohmann::ordered_json& r, const char* key) {
      return json_u64(r, key) ? format_bytes(json_u64(r, key)) : std::string("-");
    };
    const std::string sum_a = format_bytes(json_u64(d, "baseline_bytes") - json_u64(d, "unchanged_bytes"));
    const std::string sum_b = format_bytes(json_u64(d, "candidate_bytes") - json_u64(d, "unchanged_bytes"));
    const std::string sum_d = change_exact(json_i64(d, "delta_bytes"));
    wa = std::max(wa, sum_a.size());
    wb = std::max(wb, sum_b.size());
    wd = std::max(wd, sum_d.size());
    for (const auto& r : d["rows"]) {
      wname = std::min<size_t>(std::max(wname, text_label(r).size()), 72);
      wscope = std::min<size_t>(std::max({wscope, text_str(r, "baseline_scope").size(), text_str(r, "candidate_scope").size()}), 56);
      wa = std::max(wa, cell(r, "baseline_bytes").size());
      wb = std::max(wb, cell(r, "candidate_bytes").size());
      wd = std::max(wd, change_exact(json_i64(r, "delta_bytes")).size());
    }
    out += fmt::format("  {:<14} {:<{}} {:<{}} {:<{}} {:>{}} {:>{}} {:>{}}\n", "change", "tensor", wname, "scope in A", wscope, "scope in B",
                       wscope, "A", wa, "B", wb, "B - A", wd);
    for (const auto& r : d["rows"]) {
      auto scope = [&](const char* key) { return text_str(r, key).empty() ? std::string("-") : text_str(r, key); };
      out += fmt::format("  {:<14} {:<{}} {:<{}} {:<{}} {:>{}} {:>{}} {:>{}}\n", text_str(r, "change"), text_label(r), wname,
                         scope("baseline_scope"), wscope, scope("candidate_scope"), wscope, cell(r, "baseline_bytes"), wa,
                         cell(r, "candidate_bytes"), wb, change_exact(json_i64(r, "delta_bytes")), wd);
    }
    out += fmt::format("  {:<14} {:<{}} {:<{}} {:<{}} {:>{}} {:>{}} {:>{}}\n", "sum", "", wname, "", wscope, "", wscope, sum_a, wa, sum_b, wb,
                       sum_d, wd);
  }
  if (c.contains("scope_deltas") && !c["scope_deltas"].empty()) {
    out += fmt::format("\nscopes whose high-water changed:\n  {:<44} {:>16} {:>16} {:>16} {:>28}\n", "scope", "activation hw A", "activation hw B",
                       "B - A", "high-water (all) B - A");
    for (const auto& s : c["scope_deltas"])
      out += fmt::format("  {:<44} {:>16} {:>16} {:>16} {:>28}\n", scope_name(text_str(s, "scope")),
                         format_bytes(json_u64(s, "baseline_activation_high_water_bytes")),
                         format_bytes(json_u64(s, "candidate_activation_high_water_bytes")), format_delta_bytes(json_i64(s, "activation_delta_bytes")),
                         format_delta_bytes(json_i64(s, "delta_bytes")));
  }
  for (const auto& [key, who] : {std::pair{"only_in_baseline", "A"}, std::pair{"only_in_candidate", "B"}}) {
    if (!c.contains(key) || c[key].empty()) continue;
    out += fmt::format("\nallocations only {} makes ({} in all):\n", who, format_bytes(json_u64(c, (std::string(key) + "_bytes").c_str())));
    for (const auto& g : c[key])
      out += fmt::format("  {:>7} x {:>12}  {} {}\n", with_commas_u(json_u64(g, "count")), format_bytes(json_u64(g, "bytes")),
                         scope_name(text_str(g, "scope")), text_label(g));
  }
  return out;
}

std::vector<std::string> run_warnings(const ordered_json& r) {
  std::vector<std::string> w;
  const std::string name = "run " + text_str(r, "name");
  const std::string error = r.contains("extra") ? text_str(r["extra"], "error") : std::string();
  if (!error.empty()) w.push_back(fmt::format("{} failed: {}: the figures cover only what ran before the failure", name, error));
  if (r.value("truncated", false))
    w.push_back(fmt::format("{}: the trace is {}: the figures cover the part read", name,
                            text_str(r, "truncation_note").empty() ? "truncated" : text_str(r, "truncation_note")));
  if (json_u64(r, "dropped_records"))
    w.push_back(fmt::format("{}: {} dropped records: the figures are lower bounds", name, with_commas_u(json_u64(r, "dropped_records"))));
  if (json_u64(r, "allocations") == 0)
    w.push_back(fmt::format("{}: no allocations recorded{}", name,
                            text_str(r, "mode") == "imported" ? kEmptySnapshotAdvice : ""));
  return w;
}

std::string run_text(const ordered_json& r) {
  std::string out;
  // Warnings first: a failed run's or a truncated trace's figures cover only the part read.
  for (const auto& w : run_warnings(r)) out += "warning: " + w + "\n";
  for (const auto& n : run_notes(r)) out += "note: " + n + "\n";
  // What the run's metadata holds: a traced or imported program has no model, tokens or TP.
  std::string head = "run " + text_str(r, "name") + ": mode " + or_dash(text_str(r, "mode"));
  if (!text_str(r, "model").empty()) head += ", model " + text_str(r, "model");
  if (json_i64(r, "tokens") > 0) head += ", " + with_commas(json_i64(r, "tokens")) + " tokens";
  if (!run_tp_label(r).empty()) head += ", TP " + run_tp_label(r);
  head += ", backend " + or_dash(text_str(r, "backend")) + (text_str(r, "device_name").empty() ? "" : " (" + text_str(r, "device_name") + ")");
  out += head + "\n";
  // A trace with no allocation has no peak to headline: "none recorded", never a misleading 0 B.
  const bool nothing = json_u64(r, "allocations") == 0;
  auto figure = [&](const char* key) { return nothing ? std::string("none recorded") : bytes_exact(json_u64(r, key)); };
  out += fmt::format("  peak activation  {}\n", figure("peak_activation_bytes"));
  out += fmt::format("  peak total       {}\n", figure("peak_total_bytes"));
  out += fmt::format("  churn            {}\n", figure("churn_bytes"));
  out += fmt::format("  allocations      {}\n", with_commas_u(json_u64(r, "allocations")));
  // The caching allocator's segments (a PyTorch snapshot's, a traced pool's): what the process held.
  uint64_t reserved = 0, reserved_device = 0;
  if (r.contains("devices"))
    for (const auto& d : r["devices"])
      if (json_u64(d, "pool_reserved_peak_bytes") > reserved) {
        reserved = json_u64(d, "pool_reserved_peak_bytes");
        reserved_device = json_u64(d, "device");
      }
  if (reserved > 0)
    out += fmt::format("  reserved peak    {} (the allocator's segments, device {})\n", bytes_exact(reserved), reserved_device);
  const auto& live = r["live_at_peak"];
  if (!live["device"].is_number()) {
    out += "\nno allocation was replayed: there is no peak\n";
  } else {
    // Times relative to the start of the trace (docs/metrics.md, "Units"), never the recording
    // process's clock: a traced program's timestamps are nanoseconds since boot or the epoch.
    const uint64_t t = live.contains("time_ns") ? json_u64(live, "time_ns")
                                                : (json_u64(live, "timestamp_ns") >= json_u64(r, "start_timestamp_ns")
                                                       ? json_u64(live, "timestamp_ns") - json_u64(r, "start_timestamp_ns")
                                                       : 0);
    out += fmt::format("\nlive at the activation peak (device {}, {} after the start of the trace):\n", json_u64(live, "device"),
                       format_duration_ns(t));
    for (const auto& [cat, v] : live["by_category"].items())
      if (v.get<uint64_t>()) out += fmt::format("  {:<14} {}\n", cat, bytes_exact(v.get<uint64_t>()));
  }
  if (live.contains("top") && !live["top"].empty()) {
    out += "\nlargest live allocations at the peak:\n";
    // Columns as wide as their longest entry (names of traced programs are call sites, often long).
    size_t wcat = 10, wname = 16, wscope = 16;
    for (const auto& e : live["top"]) {
      wcat = std::max(wcat, text_str(e, "category").size());
      wname = std::min<size_t>(std::max(wname, text_label(e).size()), 72);
      wscope = std::min<size_t>(std::max(wscope, scope_name(text_str(e, "scope")).size()), 56);
    }
    for (const auto& e : live["top"]) {
      std::string line = fmt::format("  {:>12}  {:<{}}  {:<{}}  {:<{}}  {}{}", format_bytes(json_u64(e, "bytes")), text_str(e, "category"), wcat,
                                     text_label(e), wname, scope_name(text_str(e, "scope")), wscope, text_str(e, "shape"),
                                     e.value("held_after_last_use", false) ? "  [held after last use]" : "");
      line.erase(line.find_last_not_of(' ') + 1);
      out += line + "\n";
    }
    if (json_u64(live, "omitted_entries"))
      out += fmt::format("  ... {} more ({})\n", with_commas_u(json_u64(live, "omitted_entries")), format_bytes(json_u64(live, "omitted_bytes")));
  }
  if (!r["scopes"].empty()) {
    out += "\nscopes by activation high-water:\n";
    for (const auto& s : r["scopes"])
      out += fmt::format("  {:>12}  {:<48} live at the peak {}, churn {}, {} allocations\n", format_bytes(json_u64(s, "activation_high_water_bytes")),
                         scope_name(text_str(s, "scope")), format_bytes(json_u64(s, "live_at_activation_peak_bytes")),
                         format_bytes(json_u64(s, "allocated_bytes")), with_commas_u(json_u64(s, "allocations")));
  }
  if (r["reuse"].is_object() && (r["reuse"].value("has_uses", false) || json_u64(r["reuse"], "handoff_count"))) {
    const auto& u = r["reuse"];
    out += "\nreuse findings:\n";
    out += fmt::format("  held after last use at the peak: {}\n", format_bytes(json_u64(u, "held_after_last_use_bytes")));
    out += fmt::format("  never used, live at the peak:    {}\n", format_bytes(json_u64(u, "never_used_at_peak_bytes")));
    if (!u.value("handoffs_computed", true))
      out += fmt::format("  hand-off opportunities: not searched ({}; --stream off searches them in memory)\n",
                         u.value("handoffs_note", std::string()));
    else
      out += fmt::format("  hand-off opportunities: {} ({} in all, {} at the peak)\n", with_commas_u(json_u64(u, "handoff_count")),
                         format_bytes(json_u64(u, "handoff_bytes")), format_bytes(json_u64(u, "handoff_bytes_at_activation_peak")));
  }
  std::vector<std::string> notes;
  // Live at the end of the trace is not a leak (weights, caches, a process traced while serving):
  // reported apart, never as an anomaly (docs/metrics.md).
  for (const auto& [k, v] : r["anomalies"].items())
    if (k != "total" && k != "never_freed" && k != "never_freed_bytes" && v.get<uint64_t>())
      notes.push_back(fmt::format("{} {}", with_commas_u(v.get<uint64_t>()), k));
  if (json_u64(r, "dropped_records")) notes.push_back(fmt::format("{} dropped records", with_commas_u(json_u64(r, "dropped_records"))));
  if (r.value("truncated", false)) notes.push_back("trace truncated");
  if (r.contains("extra") && !text_str(r["extra"], "error").empty()) notes.push_back("run failed: " + text_str(r["extra"], "error"));
  if (const uint64_t live_end = json_u64(r["anomalies"], "never_freed"); live_end > 0)
    out += fmt::format("\nlive at the end of the trace: {} allocations, {} (not anomalies: weights, caches, pools)\n",
                       with_commas_u(live_end), format_bytes(json_u64(r["anomalies"], "never_freed_bytes")));
  out += fmt::format("{}anomalies: {}\n", json_u64(r["anomalies"], "never_freed") > 0 ? "" : "\n",
                     notes.empty() ? "none" : fmt::format("{}", fmt::join(notes, "; ")));
  return out;
}

}  // namespace moeprof::reports
