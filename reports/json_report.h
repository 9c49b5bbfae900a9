// The JSON report: one entry per analysed run, several runs per report, and the comparison of two
// of them. Keys and their meaning: docs/report.md; schema: docs/report.schema.json (version 1).
// Key order is stable (nlohmann::ordered_json), so reports diff cleanly.
//
// Producing DIR/report.json from two analysed runs (what `moeprof run` does):
//   std::vector<planner::RunAnalysis> runs = {planner::analyze(baseline), planner::analyze(reuse)};
//   Status st = reports::write_json_report(dir + "/report.json", runs);
// With exactly two runs the report carries `comparison` (runs[0] = baseline, runs[1] = candidate).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "planner/analysis.h"
#include "reports/memory_timeline.h"
#include "reports/report_file.h"

namespace moeprof::reports {

struct ReportOptions {
  size_t top_entries = 20;     // live_at_peak.top: the largest live allocations at the peak
  size_t top_scopes = 20;      // scopes: highest activation high-water first
  size_t list_limit = 50;      // comparison lists (scope deltas, only_in_*), reuse handoffs
  bool include_timeline = true;  // runs[].timeline: downsampled live bytes of the peak device
  // runs[].memory_timeline (reports/memory_timeline.h), for runs analysed with keep_lifetimes.
  bool include_memory_timeline = true;
  TimelineOptions memory_timeline;
  // Name of the baseline run for `comparison`. Empty: with exactly two runs, the first is the
  // baseline; with another count there is no comparison. With a name and more than two runs,
  // `comparisons` holds every other run against it and `comparison` the first of those.
  std::string compare_baseline;
  std::string generator;       // empty: "moeprof <version>"
};

// Run names in a report must be unique and non-empty: an empty name becomes the mode, then
// "run<N>"; a repeated name gets "-2", "-3", ... appended. Returns the names used.
std::vector<std::string> unique_run_names(const std::vector<planner::RunAnalysis>& runs);

// One run object (the element of `runs`), named `name`.
nlohmann::ordered_json make_run_json(const planner::RunAnalysis& run, const std::string& name,
                                     const ReportOptions& opts = {});
// One entry of a live set (live_at_peak.top), with the innermost user frames when it has a stack.
nlohmann::ordered_json live_entry_json(const planner::LiveEntry& e, const planner::RunAnalysis& run);

// The live-at-peak diff of a comparison (tensor by tensor; rows sum to delta_bytes).
nlohmann::ordered_json live_diff_json(const planner::LiveDiff& d);

// One comparison object (deltas are candidate - baseline).
nlohmann::ordered_json make_comparison_json(const planner::Comparison& cmp, const ReportOptions& opts = {});

// The whole report. Fails (kBadInput) only if compare_baseline names no run.
Result<nlohmann::ordered_json> make_report(const std::vector<planner::RunAnalysis>& runs,
                                           const ReportOptions& opts = {});

// make_report + pretty-printed write (2-space indent, trailing newline).
Status write_json_report(const std::string& path, const std::vector<planner::RunAnalysis>& runs,
                         const ReportOptions& opts = {});

}  // namespace moeprof::reports
