#include "reports/budget_report.h"

#include <fmt/format.h>

#include "core/version.h"
#include "reports/format.h"
#include "reports/html_assets.h"
#include "reports/report_file.h"

namespace moeprof::reports {

using nlohmann::ordered_json;

namespace {

int64_t signed_diff(uint64_t a, uint64_t b) { return a >= b ? static_cast<int64_t>(a - b) : -static_cast<int64_t>(b - a); }

}  // namespace

ordered_json budget_json(const BudgetReportInput& in) {
  const planner::BudgetResult& b = in.budgets.at(0);
  const planner::RunAnalysis& run = *in.runs.at(0);
  ordered_json j;
  j["generator"] = std::string("moeprof ") + kVersion;
  j["gpu_memory_bytes"] = b.gpu_memory_bytes;
  j["gpu_name"] = in.gpu_name;
  j["run"] = {{"trace", in.traces.at(0)}, {"name", in.run_names.at(0)}, {"model", run.meta.model}, {"mode", run.meta.mode},
              {"backend", run.meta.backend}, {"tokens", run.meta.tokens}, {"tp_size", run.meta.tp_size}, {"device", b.device}};
  auto wl = run.meta.extra.find("serving_workload");
  j["run"]["workload"] = wl == run.meta.extra.end() ? std::string() : wl->second;
  ordered_json comps = ordered_json::array();
  int64_t sum = 0;
  for (const auto& c : b.components) {
    comps.push_back({{"name", c.name}, {"bytes", c.bytes}, {"detail", c.detail}});
    sum += c.bytes;
  }
  j["components"] = comps;
  j["components_sum_bytes"] = sum;
  j["fits"] = b.fits;
  j["shortfall_bytes"] = b.shortfall_bytes;
  j["kv_bytes_per_token"] = b.kv_bytes_per_token;
  j["kv_cost_source"] = b.kv_cost_source;
  j["kv_check"] = in.kv_check;
  j["page_size"] = b.page_size;
  j["kv_tokens"] = b.kv_tokens;
  j["kv_tokens_capped_by_slots"] = b.kv_slots_capped;
  j["kv_pool_bytes"] = b.kv_pool_bytes;
  j["request_table_bytes"] = b.request_table_bytes;
  j["request_tokens"] = b.request_tokens;
  j["requests"] = b.requests;
  // The request table's rows at kv_tokens (SGLang's max_running_requests; 0: no table): requests
  // is at most this.
  j["request_limit"] = planner::request_limit_at(b, b.kv_tokens);
  j["trace_kv_cache_bytes"] = b.trace_kv_cache_bytes;
  // The trace's schedule was bounded by its own pool: the worst step at kv_tokens is not measured.
  j["schedule"] = {{"pool_held_requests", b.pool_held_requests}, {"trace_pool_tokens", b.trace_pool_tokens},
                   {"unconfirmed", b.schedule_unconfirmed}};
  ordered_json live = ordered_json::array();
  for (const auto& e : b.live_at_peak)
    live.push_back({{"name", e.name}, {"scope", e.scope}, {"shape", e.shape}, {"category", std::string(category_name(e.category))}, {"bytes", e.bytes}});
  ordered_json steps = ordered_json::array();
  for (const auto& [s, v] : b.steps) steps.push_back({{"step", s}, {"activation_high_water_bytes", v}});
  j["worst_step"] = {{"step", b.worst_step},
                     {"activation_peak_bytes", b.activation_peak_bytes},
                     {"activation_bytes", b.activation_bytes},
                     {"workspace_bytes", b.workspace_bytes},
                     {"worst_routing_peak_bytes", b.routing_follows ? b.worst_routing_peak_bytes : b.activation_peak_bytes},
                     {"routing", b.routing},
                     {"moe_rows", b.moe_rows},
                     {"live_count", b.live_at_peak_count},
                     {"live", live},
                     {"steps", steps}};
  const planner::EngineSettings es = planner::engine_settings(b);
  // The settings as numbers (the shortest decimals, exact in their text); null when nothing fits.
  auto number = [](const std::string& d) { return d.empty() ? ordered_json(nullptr) : ordered_json(std::stod(d)); };
  j["mem_fraction_static"] = number(es.mem_fraction_static);
  j["gpu_memory_utilization"] = number(es.gpu_memory_utilization);
  j["mem_fraction_static_detail"] = {
      {"value", es.mem_fraction_static},
      {"sglang_variant", "rest = mem_fraction_static x free memory before the weights load (pre_model_load_memory) - weights; "
                         "max_total_num_tokens = rest // bytes per token, rounded down to the page size; the free memory before "
                         "loading is taken as the device size"},
      {"rounded", es.mem_fraction_rounded},
      {"rounded_kv_tokens", es.rounded_kv_tokens},
      {"margin_tokens", b.kv_tokens >= es.rounded_kv_tokens ? b.kv_tokens - es.rounded_kv_tokens : 0}};
  j["gpu_memory_utilization_detail"] = {{"value", es.gpu_memory_utilization},
                                 {"engine", "vLLM: KV cache = gpu_memory_utilization x total - the non-KV memory it profiles; blocks of 16 tokens"}};
  const uint64_t cell = b.kv_bytes_per_token;
  ordered_json modes = ordered_json::array();
  for (size_t i = 0; i < in.budgets.size(); ++i) {
    const auto& m = in.budgets[i];
    const int64_t saved = signed_diff(b.activation_peak_bytes, m.activation_peak_bytes);
    modes.push_back({{"name", in.run_names[i]},
                     {"trace", in.traces[i]},
                     {"activation_peak_bytes", m.activation_peak_bytes},
                     {"saved_bytes", saved},
                     {"saved_tokens", saved >= 0 && cell ? static_cast<int64_t>(static_cast<uint64_t>(saved) / cell)
                                                         : -static_cast<int64_t>((static_cast<uint64_t>(-saved) + cell - 1) / (cell ? cell : 1))},
                     {"kv_tokens", m.kv_tokens},
                     {"kv_tokens_gained", signed_diff(m.kv_tokens, b.kv_tokens)},
                     {"requests", m.requests},
                     {"requests_gained", signed_diff(m.requests, b.requests)}});
  }
  j["modes"] = modes;
  ordered_json fixes = ordered_json::array();
  if (in.fixes)
    for (size_t i = 0; i < in.fixes->fixes.size(); ++i) {
      const auto& f = in.fixes->fixes[i];
      const uint64_t kv = planner::kv_tokens_with_peak(b, f.cumulative_peak_activation_bytes);
      const uint64_t rq = planner::requests_for(b, kv);
      fixes.push_back({{"rank", i + 1},
                       {"rule", f.rule},
                       {"bytes_saved_at_peak", f.bytes_saved_at_peak},
                       {"cumulative_peak_activation_bytes", f.cumulative_peak_activation_bytes},
                       {"kv_tokens", kv},
                       {"kv_tokens_gained", signed_diff(kv, b.kv_tokens)},
                       {"requests", rq},
                       {"requests_gained", signed_diff(rq, b.requests)}});
    }
  j["fixes"] = fixes;
  j["fixes_note"] = in.fixes ? in.fixes->note : std::string("no ranked fixes: the first trace has no uses, or --fixes 0");
  return j;
}

namespace {

std::string signed_commas(int64_t v) { return (v > 0 ? "+" : "") + with_commas(v); }

std::string comp_bytes(int64_t v) {
  return v < 0 ? "-" + format_exact_bytes(static_cast<uint64_t>(-v)) : format_exact_bytes(static_cast<uint64_t>(v));
}

}  // namespace

// "16,384 tokens" for one prefill, "workload W" for a serving run.
static std::string run_what(const ordered_json& r) {
  return json_str(r, "workload").empty() ? with_commas(json_i64(r, "tokens")) + " tokens" : "workload " + json_str(r, "workload");
}

std::string budget_text(const ordered_json& j) {
  std::string out;
  const auto& r = j["run"];
  const std::string what = run_what(r);
  out += fmt::format("moeprof budget: {} {} ({}, TP={}, {}, device {}) on {}{}\n", json_str(r, "model"), json_str(r, "mode"),
                     json_str(r, "backend"), json_i64(r, "tp_size"), what, json_i64(r, "device"),
                     format_exact_bytes(json_u64(j, "gpu_memory_bytes")),
                     json_str(j, "gpu_name").empty() ? "" : " (" + json_str(j, "gpu_name") + ")");
  out += "\ncomponents (they sum to the device):\n";
  for (const auto& c : j["components"])
    out += fmt::format("  {:<16} {:>24}  {}\n", json_str(c, "name"), comp_bytes(json_i64(c, "bytes")), json_str(c, "detail"));
  out += fmt::format("  {:<16} {:>24}\n", "sum", comp_bytes(json_i64(j, "components_sum_bytes")));
  if (!j["fits"].get<bool>())
    out += fmt::format("\nDOES NOT FIT: {} more are needed for one page of KV\n", format_exact_bytes(json_u64(j, "shortfall_bytes")));
  const uint64_t limit = j.contains("request_limit") ? json_u64(j, "request_limit") : 0;
  if (j.value("kv_tokens_capped_by_slots", false))
    out += "\nThe pool stops at the most tokens int32 slots address (SGLang's req_to_token; `moeprof run` refuses more): the rest is free.";
  const std::string at_limit = limit > 0 && json_u64(j, "requests") == limit
                                   ? fmt::format(" (at the request table's limit, max_running_requests {})", with_commas_u(limit))
                                   : "";
  out += fmt::format("\nKV capacity: {} tokens ({} B per token: {}{}), page size {}; {} concurrent requests of {} tokens{}\n",
                     with_commas_u(json_u64(j, "kv_tokens")), with_commas_u(json_u64(j, "kv_bytes_per_token")), json_str(j, "kv_cost_source"),
                     json_str(j, "kv_check").empty() ? "" : "; " + json_str(j, "kv_check"), json_u64(j, "page_size"),
                     with_commas_u(json_u64(j, "requests")), with_commas_u(json_u64(j, "request_tokens")), at_limit);
  if (j.contains("schedule") && j["schedule"].value("unconfirmed", false))
    out += fmt::format(
        "NOT CONFIRMED: the run's pool of {} tokens held {} request(s) back. At {} tokens the scheduler admits them sooner, so more "
        "prompt tokens can share a prefill step (up to --chunked-prefill-size) and the worst step can be larger than measured; run "
        "the workload again with --kv-tokens {} and budget that trace.\n",
        with_commas_u(json_u64(j["schedule"], "trace_pool_tokens")), with_commas_u(json_u64(j["schedule"], "pool_held_requests")),
        with_commas_u(json_u64(j, "kv_tokens")), json_u64(j, "kv_tokens"));
  const auto& w = j["worst_step"];
  out += fmt::format("worst step: {}, activation peak {} (activations {}, workspaces {}); live there, largest first ({} tensors):\n",
                     json_str(w, "step"), format_exact_bytes(json_u64(w, "activation_peak_bytes")), format_exact_bytes(json_u64(w, "activation_bytes")),
                     format_exact_bytes(json_u64(w, "workspace_bytes")), json_u64(w, "live_count"));
  for (const auto& e : w["live"])
    out += fmt::format("    {:>20}  {}/{} [{}] {}\n", format_exact_bytes(json_u64(e, "bytes")), json_str(e, "scope"), json_str(e, "name"),
                       json_str(e, "shape"), json_str(e, "category"));
  for (const auto& s : w["steps"])
    out += fmt::format("  step {}: own activation high-water {}\n", json_str(s, "step"), format_exact_bytes(json_u64(s, "activation_high_water_bytes")));
  const auto& f = j["mem_fraction_static_detail"];
  if (!json_str(f, "value").empty()) {
    out += fmt::format("\nSGLang --mem-fraction-static {} gives exactly {} tokens ({}). Rounded down to {}: {} tokens, a margin of {} tokens.\n",
                       json_str(f, "value"), with_commas_u(json_u64(j, "kv_tokens")), json_str(f, "sglang_variant"), json_str(f, "rounded"),
                       with_commas_u(json_u64(f, "rounded_kv_tokens")), with_commas_u(json_u64(f, "margin_tokens")));
    out += fmt::format("vLLM gpu_memory_utilization {} ({}).\n", json_str(j["gpu_memory_utilization_detail"], "value"),
                       json_str(j["gpu_memory_utilization_detail"], "engine"));
  }
  if (j["modes"].size() > 1) {
    out += "\nwhat each run buys (against the first):\n";
    out += fmt::format("  {:<10} {:>22} {:>22} {:>14} {:>12} {:>10} {:>9}\n", "run", "activation peak", "saved", "= tokens", "KV tokens", "gained",
                       "requests");
    for (const auto& m : j["modes"])
      out += fmt::format("  {:<10} {:>22} {:>22} {:>14} {:>12} {:>10} {:>9}\n", json_str(m, "name"),
                         format_exact_bytes(json_u64(m, "activation_peak_bytes")), signed_commas(json_i64(m, "saved_bytes")) + " B",
                         signed_commas(json_i64(m, "saved_tokens")), with_commas_u(json_u64(m, "kv_tokens")),
                         signed_commas(json_i64(m, "kv_tokens_gained")), with_commas_u(json_u64(m, "requests")));
  }
  if (!j["fixes"].empty()) {
    out += "\nranked fixes of the first run (cumulative):\n";
    for (const auto& x : j["fixes"])
      out += fmt::format("  {}. {}: saves {} at the peak -> {} KV tokens ({}), {} requests ({})\n", json_u64(x, "rank"), json_str(x, "rule"),
                         format_exact_bytes(json_u64(x, "bytes_saved_at_peak")), with_commas_u(json_u64(x, "kv_tokens")),
                         signed_commas(json_i64(x, "kv_tokens_gained")), with_commas_u(json_u64(x, "requests")),
                         signed_commas(json_i64(x, "requests_gained")));
  }
  return out;
}

std::string budget_markdown(const ordered_json& j) {
  std::string out = "# Memory budget (moeprof budget)\n\n";
  const auto& r = j["run"];
  out += fmt::format("{} {} ({}, TP={}, {}, device {}) on a device of {}{}.\n\n", md_cell(json_str(r, "model")), json_str(r, "mode"),
                     json_str(r, "backend"), json_i64(r, "tp_size"), md_cell(run_what(r)), json_i64(r, "device"),
                     format_exact_bytes(json_u64(j, "gpu_memory_bytes")), json_str(j, "gpu_name").empty() ? "" : " (" + json_str(j, "gpu_name") + ")");
  out += "| component | bytes | what |\n|---|---:|---|\n";
  for (const auto& c : j["components"])
    out += fmt::format("| {} | {} | {} |\n", json_str(c, "name"), comp_bytes(json_i64(c, "bytes")), md_cell(json_str(c, "detail")));
  out += fmt::format("| **sum** | **{}** | |\n\n", comp_bytes(json_i64(j, "components_sum_bytes")));
  out += fmt::format("KV capacity: **{} tokens** at {} B per token, {} concurrent requests of {} tokens. Worst step: {} ({}).\n\n",
                     with_commas_u(json_u64(j, "kv_tokens")), with_commas_u(json_u64(j, "kv_bytes_per_token")), with_commas_u(json_u64(j, "requests")),
                     with_commas_u(json_u64(j, "request_tokens")), json_str(j["worst_step"], "step"),
                     format_exact_bytes(json_u64(j["worst_step"], "activation_peak_bytes")));
  const auto& mf = j["mem_fraction_static_detail"];
  if (!json_str(mf, "value").empty())
    out += fmt::format("SGLang `--mem-fraction-static {}` (rounded down to {}: {} tokens); vLLM `gpu_memory_utilization {}`.\n\n",
                       json_str(mf, "value"), json_str(mf, "rounded"), with_commas_u(json_u64(mf, "rounded_kv_tokens")), json_str(j["gpu_memory_utilization_detail"], "value"));
  if (j["modes"].size() > 1) {
    out += "| run | activation peak | saved | KV tokens | gained | requests |\n|---|---:|---:|---:|---:|---:|\n";
    for (const auto& m : j["modes"])
      out += fmt::format("| {} | {} | {} B = {} tokens | {} | {} | {} |\n", json_str(m, "name"), format_exact_bytes(json_u64(m, "activation_peak_bytes")),
                         signed_commas(json_i64(m, "saved_bytes")), signed_commas(json_i64(m, "saved_tokens")), with_commas_u(json_u64(m, "kv_tokens")),
                         signed_commas(json_i64(m, "kv_tokens_gained")), with_commas_u(json_u64(m, "requests")));
    out += "\n";
  }
  if (!j["fixes"].empty()) {
    out += "| fix | saves at the peak | KV tokens | gained | requests |\n|---|---:|---:|---:|---:|\n";
    for (const auto& x : j["fixes"])
      out += fmt::format("| {}. `{}` | {} | {} | {} | {} |\n", json_u64(x, "rank"), md_cell(json_str(x, "rule")),
                         format_exact_bytes(json_u64(x, "bytes_saved_at_peak")), with_commas_u(json_u64(x, "kv_tokens")),
                         signed_commas(json_i64(x, "kv_tokens_gained")), with_commas_u(json_u64(x, "requests")));
  }
  return out;
}

std::string budget_html(const ordered_json& j) {
  auto h = [](const std::string& s) { return xml_escape(s); };
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
                    "<title>moeprof memory budget</title>\n<style>";
  out += html_asset("page.css");
  out += ".bar{display:flex;height:34px;border-radius:6px;overflow:hidden;margin:8px 0}.bar div{min-width:1px}"
         ".c-weights{background:#6b7a90}.c-kv_pool{background:#2f6fde}.c-request_table{background:#7fa6ee}.c-activation_peak{background:#b3261e}.c-routing_worst{background:#e3736b}.c-graph_pool{background:#8e44ad}"
         ".c-workspaces{background:#e08a1e}.c-allocator_rest{background:#9aa3b2}.c-untraced{background:#5d6d7e}.c-margin{background:#f0c27b}.c-free{background:#dde1e8}</style></head>"
         "<body><main>\n<h1>moeprof memory budget</h1>\n";
  const auto& r = j["run"];
  out += fmt::format("<div class=\"sub\">{} &middot; {} {} ({}, TP={}, {}, device {}) on {}{}</div>\n", h(json_str(j, "generator")),
                     h(json_str(r, "model")), h(json_str(r, "mode")), h(json_str(r, "backend")), json_i64(r, "tp_size"),
                     h(run_what(r)), json_i64(r, "device"), format_exact_bytes(json_u64(j, "gpu_memory_bytes")),
                     json_str(j, "gpu_name").empty() ? "" : " (" + h(json_str(j, "gpu_name")) + ")");
  out += "<section id=\"budget\"><h2>Every byte of the device</h2>\n";
  if (!j["fits"].get<bool>())
    out += fmt::format("<div class=\"warn\">Does not fit: {} more are needed for one page of KV.</div>\n", format_exact_bytes(json_u64(j, "shortfall_bytes")));
  const double total = static_cast<double>(json_u64(j, "gpu_memory_bytes"));
  out += "<div class=\"bar\" id=\"budget-bar\">";
  for (const auto& c : j["components"]) {
    const int64_t v = json_i64(c, "bytes");
    if (v <= 0) continue;
    out += fmt::format("<div class=\"c-{}\" style=\"width:{:.4f}%\" title=\"{}: {}\"></div>", h(json_str(c, "name")), 100.0 * static_cast<double>(v) / total,
                       h(json_str(c, "name")), format_exact_bytes(static_cast<uint64_t>(v)));
  }
  out += "</div>\n<table id=\"budget-table\"><thead><tr><th></th><th>component</th><th class=\"n\">bytes</th><th class=\"n\">share</th><th>what</th></tr></thead><tbody>\n";
  for (const auto& c : j["components"])
    out += fmt::format("<tr><td><span class=\"k c-{}\"></span></td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.2f}%</td><td>{}</td></tr>\n",
                       h(json_str(c, "name")), h(json_str(c, "name")), comp_bytes(json_i64(c, "bytes")),
                       100.0 * static_cast<double>(json_i64(c, "bytes")) / total, h(json_str(c, "detail")));
  out += fmt::format("<tr class=\"sum\"><td></td><td>sum</td><td class=\"n\">{}</td><td class=\"n\"></td><td>the device</td></tr></tbody></table>\n",
                     comp_bytes(json_i64(j, "components_sum_bytes")));
  out += fmt::format("<p>KV capacity: <b>{} tokens</b> at {} B per token ({}), page size {}: <b>{}</b> concurrent requests of {} tokens.</p>\n",
                     with_commas_u(json_u64(j, "kv_tokens")), with_commas_u(json_u64(j, "kv_bytes_per_token")), h(json_str(j, "kv_cost_source")),
                     json_u64(j, "page_size"), with_commas_u(json_u64(j, "requests")), with_commas_u(json_u64(j, "request_tokens")));
  const auto& f = j["mem_fraction_static_detail"];
  if (!json_str(f, "value").empty())
    out += fmt::format("<p>SGLang <code>--mem-fraction-static {}</code> gives exactly that pool; rounded down to {} it gives {} tokens. "
                       "vLLM <code>gpu_memory_utilization {}</code>.</p><p class=\"muted\">{}</p>\n",
                       h(json_str(f, "value")), h(json_str(f, "rounded")), with_commas_u(json_u64(f, "rounded_kv_tokens")),
                       h(json_str(j["gpu_memory_utilization_detail"], "value")), h(json_str(f, "sglang_variant")));
  out += "</section>\n";
  const auto& w = j["worst_step"];
  out += fmt::format("<section id=\"worst-step\"><h2>The worst step: {}</h2><p>Activation peak {} (activations {}, workspaces {}); "
                     "{} tensors live, the largest:</p>\n<table><thead><tr><th>tensor</th><th>shape</th><th>category</th><th class=\"n\">bytes</th></tr></thead><tbody>\n",
                     h(json_str(w, "step")), format_exact_bytes(json_u64(w, "activation_peak_bytes")), format_exact_bytes(json_u64(w, "activation_bytes")),
                     format_exact_bytes(json_u64(w, "workspace_bytes")), json_u64(w, "live_count"));
  for (const auto& e : w["live"])
    out += fmt::format("<tr><td><code>{}/{}</code></td><td>{}</td><td>{}</td><td class=\"n\">{}</td></tr>\n", h(json_str(e, "scope")),
                       h(json_str(e, "name")), h(json_str(e, "shape")), h(json_str(e, "category")), format_exact_bytes(json_u64(e, "bytes")));
  out += "</tbody></table></section>\n";
  if (j["modes"].size() > 1 || !j["fixes"].empty()) {
    out += "<section id=\"buys\"><h2>What each mode and fix buys</h2>\n<table><thead><tr><th>run or fix</th><th class=\"n\">activation peak</th>"
           "<th class=\"n\">KV tokens</th><th class=\"n\">gained</th><th class=\"n\">requests</th></tr></thead><tbody>\n";
    for (const auto& m : j["modes"])
      out += fmt::format("<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
                         h(json_str(m, "name")), format_exact_bytes(json_u64(m, "activation_peak_bytes")), with_commas_u(json_u64(m, "kv_tokens")),
                         signed_commas(json_i64(m, "kv_tokens_gained")), with_commas_u(json_u64(m, "requests")));
    for (const auto& x : j["fixes"])
      out += fmt::format("<tr><td>fix {}: <code>{}</code></td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
                         json_u64(x, "rank"), h(json_str(x, "rule")), format_exact_bytes(json_u64(x, "cumulative_peak_activation_bytes")),
                         with_commas_u(json_u64(x, "kv_tokens")), signed_commas(json_i64(x, "kv_tokens_gained")), with_commas_u(json_u64(x, "requests")));
    out += "</tbody></table></section>\n";
  }
  out += "</main></body></html>\n";
  return out;
}

}  // namespace moeprof::reports
