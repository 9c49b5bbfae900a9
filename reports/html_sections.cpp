// Sections of the HTML report page: the comparison with the live-at-peak diff, the live set at
// each run's peak, the planner's fixes. Figures come from the report JSON (reports/json_report.h).
#include <fmt/format.h>

#include "reports/format.h"
#include "reports/html_parts.h"
#include "reports/report_file.h"

namespace moeprof::reports::html {

using nlohmann::ordered_json;

namespace {

std::string scope_name(const std::string& s) { return s.empty() ? "(unscoped)" : s; }

std::string count_delta(int64_t d) {
  const char* cls = d > 0 ? "worse" : d < 0 ? "better" : "same";
  return fmt::format("<span class=\"{}\">{}{}</span>", cls, d > 0 ? "+" : "", with_commas(d));
}

std::string metric_row(const char* what, uint64_t a, uint64_t b, int64_t d, const char* id = nullptr) {
  return fmt::format("<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\"{}>{}</td><td class=\"n\">{}</td></tr>\n",
                     what, bytes(a), bytes(b), id ? fmt::format(" id=\"{}\"", id) : "", delta(d), format_percent(d, a));
}

std::string live_diff_table(const ordered_json& c) {
  if (!c.contains("live_at_peak_diff") || !c["live_at_peak_diff"].is_object()) return "";
  const auto& d = c["live_at_peak_diff"];
  std::string out = "<h3>Live at the peak, tensor by tensor</h3>\n";
  out += fmt::format("<p class=\"muted\">The activation tensors live at A's peak and at B's, matched by name and scope (another "
                     "layer's instance of the same tensor counts as the same). {} tensor(s), {}, are live at both peaks "
                     "unchanged; the rows below are the rest and sum exactly to the change of the peak.</p>\n",
                     with_commas_u(json_u64(d, "unchanged_tensors")), format_bytes(json_u64(d, "unchanged_bytes")));
  out += "<table class=\"live-diff\"><thead><tr><th>change</th><th>tensor</th><th>scope in A</th><th>scope in B</th><th>shape</th>"
         "<th class=\"n\">A</th><th class=\"n\">B</th><th class=\"n\">B &minus; A</th></tr></thead><tbody>\n";
  for (const auto& r : d["rows"]) {
    const std::string change = json_str(r, "change");
    std::string cls = change;
    for (char& ch : cls) if (ch == ' ') ch = '-';
    std::string name = h(entry_label(r));
    if (r.contains("stack") && r["stack"].is_array() && !r["stack"].empty())
      name = fmt::format("<span title=\"{}\">{}</span>", h(r["stack"][0].get<std::string>()), name);
    auto scope_cell = [&](const char* key) { return r[key].get<std::string>().empty() ? std::string("&ndash;") : "<code>" + h(json_str(r, key)) + "</code>"; };
    out += fmt::format("<tr class=\"diff-row\"><td class=\"change change-{}\">{}</td><td>{}{}</td><td>{}</td><td>{}</td><td>{} {}</td>"
                       "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n diff-delta\">{}</td></tr>\n",
                       cls, h(change), name, r.value("baseline_held_after_last_use", false) ? " <span class=\"muted\">(held after its last use in A)</span>" : "",
                       scope_cell("baseline_scope"), scope_cell("candidate_scope"), h(json_str(r, "shape")), h(json_str(r, "dtype")),
                       json_u64(r, "baseline_bytes") ? bytes(json_u64(r, "baseline_bytes")) : "&ndash;",
                       json_u64(r, "candidate_bytes") ? bytes(json_u64(r, "candidate_bytes")) : "&ndash;", delta(json_i64(r, "delta_bytes")));
  }
  out += fmt::format("<tr class=\"sum\"><td colspan=\"5\">sum of the rows ({} live at A's peak, {} at B's)</td><td class=\"n\">{}</td>"
                     "<td class=\"n\">{}</td><td class=\"n\" id=\"diff-sum\">{}</td></tr>\n",
                     format_bytes(json_u64(d, "baseline_bytes")), format_bytes(json_u64(d, "candidate_bytes")),
                     bytes(json_u64(d, "baseline_bytes") - json_u64(d, "unchanged_bytes")),
                     bytes(json_u64(d, "candidate_bytes") - json_u64(d, "unchanged_bytes")), delta(json_i64(d, "delta_bytes")));
  return out + "</tbody></table>\n";
}

}  // namespace

std::string comparison_section(const ordered_json& c) {
  const std::string a = json_str(c, "baseline"), b = json_str(c, "candidate");
  std::string out = fmt::format("<section class=\"comparison\" data-baseline=\"{}\" data-candidate=\"{}\"><h2>Why memory changed: B against A</h2>\n"
                                "<p>A = run <b>{}</b>, B = run <b>{}</b>; every change is B &minus; A (negative: B uses less).</p>\n",
                                h(a), h(b), h(a), h(b));
  out += fmt::format("<table class=\"metrics\"><thead><tr><th>figure</th><th class=\"n\">A: {}</th><th class=\"n\">B: {}</th>"
                     "<th class=\"n\">B &minus; A</th><th class=\"n\">%</th></tr></thead><tbody>\n",
                     h(a), h(b));
  out += metric_row("peak activation", json_u64(c, "baseline_peak_activation_bytes"), json_u64(c, "candidate_peak_activation_bytes"),
                    json_i64(c, "peak_activation_delta_bytes"), "delta-peak-activation");
  out += metric_row("peak total", json_u64(c, "baseline_peak_total_bytes"), json_u64(c, "candidate_peak_total_bytes"),
                    json_i64(c, "peak_total_delta_bytes"));
  out += metric_row("churn", json_u64(c, "baseline_churn_bytes"), json_u64(c, "candidate_churn_bytes"), json_i64(c, "churn_delta_bytes"));
  out += fmt::format("<tr><td>allocations</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
                     with_commas_u(json_u64(c, "baseline_allocations")), with_commas_u(json_u64(c, "candidate_allocations")),
                     count_delta(json_i64(c, "allocations_delta")),
                     format_percent(json_i64(c, "allocations_delta"), json_u64(c, "baseline_allocations")));
  if (c.contains("live_at_peak_delta_by_category") && c.contains("baseline_live_at_peak_by_category")) {
    for (const auto& [cat, v] : c["live_at_peak_delta_by_category"].items()) {
      const uint64_t va = json_u64(c["baseline_live_at_peak_by_category"], cat.c_str());
      const uint64_t vb = json_u64(c["candidate_live_at_peak_by_category"], cat.c_str());
      if (va == 0 && vb == 0) continue;
      out += metric_row(fmt::format("live at the activation peak: {}", h(cat)).c_str(), va, vb, v.get<int64_t>());
    }
  }
  out += "</tbody></table>\n";
  out += live_diff_table(c);
  if (c.contains("scope_deltas") && !c["scope_deltas"].empty()) {
    out += fmt::format("<details><summary>Scopes whose high-water mark changed ({} listed)</summary>", c["scope_deltas"].size());
    out += "<table class=\"scopes\"><thead><tr><th>scope</th>"
           "<th class=\"n\">activation high-water A</th><th class=\"n\">B</th><th class=\"n\">B &minus; A</th>"
           "<th class=\"n\">high-water (all categories) B &minus; A</th></tr></thead><tbody>\n";
    for (const auto& s : c["scope_deltas"]) {
      out += fmt::format("<tr><td><code>{}</code></td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
                         h(scope_name(json_str(s, "scope"))), bytes(json_u64(s, "baseline_activation_high_water_bytes")),
                         bytes(json_u64(s, "candidate_activation_high_water_bytes")), delta(json_i64(s, "activation_delta_bytes")),
                         delta(json_i64(s, "delta_bytes")));
    }
    out += "</tbody></table></details>\n";
  }
  for (const auto& [key, who] : {std::pair{"only_in_baseline", "A"}, std::pair{"only_in_candidate", "B"}}) {
    if (!c.contains(key) || c[key].empty()) continue;
    out += fmt::format("<details><summary>Allocations only {} makes ({} in all, {} listed)</summary><table><thead><tr><th>scope</th>"
                       "<th>name</th><th class=\"n\">bytes</th><th class=\"n\">how many more</th></tr></thead><tbody>\n",
                       who, format_bytes(json_u64(c, (std::string(key) + "_bytes").c_str())), c[key].size());
    for (const auto& g : c[key]) {
      out += fmt::format("<tr><td><code>{}</code></td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
                         h(scope_name(json_str(g, "scope"))), h(entry_label(g)), bytes(json_u64(g, "bytes")),
                         with_commas_u(json_u64(g, "count")));
    }
    out += "</tbody></table></details>\n";
  }
  if (c.contains("predicted") && c["predicted"].is_object()) {
    const auto& p = c["predicted"];
    out += fmt::format("<p class=\"note\">Predicted from A's trace by <code>{}</code>: peak activation {} (measured {}).</p>\n",
                       h(json_str(p, "rules_file")), bytes(json_u64(p, "predicted_peak_activation_bytes")),
                       bytes(json_u64(p, "measured_peak_activation_bytes")));
  }
  return out + "</section>\n";
}

std::string peak_section(const ordered_json& r) {
  const auto& live = r["live_at_peak"];
  std::string out = fmt::format("<div class=\"peak-run\" data-run=\"{}\"><h3>{}: {} of activation live at its peak, {} in all</h3>\n",
                                h(json_str(r, "name")), h(json_str(r, "name")), bytes(json_u64(live, "activation_bytes")),
                                bytes(json_u64(live, "total_bytes")));
  out += fmt::format("<div class=\"controls\"><label>group by <select class=\"icicle-by\"><option value=\"scope\">scope</option>"
                     "<option value=\"stack\">stack</option></select></label></div><div class=\"icicle\" data-run=\"{}\"></div>\n",
                     h(json_str(r, "name")));
  out += "<table class=\"categories\"><thead><tr><th>category</th><th class=\"n\">live at the activation peak</th>"
         "<th class=\"n\">the category's own high-water</th></tr></thead><tbody>\n";
  if (live.contains("by_category")) {
    for (const auto& [cat, v] : live["by_category"].items()) {
      const uint64_t hw = r["peak_by_category"].contains(cat) ? r["peak_by_category"][cat].get<uint64_t>() : 0;
      if (v.get<uint64_t>() == 0 && hw == 0) continue;
      out += fmt::format("<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n", h(cat), bytes(v.get<uint64_t>()), bytes(hw));
    }
  }
  out += "</tbody></table>\n";
  if (live.contains("top") && !live["top"].empty()) {
    out += "<table class=\"live\"><thead><tr><th>allocation</th><th>scope</th><th>shape</th><th>category</th><th class=\"n\">bytes</th></tr></thead><tbody>\n";
    for (const auto& e : live["top"]) {
      out += fmt::format("<tr><td>{}{}</td><td><code>{}</code></td><td>{} {}</td><td>{}</td><td class=\"n\">{}</td></tr>\n", h(entry_label(e)),
                         e.value("held_after_last_use", false) ? " <span class=\"worse\" title=\"held after its last use\">(held)</span>" : "",
                         h(scope_name(json_str(e, "scope"))), h(json_str(e, "shape")), h(json_str(e, "dtype")), h(json_str(e, "category")),
                         bytes(json_u64(e, "bytes")));
    }
    out += "</tbody></table>\n";
    if (json_u64(live, "omitted_entries"))
      out += fmt::format("<p class=\"muted\">{} smaller allocation{} ({}) not listed.</p>\n", with_commas_u(json_u64(live, "omitted_entries")),
                         json_u64(live, "omitted_entries") == 1 ? "" : "s",
                         format_bytes(json_u64(live, "omitted_bytes")));
  }
  return out + "</div>\n";
}

std::string fixes_section(const ordered_json& r) {
  if (!r.contains("what_if") || !r["what_if"].is_object()) return "";
  const auto& w = r["what_if"];
  std::string out = fmt::format("<div class=\"fixes-run\" data-run=\"{}\"><h3>{}: ranked fixes found in its trace</h3>\n", h(json_str(r, "name")),
                                h(json_str(r, "name")));
  out += fmt::format("<p>Peak activation measured {}; with the rules applied {}", bytes(json_u64(w, "measured_peak_activation_bytes")),
                     bytes(json_u64(w, "predicted_peak_activation_bytes")));
  if (w.value("has_uses", false))
    out += fmt::format("; liveness bound {} (every allocation freed right after its last use)", bytes(json_u64(w, "liveness_bound_bytes")));
  out += ".</p>\n";
  if (w.contains("rules") && !w["rules"].empty()) {
    out += "<table class=\"rules\"><thead><tr><th>rule applied</th><th class=\"n\">matched</th><th class=\"n\">applied</th></tr></thead><tbody>\n";
    for (const auto& x : w["rules"])
      out += fmt::format("<tr><td><code>{}</code></td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n", h(json_str(x, "rule")),
                         with_commas_u(json_u64(x, "matched")), with_commas_u(json_u64(x, "applied")));
    out += "</tbody></table>\n";
  }
  if (w.contains("fixes") && !w["fixes"].empty()) {
    out += "<table class=\"fixes\"><thead><tr><th>#</th><th>fix (rule)</th><th class=\"n\">saves at the peak</th><th class=\"n\">peak after it</th>"
           "<th class=\"n\">churn saved</th><th>tensors</th></tr></thead><tbody>\n";
    size_t n = 0;
    for (const auto& f : w["fixes"]) {
      std::string rules, tensors;
      for (const auto& x : f["rules"]) rules += (rules.empty() ? "" : "<br>") + ("<code>" + h(x.get<std::string>()) + "</code>");
      for (const auto& t : f["tensors"])
        tensors += fmt::format("{}{}: {} &times; <b>{}</b> <code>{}</code> {} ({})", tensors.empty() ? "" : "<br>", h(json_str(t, "role")),
                               with_commas_u(json_u64(t, "count")), h(json_str(t, "name").empty() ? "(unnamed)" : json_str(t, "name")),
                               h(json_str(t, "scope")), h(json_str(t, "shape")), format_bytes(json_u64(t, "bytes")));
      out += fmt::format("<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>\n", ++n,
                         rules, bytes(json_u64(f, "bytes_saved_at_peak")), bytes(json_u64(f, "cumulative_peak_activation_bytes")),
                         bytes(json_u64(f, "churn_saved_bytes")), tensors);
    }
    out += "</tbody></table>\n";
  }
  return out + "</div>\n";
}

}  // namespace moeprof::reports::html
