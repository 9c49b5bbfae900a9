// `moeprof run --routing SPEC --moe-rows bound|routed`: the MoE routing options of `run`
// (model/routing.h, docs/budget.md "Routing skew"), their checks, and the routing lines of the
// run's printed summary. Used by cmd_run.cpp.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "executor/run.h"
#include "model/config.h"

namespace moeprof::cli {

struct RoutingArgs {
  std::string routing = "router";
  std::string moe_rows = "bound";
};

// `group`: the title of the options in --help ("" for run's).
void add_routing_options(CLI::App* cmd, RoutingArgs* a, const std::string& group = "");
// Parses both into the plan and checks them against the model (hot:N within its experts) and the
// backend (routed rows on the meta backend need a drawn routing: it computes no router).
Status apply_routing_options(const RoutingArgs& a, const ModelConfig& cfg, const std::string& backend, RunPlan* plan);
// The routing lines of the printed summary (none with the defaults): per mode the padded rows
// allocated, at the bound and at the worst routing, and the activation peak under that worst.
std::string routing_summary(const RunPlan& plan, const RunPlanResult& r);

}  // namespace moeprof::cli
