#include "reports/run_loader.h"

#include <filesystem>

#include "core/trace_io.h"

#include <fmt/format.h>

namespace moeprof::reports {

Result<LoadedRun> load_run(const std::string& path, const planner::AnalyzeOptions& opts, const std::string& name_override,
                           const CategoryOptions& categories) {
  MOEPROF_ASSIGN_OR_RETURN(Trace trace, read_trace(path));
  if (!name_override.empty()) trace.meta.name = name_override;
  if (trace.meta.name.empty()) trace.meta.name = std::filesystem::path(path).stem().string();
  LoadedRun run;
  planner::AnalyzeOptions o = opts;
  planner::InferredCategories inferred;
  const bool infer = planner::should_infer_categories(trace, categories.mode);
  if (infer) {
    inferred = planner::infer_categories(trace, categories.rules);
    o.record_categories = &inferred.by_record;
  }
  run.analysis = planner::analyze(trace, o);
  if (infer)
    run.analysis.categories_note = fmt::format(
        "categories inferred (docs/metrics.md): {} persistent (counted as weights), {} transient (activation), {} from "
        "library frames, {} driver-internal (workspace), {} by rule",
        inferred.persistent, inferred.transient, inferred.by_library, inferred.driver, inferred.by_rule);
  run.trace = std::move(trace);
  return run;
}

}  // namespace moeprof::reports
