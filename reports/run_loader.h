// Reading a trace and analysing it in one call: what the plan/compare/report/export commands do.
#pragma once

#include <string>

#include "core/status.h"
#include "core/trace.h"
#include "planner/analysis.h"
#include "planner/categories.h"

namespace moeprof::reports {

struct LoadedRun {
  Trace trace;
  planner::RunAnalysis analysis;
};

// How categories are read: inferred for traced programs unless kept (planner/categories.h).
struct CategoryOptions {
  planner::CategoryInference mode = planner::CategoryInference::kAuto;
  std::vector<planner::CategoryRule> rules;
};

// read_trace + planner::analyze. The run name is the trace's meta name, else its file stem;
// `name_override` (when not empty) wins. Errors are read_trace's (kBadInput naming file and offset).
Result<LoadedRun> load_run(const std::string& path, const planner::AnalyzeOptions& opts = {},
                           const std::string& name_override = "", const CategoryOptions& categories = {});

}  // namespace moeprof::reports
