// The one number formatter of every command and report (docs/metrics.md, "Units"): byte amounts
// in decimal units, MB from 1 MB upward with thousands separators (a figure reads the same at any
// size, as the seed's published figures do), exact byte counts with separators, times relative
// to the start of a trace.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace moeprof::reports {

// 512 -> "512 B"; 613460 -> "613.5 kB"; 3876114688 -> "3,876.1 MB"; 15.5e9 -> "15,500.0 MB".
std::string format_bytes(uint64_t bytes);
// Signed, with an explicit sign: "+539.0 MB", "-124.8 kB", "0 B".
std::string format_delta_bytes(int64_t bytes);
// Signed delta of two unsigned amounts, exact at any size: format_delta_bytes(b - a) without
// overflow ("+9,223,372,036,854.8 MB" and beyond stay correct).
std::string format_change_bytes(uint64_t from, uint64_t to);
// Exact bytes with separators: 538968064 -> "538,968,064 B".
std::string format_exact_bytes(uint64_t bytes);
// Nanoseconds since the start of a trace: "0 ns", "812 us", "41.3 ms", "3.58 s".
std::string format_duration_ns(uint64_t ns);
// Thousands separators: 538968064 -> "538,968,064"; negative numbers keep their sign.
std::string with_commas(int64_t v);
std::string with_commas_u(uint64_t v);
// Percentage change with a sign and one decimal ("-13.6%"); "n/a" when base is 0 and v != 0.
std::string format_percent(int64_t delta, uint64_t base);
// Escapes &, <, >, " and ' for HTML/XML text and attribute values.
std::string xml_escape(std::string_view s);
// Escapes | and newlines so a value fits in one Markdown table cell.
std::string md_cell(std::string_view s);

}  // namespace moeprof::reports
