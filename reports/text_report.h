// Plain-text renderings for a terminal (moeprof compare, moeprof plan): the same figures as the
// JSON report, in the one unit policy (reports/format.h; docs/metrics.md, "Units").
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace moeprof::reports {

// A comparison object (make_comparison_json): A and B named with their files, the figures of both
// and the change, the live-at-peak diff with its sum, scopes, allocations only in one run.
std::string comparison_text(const nlohmann::ordered_json& c, const std::string& a_file, const std::string& b_file);

// What a reader must see before any figure of a run object (make_run_json), one line each
// (without "warning: "), most serious first: the run failed (extra.error), its trace is truncated
// (the figures cover the part read), the recorder dropped records, nothing was allocated. Each
// names the run. Empty for a complete run.
std::vector<std::string> run_warnings(const nlohmann::ordered_json& run);

// Appended where an imported PyTorch snapshot holds no allocation: how to record one.
inline constexpr const char* kEmptySnapshotAdvice =
    " (the snapshot holds no allocation history: call torch.cuda.memory._record_memory_history() before the code to "
    "profile, then torch.cuda.memory._dump_snapshot(FILE))";

// A run object (make_run_json) for `moeprof plan`: run_warnings first, the peaks ("none recorded"
// rather than 0 B when nothing was allocated), the live set at the peak, scopes, reuse findings,
// anomalies (a failed run and a truncation among them).
std::string run_text(const nlohmann::ordered_json& run);

}  // namespace moeprof::reports
