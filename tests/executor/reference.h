// Float64 reference helpers for the executor tests (shared by the CPU op tests and the GPU kernel
// tests). Everything here is written independently of kernels/common/fp_formats.h: number
// formats are decoded from their definitions and encoded by searching the decoded value table,
// so a bug in the bit-level encoders cannot hide in both the code and its reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "executor/backend.h"

namespace moeprof::testref {

// ---- number formats ------------------------------------------------------------------------

inline double bf16_value(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Nearest bf16 value to x (ties to the even mantissa), for finite x within the bf16 range.
inline double round_bf16(double x) {
  if (x == 0.0 || !std::isfinite(x)) return x;
  int e;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  const double ulp = std::ldexp(1.0, e - 8);  // 8 significant bits
  const double q = x / ulp;
  double r = std::nearbyint(q);  // default rounding mode: ties to even
  return r * ulp;
}

// FP8 e4m3 (fn): decoded from the definition; NaN for 0x7F / 0xFF.
inline double e4m3_value(uint8_t c) {
  const int sign = c >> 7, exp = (c >> 3) & 0xF, man = c & 7;
  if (exp == 15 && man == 7) return NAN;
  const double mag = exp == 0 ? std::ldexp(man, -9) : std::ldexp(1.0 + man / 8.0, exp - 7);
  return sign ? -mag : mag;
}

// Nearest e4m3 code by table search: ties to the even code, saturating at +-448, zero -> +0
// for +0 and 0x80 for -0.
inline uint8_t e4m3_encode_ref(double x) {
  const bool neg = std::signbit(x);
  const double a = std::fabs(x);
  int best = 0;
  for (int c = 1; c <= 0x7E; ++c) {
    const double d = std::fabs(e4m3_value(static_cast<uint8_t>(c)) - a);
    const double db = std::fabs(e4m3_value(static_cast<uint8_t>(best)) - a);
    if (d < db || (d == db && (c % 2 == 0))) best = c;
  }
  return static_cast<uint8_t>(best | (neg ? 0x80 : 0));
}

inline double e2m1_value(uint8_t code) {
  static const double kMag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const double m = kMag[code & 7];
  return (code & 8) ? -m : m;
}

// Nearest e2m1 code by table search: ties to the even code, saturating at +-6; magnitude 0 -> +0.
inline uint8_t e2m1_encode_ref(double x) {
  const double a = std::fabs(x);
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const double d = std::fabs(e2m1_value(static_cast<uint8_t>(c)) - a);
    const double db = std::fabs(e2m1_value(static_cast<uint8_t>(best)) - a);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  if (best == 0) return 0;
  return static_cast<uint8_t>(best | (x < 0 ? 8 : 0));
}

// Correctly rounded fp32 quotient of two fp32 values (double rounding through float64 is exact
// for division since 53 >= 2 * 24 + 2).
inline double f32_div(double a, double b) { return static_cast<float>(a / b); }
inline double f32_mul(double a, double b) { return static_cast<float>(a * b); }

// NVFP4 quantization of one row, following backend.h: s = e4m3(amax / fp32(6 gs)),
// q = e2m1(fp32(x / fp32(s gs))); blocks with s == 0 get codes 0. codes: one per element.
struct Nvfp4Row {
  std::vector<uint8_t> codes;   // one code per element (unpacked)
  std::vector<uint8_t> scales;  // one e4m3 per 16 elements
};
inline Nvfp4Row quantize_nvfp4_ref(const std::vector<double>& x, double gs) {
  Nvfp4Row r;
  const size_t n = x.size();
  r.codes.assign(n, 0);
  r.scales.assign(n / 16, 0);
  const double six_gs = f32_mul(6.0, gs);
  for (size_t b = 0; b < n / 16; ++b) {
    double amax = 0;
    for (size_t i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(x[16 * b + i]));
    const uint8_t s = e4m3_encode_ref(f32_div(amax, six_gs));
    r.scales[b] = s;
    const double sf = e4m3_value(s);
    if (sf == 0) continue;
    const double denom = f32_mul(sf, gs);
    for (size_t i = 0; i < 16; ++i) r.codes[16 * b + i] = e2m1_encode_ref(f32_div(x[16 * b + i], denom));
  }
  return r;
}

// Dequantized value e2m1 * e4m3 of element i of a packed NVFP4 row (without the global scale).
inline double nvfp4_element(const uint8_t* packed, const uint8_t* scales, int64_t i) {
  const uint8_t byte = packed[i / 2];
  const uint8_t code = (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
  return e2m1_value(code) * e4m3_value(scales[i / 16]);
}

inline double silu(double x) { return x / (1.0 + std::exp(-x)); }

// ---- random data -----------------------------------------------------------------------------

// Random bf16 bit patterns of values uniform in [-a, a], never exactly zero.
inline std::vector<uint16_t> random_bf16(std::mt19937_64& rng, size_t n, double a) {
  std::uniform_real_distribution<double> d(-a, a);
  std::vector<uint16_t> v(n);
  for (auto& h : v) {
    float f = static_cast<float>(round_bf16(d(rng)));
    if (f == 0.0f) f = static_cast<float>(a / 64);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    h = static_cast<uint16_t>(u >> 16);  // exact: f is a bf16 value
  }
  return v;
}

inline std::vector<float> random_f32(std::mt19937_64& rng, size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<float> v(n);
  for (auto& f : v) f = static_cast<float>(d(rng));
  return v;
}

// ---- tensors through any backend ---------------------------------------------------------------

template <typename T>
Tensor upload(Backend& b, DType dt, int64_t rows, int64_t cols, const std::vector<T>& host,
              const std::string& name = "test") {
  auto t = b.empty(dt, rows, cols, AllocTag{name, "test", Category::kActivation});
  if (!t.is_ok()) return Tensor();
  Tensor out = std::move(t).value();
  if (static_cast<size_t>(out.bytes()) != host.size() * sizeof(T)) return Tensor();
  if (!b.copy_from_host(out, host.data()).is_ok()) return Tensor();
  return out;
}

inline Tensor empty(Backend& b, DType dt, int64_t rows, int64_t cols, const std::string& name = "out") {
  auto t = b.empty(dt, rows, cols, AllocTag{name, "test", Category::kActivation});
  return t.is_ok() ? std::move(t).value() : Tensor();
}

template <typename T>
std::vector<T> download(Backend& b, const Tensor& t) {
  std::vector<T> host(static_cast<size_t>(t.bytes() / sizeof(T)));
  if (!b.copy_to_host(t, host.data()).is_ok()) host.clear();
  (void)b.synchronize();
  return host;
}

// Overwrites every byte of t (contiguous) with `byte`.
inline bool fill_bytes(Backend& b, Tensor& t, uint8_t byte) {
  std::vector<uint8_t> host(t.bytes(), byte);
  return b.copy_from_host(t, host.data()).is_ok();
}

// Raw bytes of t (row by row for views).
inline std::vector<uint8_t> bytes_of(Backend& b, const Tensor& t) { return download<uint8_t>(b, t); }

}  // namespace moeprof::testref
