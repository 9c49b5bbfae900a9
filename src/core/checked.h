// Checked arithmetic for sizes, byte counts and element counts: the one helper every layer uses
// where a product or a sum of values that come from input (a config, a trace, a report, a CSV)
// could wrap. Every function reports overflow instead of wrapping; none throws or aborts.
//
// The byte limit: every byte figure moeprof reads or derives (an allocation, live bytes, churn,
// a peak, a tolerance) is at most kMaxBytes = 2^63 - 1, so the difference of any two figures is an
// exact int64 and no negation overflows. Inputs beyond it are bad input (docs/robustness.md).
// C++17-compatible (CUDA sources include it).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <type_traits>

namespace moeprof {

inline constexpr uint64_t kMaxBytes = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// a * b, a + b, a - b in T; std::nullopt when the exact result does not fit T.
template <typename T>
constexpr std::optional<T> checked_mul(T a, T b) {
  static_assert(std::is_integral_v<T>);
  T r{};
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
template <typename T>
constexpr std::optional<T> checked_add(T a, T b) {
  static_assert(std::is_integral_v<T>);
  T r{};
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}
template <typename T>
constexpr std::optional<T> checked_sub(T a, T b) {
  static_assert(std::is_integral_v<T>);
  T r{};
  if (__builtin_sub_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The product of non-negative int64 factors, std::nullopt when a factor is negative or the product
// exceeds `limit` (rows * cols * element size of a tensor, shapes of a rank).
inline std::optional<int64_t> checked_product(std::initializer_list<int64_t> factors,
                                              int64_t limit = std::numeric_limits<int64_t>::max()) {
  int64_t p = 1;
  for (int64_t f : factors) {
    if (f < 0) return std::nullopt;
    if (__builtin_mul_overflow(p, f, &p)) return std::nullopt;
  }
  if (p > limit) return std::nullopt;
  return p;
}

// Byte sums bounded by kMaxBytes: add() returns false (and leaves `total` unchanged) when the sum
// would exceed the limit.
inline bool add_bytes(uint64_t& total, uint64_t b) {
  if (b > kMaxBytes || total > kMaxBytes - b) return false;
  total += b;
  return true;
}

// Rounds v up to a multiple of a (a <= 1: v); std::nullopt when the result does not fit uint64_t.
constexpr std::optional<uint64_t> checked_align_up(uint64_t v, uint64_t a) {
  if (a <= 1) return v;
  const uint64_t rem = v % a;
  if (rem == 0) return v;
  return checked_add<uint64_t>(v, a - rem);
}

// The exact difference to - from of two figures within kMaxBytes (always representable; beyond
// the limit the result is modulo 2^64, never undefined).
constexpr int64_t bytes_delta(uint64_t from, uint64_t to) { return static_cast<int64_t>(to - from); }

// |d| as uint64_t, defined for every int64_t (also INT64_MIN).
constexpr uint64_t magnitude(int64_t d) { return d < 0 ? 0 - static_cast<uint64_t>(d) : static_cast<uint64_t>(d); }

}  // namespace moeprof
