#include "reports/serving_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "reports/format.h"
#include "reports/html_parts.h"
#include "reports/report_file.h"

namespace moeprof::reports {

using nlohmann::ordered_json;

namespace {

std::string bytes_cell(uint64_t b) { return b < 1000 ? format_bytes(b) : fmt::format("{} ({})", format_bytes(b), format_exact_bytes(b)); }

// The memory lines: (label, bytes, note).
struct MemLine {
  std::string what;
  uint64_t bytes;
  std::string note;
};
std::vector<MemLine> memory_lines(const ordered_json& s) {
  const ordered_json& m = s["memory"];
  std::vector<MemLine> v;
  std::string wnote;
  if (m.value("weights_shared", false))
    wnote = fmt::format("the MoE layers share one layer's expert weights; per-layer weights would take {}",
                        format_bytes(json_u64(m, "weights_per_layer_bytes")));
  v.push_back({"weights", json_u64(m, "weights_bytes"), wnote});
  const ordered_json& ps = s["pool_sizing"];
  std::string sizing = json_str(ps, "method");
  if (sizing == "mem-fraction-static")
    sizing = fmt::format("--mem-fraction-static {}: free after the weights - free before x (1 - F)", ps.value("mem_fraction_static", 0.0));
  else if (sizing == "kv-tokens")
    sizing = "--kv-tokens";
  else
    sizing = "the workload's whole need";
  v.push_back({"KV pool", json_u64(s, "kv_pool_bytes"),
               fmt::format("{} tokens of {} B, page {}, sized by {}; at most {} tokens in use", with_commas_u(json_u64(s, "kv_pool_tokens")),
                           with_commas_u(json_u64(s, "kv_cell_bytes")), json_u64(s, "page_size"), sizing,
                           with_commas_u(json_u64(s, "peak_tokens_used")))});
  v.push_back({"request-to-token table", json_u64(s, "req_to_token_bytes"),
               fmt::format("{} request rows x {} positions", with_commas_u(json_u64(s, "max_running_requests") + 1),
                           with_commas_u(json_u64(s, "context_len") + 4))});
  const ordered_json& g = s["cuda_graphs"];
  std::string sizes;
  if (g.contains("sizes"))
    for (const auto& b : g["sizes"]) sizes += (sizes.empty() ? "" : ",") + std::to_string(b.get<int64_t>());
  v.push_back({"CUDA graph pool", json_u64(s, "graph_pool_bytes"),
               g.value("enabled", false) ? fmt::format("one pool for the decode graphs of batch sizes {}; their inputs {}", sizes,
                                                       format_bytes(json_u64(g, "input_bytes")))
                                         : "no CUDA graph (decode runs eagerly)"});
  v.push_back({"highest step activation peak", json_u64(m, "peak_activation_bytes"), "the larger of the step kinds' peaks below"});
  return v;
}

const char* const kKinds[] = {"prefill", "decode"};

}  // namespace

std::string serving_markdown(const ordered_json& run) {
  if (!run.contains("serving") || !run["serving"].is_object()) return "";
  const ordered_json& s = run["serving"];
  std::string out = fmt::format("\n## Serving: {}\n\n", md_cell(json_str(run, "name")));
  out += fmt::format("Workload {}: {} requests, {} tokens generated, {} held back at least once by the pool or the request limit.\n\n",
                     md_cell(json_str(s, "workload")), with_commas_u(json_u64(s, "requests")), with_commas_u(json_u64(s, "output_tokens")),
                     with_commas_u(json_u64(s, "waited_requests")));
  out += "| memory | bytes | |\n|---|---:|---|\n";
  for (const MemLine& l : memory_lines(s)) out += fmt::format("| {} | {} | {} |\n", l.what, bytes_cell(l.bytes), md_cell(l.note));
  const ordered_json& m = s["memory"];
  out += fmt::format("| **total** | **{}** | {} |\n", bytes_cell(json_u64(m, "total_bytes")),
                     m.contains("device_bytes")
                         ? md_cell(fmt::format("of the device's {}; headroom {}", format_bytes(json_u64(m, "device_bytes")),
                                               format_delta_bytes(json_i64(m, "headroom_bytes"))))
                         : std::string("device memory unknown"));
  out += "\n| step kind | steps | rows (max) | peak activation | at step (rows) | largest tensors live there | wall time per step |\n"
         "|---|---:|---:|---:|---|---|---:|\n";
  for (const char* k : kKinds) {
    const ordered_json& st = s["step_kinds"][k];
    std::string top;
    const auto& live = st["live_at_peak"];
    for (size_t i = 0; i < live.size() && i < 3; ++i)
      top += fmt::format("{}{} {}", i ? ", " : "", json_str(live[i], "name"), format_bytes(json_u64(live[i], "bytes")));
    const uint64_t steps = json_u64(st, "steps");
    std::string kind = k;
    if (json_u64(st, "graph_steps") > 0) kind += fmt::format(" ({} replayed from a CUDA graph)", with_commas_u(json_u64(st, "graph_steps")));
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", kind, with_commas_u(steps), with_commas_u(json_u64(st, "max_rows")),
                       bytes_cell(json_u64(st, "peak_activation_bytes")),
                       steps ? fmt::format("{} ({})", json_i64(st, "peak_step"), json_u64(st, "peak_rows")) : std::string("-"), md_cell(top),
                       steps ? format_duration_ns(static_cast<uint64_t>(st.value("seconds", 0.0) / double(steps) * 1e9)) : std::string("-"));
  }
  const ordered_json& dec = s["step_kinds"]["decode"];
  if (json_u64(dec, "graph_steps") > 0)
    out += fmt::format("\nA replayed decode step allocates nothing: its tensors live in the CUDA graph pool, at most {} at once "
                       "(during the capture of batch size {}).\n",
                       bytes_cell(json_u64(dec, "graph_live_peak_bytes")), json_u64(dec, "graph_live_peak_bs"));
  if (dec.contains("reads") && json_u64(dec["reads"], "steps") > 0) {
    // The floor of a memory-bound decode step (a drawn routing says which experts it reads).
    const ordered_json& r = dec["reads"];
    const double n = static_cast<double>(json_u64(r, "steps"));
    const uint64_t w = json_u64(r, "weight_bytes"), kv = json_u64(r, "kv_bytes");
    const double secs = r.value("seconds", 0.0);
    out += fmt::format("\nA decode step reads at least {} per step: weights {} (routed experts {}) and KV cache rows {}; "
                       "at its wall time, {:.0f} GB/s.\n",
                       bytes_cell(static_cast<uint64_t>(double(w + kv) / n)), bytes_cell(static_cast<uint64_t>(double(w) / n)),
                       bytes_cell(static_cast<uint64_t>(double(json_u64(r, "expert_bytes")) / n)),
                       bytes_cell(static_cast<uint64_t>(double(kv) / n)), secs > 0 ? double(w + kv) / secs / 1e9 : 0.0);
  }
  for (const char* k : kKinds) {
    const ordered_json& st = s["step_kinds"][k];
    if (json_u64(st, "steps") == 0 || st["live_at_peak"].empty()) continue;
    out += fmt::format("\n### Live at the {} peak (step {})\n\n| tensor | scope | shape | category | bytes |\n|---|---|---|---|---:|\n", k,
                       json_i64(st, "peak_step"));
    size_t n = 0;
    uint64_t rest = 0;
    for (const auto& e : st["live_at_peak"]) {
      if (n++ >= 12) {
        rest += json_u64(e, "bytes");
        continue;
      }
      out += fmt::format("| {} | {} | {} | {} | {} |\n", md_cell(json_str(e, "name")), md_cell(json_str(e, "scope")), md_cell(json_str(e, "shape")),
                         json_str(e, "category"), bytes_cell(json_u64(e, "bytes")));
    }
    if (n > 12) out += fmt::format("| {} more | | | | {} |\n", n - 12, bytes_cell(rest));
  }
  // The occupancy: at most 12 evenly spaced points of the (already per-step) series, and its peak.
  const ordered_json& occ = s["kv_pool_occupancy"];
  const auto& pts = occ["points"];
  out += fmt::format("\n### KV pool occupancy\n\nTokens in use over {} steps (peak {} of {}):\n\n| step | tokens in use |\n|---:|---:|\n",
                     with_commas_u(json_u64(occ, "steps")), with_commas_u(json_u64(occ, "peak_tokens")),
                     with_commas_u(json_u64(s, "kv_pool_tokens")));
  const size_t n = pts.size(), shown = std::min<size_t>(n, 12);
  for (size_t i = 0; i < shown; ++i) {
    const size_t k = shown == 1 ? 0 : i * (n - 1) / (shown - 1);
    out += fmt::format("| {} | {} |\n", with_commas_u(pts[k][0].get<uint64_t>()), with_commas_u(pts[k][1].get<uint64_t>()));
  }
  return out;
}

std::string serving_html(const ordered_json& run) {
  using html::h;
  if (!run.contains("serving") || !run["serving"].is_object()) return "";
  const ordered_json& s = run["serving"];
  const std::string name = json_str(run, "name");
  std::string out = fmt::format("<div class=\"serving\" data-run=\"{}\"><h3>{}</h3>\n", h(name), h(name));
  out += fmt::format("<p>Workload <code>{}</code>: {} requests, {} tokens generated, {} held back at least once by the pool or "
                     "the request limit.</p>\n",
                     h(json_str(s, "workload")), with_commas_u(json_u64(s, "requests")), with_commas_u(json_u64(s, "output_tokens")),
                     with_commas_u(json_u64(s, "waited_requests")));
  out += "<table class=\"serving-memory\"><thead><tr><th>memory</th><th class=\"n\">bytes</th><th></th></tr></thead><tbody>\n";
  for (const MemLine& l : memory_lines(s))
    out += fmt::format("<tr><td>{}</td><td class=\"n\">{}</td><td class=\"muted\">{}</td></tr>\n", h(l.what), html::bytes(l.bytes), h(l.note));
  const ordered_json& m = s["memory"];
  out += fmt::format("<tr class=\"sum\"><td>total</td><td class=\"n serving-total\">{}</td><td>{}</td></tr>\n",
                     html::bytes(json_u64(m, "total_bytes")),
                     m.contains("device_bytes")
                         ? fmt::format("of the device's {}; {}", html::bytes(json_u64(m, "device_bytes")),
                                       json_i64(m, "headroom_bytes") >= 0
                                           ? "headroom " + html::bytes(static_cast<uint64_t>(json_i64(m, "headroom_bytes")))
                                           : "<span class=\"worse\">over by " + html::bytes(static_cast<uint64_t>(-json_i64(m, "headroom_bytes"))) + "</span>")
                         : std::string("device memory unknown"));
  out += "</tbody></table>\n";
  out += "<table class=\"serving-steps\"><thead><tr><th>step kind</th><th class=\"n\">steps</th><th class=\"n\">rows (max)</th>"
         "<th class=\"n\">peak activation</th><th>at step (rows)</th><th>largest tensors live there</th><th class=\"n\">wall time per step</th>"
         "</tr></thead><tbody>\n";
  for (const char* k : kKinds) {
    const ordered_json& st = s["step_kinds"][k];
    const uint64_t steps = json_u64(st, "steps");
    std::string top;
    const auto& live = st["live_at_peak"];
    for (size_t i = 0; i < live.size() && i < 4; ++i)
      top += fmt::format("{}<span title=\"{}\">{}</span> {}", i ? ", " : "", h(json_str(live[i], "scope")), h(json_str(live[i], "name")),
                         html::bytes(json_u64(live[i], "bytes")));
    std::string kind = k;
    if (json_u64(st, "graph_steps") > 0)
      kind += fmt::format(" <span class=\"muted\">({} replayed from a CUDA graph; in the graph pool at most {})</span>",
                          with_commas_u(json_u64(st, "graph_steps")), html::bytes(json_u64(st, "graph_live_peak_bytes")));
    out += fmt::format("<tr class=\"step-kind\" data-kind=\"{}\"><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
                       "<td>{}</td><td>{}</td><td class=\"n\">{}</td></tr>\n",
                       k, kind, with_commas_u(steps), with_commas_u(json_u64(st, "max_rows")), html::bytes(json_u64(st, "peak_activation_bytes")),
                       steps ? fmt::format("{} ({})", json_i64(st, "peak_step"), json_u64(st, "peak_rows")) : std::string("&ndash;"), top,
                       steps ? format_duration_ns(static_cast<uint64_t>(st.value("seconds", 0.0) / double(steps) * 1e9)) : std::string("&ndash;"));
  }
  out += "</tbody></table>\n";
  const ordered_json& occ = s["kv_pool_occupancy"];
  out += fmt::format("<h4>KV pool occupancy</h4><p class=\"muted\">Tokens in use per step, over {} steps{} (peak {} of {} tokens).</p>"
                     "<div class=\"occupancy-chart\" data-run=\"{}\"></div>\n",
                     with_commas_u(json_u64(occ, "steps")),
                     json_u64(occ, "steps_per_point") > 1 ? fmt::format(", the highest of each {} steps", json_u64(occ, "steps_per_point")) : "",
                     with_commas_u(json_u64(occ, "peak_tokens")), with_commas_u(json_u64(s, "kv_pool_tokens")), h(name));
  return out + "</div>\n";
}

}  // namespace moeprof::reports
