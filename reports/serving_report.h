// A serving run's part of the Markdown and HTML reports, from the run's `serving` object
// (reports/serving_json.h): the memory against the device, each step kind's activation peak and
// what is live there, the CUDA-graph pool, and the KV pool's occupancy over the steps. Aggregated
// per step kind, so a run of thousands of steps reads as one of ten.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace moeprof::reports {

// "" for a run without a `serving` object.
std::string serving_markdown(const nlohmann::ordered_json& run);
// A <section class="serving"> (the occupancy chart is drawn by page.js from the report data).
std::string serving_html(const nlohmann::ordered_json& run);

}  // namespace moeprof::reports
