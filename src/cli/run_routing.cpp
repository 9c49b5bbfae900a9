#include "cli/run_routing.h"

#include <filesystem>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "model/expert_parallel.h"
#include "model/routing.h"
#include "reports/format.h"

namespace moeprof::cli {

void add_routing_options(CLI::App* cmd, RoutingArgs* a, const std::string& group) {
  const std::string g = group.empty() ? "MoE routing (docs/budget.md, \"Routing skew\")" : group;
  cmd->add_option("--routing", a->routing,
                  "the MoE layers' routing: router (the router's own top-k), or drawn from --seed per token: uniform, zipf:S "
                  "(expert of rank r weighted 1/r^S), hot:N (N hot experts take every top-k they can), worst (the counts "
                  "that pad the most rows)")
      ->type_name("SPEC")
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--moe-rows", a->moe_rows,
                  "the expert runner's padded rows: bound = T*k + E*(tile-1) whatever the routing; routed = the routing's own "
                  "per-expert tiles (a CUDA graph takes the worst routing's)")
      ->type_name("bound|routed")
      ->capture_default_str()
      ->group(g);
  const std::string ge = "Expert parallelism (docs/executor.md, \"Expert parallelism\")";
  cmd->add_option("--ep", a->ep,
                  "expert-parallel size N: each rank holds E/N routed experts and receives the rows the routing of the "
                  "whole batch sends them (needs --tp 1); emulated on one device, or real with --gpus N (all-to-alls)")
      ->type_name("N")
      ->capture_default_str()
      ->group(ge);
  cmd->add_option("--ep-rank", a->ep_rank, "with --ep on one device: the rank to emulate [default: every rank in turn on the meta backend, rank 0 elsewhere]")
      ->type_name("R")
      ->check(integer_range(0, int64_t{1} << 20))
      ->group(ge);
  cmd->add_option("--ep-buffers", a->ep_buffers,
                  "with --ep: exact = dispatch buffers sized by the rows received; worst-case = T * min(top_k, E/N) rows, "
                  "whatever the routing")
      ->type_name("exact|worst-case")
      ->capture_default_str()
      ->group(ge);
  cmd->add_option("--dp", a->dp,
                  "with --ep N: DP attention over the N ranks, as SGLang's --enable-dp-attention: rank r runs its own request, "
                  "tokens [r T/N, (r+1) T/N) of the batch, and keeps its rows of the MoE output; on one device it needs a "
                  "drawn --routing")
      ->type_name("N")
      ->capture_default_str()
      ->group(ge);
}

Status apply_routing_options(const RoutingArgs& a, const ModelConfig& cfg, const std::string& backend, RunPlan* plan) {
  MOEPROF_ASSIGN_OR_RETURN(RoutingSpec spec, parse_routing(a.routing));
  MOEPROF_ASSIGN_OR_RETURN(MoeRows rows, parse_moe_rows(a.moe_rows));
  if (spec.forced()) {
    if (cfg.n_routed_experts <= 0) return Status::bad_input("--routing " + spec.text() + ": " + cfg.name + " has no routed experts");
    MOEPROF_RETURN_IF_ERROR(RoutingDraw::create(spec, cfg.n_routed_experts, cfg.num_experts_per_tok, plan->seed).status());
  }
  if (rows == MoeRows::kRouted && !spec.forced() && backend == "meta")
    return Status::bad_input("--moe-rows routed on the meta backend needs a drawn routing (--routing uniform, zipf:S, hot:N or worst): "
                             "it computes no router to count");
  plan->routing = spec;
  plan->moe_rows = rows;
  MOEPROF_ASSIGN_OR_RETURN(plan->ep_buffers, parse_ep_buffers(a.ep_buffers));
  MOEPROF_RETURN_IF_ERROR(check_ep_size(a.ep, cfg.n_routed_experts, cfg.name));
  if (a.ep == 1 && (a.ep_rank >= 0 || a.ep_buffers != "exact"))
    return Status::bad_input("--ep-rank and --ep-buffers need --ep N with N >= 2");
  if (a.ep > 1) {
    if (a.ep_rank < -1 || a.ep_rank >= a.ep)
      return Status::bad_input("--ep-rank " + std::to_string(a.ep_rank) + " must be 0 to " + std::to_string(a.ep - 1));
    if (plan->tp != 1) return Status::bad_input("--ep runs with --tp 1: attention runs the whole batch on every rank");
    if (plan->serving) return Status::bad_input("--ep runs one prefill: drop --workload");
    if (!spec.forced() && backend == "meta")
      return Status::bad_input("--ep on the meta backend needs a drawn routing (--routing uniform, zipf:S, hot:N or worst): "
                               "it computes no router to dispatch by");
  }
  if (a.dp < 1) return Status::bad_input("--dp " + std::to_string(a.dp) + " must be at least 1");
  if (a.dp > 1 && a.dp != a.ep)
    return Status::bad_input("--dp " + std::to_string(a.dp) + " runs DP attention over the EP ranks: it needs --ep " + std::to_string(a.dp));
  plan->ep = a.ep;
  plan->ep_rank = a.ep_rank;
  plan->dp_attention = a.dp > 1;
  return Status::ok();
}

std::string routing_summary(const RunPlan& plan, const RunPlanResult& r) {
  std::string out;
  if (r.ep > 1) {
    out += fmt::format("Expert parallelism: EP={}{}, {} buffers, worst case {} rows per MoE call (T * min(top_k, E/N)), routing {}\n",
                       r.ep, r.dp_attention ? " with DP attention (one request of T/N tokens per rank)" : "", ep_buffers_name(r.ep_buffers), reports::with_commas_u(static_cast<uint64_t>(r.ep_worst_rows)),
                       plan.routing.text());
    for (size_t m = 0; m < r.modes.size(); ++m) {
      for (size_t i = 0; i < r.ep_ranks.size(); ++i) {
        const ModeResult& mr = r.ep_rank_modes[i][m];
        out += fmt::format("  {} rank {}: peak activation {}, under the worst routing {}; rows received {} (most in one call {})\n",
                           mr.mode, r.ep_ranks[i], reports::format_exact_bytes(mr.accounting.peak_activation),
                           reports::format_exact_bytes(mr.accounting.peak_activation_worst),
                           reports::with_commas_u(static_cast<uint64_t>(mr.moe.ep_rows_received)),
                           reports::with_commas_u(static_cast<uint64_t>(mr.moe.ep_max_rows_received)));
      }
      // The budget rank's own figures (a real run's modes hold the largest over the ranks).
      const CategoryCounters* own = &r.modes[m].accounting;
      for (size_t i = 0; i < r.ep_ranks.size(); ++i)
        if (r.ep_ranks[i] == r.budget_ranks[m]) own = &r.ep_rank_modes[i][m].accounting;
      out += fmt::format("  {}: rank {} sets the budget (peak activation {}, under the worst routing {})\n", r.modes[m].mode,
                         r.budget_ranks[m], reports::format_exact_bytes(own->peak_activation),
                         reports::format_exact_bytes(own->peak_activation_worst));
    }
  }
  if (!plan.routing.forced() && plan.moe_rows == MoeRows::kBound) return out;
  for (const auto& m : r.modes) {
    const MoeRunnerStats& s = m.moe;
    out += fmt::format("MoE routing ({}): {}, rows {}: {} padded rows over {} MoE calls (bound {}, worst routing {})", m.mode,
                       plan.routing.text(), moe_rows_name(plan.moe_rows), reports::with_commas_u(static_cast<uint64_t>(s.rows_allocated)),
                       s.calls, reports::with_commas_u(static_cast<uint64_t>(s.rows_bound)),
                       reports::with_commas_u(static_cast<uint64_t>(s.rows_worst)));
    if (s.max_expert_tokens >= 0) out += fmt::format("; busiest expert {} of {} tokens", s.max_expert_tokens, s.max_expert_capacity);
    out += fmt::format("; peak activation {}, under the worst routing {}\n", reports::format_exact_bytes(m.accounting.peak_activation),
                       reports::format_exact_bytes(m.accounting.peak_activation_worst));
  }
  return out;
}

}  // namespace moeprof::cli

namespace moeprof::cli {

nlohmann::json ep_ranks_json(const RunPlanResult& r, size_t mode_index) {
  if (r.ep <= 1) return nullptr;
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t i = 0; i < r.ep_ranks.size(); ++i) {
    const ModeResult& m = r.ep_rank_modes[i][mode_index];
    ranks.push_back({{"rank", r.ep_ranks[i]},
                     {"peak_activation_bytes", m.accounting.peak_activation},
                     {"peak_activation_worst_routing_bytes", m.accounting.peak_activation_worst},
                     {"peak_total_bytes", m.accounting.peak_total},
                     {"rows_received", m.moe.ep_rows_received},
                     {"max_rows_received", m.moe.ep_max_rows_received},
                     {"rows_buffered", m.moe.ep_rows_buffered},
                     {"trace", std::filesystem::path(m.trace_path).filename().string()}});  // beside the report
  }
  return ranks;
}

nlohmann::json ep_run_json(const RunPlanResult& r, size_t mode_index) {
  if (r.ep <= 1) return nullptr;
  return {{"size", r.ep},
          {"buffers", std::string(ep_buffers_name(r.ep_buffers))},
          {"worst_rows_per_call", r.ep_worst_rows},
          {"budget_rank", r.budget_ranks[mode_index]},
          {"emulated", r.ep_emulated},
          {"dp_attention", r.dp_attention}};
}

}  // namespace moeprof::cli
