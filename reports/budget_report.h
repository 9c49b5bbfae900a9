// `moeprof budget` as JSON, text, Markdown and a single-file HTML page: the device's bytes in
// components that sum to its size, the KV capacity in tokens and requests, the engine settings
// that give it, and what each memory mode and each ranked fix buys (docs/budget.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/budget.h"
#include "planner/whatif.h"

namespace moeprof::reports {

struct BudgetReportInput {
  std::vector<std::string> traces;          // one per run; the first is the reference
  std::vector<std::string> run_names;       // baseline, reuse, ...
  std::vector<planner::BudgetResult> budgets;
  std::vector<const planner::RunAnalysis*> runs;
  std::string gpu_name;                     // when the size was given by name
  std::string kv_check;                     // the per-token cost from the model's config, when known
  std::optional<planner::WhatIfResult> fixes;  // ranked fixes of the first run
};

nlohmann::ordered_json budget_json(const BudgetReportInput& in);
std::string budget_text(const nlohmann::ordered_json& j);
std::string budget_markdown(const nlohmann::ordered_json& j);
std::string budget_html(const nlohmann::ordered_json& j);

}  // namespace moeprof::reports
