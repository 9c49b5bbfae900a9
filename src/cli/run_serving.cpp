#include "cli/run_serving.h"

#include "cli/cli_util.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/utf8.h"
#include "executor/graph_runner.h"
#include "executor/workload.h"
#include "reports/format.h"

namespace moeprof::cli {

namespace {
const char* const kServingOptions[] = {"--chunked-prefill-size", "--kv-tokens",     "--mem-fraction-static",
                                       "--page-size",            "--max-running-requests", "--context-length",
                                       "--cuda-graph-bs",        "--cuda-graph-max-bs",    "--disable-cuda-graph"};
}

void add_serving_options(CLI::App* cmd, ServingArgs* a) {
  const std::string g = "Serving (a workload of requests: prefill chunks, decode batches, CUDA graphs)";
  cmd->add_option("--workload", a->workload,
                  "serve these requests instead of one prefill: a JSONL file (one {\"prompt_tokens\", \"output_tokens\", "
                  "\"arrival_step\"} per line) or synthetic:N,PROMPT,OUTPUT[,SEED] (lengths L or LO-HI)")
      ->type_name("FILE|SPEC")
      ->group(g);
  cmd->add_option("--chunked-prefill-size", a->chunked_prefill_size, "prompt tokens per prefill step; a longer prompt is chunked")
      ->check(integer_range(1, int64_t{1} << 30))
      ->type_name("N")
      ->capture_default_str()
      ->group(g);
  auto* kv = cmd->add_option("--kv-tokens", a->kv_tokens, "tokens of the paged KV pool [default: the workload's whole need]")
                 ->check(integer_range(1, int64_t{1} << 40))
                 ->type_name("N")
                 ->group(g);
  cmd->add_option("--mem-fraction-static", a->mem_fraction_static,
                  "size the KV pool as SGLang does: free after weights - free before weights x (1 - F), in tokens")
      ->check(number_range(1e-6, 1.0))
      ->type_name("F")
      ->excludes(kv)
      ->group(g);
  cmd->add_option("--page-size", a->page_size, "tokens per KV page")
      ->check(integer_range(1, int64_t{1} << 20))
      ->type_name("N")
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--max-running-requests", a->max_running_requests,
                  "requests running at once (request rows) [default: SGLang's, clamp(pool tokens / context x 512, 2048, 4096)]")
      ->check(integer_range(1, int64_t{1} << 20))
      ->type_name("N")
      ->group(g);
  cmd->add_option("--context-length", a->context_length, "positions per request (rope table, request-to-token table) [default: the model's max_position_embeddings]")
      ->check(integer_range(1, int64_t{1} << 24))
      ->type_name("N")
      ->group(g);
  auto* disable = cmd->add_flag("--disable-cuda-graph", a->disable_cuda_graph, "decode eagerly, no CUDA graphs")->group(g);
  cmd->add_option("--cuda-graph-bs", a->cuda_graph_bs,
                  "decode batch sizes to capture, comma-separated [default: SGLang's list for the device's memory]")
      ->type_name("LIST")
      ->excludes(disable)
      ->group(g);
  cmd->add_option("--cuda-graph-max-bs", a->cuda_graph_max_bs, "capture only batch sizes up to N")
      ->check(integer_range(1, int64_t{1} << 16))
      ->type_name("N")
      ->excludes(disable)
      ->group(g);
}

void note_serving_options(const CLI::App* cmd, ServingArgs* a) {
  a->given.clear();
  for (const char* o : kServingOptions)
    if (cmd->count(o) > 0) a->given.emplace_back(o);
  a->workload_given = cmd->count("--workload") > 0;
}

Result<std::optional<ServingOptions>> serving_options(const ServingArgs& a) {
  if (a.workload.empty()) {
    if (a.workload_given) return Status::bad_input("--workload is empty (a JSONL file, or synthetic:N,PROMPT,OUTPUT[,SEED])");
    if (!a.given.empty()) return Status::bad_input(a.given.front() + " needs --workload (a serving run)");
    return std::optional<ServingOptions>();
  }
  // Parsed here too, so that a bad workload fails before anything runs.
  MOEPROF_RETURN_IF_ERROR(load_workload(a.workload).status());
  ServingOptions o;
  o.workload = a.workload;
  o.chunked_prefill_size = a.chunked_prefill_size;
  o.kv_tokens = a.kv_tokens;
  o.mem_fraction_static = a.mem_fraction_static;
  o.page_size = a.page_size;
  o.max_running_requests = a.max_running_requests;
  o.context_len = a.context_length;
  if (std::find(a.given.begin(), a.given.end(), "--cuda-graph-bs") != a.given.end()) {
    // Each item an integer of 1 to 65536; an empty one (`1,,2`, a trailing comma) is a typo, not
    // a size to skip. Repeated sizes are captured once, as SGLang's set() does.
    size_t at = 0;
    const std::string& text = a.cuda_graph_bs;
    for (int item = 1;; ++item) {
      const size_t comma = text.find(',', at);
      const std::string v = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      int64_t b = 0;
      if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos || (b = std::stoll(v)) < 1 || b > 65536)
        return Status::bad_input("--cuda-graph-bs: item " + std::to_string(item) + " of '" + printable(text) +
                                 "' must be an integer from 1 to 65,536 (got '" + printable(v) + "')");
      o.cuda_graph_bs.push_back(b);
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  }
  o.cuda_graph_max_bs = a.cuda_graph_max_bs;
  o.disable_cuda_graph = a.disable_cuda_graph;
  return std::optional<ServingOptions>(o);
}

std::string serving_summary(const RunPlanResult& r) {
  using reports::format_bytes;
  using reports::format_exact_bytes;
  std::string out;
  for (const ModeResult& m : r.modes) {
    if (!m.serving) continue;
    const ServingResult& s = *m.serving;
    out += fmt::format("\nserving ({}): {} requests, {} tokens generated, {} held back by the pool or the request limit\n", m.mode,
                       s.requests, s.output_tokens, s.waited_requests);
    std::string sizing = s.pool_sizing;
    if (s.pool_sizing == "mem-fraction-static") sizing = fmt::format("--mem-fraction-static {}", s.mem_fraction_static);
    if (s.pool_sizing == "workload") sizing = "the workload's whole need";
    out += fmt::format("  KV pool: {} tokens (page {}, sized by {}), {} ({}) + request table {}; peak use {} tokens\n",
                       reports::with_commas_u(static_cast<uint64_t>(s.kv_pool_tokens)), s.page_size, sizing,
                       format_bytes(s.kv_pool_bytes), format_exact_bytes(s.kv_pool_bytes), format_bytes(s.req_to_token_bytes),
                       reports::with_commas_u(static_cast<uint64_t>(s.peak_tokens_used)));
    if (s.graphs) {
      std::string sizes;
      for (int64_t b : s.graph_sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(b);
      out += fmt::format("  CUDA graphs: batch sizes {}; graph pool {} ({}), inputs {}\n", sizes, format_bytes(s.graph_pool_bytes),
                         format_exact_bytes(s.graph_pool_bytes), format_bytes(s.graph_input_bytes));
      if (auto need = shared_pool_need(s.graph_captures, s.graph_sizes); need.is_ok() && !s.graph_captures.empty())
        out += fmt::format("  graph pool shared by {} graphs: needs {} live (the capture of batch {}: its own {} + the outputs of the "
                           "larger graphs {}); one pool per graph would need {} (the sum of the own peaks); reserved {} in segments\n",
                           s.graph_captures.size(), format_exact_bytes(need->need_bytes), need->at_bs,
                           format_exact_bytes(need->at_own_bytes), format_exact_bytes(need->at_outputs_bytes),
                           format_exact_bytes(need->separate_bytes), format_exact_bytes(s.graph_pool_bytes));
    } else {
      out += "  CUDA graphs: none (decode runs eagerly)\n";
    }
    for (const auto* k : {&s.prefill, &s.decode}) {
      const bool pre = k == &s.prefill;
      if (k->steps == 0) {
        out += fmt::format("  {:<7} no step\n", pre ? "prefill" : "decode");
        continue;
      }
      std::string top;
      for (size_t i = 0; i < k->live_at_peak.size() && i < 3; ++i)
        top += fmt::format("{}{} {}", i ? ", " : "; largest live: ", k->live_at_peak[i].name, format_bytes(k->live_at_peak[i].bytes));
      out += fmt::format("  {:<7} {} steps{} (up to {} rows): peak activation {} ({}) at step {} ({} rows){}; {:.3f} s per step\n",
                         pre ? "prefill" : "decode", k->steps,
                         pre ? "" : fmt::format(", {} replayed from a graph", k->graph_steps), k->max_rows,
                         format_bytes(k->peak_activation_bytes), format_exact_bytes(k->peak_activation_bytes), k->peak_step,
                         k->peak_rows, top, k->seconds / static_cast<double>(k->steps));
      if (k->read_steps > 0) {
        // The floor of a memory-bound step: what it must read, and the rate its wall time gives.
        const double n = static_cast<double>(k->read_steps);
        const double bytes = static_cast<double>(k->read_weight_bytes + k->read_kv_bytes) / n;
        out += fmt::format("          reads at least {} per step: weights {} (routed experts {}, {:.1f} hit per MoE layer) + KV "
                           "cache {}; {:.0f} GB/s at {:.4f} s per step\n",
                           format_bytes(static_cast<uint64_t>(bytes)), format_bytes(k->read_weight_bytes / k->read_steps),
                           format_bytes(k->read_expert_bytes / k->read_steps),
                           static_cast<double>(k->experts_hit) / n / std::max<double>(1.0, static_cast<double>(s.moe_layers)),
                           format_bytes(k->read_kv_bytes / k->read_steps), bytes / (k->read_seconds / n) / 1e9, k->read_seconds / n);
      }
      if (!pre && k->graph_steps > 0) {
        const GraphCapture* g = nullptr;
        for (const GraphCapture& c : s.graph_captures)
          if (g == nullptr || c.live_peak_bytes > g->live_peak_bytes) g = &c;
        if (g != nullptr)
          out += fmt::format("          replayed steps allocate nothing: their tensors live in the graph pool, at most {} ({}) during "
                             "the capture of batch {}\n",
                             format_bytes(g->live_peak_bytes), format_exact_bytes(g->live_peak_bytes), g->bs);
      }
    }
    const uint64_t act = std::max(s.prefill.peak_activation_bytes, s.decode.peak_activation_bytes);
    const uint64_t total = s.weights_bytes + s.kv_pool_bytes + s.req_to_token_bytes + s.graph_pool_bytes + s.graph_input_bytes + act;
    out += fmt::format("  memory: weights {}{} + KV {} + graphs {} + activation peak {} = {}{}\n", format_bytes(s.weights_bytes),
                       s.weights_shared ? fmt::format(" (experts shared; per-layer {})", format_bytes(s.weights_per_layer_bytes)) : "",
                       format_bytes(s.kv_pool_bytes + s.req_to_token_bytes), format_bytes(s.graph_pool_bytes + s.graph_input_bytes),
                       format_bytes(act), format_bytes(total),
                       s.device.known ? fmt::format(" of the device's {}", format_bytes(s.device.total)) : std::string());
  }
  return out;
}

}  // namespace moeprof::cli
