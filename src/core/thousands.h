// Digits grouped by thousands ("150,186,029,056"): how every byte and token count moeprof prints
// reads, in the reports (reports/format.h) and in the executor's own messages.
#pragma once

#include <cstdint>
#include <string>

namespace moeprof {

inline std::string group_thousands(uint64_t v) {
  const std::string d = std::to_string(v);
  std::string out;
  out.reserve(d.size() + d.size() / 3);
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0 && (d.size() - i) % 3 == 0) out += ',';
    out += d[i];
  }
  return out;
}

}  // namespace moeprof
