#include "reports/run_loader.h"

#include <filesystem>

#include "core/trace_io.h"
#include "core/trace_merge.h"
#include "core/utf8.h"
#include "planner/stream.h"

namespace moeprof::reports {

namespace {

Status check_name(const std::string& name) {
  if (!is_valid_utf8(name)) return Status::bad_input("run name '" + valid_utf8(name) + "' is not valid UTF-8");
  return Status::ok();
}

// Names the run, infers categories when asked, analyses. A trace whose figures would exceed the
// byte limit (planner: limit_error) is bad input.
Result<LoadedRun> analyze_trace(Trace trace, const std::string& source, const planner::AnalyzeOptions& opts,
                                const std::string& name_override, const CategoryOptions& categories) {
  if (!name_override.empty()) trace.meta.name = name_override;
  // A file name need not be UTF-8; the report's run name must be (U+FFFD replaces bad bytes).
  if (trace.meta.name.empty()) trace.meta.name = valid_utf8(std::filesystem::path(source).stem().string());
  LoadedRun run;
  planner::AnalyzeOptions o = opts;
  planner::InferredCategories inferred;
  const bool infer = planner::should_infer_categories(trace, categories.mode, !categories.rules.empty());
  if (infer) {
    inferred = planner::infer_categories(trace, categories.rules, categories.mode);
    o.record_categories = &inferred.by_record;
  }
  run.analysis = planner::analyze(trace, o);
  if (!run.analysis.limit_error.empty()) return Status::bad_input(source + ": " + run.analysis.limit_error);
  if (infer) run.analysis.categories_note = planner::categories_note(inferred);
  run.trace = std::move(trace);
  return run;
}

}  // namespace

Result<LoadedRun> load_run(const std::string& path, const planner::AnalyzeOptions& opts, const std::string& name_override,
                           const CategoryOptions& categories) {
  MOEPROF_RETURN_IF_ERROR(check_name(name_override));
  MOEPROF_ASSIGN_OR_RETURN(Trace trace, read_trace(path));
  return analyze_trace(std::move(trace), path, opts, name_override, categories);
}

std::vector<std::string> split_run_argument(const std::string& arg) {
  std::error_code ec;
  if (arg.find(',') == std::string::npos || std::filesystem::exists(arg, ec)) return {arg};
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= arg.size()) {
    const size_t c = arg.find(',', start);
    const std::string part = arg.substr(start, c == std::string::npos ? std::string::npos : c - start);
    if (!part.empty()) out.push_back(part);
    if (c == std::string::npos) break;
    start = c + 1;
  }
  return out;
}

Result<LoadedRun> load_run(const std::vector<std::string>& paths, const LoadOptions& opts) {
  if (paths.empty()) return Status::bad_input("no trace given");
  MOEPROF_RETURN_IF_ERROR(check_name(opts.name));
  uint64_t bytes = 0;
  for (const std::string& p : paths) {
    std::error_code ec;
    const auto n = std::filesystem::file_size(p, ec);
    if (!ec) bytes += n;
  }
  bool stream = opts.stream == StreamMode::kOn ||
                (opts.stream == StreamMode::kAuto && (opts.prefers_memory.empty() || bytes >= opts.auto_bytes));
  if (!opts.needs_memory.empty()) {
    if (opts.stream == StreamMode::kOn)
      return Status::bad_input(opts.needs_memory + " needs the whole trace in memory: drop --stream on");
    stream = false;
  }
  if (paths.size() > 1) {
    // Ranks of one run only when their metadata says so (trace_merge.h): never two unrelated runs.
    std::vector<RunMeta> metas;
    for (const std::string& p : paths) {
      MOEPROF_ASSIGN_OR_RETURN(RunMeta m, read_trace_meta(p));
      metas.push_back(std::move(m));
    }
    MOEPROF_RETURN_IF_ERROR(check_rank_traces(metas, paths));
  }
  if (stream) {
    LoadedRun run;
    planner::StreamOptions so;
    so.analyze = opts.analyze;
    so.categories = opts.categories.mode;
    so.category_rules = opts.categories.rules;
    // Under auto, an input small enough for memory is read there when the stream cannot give what
    // the in-memory analysis gives: an error (a stream-only limit, e.g. a rank input naming a device
    // after its first frame; a corrupt input then fails with the in-memory message), or a hand-off
    // search that stopped.
    const bool can_redo = opts.stream == StreamMode::kAuto && bytes < opts.auto_bytes;
    auto streamed = planner::analyze_stream(paths, so);
    if (!streamed && !can_redo) return streamed.status();
    if (streamed) run.analysis = std::move(streamed).value();
    if (streamed && !run.analysis.limit_error.empty()) return Status::bad_input(paths.front() + ": " + run.analysis.limit_error);
    const bool redo = can_redo && (!streamed || (opts.analyze.findings && !run.analysis.handoffs_computed));
    if (!redo) {
      if (!opts.name.empty()) run.analysis.meta.name = opts.name;
      run.analysis.meta.name = valid_utf8(run.analysis.meta.name);
      run.streamed = true;
      return run;
    }
  }
  if (paths.size() == 1) return load_run(paths.front(), opts.analyze, opts.name, opts.categories);
  std::vector<Trace> ranks;
  for (const std::string& p : paths) {
    MOEPROF_ASSIGN_OR_RETURN(Trace t, read_trace(p));
    ranks.push_back(std::move(t));
  }
  MOEPROF_RETURN_IF_ERROR(offset_rank_devices(&ranks));
  Trace merged = merge_traces(ranks);
  ranks.clear();
  return analyze_trace(std::move(merged), paths.front(), opts.analyze, opts.name, opts.categories);
}

}  // namespace moeprof::reports
