// `moeprof run`'s check of its own figures: each mode's trace read back as written and analysed,
// and compared with the executor's accounting of the same run. A report's numbers come from the
// trace; a trace that disagrees with the allocations the executor made fails the run.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "executor/recorder.h"
#include "executor/run.h"
#include "planner/analysis.h"

namespace moeprof::cli {

// One analysis per mode, in r.modes' order (the baseline's with its event index); a run failure
// naming the trace when one cannot be read, exceeds an analysis limit, or disagrees with the
// accounting (peak total or activation).
Result<std::vector<planner::RunAnalysis>> analyse_run_traces(const RunPlanResult& r);

// Compares the CUPTI view of a run (its trace's analysis) with the executor's own accounting,
// category by category (each category's high-water mark and the bytes allocated). "" when they
// agree, else one "category: ...;" clause per category that differs.
std::string cupti_disagreement(const planner::RunAnalysis& cupti, const CategoryCounters& acc);

}  // namespace moeprof::cli
