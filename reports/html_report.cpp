// The single-file HTML page of a report: markup written here and in html_sections.cpp, the styles
// and script of reports/html/ and the vendored uPlot (reports/html/vendor/) inlined from the
// embedded assets (reports/html_assets.h), the report JSON in <script id="moeprof-data">. No
// external resource: the page makes no network request.
#include <fmt/format.h>

#include "reports/format.h"
#include "reports/html_assets.h"
#include "reports/html_parts.h"
#include "reports/html_report.h"
#include "reports/report_file.h"
#include "reports/serving_report.h"
#include "reports/text_report.h"

namespace moeprof::reports {

using nlohmann::ordered_json;

namespace html {

std::string h(std::string_view s) { return xml_escape(s); }

std::string bytes(uint64_t b) {
  return fmt::format("<span data-bytes=\"{}\" title=\"{}\">{}</span>", b, format_exact_bytes(b), format_bytes(b));
}

std::string delta(int64_t d) {
  const char* cls = d > 0 ? "worse" : d < 0 ? "better" : "same";
  const uint64_t mag = d < 0 ? -static_cast<uint64_t>(d) : static_cast<uint64_t>(d);
  return fmt::format("<span class=\"{}\" data-bytes=\"{}\" title=\"{}{}\">{}</span>", cls, d, d < 0 ? "-" : d > 0 ? "+" : "",
                     format_exact_bytes(mag), format_delta_bytes(d));
}

}  // namespace html

namespace {

using html::h;

// "</" and "<!" cannot appear inside a <script> element's text.
std::string script_safe(std::string_view text) {
  std::string safe;
  safe.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/') safe += "<\\/";
    else if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '!') safe += "\\u003c!";
    else { safe.push_back(text[i]); continue; }
    ++i;
  }
  return safe;
}

std::string runs_section(const ordered_json& report) {
  std::string out = "<section id=\"runs\"><h2>Runs</h2>\n";
  // Warnings first: figures of a failed run, a truncated trace or one with lost records cover
  // only the part recorded (reports/text_report.h, run_warnings).
  for (const auto& r : report["runs"])
    for (const auto& w : run_warnings(r)) out += fmt::format("<div class=\"warn\">{}</div>\n", h(w));
  bool predicted = false;
  for (const auto& r : report["runs"]) predicted |= r.contains("predicted_from_baseline");
  out += "<table id=\"runs-table\"><thead><tr><th>run</th><th>mode</th><th>model</th><th class=\"n\">tokens</th><th>TP</th>"
         "<th>backend / device</th><th class=\"n\">peak activation</th>";
  if (predicted) out += "<th class=\"n\">predicted from the baseline</th>";
  out += "<th class=\"n\">peak total</th><th class=\"n\">churn</th><th class=\"n\">allocations</th><th class=\"n\">anomalies</th></tr></thead><tbody>\n";
  for (const auto& r : report["runs"]) {
    out += fmt::format("<tr data-run=\"{}\"><td><b>{}</b></td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{} / {}</td>"
                       "<td class=\"n peak-act\">{}</td>",
                       h(json_str(r, "name")), h(json_str(r, "name")), h(json_str(r, "mode")), h(or_dash(json_str(r, "model"))),
                       json_i64(r, "tokens") > 0 ? with_commas(json_i64(r, "tokens")) : "-", h(run_tp_label(r).empty() ? "-" : run_tp_label(r)), h(json_str(r, "backend")), h(json_str(r, "device_name")),
                       json_u64(r, "allocations") == 0 ? std::string("none recorded") : html::bytes(json_u64(r, "peak_activation_bytes")));
    if (predicted) {
      std::string cell;
      if (r.contains("predicted_from_baseline") && r["predicted_from_baseline"].is_object()) {
        const auto& p = r["predicted_from_baseline"];
        const uint64_t v = json_u64(p, "predicted_peak_activation_bytes");
        cell = (v == json_u64(r, "peak_activation_bytes") ? "= " : "") + html::bytes(v) +
               fmt::format(" <span class=\"muted\">({})</span>", h(json_str(p, "rules")));
      }
      out += "<td class=\"n\">" + cell + "</td>";
    }
    out += fmt::format("<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
                       json_u64(r, "allocations") == 0 ? std::string("none recorded") : html::bytes(json_u64(r, "peak_total_bytes")),
                       json_u64(r, "allocations") == 0 ? std::string("none recorded") : html::bytes(json_u64(r, "churn_bytes")),
                       with_commas(json_i64(r, "allocations")), with_commas_u(r.contains("anomalies") ? json_u64(r["anomalies"], "total") : 0));
  }
  out += "</tbody></table>\n";
  for (const auto& r : report["runs"]) {
    for (const auto& n : run_notes(r)) out += fmt::format("<div class=\"note\"><b>{}</b>: {}</div>\n", h(json_str(r, "name")), h(n));
    if (r.value("streamed", false))
      out += fmt::format("<div class=\"note streamed\" data-run=\"{}\"><b>{}</b>: {}</div>\n", h(json_str(r, "name")), h(json_str(r, "name")),
                         h(streamed_note()));
  }
  return out + "</section>\n";
}

std::string timeline_section() {
  return "<section id=\"timeline\"><h2>Memory over the forward pass</h2>\n"
         "<p class=\"muted\">One band per allocation, stacked as they are live; the activation categories on their own axis "
         "above all memory. Runs share the x axis, aligned by layer. Hover a band for its name, shape, scope, stack, exact "
         "size and lifetime; drag to zoom, mouse wheel to zoom, Shift + wheel to pan, double-click to reset.</p>\n"
         "<div class=\"controls\"><label>colour by <select id=\"colour-by\"><option value=\"category\">category</option>"
         "<option value=\"scope\">scope</option></select></label><button id=\"zoom-peak\" type=\"button\">zoom to the peak</button>"
         "<button id=\"zoom-reset\" type=\"button\">reset zoom</button></div>\n"
         "<div id=\"timeline-legend\" class=\"legend\"></div><div id=\"timeline-charts\"></div></section>\n";
}

}  // namespace

std::string report_html(const ordered_json& report) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                    "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
                    "<title>moeprof memory report</title>\n<style>";
  out += html_asset("vendor/uPlot.min.css");
  out += "\n";
  out += html_asset("page.css");
  out += "</style></head><body><main>\n<h1>moeprof memory report</h1>\n";
  out += fmt::format("<div class=\"sub\">{} &middot; schema version {} &middot; {} run(s)</div>\n", h(json_str(report, "generator")),
                     json_i64(report, "schema_version"), report["runs"].size());
  std::vector<ordered_json> comparisons;
  if (report.contains("comparisons") && report["comparisons"].is_array()) {
    for (const auto& c : report["comparisons"]) comparisons.push_back(c);
  } else if (report.contains("comparison") && report["comparison"].is_object()) {
    comparisons.push_back(report["comparison"]);
  }
  std::string fixes, serving;
  for (const auto& r : report["runs"]) fixes += html::fixes_section(r);
  for (const auto& r : report["runs"]) serving += serving_html(r);
  out += "<nav><a href=\"#runs\">Runs</a>";
  if (!serving.empty()) out += "<a href=\"#serving\">Serving</a>";
  out += "<a href=\"#timeline\">Timeline</a>";
  if (!comparisons.empty()) out += "<a href=\"#comparison\">Why memory changed</a>";
  out += "<a href=\"#peak\">Live at the peak</a>";
  if (!fixes.empty()) out += "<a href=\"#fixes\">Fixes</a>";
  out += "</nav>\n";
  out += runs_section(report);
  if (!serving.empty())
    out += "<section id=\"serving\"><h2>Serving: the KV pool, the step kinds, the CUDA graphs</h2>\n"
           "<p class=\"muted\">The memory a serving engine holds: weights, the KV pool sized at start, the decode graphs' "
           "pool, and the activations of its largest step, per step kind (every step of a kind summed up in one row).</p>\n" +
           serving + "</section>\n";
  out += timeline_section();
  for (size_t i = 0; i < comparisons.size(); ++i) {
    std::string sec = html::comparison_section(comparisons[i]);
    if (i == 0) sec.replace(sec.find("<section"), 8, "<section id=\"comparison\"");
    out += sec;
  }
  out += "<section id=\"peak\"><h2>Live at the activation peak</h2>\n";
  for (const auto& r : report["runs"]) out += html::peak_section(r);
  out += "</section>\n";
  if (!fixes.empty()) out += "<section id=\"fixes\"><h2>What the planner would fix</h2>\n" + fixes + "</section>\n";
  out += "<div id=\"tooltip\" hidden></div>\n";
  out += "<script type=\"application/json\" id=\"moeprof-data\">" + script_safe(json_text(report)) + "</script>\n";
  // The scripts go in as they are: cmake/EmbedAssets.cmake refuses a script containing "</script" or "<!--".
  out += "<script>";
  out += html_asset("vendor/uPlot.iife.min.js");
  out += "</script>\n<script>";
  out += html_asset("page.js");
  out += "</script>\n";
  out += "</main></body></html>\n";
  return out;
}

}  // namespace moeprof::reports
