// Self-contained HTML rendering of a report: no external resources; the report JSON is embedded in
// <script type="application/json" id="moeprof-data">; charts are inline SVG drawn here.
#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "reports/format.h"
#include "reports/json_report.h"
#include "reports/html_report.h"

namespace moeprof::reports {

using nlohmann::ordered_json;

namespace {

std::string h(std::string_view s) { return xml_escape(s); }
std::string bytes_html(uint64_t b) {
  return fmt::format("<span title=\"{} bytes\">{}</span>", with_commas(static_cast<int64_t>(b)), format_bytes(b));
}
std::string delta_html(int64_t d) {
  const char* cls = d > 0 ? "worse" : d < 0 ? "better" : "same";
  return fmt::format("<span class=\"{}\" title=\"{} bytes\">{}</span>", cls, with_commas(d), format_delta_bytes(d));
}

// Live bytes over time: one polyline per series, step-shaped, with axes in decimal MB/GB.
std::string chart_svg(const ordered_json& run) {
  if (!run.contains("timeline") || !run["timeline"].is_object()) return "<p class=\"note\">No timeline in this report.</p>";
  const auto& tl = run["timeline"];
  struct Series { const char* key; const char* label; const char* cls; };
  const Series series[] = {{"total", "total", "s-total"}, {"activation", "activation", "s-act"}};
  uint64_t tmin = UINT64_MAX, tmax = 0, vmax = 0;
  for (const auto& s : series) {
    if (!tl.contains(s.key)) continue;
    for (const auto& p : tl[s.key]) {
      tmin = std::min(tmin, p[0].get<uint64_t>());
      tmax = std::max(tmax, p[0].get<uint64_t>());
      vmax = std::max(vmax, p[1].get<uint64_t>());
    }
  }
  if (tmin == UINT64_MAX) return "<p class=\"note\">Empty timeline.</p>";
  const double W = 900, H = 260, L = 80, R = 20, T = 16, B = 34;
  double span = tmax > tmin ? static_cast<double>(tmax - tmin) : 1.0;
  double top = vmax ? static_cast<double>(vmax) * 1.05 : 1.0;
  auto x = [&](uint64_t t) { return L + (W - L - R) * static_cast<double>(t - tmin) / span; };
  auto y = [&](uint64_t v) { return T + (H - T - B) * (1.0 - static_cast<double>(v) / top); };
  std::string svg = fmt::format("<svg class=\"chart\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"live bytes over time for {}\">",
                                W, H, h(json_str(run, "name")));
  for (int i = 0; i <= 4; ++i) {
    uint64_t v = static_cast<uint64_t>(top * i / 4);
    double yy = y(v);
    svg += fmt::format("<line class=\"grid\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>", L, yy, W - R, yy);
    svg += fmt::format("<text class=\"axis\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>", L - 6, yy + 4, format_bytes(v));
  }
  svg += fmt::format("<text class=\"axis\" x=\"{:.1f}\" y=\"{:.1f}\">0 ms</text>", L, H - 10);
  svg += fmt::format("<text class=\"axis\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:.3f} ms</text>", W - R, H - 10,
                     span / 1e6);
  for (const auto& s : series) {
    if (!tl.contains(s.key) || tl[s.key].empty()) continue;
    std::string pts;
    double prev_y = -1;
    for (const auto& p : tl[s.key]) {
      double xx = x(p[0].get<uint64_t>()), yy = y(p[1].get<uint64_t>());
      if (prev_y >= 0) pts += fmt::format("{:.1f},{:.1f} ", xx, prev_y);
      pts += fmt::format("{:.1f},{:.1f} ", xx, yy);
      prev_y = yy;
    }
    svg += fmt::format("<polyline class=\"{}\" points=\"{}\"><title>{} live bytes</title></polyline>", s.cls, pts, s.label);
  }
  // Mark the activation peak.
  uint64_t peak = json_u64(run, "peak_activation_bytes");
  if (run.contains("live_at_peak") && run["live_at_peak"]["timestamp_ns"].is_number()) {
    uint64_t t = run["live_at_peak"]["timestamp_ns"].get<uint64_t>();
    if (t >= tmin && t <= tmax) {
      svg += fmt::format("<circle class=\"peak\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\"><title>activation peak {}</title></circle>",
                         x(t), y(peak), format_bytes(peak));
    }
  }
  svg += "</svg>";
  svg += "<div class=\"legend\"><span class=\"k s-total\"></span>total live <span class=\"k s-act\"></span>activation live "
         "<span class=\"k peak\"></span>activation peak</div>";
  return svg;
}

const char* kStyle = R"CSS(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px}h3{font-size:15px;margin:18px 0 6px}
.sub{color:#5b6475;margin-bottom:16px}
section{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:14px 18px;margin:14px 0}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{padding:5px 8px;border-bottom:1px solid #eceef2;text-align:left;vertical-align:top}
th{background:#f0f2f5;font-weight:600}td.n,th.n{text-align:right}
.worse{color:#b3261e;font-weight:600}.better{color:#1b7f3b;font-weight:600}.same{color:#5b6475}
.note{background:#eef4fb;border:1px solid #b9cfe8;border-radius:6px;padding:6px 10px;margin:6px 0}
.warn{background:#fff4e5;border:1px solid #f0c27b;border-radius:6px;padding:6px 10px;margin:6px 0}
.note{color:#5b6475}
svg.chart{width:100%;height:auto;background:#fff}
.grid{stroke:#eceef2;stroke-width:1}.axis{font-size:11px;fill:#5b6475}
polyline{fill:none;stroke-width:1.6}.s-total{stroke:#7a8699}.s-act{stroke:#2f6fde}
circle.peak{fill:#b3261e}
.legend{font-size:12px;color:#5b6475}.k{display:inline-block;width:18px;height:3px;margin:0 4px 3px 10px;vertical-align:middle}
.k.s-total{background:#7a8699}.k.s-act{background:#2f6fde}.k.peak{background:#b3261e;width:8px;height:8px;border-radius:4px}
code{font-size:12px}
)CSS";

}  // namespace

std::string report_html(const ordered_json& report) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                    "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
                    "<title>moeprof memory report</title><style>";
  out += kStyle;
  out += "</style></head><body><main>\n<h1>moeprof memory report</h1>\n";
  out += fmt::format("<div class=\"sub\">{} &middot; schema version {} &middot; {} run(s)</div>\n", h(json_str(report, "generator")),
                     json_i64(report, "schema_version"), report["runs"].size());

  // Runs table.
  out += "<section id=\"runs\"><h2>Runs</h2><table><thead><tr><th>run</th><th>mode</th><th>model</th><th class=\"n\">tokens</th>"
         "<th>TP</th><th>backend / device</th><th class=\"n\">peak activation</th><th class=\"n\">peak total</th>"
         "<th class=\"n\">churn</th><th class=\"n\">allocations</th><th class=\"n\">anomalies</th></tr></thead><tbody>\n";
  for (const auto& r : report["runs"]) {
    out += fmt::format("<tr data-run=\"{}\"><td><b>{}</b></td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td>"
                       "<td>{} / {}</td><td class=\"n peak-act\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
                       "<td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
                       h(json_str(r, "name")), h(json_str(r, "name")), h(json_str(r, "mode")), h(json_str(r, "model")), json_i64(r, "tokens"),
                       h(run_tp_label(r)), h(json_str(r, "backend")), h(json_str(r, "device_name")),
                       bytes_html(json_u64(r, "peak_activation_bytes")), bytes_html(json_u64(r, "peak_total_bytes")),
                       bytes_html(json_u64(r, "churn_bytes")), with_commas(json_i64(r, "allocations")),
                       r.contains("anomalies") ? json_u64(r["anomalies"], "total") : 0);
  }
  out += "</tbody></table>\n";
  for (const auto& r : report["runs"]) {
    for (const auto& n : run_notes(r))
      out += fmt::format("<div class=\"note\"><b>{}</b>: {}</div>", h(json_str(r, "name")), h(n));
    if (r.value("truncated", false))
      out += fmt::format("<div class=\"warn\"><b>{}</b>: trace truncated: {}</div>", h(json_str(r, "name")), h(json_str(r, "truncation_note")));
    if (json_u64(r, "dropped_records"))
      out += fmt::format("<div class=\"warn\"><b>{}</b>: {} dropped records: figures are lower bounds</div>", h(json_str(r, "name")),
                         json_u64(r, "dropped_records"));
  }
  out += "</section>\n";

  // Comparison.
  std::vector<ordered_json> comparisons;
  if (report.contains("comparisons") && report["comparisons"].is_array()) {
    for (const auto& c : report["comparisons"]) comparisons.push_back(c);
  } else if (report.contains("comparison") && report["comparison"].is_object()) {
    comparisons.push_back(report["comparison"]);
  }
  for (const auto& c : comparisons) {
    out += fmt::format("<section class=\"comparison\"><h2>{} vs {} (baseline)</h2><table><thead><tr><th>metric</th>"
                       "<th class=\"n\">baseline</th><th class=\"n\">candidate</th><th class=\"n\">delta</th></tr></thead><tbody>\n",
                       h(json_str(c, "candidate")), h(json_str(c, "baseline")));
    out += fmt::format("<tr><td>peak activation</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\" id=\"delta-peak-activation\">{}</td></tr>\n",
                       bytes_html(json_u64(c, "baseline_peak_activation_bytes")), bytes_html(json_u64(c, "candidate_peak_activation_bytes")),
                       delta_html(json_i64(c, "peak_activation_delta_bytes")));
    out += fmt::format("<tr><td>peak total</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
                       bytes_html(json_u64(c, "baseline_peak_total_bytes")), bytes_html(json_u64(c, "candidate_peak_total_bytes")),
                       delta_html(json_i64(c, "peak_total_delta_bytes")));
    out += fmt::format("<tr><td>allocation churn</td><td></td><td></td><td class=\"n\">{}</td></tr>\n", delta_html(json_i64(c, "churn_delta_bytes")));
    if (c.contains("live_at_peak_delta_by_category")) {
      for (const auto& [cat, v] : c["live_at_peak_delta_by_category"].items()) {
        if (v.get<int64_t>() != 0)
          out += fmt::format("<tr><td>live at peak: {}</td><td></td><td></td><td class=\"n\">{}</td></tr>\n", h(cat), delta_html(v.get<int64_t>()));
      }
    }
    out += "</tbody></table>\n";
    if (c.contains("scope_deltas") && !c["scope_deltas"].empty()) {
      out += "<h3>Scopes that changed (high-water)</h3><table><thead><tr><th>scope</th><th class=\"n\">baseline</th>"
             "<th class=\"n\">candidate</th><th class=\"n\">delta</th></tr></thead><tbody>\n";
      for (const auto& s : c["scope_deltas"]) {
        out += fmt::format("<tr><td><code>{}</code></td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
                           h(json_str(s, "scope").empty() ? "(unscoped)" : json_str(s, "scope")), bytes_html(json_u64(s, "baseline_high_water_bytes")),
                           bytes_html(json_u64(s, "candidate_high_water_bytes")), delta_html(json_i64(s, "delta_bytes")));
      }
      out += "</tbody></table>\n";
    }
    for (const char* key : {"only_in_baseline", "only_in_candidate"}) {
      if (!c.contains(key) || c[key].empty()) continue;
      out += fmt::format("<h3>Allocations only in the {}</h3><table><thead><tr><th>scope</th><th>name</th><th class=\"n\">bytes</th>"
                         "<th class=\"n\">count</th></tr></thead><tbody>\n", std::string(key).substr(8));
      for (const auto& g : c[key]) {
        out += fmt::format("<tr><td><code>{}</code></td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
                           h(json_str(g, "scope")), h(json_str(g, "name")), bytes_html(json_u64(g, "bytes")), json_u64(g, "count"));
      }
      out += "</tbody></table>\n";
    }
    out += "</section>\n";
  }

  // Per run: chart, live set at the peak.
  for (const auto& r : report["runs"]) {
    out += fmt::format("<section class=\"run\" data-run=\"{}\"><h2>{}</h2>\n", h(json_str(r, "name")), h(json_str(r, "name")));
    out += chart_svg(r);
    const auto& live = r["live_at_peak"];
    out += fmt::format("<h3>Live at the activation peak: {} activation, {} in total</h3>\n", bytes_html(json_u64(live, "activation_bytes")),
                       bytes_html(json_u64(live, "total_bytes")));
    out += "<table class=\"categories\"><thead><tr><th>category</th><th class=\"n\">live at peak</th><th class=\"n\">own high-water</th></tr></thead><tbody>\n";
    if (live.contains("by_category")) {
      for (const auto& [cat, v] : live["by_category"].items()) {
        uint64_t hw = r["peak_by_category"].contains(cat) ? r["peak_by_category"][cat].get<uint64_t>() : 0;
        if (v.get<uint64_t>() == 0 && hw == 0) continue;
        out += fmt::format("<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n", h(cat), bytes_html(v.get<uint64_t>()), bytes_html(hw));
      }
    }
    out += "</tbody></table>\n";
    if (live.contains("top") && !live["top"].empty()) {
      out += "<table class=\"live\"><thead><tr><th>allocation</th><th>scope</th><th>shape</th><th>dtype</th><th>category</th>"
             "<th class=\"n\">bytes</th></tr></thead><tbody>\n";
      for (const auto& e : live["top"]) {
        out += fmt::format("<tr><td>{}{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td></tr>\n",
                           h(json_str(e, "name")), e.value("held_after_last_use", false) ? " <span class=\"worse\" title=\"held after its last use\">(held)</span>" : "",
                           h(json_str(e, "scope")), h(json_str(e, "shape")), h(json_str(e, "dtype")), h(json_str(e, "category")), bytes_html(json_u64(e, "bytes")));
      }
      out += "</tbody></table>\n";
      if (json_u64(live, "omitted_entries"))
        out += fmt::format("<p class=\"note\">{} smaller allocations ({}) not listed.</p>\n", json_u64(live, "omitted_entries"),
                           format_bytes(json_u64(live, "omitted_bytes")));
    }
    out += "</section>\n";
  }

  // Embedded data: "</" is escaped so the JSON cannot end the script element.
  std::string data = report.dump();
  std::string safe;
  safe.reserve(data.size());
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] == '<' && i + 1 < data.size() && data[i + 1] == '/') safe += "<\\/";
    else if (data[i] == '<' && i + 1 < data.size() && data[i + 1] == '!') safe += "\\u003c!";
    else { safe.push_back(data[i]); continue; }
    ++i;
  }
  out += "<script type=\"application/json\" id=\"moeprof-data\">" + safe + "</script>\n";
  out += "</main></body></html>\n";
  return out;
}

}  // namespace moeprof::reports
