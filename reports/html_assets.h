// The page assets of the HTML report, compiled in from reports/html/ (cmake/EmbedAssets.cmake):
// page.css, page.js and the vendored uPlot (vendor/uPlot.iife.min.js, vendor/uPlot.min.css; its
// licence and version in vendor/). Nothing is read from disk at run time.
#pragma once

#include <string_view>

namespace moeprof::reports {

// The contents of the asset at `path` relative to reports/html/; empty for an unknown path.
std::string_view html_asset(std::string_view path);

}  // namespace moeprof::reports
