#include "reports/format.h"

#include <cmath>
#include <cstdio>

namespace moeprof::reports {

std::string format_bytes(uint64_t bytes) {
  static const char* kUnits[] = {"kB", "MB", "GB", "TB", "PB"};
  if (bytes < 1000) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1000.0 && u < 4) {
    v /= 1000.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  return buf;
}

std::string format_delta_bytes(int64_t bytes) {
  if (bytes == 0) return "0 B";
  uint64_t mag = bytes < 0 ? static_cast<uint64_t>(-(bytes + 1)) + 1 : static_cast<uint64_t>(bytes);
  return (bytes < 0 ? "-" : "+") + format_bytes(mag);
}

std::string with_commas(int64_t v) {
  bool neg = v < 0;
  uint64_t mag = neg ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v);
  std::string digits = std::to_string(mag);
  std::string out;
  int n = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (n > 0 && n % 3 == 0) out.push_back(',');
    out.push_back(*it);
    ++n;
  }
  if (neg) out.push_back('-');
  return std::string(out.rbegin(), out.rend());
}

std::string format_percent(int64_t delta, uint64_t base) {
  if (delta == 0) return "0.0%";
  if (base == 0) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%+.1f%%", 100.0 * static_cast<double>(delta) / static_cast<double>(base));
  return buf;
}

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        // XML 1.0 forbids most control characters, even escaped.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' && c != '\r') out += '?';
        else out.push_back(c);
    }
  }
  return out;
}

std::string md_cell(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n' || c == '\r') out.push_back(' ');
    else out.push_back(c);
  }
  return out;
}

}  // namespace moeprof::reports
