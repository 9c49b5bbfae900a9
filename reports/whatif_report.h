// What-if predictions and ranked fixes in reports: the `what_if` object of a run (JSON,
// docs/report.schema.json $defs/what_if), its text for `moeprof plan`, and the predicted-vs-
// measured object of a comparison (`moeprof compare --predicted-by`).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "planner/analysis.h"
#include "planner/whatif.h"

namespace moeprof::reports {

nlohmann::ordered_json what_if_json(const planner::WhatIfResult& w, const planner::RunAnalysis& run, size_t top_entries = 20);

// Text for a terminal: predictions per rule, the peaks, the live set at the predicted peak, fixes.
std::string what_if_text(const planner::WhatIfResult& w, size_t top_entries = 10);

// Predicted (from the baseline and rules) beside measured (the candidate run).
nlohmann::ordered_json prediction_json(const planner::WhatIfResult& w, const planner::RunAnalysis& candidate,
                                       const std::string& rules_path);
std::string prediction_text(const nlohmann::ordered_json& p);

}  // namespace moeprof::reports
