#include "reports/run_loader.h"

#include <filesystem>

#include "core/trace_io.h"

namespace moeprof::reports {

Result<LoadedRun> load_run(const std::string& path, const planner::AnalyzeOptions& opts, const std::string& name_override) {
  MOEPROF_ASSIGN_OR_RETURN(Trace trace, read_trace(path));
  if (!name_override.empty()) trace.meta.name = name_override;
  if (trace.meta.name.empty()) trace.meta.name = std::filesystem::path(path).stem().string();
  LoadedRun run;
  run.analysis = planner::analyze(trace, opts);
  run.trace = std::move(trace);
  return run;
}

}  // namespace moeprof::reports
