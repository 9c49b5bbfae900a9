#include "reports/format.h"

#include <cmath>
#include <cstdio>

namespace moeprof::reports {

namespace {
// v / 10^k with one decimal, rounded half up, with separators in the integer part; exact in
// integer arithmetic for every uint64_t.
std::string scaled_one_decimal(uint64_t v, uint64_t unit) {
  const uint64_t tenth = unit / 10;
  const uint64_t q = v / tenth, r = v % tenth;
  const uint64_t tenths = q + (r * 2 >= tenth ? 1 : 0);  // no overflow: q <= 2^64 / 10^2
  return with_commas_u(tenths / 10) + "." + std::to_string(tenths % 10);
}
}  // namespace

std::string format_bytes(uint64_t bytes) {
  if (bytes < 1000) return std::to_string(bytes) + " B";
  if (bytes < 999950) return scaled_one_decimal(bytes, 1000) + " kB";
  return scaled_one_decimal(bytes, 1000000) + " MB";
}

std::string format_delta_bytes(int64_t bytes) {
  if (bytes == 0) return "0 B";
  uint64_t mag = bytes < 0 ? static_cast<uint64_t>(-(bytes + 1)) + 1 : static_cast<uint64_t>(bytes);
  return (bytes < 0 ? "-" : "+") + format_bytes(mag);
}

std::string format_change_bytes(uint64_t from, uint64_t to) {
  if (from == to) return "0 B";
  return to > from ? "+" + format_bytes(to - from) : "-" + format_bytes(from - to);
}

std::string format_exact_bytes(uint64_t bytes) { return with_commas_u(bytes) + " B"; }

std::string format_duration_ns(uint64_t ns) {
  char buf[64];
  if (ns < 1000) return std::to_string(ns) + " ns";
  if (ns < 1000000) std::snprintf(buf, sizeof(buf), "%.0f us", double(ns) / 1e3);
  else if (ns < 1000000000) std::snprintf(buf, sizeof(buf), "%.1f ms", double(ns) / 1e6);
  else std::snprintf(buf, sizeof(buf), "%.2f s", double(ns) / 1e9);
  return buf;
}

std::string with_commas_u(uint64_t mag) {
  std::string digits = std::to_string(mag);
  std::string out;
  int n = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (n > 0 && n % 3 == 0) out.push_back(',');
    out.push_back(*it);
    ++n;
  }
  return std::string(out.rbegin(), out.rend());
}

std::string with_commas(int64_t v) {
  const bool neg = v < 0;
  const uint64_t mag = neg ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v);
  return (neg ? "-" : "") + with_commas_u(mag);
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
