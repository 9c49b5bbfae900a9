#include "reports/run_loader.h"

#include <filesystem>

#include "core/trace_io.h"
#include "core/utf8.h"

#include <fmt/format.h>

namespace moeprof::reports {

Result<LoadedRun> load_run(const std::string& path, const planner::AnalyzeOptions& opts, const std::string& name_override,
                           const CategoryOptions& categories) {
  if (!is_valid_utf8(name_override))
    return Status::bad_input("run name '" + valid_utf8(name_override) + "' is not valid UTF-8");
  MOEPROF_ASSIGN_OR_RETURN(Trace trace, read_trace(path));
  if (!name_override.empty()) trace.meta.name = name_override;
  // A file name need not be UTF-8; the report's run name must be (U+FFFD replaces bad bytes).
  if (trace.meta.name.empty()) trace.meta.name = valid_utf8(std::filesystem::path(path).stem().string());
  LoadedRun run;
  planner::AnalyzeOptions o = opts;
  planner::InferredCategories inferred;
  const bool infer = planner::should_infer_categories(trace, categories.mode);
  if (infer) {
    inferred = planner::infer_categories(trace, categories.rules);
    o.record_categories = &inferred.by_record;
  }
  run.analysis = planner::analyze(trace, o);
  if (!run.analysis.limit_error.empty()) return Status::bad_input(path + ": " + run.analysis.limit_error);
  if (infer)
    run.analysis.categories_note = fmt::format(
        "categories inferred (docs/metrics.md): {} persistent (counted as weights), {} transient (activation), {} from "
        "library frames, {} driver-internal (workspace), {} by rule",
        inferred.persistent, inferred.transient, inferred.by_library, inferred.driver, inferred.by_rule);
  run.trace = std::move(trace);
  return run;
}

}  // namespace moeprof::reports
