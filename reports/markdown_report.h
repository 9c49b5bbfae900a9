// The Markdown rendering of a report document (make_report's result or a ReportFile's doc): the
// figures of every run, the comparison and the live set at the peak, for a PR comment.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace moeprof::reports {

std::string report_markdown(const nlohmann::ordered_json& report);
// One comparison object (make_comparison_json) as Markdown: the figures of both runs and the
// change, the live-at-peak diff tensor by tensor with its sum, scopes, allocations only in one.
std::string comparison_markdown(const nlohmann::ordered_json& comparison);

}  // namespace moeprof::reports
