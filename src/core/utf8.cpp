#include "core/utf8.h"

#include <cstdint>

namespace moeprof {

namespace {

// Length of the well-formed sequence starting at s[i], or 0.
size_t sequence_length(std::string_view s, size_t i) {
  auto cont = [&](size_t k) { return k < s.size() && (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80; };
  const auto c = static_cast<uint8_t>(s[i]);
  const size_t n = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
  for (size_t k = 1; k < n; ++k)
    if (!cont(i + k)) return 0;
  if (n == 3) {
    const auto c1 = static_cast<uint8_t>(s[i + 1]);
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0)) return 0;  // overlong, surrogates
  }
  if (n == 4) {
    const auto c1 = static_cast<uint8_t>(s[i + 1]);
    if ((c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90)) return 0;  // overlong, > U+10FFFF
  }
  return n;
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = sequence_length(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

std::string printable(std::string_view s, size_t max_chars) {
  std::string out;
  size_t shown = 0;
  for (size_t i = 0; i < s.size() && shown < max_chars; ++shown) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = sequence_length(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else if (c < 0x20 || c == 0x7F) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
    if (shown + 1 == max_chars && i < s.size()) out += "...";
  }
  return out;
}

}  // namespace moeprof
