#include "reports/format.h"

#include <cmath>
#include <cstdio>

#include "core/thousands.h"

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
  // Rounded half up in integers, each unit up to where the next one takes over (999,999 ns is
  // "1.0 ms", not "1000 us"); seconds with thousands separators.
  auto rounded = [ns](uint64_t unit) { return ns / unit + (ns % unit >= unit - unit / 2 ? 1 : 0); };
  if (ns < 1000) return std::to_string(ns) + " ns";
  if (const uint64_t us = rounded(1000); us < 1000) return std::to_string(us) + " us";
  if (const uint64_t tenths_ms = rounded(100000); tenths_ms < 10000)
    return std::to_string(tenths_ms / 10) + "." + std::to_string(tenths_ms % 10) + " ms";
  const uint64_t hundredths_s = rounded(10000000);
  const uint64_t frac = hundredths_s % 100;
  return with_commas_u(hundredths_s / 100) + "." + (frac < 10 ? "0" : "") + std::to_string(frac) + " s";
}

std::string with_commas_u(uint64_t mag) { return group_thousands(mag); }

std::string with_commas(int64_t v) {
  const bool neg = v < 0;
  const uint64_t mag = neg ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v);
  return (neg ? "-" : "") + with_commas_u(mag);
}

std::string format_percent(int64_t delta, uint64_t base) {
  if (delta == 0) return "0.0%";
  if (base == 0) return "n/a";
  // One decimal, the sign of the change, thousands separators ("+20,124.7%").
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f", 100.0 * std::fabs(static_cast<double>(delta)) / static_cast<double>(base));
  const std::string digits(buf);
  const size_t dot = digits.find('.');
  std::string out = delta < 0 ? "-" : "+";
  for (size_t i = 0; i < dot; ++i) {
    if (i > 0 && (dot - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out + digits.substr(dot) + "%";
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
