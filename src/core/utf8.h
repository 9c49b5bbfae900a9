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

}  // namespace moeprof
