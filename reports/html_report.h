// The single-file HTML rendering of a report document: everything inline (data, styles, script),
// no network request; docs/report.md describes the page.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace moeprof::reports {

std::string report_html(const nlohmann::ordered_json& report);

}  // namespace moeprof::reports
