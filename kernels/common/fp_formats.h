// Scalar number formats shared by the CPU reference backend and the CUDA kernels:
// bf16, FP8 e4m3 (the "fn" variant: no infinities, max 448) and FP4 e2m1.
// All encoders round to nearest, ties to even. Tested exhaustively in tests/executor/nvfp4_test.cpp.
#pragma once
#include <cstdint>
#include <cstring>

#include "hostdev.h"

namespace moeprof::kern {

MOEPROF_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
MOEPROF_HD float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// ---- bf16 ---------------------------------------------------------------------------------
MOEPROF_HD uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7FFFu + lsb;
  return static_cast<uint16_t>(u >> 16);
}
MOEPROF_HD float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }
MOEPROF_HD float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// ---- FP8 e4m3 (fn) -------------------------------------------------------------------------
// 1 sign, 4 exponent (bias 7), 3 mantissa; max normal 448 (0x7E), NaN 0x7F; min normal 2^-6,
// subnormals k * 2^-9.
MOEPROF_HD float e4m3_to_f32(uint8_t v) {
  const uint32_t sign = v >> 7, exp = (v >> 3) & 0xF, man = v & 0x7;
  float mag;
  if (exp == 0xF && man == 0x7) {
    mag = bits_f32(0x7FC00000u);  // NaN
  } else if (exp == 0) {
    mag = static_cast<float>(man) * (1.0f / 512.0f);
  } else {
    mag = bits_f32(((exp + 120u) << 23) | (man << 20));  // 2^(exp-7) * (1 + man/8)
  }
  return sign ? -mag : mag;
}

// Saturating encode (values beyond 448 become 448; NaN stays NaN).
MOEPROF_HD uint8_t f32_to_e4m3(float f) {
  uint32_t u = f32_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  u &= 0x7FFFFFFFu;
  if (u > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7F);
  const float a = bits_f32(u);
  if (a >= 448.0f) return static_cast<uint8_t>(sign | 0x7E);
  if (a < 0.015625f) {
    // Subnormal range: multiples of 2^-9. a * 512 is exact; round to nearest even integer.
    const float s = a * 512.0f;
    uint32_t k = static_cast<uint32_t>(s);
    const float rem = s - static_cast<float>(k);
    if (rem > 0.5f || (rem == 0.5f && (k & 1u))) ++k;
    return static_cast<uint8_t>(sign | k);  // k == 8 is the smallest normal (exp 1, man 0)
  }
  // Normal: keep 3 mantissa bits, round to nearest even on the 20 dropped bits.
  const uint32_t lsb = (u >> 20) & 1u;
  u += 0x7FFFFu + lsb;
  const uint32_t exp = (u >> 23) - 120u;  // rebias 127 -> 7
  const uint32_t man = (u >> 20) & 0x7u;
  uint32_t code = (exp << 3) | man;
  if (code > 0x7E) code = 0x7E;  // rounding up past 448 saturates
  return static_cast<uint8_t>(sign | code);
}

// ---- FP4 e2m1 ------------------------------------------------------------------------------
// Codes 0..7: 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign.
MOEPROF_HD float e2m1_to_f32(uint8_t code) {
  const uint8_t m = code & 0x7;
  const float mag = m < 4 ? 0.5f * static_cast<float>(m) : (m == 4 ? 2.0f : (m == 5 ? 3.0f : (m == 6 ? 4.0f : 6.0f)));
  return (code & 0x8) ? -mag : mag;
}

// Round to nearest e2m1 value, ties to the even code; saturates at 6. A result of magnitude 0 is
// encoded as +0 (code 0).
MOEPROF_HD uint8_t f32_to_e2m1(float f) {
  const bool neg = f < 0.0f;
  const float a = neg ? -f : f;
  uint8_t m;
  if (!(a == a)) return 0x7;  // NaN -> saturate (never produced by finite inputs)
  if (a <= 0.25f) m = 0;          // tie 0.25 -> 0 (even)
  else if (a < 0.75f) m = 1;
  else if (a <= 1.25f) m = 2;     // tie 0.75 -> 1.0 (even code 2); tie 1.25 -> 1.0
  else if (a < 1.75f) m = 3;
  else if (a <= 2.5f) m = 4;      // tie 1.75 -> 2 (code 4); tie 2.5 -> 2
  else if (a < 3.5f) m = 5;
  else if (a <= 5.0f) m = 6;      // tie 3.5 -> 4 (code 6); tie 5 -> 4
  else m = 7;
  if (m == 0) return 0;
  return static_cast<uint8_t>(m | (neg ? 0x8 : 0x0));
}

// ---- e2m1 code of a quotient, without the division ------------------------------------------
// f32_to_e2m1(x / d) for a block of values sharing d, computed from seven thresholds of d: the code
// is the number of e2m1 decision boundaries that fl32(x / d) passes. fl32(q) <= b holds exactly when
// q <= b+ (b+ the midpoint between b and the next float; at the midpoint round-to-even picks b, whose
// last mantissa bit is 0 for every boundary here), and fl32(q) < b exactly when q < b- (the
// midpoint below). With q = |x| / d and d > 0 that is |x| <= d * b+ and |x| < d * b-; b+- have 25
// significant bits and d 24, so d * b+- is exact in double, and a float a compares with a real B as
// a > B <=> a > RD32(B) and a >= B <=> a >= RU32(B). The code is found by a binary search over the
// seven thresholds (three compares), which needs them strictly increasing: true for 2^-100 <= d <=
// 2^100 (e2m1_thresholds_ok; every product is then a normal float and neighbouring boundaries are
// at least 1.4x apart), which covers every e4m3 scale times any global scale the model uses; other
// d take the division. tests/executor/nvfp4_test.cpp checks it against the division for every bf16
// x and many d.
struct E2m1Thresholds {
  float t[7];  // |x| passes boundary i when |x| > t[i] (i even) or |x| >= t[i] (i odd)
};
MOEPROF_HD bool e2m1_thresholds_ok(float d) { return d >= 0x1p-100f && d <= 0x1p100f; }
MOEPROF_HD float f64_to_f32_down(double v) {
#if defined(__CUDA_ARCH__)
  return __double2float_rd(v);
#else
  float f = static_cast<float>(v);
  if (static_cast<double>(f) > v) f = bits_f32(f > 0.0f ? f32_bits(f) - 1u : (f < 0.0f ? f32_bits(f) + 1u : 0x80000001u));
  return f;
#endif
}
MOEPROF_HD float f64_to_f32_up(double v) { return -f64_to_f32_down(-v); }
MOEPROF_HD E2m1Thresholds e2m1_thresholds(float d) {
  // The boundaries 0.25 (<=), 0.75 (<), 1.25 (<=), 1.75 (<), 2.5 (<=), 3.5 (<), 5 (<=), each moved
  // by half a float ulp to the midpoint on the side that decides.
  constexpr double kB[7] = {0.25 + 0x1p-26, 0.75 - 0x1p-25, 1.25 + 0x1p-24, 1.75 - 0x1p-24,
                            2.5 + 0x1p-23,  3.5 - 0x1p-23,  5.0 + 0x1p-22};
  E2m1Thresholds th;
  const double dd = static_cast<double>(d);
  for (int i = 0; i < 7; ++i) th.t[i] = (i % 2 == 0) ? f64_to_f32_down(kB[i] * dd) : f64_to_f32_up(kB[i] * dd);
  return th;
}
// = f32_to_e2m1(x / d) when e2m1_thresholds_ok(d), th = e2m1_thresholds(d). Branch-free: passing
// boundary 3 decides m >= 4, then boundary 5 or 1 decides bit 1, then boundary 6, 4, 2 or 0 bit 0
// (the passes are monotone in i because the thresholds increase).
MOEPROF_HD uint8_t e2m1_of_quotient(float x, const E2m1Thresholds& th) {
  const float a = x < 0.0f ? -x : x;
  const bool b2 = a >= th.t[3];
  const bool b1 = a >= (b2 ? th.t[5] : th.t[1]);
  const bool b0 = a > (b2 ? (b1 ? th.t[6] : th.t[4]) : (b1 ? th.t[2] : th.t[0]));
  const uint32_t m = (b2 ? 4u : 0u) | (b1 ? 2u : 0u) | (b0 ? 1u : 0u);
  const uint32_t code = m | (x < 0.0f && m != 0u ? 0x8u : 0u);  // -0 codes as 0
  return static_cast<uint8_t>(a == a ? code : 0x7u);                // NaN, as f32_to_e2m1
}

// The same codes for two bf16 values at once, from the bit patterns (fp4_quantize, whose inputs are
// bf16). For non-negative floats the order of the values is the order of their bit patterns, and a
// bf16 a passes a float threshold t exactly when a > RD_bf16(t) (a >= RD_bf16(t) + 1 as patterns) or
// a >= RU_bf16(t), so each threshold becomes one 15-bit pattern, kept in both halves of a word.
// e2m1x2_of_bf16x2 compares the two magnitudes of a word (element 0 in the low half) with all of
// them at once: (|a| | 0x8000) - t has bit 15 set exactly when |a| >= t, and cannot borrow from the
// other half. The search is e2m1_of_quotient's; NaN (|a| > 0x7F80) passes every threshold (code 7)
// and takes no sign; a code of magnitude 0 takes no sign. Result: element 0's code in bits 0..3,
// element 1's in bits 16..19. Needs e2m1_thresholds_ok(d), as e2m1_of_quotient (thresholds below
// 2^103, far under the NaN patterns).
struct E2m1ThresholdsBf16x2 {
  uint32_t t[7];  // pattern in both halves: |a| passes boundary i when its pattern >= it
};
MOEPROF_HD E2m1ThresholdsBf16x2 e2m1_thresholds_bf16x2(const E2m1Thresholds& th) {
  E2m1ThresholdsBf16x2 r;
  for (int i = 0; i < 7; ++i) {
    const uint32_t b = f32_bits(th.t[i]);  // positive: RD to bf16 is truncation
    const uint32_t h = (i % 2 == 0) ? (b >> 16) + 1u : (b + 0xFFFFu) >> 16;
    r.t[i] = h | (h << 16);
  }
  return r;
}
MOEPROF_HD uint32_t e2m1x2_of_bf16x2(uint32_t w, const E2m1ThresholdsBf16x2& th) {
  constexpr uint32_t kTop = 0x80008000u;
  const uint32_t a = w & 0x7FFF7FFFu;
  const uint32_t aa = a | kTop;
  const uint32_t b2 = (aa - th.t[3]) & kTop;
  const uint32_t m2 = (b2 >> 15) * 0xFFFFu;  // all ones in the halves that passed
  const uint32_t b1 = (aa - ((th.t[5] & m2) | (th.t[1] & ~m2))) & kTop;
  const uint32_t m1 = (b1 >> 15) * 0xFFFFu;
  const uint32_t t_hi = (th.t[6] & m1) | (th.t[4] & ~m1), t_lo = (th.t[2] & m1) | (th.t[0] & ~m1);
  const uint32_t b0 = (aa - ((t_hi & m2) | (t_lo & ~m2))) & kTop;
  const uint32_t m = (b2 >> 13) | (b1 >> 14) | (b0 >> 15);  // 0..7 in each half
  const uint32_t nan = (aa - 0x7F817F81u) & kTop;
  const uint32_t neg = w & kTop & ~nan;
  const uint32_t nonzero = (m + 0x00070007u) & 0x00080008u;
  return m | ((neg >> 12) & nonzero);
}

// Packs two codes: element 0 in the low nibble.
MOEPROF_HD uint8_t pack_e2m1(uint8_t lo, uint8_t hi) { return static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4)); }

// NVFP4 block scale for a block with max |x| = amax and tensor global scale gs.
MOEPROF_HD uint8_t nvfp4_block_scale(float amax, float gs) { return f32_to_e4m3(amax / (6.0f * gs)); }

}  // namespace moeprof::kern
