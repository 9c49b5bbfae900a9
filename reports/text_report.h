// Plain-text renderings for a terminal (moeprof compare, moeprof plan): the same figures as the
// JSON report, in the one unit policy (reports/format.h; docs/metrics.md, "Units").
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace moeprof::reports {

// A comparison object (make_comparison_json): A and B named with their files, the figures of both
// and the change, the live-at-peak diff with its sum, scopes, allocations only in one run.
std::string comparison_text(const nlohmann::ordered_json& c, const std::string& a_file, const std::string& b_file);

// A run object (make_run_json) for `moeprof plan`: warnings (truncation, dropped records) first,
// the peaks, the live set at the peak, scopes, reuse findings, anomalies.
std::string run_text(const nlohmann::ordered_json& run);

}  // namespace moeprof::reports
