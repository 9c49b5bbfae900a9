// Small text helpers shared by the Markdown, HTML, gate and CLI writers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace moeprof::reports {

// Decimal units as the docs use them: 234881024 -> "234.9 MB"; below 1 kB: "512 B".
std::string format_bytes(uint64_t bytes);
// Signed, with an explicit sign: "+539.0 MB", "-1.2 kB", "0 B".
std::string format_delta_bytes(int64_t bytes);
// Thousands separators: 538968064 -> "538,968,064"; negative numbers keep their sign.
std::string with_commas(int64_t v);
// Percentage change with a sign and one decimal ("-13.6%"); "n/a" when base is 0 and v != 0.
std::string format_percent(int64_t delta, uint64_t base);
// Escapes &, <, >, " and ' for HTML/XML text and attribute values.
std::string xml_escape(std::string_view s);
// Escapes | and newlines so a value fits in one Markdown table cell.
std::string md_cell(std::string_view s);

}  // namespace moeprof::reports
