// `moeprof run --routing SPEC --moe-rows bound|routed`: the MoE routing options of `run`
// (model/routing.h, docs/budget.md "Routing skew"), their checks, and the routing lines of the
// run's printed summary. Used by cmd_run.cpp.
#pragma once

#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "executor/run.h"
#include "model/config.h"

namespace moeprof::cli {

struct RoutingArgs {
  std::string routing = "router";
  std::string moe_rows = "bound";
  int ep = 1;                          // --ep N
  int ep_rank = -1;                    // --ep-rank R (-1: every rank on meta, rank 0 elsewhere)
  std::string ep_buffers = "exact";    // --ep-buffers exact|worst-case
  int dp = 1;                          // --dp N: DP attention over the N EP ranks
};

// `group`: the title of the options in --help ("" for run's).
void add_routing_options(CLI::App* cmd, RoutingArgs* a, const std::string& group = "");
// Parses both into the plan and checks them against the model (hot:N within its experts) and the
// backend (routed rows on the meta backend need a drawn routing: it computes no router).
Status apply_routing_options(const RoutingArgs& a, const ModelConfig& cfg, const std::string& backend, RunPlan* plan);
// The routing lines of the printed summary (none with the defaults): per mode the padded rows
// allocated, at the bound and at the worst routing, and the activation peak under that worst.
// With --ep N, also one line per emulated rank and mode: its activation peak (and at the worst
// routing), rows received, and the rank that sets the budget.
std::string routing_summary(const RunPlan& plan, const RunPlanResult& r);
// The report's per-run EP figures (docs/report.schema.json, runs[].ranks and runs[].ep): one
// entry per emulated rank of mode `mode_index`; null without --ep.
nlohmann::json ep_ranks_json(const RunPlanResult& r, size_t mode_index);
nlohmann::json ep_run_json(const RunPlanResult& r, size_t mode_index);

}  // namespace moeprof::cli
