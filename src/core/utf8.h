// UTF-8 validity for text that ends up in JSON (run names, file names, NVTX ranges, pickled
// strings): nlohmann::json refuses to serialize invalid UTF-8, so every string that comes from
// outside moeprof passes through one of these before it reaches a report.
#pragma once

#include <string>
#include <string_view>

namespace moeprof {

// True when `s` is well-formed UTF-8 (no overlong forms, no surrogates, at most U+10FFFF).
bool is_valid_utf8(std::string_view s);
// `s` with every byte that does not start a well-formed sequence replaced by U+FFFD.
std::string valid_utf8(std::string_view s);
// `s` for a one-line message: valid UTF-8 (as valid_utf8), control characters as \xNN, at most
// `max_chars` characters (then "..."). Values read from input are shown through this.
std::string printable(std::string_view s, size_t max_chars = 80);

}  // namespace moeprof
