// Pieces of the HTML report page (internal to reports/): escaped text, byte cells and the
// sections that html_report.cpp assembles. Every figure comes from the report JSON.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace moeprof::reports::html {

std::string h(std::string_view s);
// A byte amount in the unit policy, the exact count in its title and data-bytes.
std::string bytes(uint64_t b);
// A signed change, coloured (better / worse), exact bytes in its title and data-bytes.
std::string delta(int64_t d);

// The comparison of two runs: metrics with both runs and the change, the live-at-peak diff
// (tensor by tensor, with its sum row), scopes whose high-water changed, allocations only in one.
std::string comparison_section(const nlohmann::ordered_json& c);
// The live set at the peak of one run: icicle (drawn by page.js), categories, largest entries.
std::string peak_section(const nlohmann::ordered_json& run);
// The planner's what-if predictions and ranked fixes of a run ("" when it has none).
std::string fixes_section(const nlohmann::ordered_json& run);

}  // namespace moeprof::reports::html
