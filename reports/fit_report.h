// `moeprof fit` as JSON, text and Markdown: the laws per site (and per family of sites, with layer
// numbers as '*'), the flags, the peaks reproduced at the measured sizes, the predictions and the
// budget solve. Every format renders the JSON (docs/budget.md describes the keys).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/fit.h"

namespace moeprof::reports {

struct FitReportInput {
  const planner::FitResult* fit = nullptr;
  std::vector<std::string> traces;                   // paths, in the order of the fit
  std::vector<std::string> trace_labels;             // "kimi-k2.5 baseline (meta, TP=4)" per trace
  std::vector<planner::SizePrediction> predictions;  // one per --at
  // Each trace's size predicted back (nullopt where it lies below a regime's floor).
  std::vector<std::optional<planner::SizePrediction>> reproduced;
  std::optional<uint64_t> budget;
  std::optional<planner::BudgetSolution> solution;   // the largest size within the budget
  // With a context variable and a budget: the smallest context at which the predicted peak
  // exceeds it (the other variables at their largest measured values).
  std::optional<planner::BudgetSolution> context_solution;
};

// Everything but the laws per site (families, flags, predictions, budget): what the text and
// Markdown render.
nlohmann::ordered_json fit_json(const FitReportInput& in);
// The JSON document `doc` (from fit_json) with `law_details` (per distinct law: law, formula,
// state, degree, sizes_used, range for data-dependent sites, bytes per trace, note) and `laws`
// added last, one per site (site, name, scope, ordinal, device, category, text, formula,
// coefficients, confirmed, state, regime, law: the index into law_details), pretty-printed.
// Written as text site by site: a law shared by many sites is serialized once.
std::string fit_json_text(const FitReportInput& in, const nlohmann::ordered_json& doc);
std::string fit_text(const nlohmann::ordered_json& j);
std::string fit_markdown(const nlohmann::ordered_json& j);

}  // namespace moeprof::reports
