#include "cli/run_routing.h"

#include <fmt/format.h>

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
  return Status::ok();
}

std::string routing_summary(const RunPlan& plan, const RunPlanResult& r) {
  if (!plan.routing.forced() && plan.moe_rows == MoeRows::kBound) return "";
  std::string out;
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
