// NVFP4 and its scalar formats: bf16, FP8 e4m3 and FP4 e2m1 encoders/decoders
// (kernels/common/fp_formats.h), CpuBackend::fp4_quantize and the FP4 expert GEMMs against an
// independent float64 reference (tests/executor/reference.h). Tolerances are stated per test and
// collected in docs/nvfp4.md.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <random>
#include <vector>

#include "executor/backends.h"
#include "kernels/common/fp4_tiled.h"
#include "kernels/common/fp_formats.h"
#include "tests/executor/reference.h"

using namespace moeprof;
using namespace moeprof::testref;

namespace {

float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t bits_from_f32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float next_up(float f) { return std::nextafter(f, std::numeric_limits<float>::infinity()); }
float next_down(float f) { return std::nextafter(f, -std::numeric_limits<float>::infinity()); }

}  // namespace

// ---- e2m1 ------------------------------------------------------------------------------------

TEST_CASE("e2m1: all 16 codes decode to the e2m1 table and encode back", "[nvfp4][e2m1]") {
  const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (uint8_t c = 0; c < 16; ++c) {
    const float v = kern::e2m1_to_f32(c);
    CHECK(std::fabs(v) == mags[c & 7]);
    CHECK(std::signbit(v) == ((c & 8) != 0));
    CHECK(v == e2m1_value(c));
    // Every value encodes back to its code, except -0 which is stored as +0.
    CHECK(kern::f32_to_e2m1(v) == (c == 8 ? 0 : c));
  }
}

TEST_CASE("e2m1: rounding boundaries, ties to even, saturation, sign", "[nvfp4][e2m1]") {
  struct Tie {
    float x;
    uint8_t code;
  };
  // Midpoints between adjacent values: ties go to the even code.
  const Tie ties[] = {{0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4}, {3.5f, 6}, {5.0f, 6}};
  for (const auto& t : ties) {
    INFO("x = " << t.x);
    CHECK(kern::f32_to_e2m1(t.x) == t.code);
    CHECK(kern::f32_to_e2m1(-t.x) == (t.code == 0 ? 0 : (t.code | 8)));
    // Just above / below a midpoint: the nearer value wins.
    const uint8_t above = kern::f32_to_e2m1(next_up(t.x)), below = kern::f32_to_e2m1(next_down(t.x));
    CHECK(e2m1_value(above) > t.x);
    CHECK(e2m1_value(below) < t.x);
    CHECK(above == e2m1_encode_ref(next_up(t.x)));
    CHECK(below == e2m1_encode_ref(next_down(t.x)));
  }
  // Saturation above 6.
  for (float x : {6.0f, 6.5f, 7.0f, 100.0f, 1e30f, std::numeric_limits<float>::infinity()}) {
    CHECK(kern::f32_to_e2m1(x) == 7);
    CHECK(kern::f32_to_e2m1(-x) == 15);
  }
  // Small negatives round to magnitude 0 and are stored as +0.
  CHECK(kern::f32_to_e2m1(-0.0f) == 0);
  CHECK(kern::f32_to_e2m1(-0.1f) == 0);
  CHECK(kern::f32_to_e2m1(-0.25f) == 0);
  CHECK(kern::f32_to_e2m1(next_down(-0.25f)) == 9);  // -0.25000003 -> -0.5
  // Dense sweep against the table-search reference.
  for (int i = -8000; i <= 8000; ++i) {
    const float x = static_cast<float>(i) / 1000.0f;
    REQUIRE(kern::f32_to_e2m1(x) == e2m1_encode_ref(x));
  }
}

// The CUDA quantizers code x / d without dividing (e2m1_of_quotient): it must equal
// f32_to_e2m1(x / d) for every bf16 x, at the scales the kernels see (e4m3 codes times global
// scales), at random d of every exponent, and where x / d lies within a few ulps of a decision
// boundary or of the midpoints round-to-nearest-even decides (d = x / b and its float neighbours).
TEST_CASE("e2m1 of a quotient without division equals f32_to_e2m1(x / d)", "[nvfp4][e2m1]") {
  std::vector<float> ds;
  for (float gs : {1.0f, 12.0f / (6.0f * 448.0f), 4.0f / (6.0f * 448.0f), 3.1e-3f, 0.7f, 1.9e-5f})
    for (int c = 1; c < 0x7F; ++c) ds.push_back(kern::e4m3_to_f32(static_cast<uint8_t>(c)) * gs);
  std::mt19937 rng(20261130);
  std::uniform_int_distribution<uint32_t> bits(1u, 0x7F7FFFFFu);  // positive finite floats, subnormals included
  for (int i = 0; i < 300; ++i) ds.push_back(f32_from_bits(bits(rng)));
  for (float d : {std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(), 1.0f,
                  std::numeric_limits<float>::max()})
    ds.push_back(d);
  int64_t checked = 0, mismatched = 0;
  auto check = [&](float x, float d) {
    if (!kern::e2m1_thresholds_ok(d)) return;
    const uint8_t want = kern::f32_to_e2m1(x / d);
    const uint8_t got = kern::e2m1_of_quotient(x, kern::e2m1_thresholds(d));
    ++checked;
    if (want != got && ++mismatched <= 5) FAIL_CHECK("x " << x << " d " << d << ": " << int(got) << " != " << int(want));
  };
  for (float d : ds) {
    if (!kern::e2m1_thresholds_ok(d)) continue;  // the quantizers divide there
    const kern::E2m1Thresholds th = kern::e2m1_thresholds(d);
    for (uint32_t h = 0; h < 0x10000u; ++h) {
      const float x = kern::bf16_to_f32(static_cast<uint16_t>(h));
      const uint8_t want = kern::f32_to_e2m1(x / d);
      ++checked;
      if (kern::e2m1_of_quotient(x, th) != want && ++mismatched <= 5)
        FAIL_CHECK("x " << x << " d " << d << ": " << int(kern::e2m1_of_quotient(x, th)) << " != " << int(want));
    }
  }
  // Adversarial: d chosen so that x / d falls on (or a few ulps around) a boundary b or the
  // float midpoints next to it; bf16 x (what the kernels quantize) and full-precision float x
  // (which reach the midpoints exactly, e.g. above 0.25, where no bf16 x can).
  std::vector<float> xs;
  for (uint32_t h = 1; h < 0x7F80u; h += 3) xs.push_back(kern::bf16_to_f32(static_cast<uint16_t>(h)));
  std::uniform_int_distribution<uint32_t> mant(0x700000u, 0x7FFFFFu);  // upper part of the binade
  std::uniform_int_distribution<uint32_t> expo(1u, 250u);
  for (int i = 0; i < 20000; ++i) xs.push_back(f32_from_bits((expo(rng) << 23) | mant(rng)));
  for (const float x : xs) {
    for (double b : {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0}) {
      const float fb = static_cast<float>(b);
      for (double target : {b, (b + next_up(fb)) / 2, (b + next_down(fb)) / 2}) {
        float d = static_cast<float>(static_cast<double>(x) / target);
        for (int k = 0; k < 3; ++k) d = next_down(d);
        for (int k = 0; k < 7; ++k, d = next_up(d)) {
          check(x, d);
          check(-x, d);
        }
      }
    }
  }
  CHECK(mismatched == 0);
  CHECK(checked > 50'000'000);
}

// The packed bf16 form (two elements per word, fp4_quantize's GPU path) gives e2m1_of_quotient's
// codes for every bf16 pattern in either half (NaN, infinities, -0, subnormals included), with a
// pseudo-random pattern in the other half, at the scales the kernels see and at random ones.
TEST_CASE("e2m1 of two bf16 at once equals e2m1_of_quotient for each", "[nvfp4][e2m1]") {
  std::vector<float> ds;
  for (float gs : {1.0f, 12.0f / (6.0f * 448.0f), 3.1e-3f, 1.9e-5f})
    for (int c = 1; c < 0x7F; c += 3) ds.push_back(kern::e4m3_to_f32(static_cast<uint8_t>(c)) * gs);
  std::mt19937 rng(20261201);
  std::uniform_int_distribution<uint32_t> bits(0x0D800000u, 0x717FFFFFu);  // 2^-100 .. 2^100
  for (int i = 0; i < 60; ++i) ds.push_back(f32_from_bits(bits(rng)));
  ds.push_back(0x1p-100f);
  ds.push_back(0x1p100f);
  int64_t checked = 0, mismatched = 0;
  for (float d : ds) {
    REQUIRE(kern::e2m1_thresholds_ok(d));
    const kern::E2m1Thresholds th = kern::e2m1_thresholds(d);
    const kern::E2m1ThresholdsBf16x2 th2 = kern::e2m1_thresholds_bf16x2(th);
    for (uint32_t h = 0; h < 0x10000u; ++h) {
      const uint32_t other = (h * 40503u + 0x3F80u) & 0xFFFFu;  // a different pattern each time
      for (const uint32_t w : {h | (other << 16), other | (h << 16)}) {
        const uint32_t got = kern::e2m1x2_of_bf16x2(w, th2);
        const uint8_t want0 = kern::e2m1_of_quotient(kern::bf16_to_f32(static_cast<uint16_t>(w & 0xFFFFu)), th);
        const uint8_t want1 = kern::e2m1_of_quotient(kern::bf16_to_f32(static_cast<uint16_t>(w >> 16)), th);
        ++checked;
        if (((got & 0xFFF0FFF0u) != 0 || (got & 0xFu) != want0 || ((got >> 16) & 0xFu) != want1) && ++mismatched <= 5)
          FAIL_CHECK("w " << std::hex << w << " d " << d << ": " << got << " != " << int(want0) << "/" << int(want1));
      }
    }
  }
  CHECK(mismatched == 0);
  CHECK(checked > 20'000'000);
}

// The fast path covers what the kernels see: every nonzero finite e4m3 scale times global scales
// from 2^-40 to 2^40 (the seed model's are near 1e-2 .. 1e-5), and its thresholds increase.
TEST_CASE("e2m1 thresholds: the fast path covers every e4m3 scale and its thresholds increase", "[nvfp4][e2m1]") {
  for (int c = 1; c < 0x7F; ++c)
    for (int ex = -40; ex <= 40; ex += 5) {
      const float d = kern::e4m3_to_f32(static_cast<uint8_t>(c)) * std::ldexp(1.0f, ex);
      INFO("code " << c << " gs 2^" << ex);
      REQUIRE(kern::e2m1_thresholds_ok(d));
      const kern::E2m1Thresholds th = kern::e2m1_thresholds(d);
      for (int i = 0; i + 1 < 7; ++i) REQUIRE(th.t[i] < th.t[i + 1]);
    }
  CHECK_FALSE(kern::e2m1_thresholds_ok(0.0f));
  CHECK_FALSE(kern::e2m1_thresholds_ok(std::numeric_limits<float>::denorm_min()));
  CHECK_FALSE(kern::e2m1_thresholds_ok(std::numeric_limits<float>::infinity()));
  CHECK_FALSE(kern::e2m1_thresholds_ok(std::numeric_limits<float>::quiet_NaN()));
}

TEST_CASE("e2m1: pack puts element 0 in the low nibble", "[nvfp4][e2m1]") {
  for (uint8_t lo = 0; lo < 16; ++lo)
    for (uint8_t hi = 0; hi < 16; ++hi) {
      const uint8_t b = kern::pack_e2m1(lo, hi);
      CHECK((b & 0xF) == lo);
      CHECK((b >> 4) == hi);
    }
}

// ---- e4m3 ------------------------------------------------------------------------------------

TEST_CASE("e4m3: all 256 codes decode per the definition and round-trip", "[nvfp4][e4m3]") {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    const float v = kern::e4m3_to_f32(code);
    if ((c & 0x7F) == 0x7F) {
      CHECK(std::isnan(v));
      CHECK((kern::f32_to_e4m3(v) & 0x7F) == 0x7F);  // NaN stays NaN
      continue;
    }
    INFO("code " << c);
    CHECK(static_cast<double>(v) == e4m3_value(code));
    CHECK(kern::f32_to_e4m3(v) == code);  // includes -0 (0x80)
  }
  CHECK(kern::e4m3_to_f32(0x7E) == 448.0f);
  CHECK(kern::e4m3_to_f32(0x08) == 0.015625f);     // min normal 2^-6
  CHECK(kern::e4m3_to_f32(0x01) == 0.001953125f);  // min subnormal 2^-9
}

TEST_CASE("e4m3: midpoints between adjacent codes round to the even code", "[nvfp4][e4m3]") {
  // Adjacent positive codes c, c+1 (0 .. 0x7E); midpoints computed from the decoded table.
  for (int c = 0; c < 0x7E; ++c) {
    const double lo = e4m3_value(static_cast<uint8_t>(c)), hi = e4m3_value(static_cast<uint8_t>(c + 1));
    const float mid = static_cast<float>((lo + hi) / 2);
    REQUIRE(static_cast<double>(mid) == (lo + hi) / 2);  // exact in fp32
    const uint8_t even = static_cast<uint8_t>(c % 2 == 0 ? c : c + 1);
    INFO("between codes " << c << " and " << c + 1 << ", mid " << mid);
    CHECK(kern::f32_to_e4m3(mid) == even);
    CHECK(kern::f32_to_e4m3(-mid) == (even | 0x80));
    CHECK(kern::f32_to_e4m3(next_up(mid)) == c + 1);
    CHECK(kern::f32_to_e4m3(next_down(mid)) == c);
    CHECK(kern::f32_to_e4m3(next_down(mid)) == e4m3_encode_ref(next_down(mid)));
  }
}

TEST_CASE("e4m3: subnormals and saturation at 448", "[nvfp4][e4m3]") {
  for (int k = 0; k <= 8; ++k) CHECK(kern::f32_to_e4m3(std::ldexp(static_cast<float>(k), -9)) == k);
  CHECK(kern::f32_to_e4m3(std::ldexp(1.0f, -10)) == 0);      // tie 0 / 2^-9 -> 0
  CHECK(kern::f32_to_e4m3(std::ldexp(3.0f, -10)) == 2);      // tie 1 / 2 -> 2
  CHECK(kern::f32_to_e4m3(std::ldexp(1.0f, -12)) == 0);
  CHECK(kern::f32_to_e4m3(std::ldexp(15.0f, -10)) == 8);     // tie 7 / 8 (2^-6) -> 8
  for (float x : {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, std::numeric_limits<float>::infinity()}) {
    CHECK(kern::f32_to_e4m3(x) == 0x7E);
    CHECK(kern::f32_to_e4m3(-x) == 0xFE);
  }
  CHECK(kern::f32_to_e4m3(432.0f) == 0x7E);             // tie 416 / 448 -> 448 (even mantissa)
  CHECK(kern::f32_to_e4m3(next_down(432.0f)) == 0x7D);  // just below -> 416
  // Dense sweep against the reference (positive and negative, covering all binades).
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> e(-12, 9.5);
  for (int i = 0; i < 200000; ++i) {
    const float x = static_cast<float>(std::exp2(e(rng))) * (i % 2 ? -1.0f : 1.0f);
    REQUIRE(kern::f32_to_e4m3(x) == e4m3_encode_ref(x));
  }
}

// ---- bf16 ------------------------------------------------------------------------------------

TEST_CASE("bf16: round to nearest even, NaN and overflow", "[nvfp4][bf16]") {
  CHECK(kern::f32_to_bf16(f32_from_bits(0x3F808000u)) == 0x3F80);  // tie, even stays
  CHECK(kern::f32_to_bf16(f32_from_bits(0x3F818000u)) == 0x3F82);  // tie, odd rounds up
  CHECK(kern::f32_to_bf16(f32_from_bits(0x3F808001u)) == 0x3F81);  // just above the tie
  CHECK(kern::f32_to_bf16(f32_from_bits(0x3F807FFFu)) == 0x3F80);  // just below
  CHECK(kern::f32_to_bf16(f32_from_bits(0xBF818000u)) == 0xBF82);  // negative tie
  CHECK(kern::f32_to_bf16(f32_from_bits(0x7F7FFFFFu)) == 0x7F80);  // rounds to +inf
  CHECK(kern::f32_to_bf16(std::numeric_limits<float>::infinity()) == 0x7F80);
  const uint16_t nan = kern::f32_to_bf16(std::numeric_limits<float>::quiet_NaN());
  CHECK(((nan & 0x7F80) == 0x7F80 && (nan & 0x7F) != 0));
  // A signalling NaN whose payload is only in the low bits must stay NaN.
  const uint16_t snan = kern::f32_to_bf16(f32_from_bits(0x7F800001u));
  CHECK(((snan & 0x7F80) == 0x7F80 && (snan & 0x7F) != 0));
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> d(-1e4, 1e4);
  for (int i = 0; i < 100000; ++i) {
    const float f = static_cast<float>(d(rng));
    REQUIRE(static_cast<double>(kern::round_bf16(f)) == round_bf16(f));
  }
  (void)bits_from_f32;
}

// ---- NVFP4 quantization (CpuBackend::fp4_quantize) --------------------------------------------

namespace {

// Quantizes host bf16 rows [T, K] with the CPU backend; returns (packed codes, scales).
struct Quantized {
  std::vector<uint8_t> codes;   // [T, K/2]
  std::vector<uint8_t> scales;  // [T, K/16]
};
Quantized cpu_quantize(Backend& b, const std::vector<uint16_t>& x, int64_t T, int64_t K, float gs) {
  Tensor xt = upload(b, DType::kBF16, T, K, x);
  Tensor out = empty(b, DType::kFP4x2, T, K / 2), sc = empty(b, DType::kE4M3, T, K / 16);
  REQUIRE(b.fp4_quantize(xt, gs, out, sc).is_ok());
  return {download<uint8_t>(b, out), download<uint8_t>(b, sc)};
}

uint16_t bf16_bits(float f) { return kern::f32_to_bf16(f); }

}  // namespace

TEST_CASE("fp4_quantize: random rows match the float64 reference bit for bit", "[nvfp4][quantize]") {
  auto b = make_cpu_backend();
  std::mt19937_64 rng(11);
  const int64_t T = 37, K = 272;
  for (float gs : {1.0f, 0.0123f, 3.7f}) {
    auto x = random_bf16(rng, static_cast<size_t>(T * K), 20.0);
    // Give some blocks a much smaller magnitude (scales in the e4m3 subnormal range).
    for (int64_t i = 0; i < 16; ++i) x[static_cast<size_t>(5 * K + 32 + i)] = bf16_bits(1e-4f * static_cast<float>(i + 1));
    const auto q = cpu_quantize(*b, x, T, K, gs);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> row(static_cast<size_t>(K));
      for (int64_t i = 0; i < K; ++i) row[static_cast<size_t>(i)] = bf16_value(x[static_cast<size_t>(t * K + i)]);
      const auto ref = quantize_nvfp4_ref(row, gs);
      for (int64_t blk = 0; blk < K / 16; ++blk)
        REQUIRE(q.scales[static_cast<size_t>(t * K / 16 + blk)] == ref.scales[static_cast<size_t>(blk)]);
      for (int64_t i = 0; i < K; ++i) {
        const uint8_t byte = q.codes[static_cast<size_t>(t * K / 2 + i / 2)];
        const uint8_t code = i % 2 == 0 ? (byte & 0xF) : (byte >> 4);
        INFO("gs " << gs << " row " << t << " element " << i);
        REQUIRE(code == ref.codes[static_cast<size_t>(i)]);
      }
    }
  }
}

TEST_CASE("fp4_quantize: zero blocks, scale at the e4m3 limit, nibble order, sign", "[nvfp4][quantize]") {
  auto b = make_cpu_backend();
  const int64_t K = 64;
  std::vector<float> v(static_cast<size_t>(K), 0.0f);
  // Block 0: all zeros -> scale 0, codes 0.
  // Block 1: amax 2688 with gs 1 -> amax / 6 = 448 exactly: scale 0x7E, amax codes +-6.
  v[16] = 2688.0f;
  v[17] = -2688.0f;
  v[18] = 448.0f;  // 448 / 448 = 1 -> code 2
  v[19] = 672.0f;  // 1.5 -> code 3
  // Block 2: amax 2720 > 6 * 448: the scale saturates at 448 and 2720 / 448 = 6.07 saturates to 6.
  v[32] = 2720.0f;
  v[33] = -1.0f;
  // Block 3: amax 6 -> scale 1: codes are the values themselves; checks the nibble order.
  const float b3[16] = {0.5f, 1.0f, -1.5f, 2.0f, 3.0f, -4.0f, 6.0f, 0.0f, -0.5f, 0.25f, 0.75f, 1.25f, -1.75f, 2.5f, 3.5f, 5.0f};
  for (int i = 0; i < 16; ++i) v[static_cast<size_t>(48 + i)] = b3[i];
  std::vector<uint16_t> x(static_cast<size_t>(K));
  for (int64_t i = 0; i < K; ++i) x[static_cast<size_t>(i)] = bf16_bits(v[static_cast<size_t>(i)]);
  const auto q = cpu_quantize(*b, x, 1, K, 1.0f);

  CHECK(q.scales[0] == 0);
  for (int i = 0; i < 8; ++i) CHECK(q.codes[static_cast<size_t>(i)] == 0);
  CHECK(q.scales[1] == 0x7E);
  CHECK(q.codes[8] == kern::pack_e2m1(7, 15));  // +6, -6
  CHECK(q.codes[9] == kern::pack_e2m1(2, 3));   // 1, 1.5
  for (int i = 10; i < 16; ++i) CHECK(q.codes[static_cast<size_t>(i)] == 0);
  CHECK(q.scales[2] == 0x7E);
  CHECK((q.codes[16] & 0xF) == 7);  // saturated
  CHECK((q.codes[16] >> 4) == 0);   // -1/448 rounds to magnitude 0, stored +0
  CHECK(kern::e4m3_to_f32(q.scales[3]) == 1.0f);
  const uint8_t expect3[16] = {1, 2, 11, 4, 5, 14, 7, 0, 9, 0, 2, 2, 12, 4, 6, 6};
  for (int i = 0; i < 8; ++i) {
    INFO("block 3 byte " << i);
    CHECK(q.codes[static_cast<size_t>(24 + i)] == (expect3[2 * i] | (expect3[2 * i + 1] << 4)));
  }
}

TEST_CASE("fp4_quantize: a block whose scale underflows e4m3 gets codes 0", "[nvfp4][quantize]") {
  auto b = make_cpu_backend();
  std::vector<uint16_t> x(16, bf16_bits(1e-6f));
  const auto q = cpu_quantize(*b, x, 1, 16, 1.0f);  // 1e-6 / 6 < 2^-10: scale rounds to 0
  CHECK(q.scales[0] == 0);
  for (uint8_t c : q.codes) CHECK(c == 0);
}

// ---- FP4 expert GEMMs ------------------------------------------------------------------------

namespace {

struct MoeCase {
  int64_t T, H, I, E, k, tile;
  std::vector<int32_t> ids;  // [T, k]
};

// Builds a routing where experts listed in `empty_experts` never receive a token.
std::vector<int32_t> make_ids(std::mt19937_64& rng, int64_t T, int64_t k, int64_t E, const std::vector<int>& empty_experts) {
  std::vector<int> allowed;
  for (int e = 0; e < E; ++e)
    if (std::find(empty_experts.begin(), empty_experts.end(), e) == empty_experts.end()) allowed.push_back(e);
  std::vector<int32_t> ids(static_cast<size_t>(T * k));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int> pool = allowed;
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int64_t j = 0; j < k; ++j) ids[static_cast<size_t>(t * k + j)] = pool[static_cast<size_t>(j)];
  }
  return ids;
}

}  // namespace

TEST_CASE("moe_gemm1_fp4 / moe_gemm2_fp4 match the float64 reference", "[nvfp4][gemm]") {
  auto bp = make_cpu_backend();
  Backend& b = *bp;
  std::mt19937_64 rng(2024);
  const int64_t T = 37, H = 272, I = 80, E = 6, k = 3, tile = 8;
  const int64_t P = T * k + E * (tile - 1);
  const auto ids = make_ids(rng, T, k, E, {2, 5});
  const float a_gs = 0.02f, out_gs = 0.5f, h_gs = out_gs;

  // Activations: random bf16 quantized by the backend (checked bit-exact above).
  Tensor x = upload(b, DType::kBF16, T, H, random_bf16(rng, static_cast<size_t>(T * H), 3.0));
  Tensor a = empty(b, DType::kFP4x2, T, H / 2), a_sc = empty(b, DType::kE4M3, T, H / 16);
  REQUIRE(b.fp4_quantize(x, a_gs, a, a_sc).is_ok());
  // Weights: random codes, scales in [0.05, 1.5] (e4m3), per-expert global scales.
  Tensor w13 = empty(b, DType::kFP4x2, E * 2 * I, H / 2), w13_sc = empty(b, DType::kE4M3, E * 2 * I, H / 16);
  Tensor w2 = empty(b, DType::kFP4x2, E * H, I / 2), w2_sc = empty(b, DType::kE4M3, E * H, I / 16);
  REQUIRE(b.init_bytes(w13, 1).is_ok());
  REQUIRE(b.init_e4m3(w13_sc, 2, 0.05f, 1.5f).is_ok());
  REQUIRE(b.init_bytes(w2, 3).is_ok());
  REQUIRE(b.init_e4m3(w2_sc, 4, 0.05f, 1.5f).is_ok());
  const std::vector<float> w13_gs_h = {0.011f, 0.02f, 0.5f, 0.013f, 0.017f, 1.0f};
  const std::vector<float> w2_gs_h = {0.03f, 0.021f, 0.5f, 0.04f, 0.025f, 1.0f};
  Tensor w13_gs = upload(b, DType::kF32, 1, E, w13_gs_h), w2_gs = upload(b, DType::kF32, 1, E, w2_gs_h);

  Tensor ids_t = upload(b, DType::kI32, T, k, ids);
  Tensor offsets = empty(b, DType::kI32, 1, E + 1), p2t = empty(b, DType::kI32, 1, P), e2p = empty(b, DType::kI32, 1, T * k);
  REQUIRE(b.moe_permute(ids_t, E, tile, offsets, p2t, e2p, Tensor()).is_ok());

  // Outputs start poisoned with two different patterns: both runs must agree (every byte written).
  Tensor h = empty(b, DType::kFP4x2, P, I / 2), h_sc = empty(b, DType::kE4M3, P, I / 16);
  Tensor g2 = empty(b, DType::kBF16, P, H);
  REQUIRE(b.moe_gemm1_fp4(a, a_sc, a_gs, w13, w13_sc, w13_gs, offsets, p2t, out_gs, h, h_sc).is_ok());
  REQUIRE(b.moe_gemm2_fp4(h, h_sc, h_gs, w2, w2_sc, w2_gs, offsets, p2t, g2).is_ok());
  const auto h1 = bytes_of(b, h), hs1 = bytes_of(b, h_sc), g21 = bytes_of(b, g2);
  REQUIRE(fill_bytes(b, h, 0x00));
  REQUIRE(fill_bytes(b, h_sc, 0x33));
  REQUIRE(fill_bytes(b, g2, 0x5A));
  REQUIRE(b.moe_gemm1_fp4(a, a_sc, a_gs, w13, w13_sc, w13_gs, offsets, p2t, out_gs, h, h_sc).is_ok());
  REQUIRE(b.moe_gemm2_fp4(h, h_sc, h_gs, w2, w2_sc, w2_gs, offsets, p2t, g2).is_ok());
  CHECK(bytes_of(b, h) == h1);
  CHECK(bytes_of(b, h_sc) == hs1);
  CHECK(bytes_of(b, g2) == g21);

  const auto a_h = download<uint8_t>(b, a), a_sc_h = download<uint8_t>(b, a_sc);
  const auto w13_h = download<uint8_t>(b, w13), w13_sc_h = download<uint8_t>(b, w13_sc);
  const auto w2_h = download<uint8_t>(b, w2), w2_sc_h = download<uint8_t>(b, w2_sc);
  const auto off = download<int32_t>(b, offsets), p2t_h = download<int32_t>(b, p2t);
  const auto hs_h = download<uint8_t>(b, h_sc);
  const auto g2_h = download<uint16_t>(b, g2);
  REQUIRE(off[2] == off[3]);  // expert 2 has no rows
  REQUIRE(off[5] == off[6]);

  int64_t rows_checked = 0, codes_total = 0, codes_diff = 0, scales_total = 0, scales_diff = 0;
  for (int64_t r = 0; r < P; ++r) {
    const int64_t t = p2t_h[static_cast<size_t>(r)];
    int64_t e = -1;
    for (int64_t i = 0; i < E; ++i)
      if (r >= off[static_cast<size_t>(i)] && r < off[static_cast<size_t>(i + 1)]) e = i;
    if (t < 0 || e < 0) {  // padding and rows past offsets[E]: codes 0, scales 0, gemm2 zeros
      for (int64_t i = 0; i < I / 2; ++i) REQUIRE(h1[static_cast<size_t>(r * I / 2 + i)] == 0);
      for (int64_t i = 0; i < I / 16; ++i) REQUIRE(hs_h[static_cast<size_t>(r * I / 16 + i)] == 0);
      for (int64_t n = 0; n < H; ++n) REQUIRE(g2_h[static_cast<size_t>(r * H + n)] == 0);
      continue;
    }
    ++rows_checked;
    // gemm1 reference in float64 from the exact dequantized operands.
    std::vector<double> acc(static_cast<size_t>(2 * I), 0.0);
    for (int64_t n = 0; n < 2 * I; ++n) {
      const int64_t wr = e * 2 * I + n;
      for (int64_t kk = 0; kk < H; ++kk)
        acc[static_cast<size_t>(n)] += nvfp4_element(&a_h[static_cast<size_t>(t * H / 2)], &a_sc_h[static_cast<size_t>(t * H / 16)], kk) *
                                       nvfp4_element(&w13_h[static_cast<size_t>(wr * H / 2)], &w13_sc_h[static_cast<size_t>(wr * H / 16)], kk);
    }
    const double gs1 = static_cast<double>(a_gs) * w13_gs_h[static_cast<size_t>(e)];
    std::vector<double> href(static_cast<size_t>(I));
    for (int64_t n = 0; n < I; ++n)
      href[static_cast<size_t>(n)] = round_bf16(silu(acc[static_cast<size_t>(n)] * gs1) * acc[static_cast<size_t>(I + n)] * gs1);
    const auto qref = quantize_nvfp4_ref(href, out_gs);
    for (int64_t blk = 0; blk < I / 16; ++blk) {
      const uint8_t s_cpu = hs_h[static_cast<size_t>(r * I / 16 + blk)], s_ref = qref.scales[static_cast<size_t>(blk)];
      ++scales_total;
      if (s_cpu != s_ref) {
        ++scales_diff;
        CHECK(std::abs(int(s_cpu) - int(s_ref)) <= 1);  // adjacent e4m3 codes at most
      }
    }
    for (int64_t n = 0; n < I; ++n) {
      const uint8_t byte = h1[static_cast<size_t>(r * I / 2 + n / 2)];
      const uint8_t code = n % 2 == 0 ? (byte & 0xF) : (byte >> 4);
      ++codes_total;
      if (code != qref.codes[static_cast<size_t>(n)]) ++codes_diff;
      // Dequantized value: within one e2m1 step (at most 2 units of the block scale) of the
      // reference's dequantized value.
      const double deq_cpu = e2m1_value(code) * e4m3_value(hs_h[static_cast<size_t>(r * I / 16 + n / 16)]) * out_gs;
      const double deq_ref = e2m1_value(qref.codes[static_cast<size_t>(n)]) * e4m3_value(qref.scales[static_cast<size_t>(n / 16)]) * out_gs;
      const double unit = e4m3_value(qref.scales[static_cast<size_t>(n / 16)]) * out_gs;
      INFO("gemm1 row " << r << " col " << n);
      CHECK(std::fabs(deq_cpu - deq_ref) <= 2.0 * unit * 1.15 + 1e-30);
    }
    // gemm2 reference in float64 from the backend's own gemm1 codes (the gemm2 input).
    const double gs2 = static_cast<double>(h_gs) * w2_gs_h[static_cast<size_t>(e)];
    for (int64_t n = 0; n < H; ++n) {
      const int64_t wr = e * H + n;
      double s = 0, sabs = 0;
      for (int64_t kk = 0; kk < I; ++kk) {
        const double p = nvfp4_element(&h1[static_cast<size_t>(r * I / 2)], &hs_h[static_cast<size_t>(r * I / 16)], kk) *
                         nvfp4_element(&w2_h[static_cast<size_t>(wr * I / 2)], &w2_sc_h[static_cast<size_t>(wr * I / 16)], kk);
        s += p;
        sabs += std::fabs(p);
      }
      const double ref = s * gs2, got = bf16_value(g2_h[static_cast<size_t>(r * H + n)]);
      // bf16 output: half an ulp (2^-9 relative) plus fp32 accumulation error (I * 2^-24 * sum|p|).
      const double tol = std::ldexp(std::fabs(ref), -8) + 1e-5 * sabs * gs2 + 1e-30;
      INFO("gemm2 row " << r << " col " << n << " ref " << ref << " got " << got);
      REQUIRE(std::fabs(got - ref) <= tol);
    }
  }
  CHECK(rows_checked == T * k);
  INFO("gemm1 codes differing from the reference: " << codes_diff << " / " << codes_total << ", scales: " << scales_diff
                                                     << " / " << scales_total);
  CHECK(codes_diff * 100 <= codes_total);   // <= 1% of codes
  CHECK(scales_diff * 100 <= scales_total);  // <= 1% of block scales
}

// ---- gemm1's tiled w13 layout (kernels/common/fp4_tiled.h) -------------------------------------

// The layout's functions against the kernel's side written out independently: kWgmmaWsRs's
// producer thread pt reads load j of block (e, nt, kt) as items 2j and 2j + 1, item `it` being
// tile row (it * 128 + pt) >> 2 (ws_produce's item mapping) at k16 block pt & 3, and tile row br
// being gate row nt * 128 + br of expert e for br < 128, else up row I + nt * 128 + br - 128
// (weight_row). Every code byte and scale lands on its own offset (a bijection).
TEST_CASE("gemm1 tiled w13 layout: a bijection in the producers' load order", "[nvfp4][layout]") {
  using kern::gemm1_tiled_code_offset;
  using kern::gemm1_tiled_scale_offset;
  CHECK(kern::gemm1_tiled_ok(7168, 512));
  CHECK(kern::gemm1_tiled_ok(64, 128));
  CHECK_FALSE(kern::gemm1_tiled_ok(7168, 192));  // I % 128
  CHECK_FALSE(kern::gemm1_tiled_ok(832 + 16, 256));  // H % 64
  CHECK_FALSE(kern::gemm1_tiled_ok(0, 128));
  for (const auto& [E, H, I] : {std::tuple<int64_t, int64_t, int64_t>{3, 192, 384}, {1, 64, 128}, {2, 7168, 256}}) {
    INFO("E=" << E << " H=" << H << " I=" << I);
    const int64_t rows = E * 2 * I, cb = H / 2, sb = H / 16;
    std::vector<uint8_t> seen(static_cast<size_t>(rows * cb), 0), seen_s(static_cast<size_t>(rows * sb), 0);
    size_t bad = 0;
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t c = 0; c < cb; ++c) {
        const int64_t o = gemm1_tiled_code_offset(row, c, H, I);
        if (o < 0 || o >= rows * cb || seen[static_cast<size_t>(o)]++) ++bad;
      }
      for (int64_t b = 0; b < sb; ++b) {
        const int64_t o = gemm1_tiled_scale_offset(row, b, H, I);
        if (o < 0 || o >= rows * sb || seen_s[static_cast<size_t>(o)]++) ++bad;
      }
    }
    CHECK(bad == 0);
    size_t wrong = 0;
    const int64_t NT = I / 128, KT = H / 64;
    for (int64_t e = 0; e < E; ++e)
      for (int64_t nt = 0; nt < NT; ++nt)
        for (int64_t kt = 0; kt < KT; ++kt) {
          const int64_t block = (e * NT + nt) * KT + kt;
          for (int pt = 0; pt < 128; ++pt)
            for (int it = 0; it < 8; ++it) {
              const int br = (it * 128 + pt) >> 2, kb = pt & 3;
              const int64_t row = e * 2 * I + (br < 128 ? nt * 128 + br : I + nt * 128 + (br - 128));
              for (int b = 0; b < 8; ++b)
                wrong += gemm1_tiled_code_offset(row, kt * 32 + kb * 8 + b, H, I) !=
                         block * 8192 + ((it / 2) * 128 + pt) * 16 + (it % 2) * 8 + b;
              wrong += gemm1_tiled_scale_offset(row, kt * 4 + kb, H, I) != block * 1024 + pt * 8 + it;
            }
        }
    CHECK(wrong == 0);
  }
}

// gemm2's tiled w2 layout, the same way: the persistent kernels' producer thread pt loads items
// 2j, 2j + 1 of its weight items (it = 4..11 of ws_produce's mapping, tile row
// ((it * 128 + pt) >> 2) - 128, k16 block pt & 3) with load j of block (e, nt, kt), and tile row br
// is w2 row e * H + nt * 256 + br (weight_row). K = I here, NT = H / 256 column tiles.
TEST_CASE("gemm2 tiled w2 layout: a bijection in the producers' load order", "[nvfp4][layout]") {
  using kern::gemm2_tiled_code_offset;
  using kern::gemm2_tiled_scale_offset;
  CHECK(kern::gemm2_tiled_ok(512, 7168));
  CHECK(kern::gemm2_tiled_ok(1408, 2048));  // DeepSeek-V2-Lite at TP=1
  CHECK(kern::gemm2_tiled_ok(64, 256));
  CHECK_FALSE(kern::gemm2_tiled_ok(512, 832));   // H % 256
  CHECK_FALSE(kern::gemm2_tiled_ok(1088 + 16, 512));  // I % 64
  CHECK_FALSE(kern::gemm2_tiled_ok(0, 256));
  for (const auto& [E, I, H] : {std::tuple<int64_t, int64_t, int64_t>{3, 192, 768}, {1, 64, 256}, {2, 1088, 512}}) {
    INFO("E=" << E << " I=" << I << " H=" << H);
    const int64_t rows = E * H, cb = I / 2, sb = I / 16;
    std::vector<uint8_t> seen(static_cast<size_t>(rows * cb), 0), seen_s(static_cast<size_t>(rows * sb), 0);
    size_t bad = 0;
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t c = 0; c < cb; ++c) {
        const int64_t o = gemm2_tiled_code_offset(row, c, I, H);
        if (o < 0 || o >= rows * cb || seen[static_cast<size_t>(o)]++) ++bad;
      }
      for (int64_t b = 0; b < sb; ++b) {
        const int64_t o = gemm2_tiled_scale_offset(row, b, I, H);
        if (o < 0 || o >= rows * sb || seen_s[static_cast<size_t>(o)]++) ++bad;
      }
    }
    CHECK(bad == 0);
    size_t wrong = 0;
    const int64_t NT = H / 256, KT = I / 64;
    for (int64_t e = 0; e < E; ++e)
      for (int64_t nt = 0; nt < NT; ++nt)
        for (int64_t kt = 0; kt < KT; ++kt) {
          const int64_t block = (e * NT + nt) * KT + kt;
          for (int pt = 0; pt < 128; ++pt)
            for (int it = 4; it < 12; ++it) {
              const int br = ((it * 128 + pt) >> 2) - 128, kb = pt & 3, wi = it - 4;
              const int64_t row = e * H + nt * 256 + br;
              for (int b = 0; b < 8; ++b)
                wrong += gemm2_tiled_code_offset(row, kt * 32 + kb * 8 + b, I, H) !=
                         block * 8192 + ((wi / 2) * 128 + pt) * 16 + (wi % 2) * 8 + b;
              wrong += gemm2_tiled_scale_offset(row, kt * 4 + kb, I, H) != block * 1024 + pt * 8 + wi;
            }
        }
    CHECK(wrong == 0);
  }
}

// The CPU backend keeps gemm1's weights row-major: init_moe_w13 gives init_bytes' and
// init_e4m3's bytes, at a size the CUDA backend would store tiled and at one it would not.
TEST_CASE("CpuBackend init_moe_w13 equals init_bytes + init_e4m3 (row-major)", "[nvfp4][layout]") {
  auto b = make_cpu_backend();
  for (const auto& [E, H, I] : {std::tuple<int64_t, int64_t, int64_t>{3, 192, 384}, {5, 80, 48}}) {
    INFO("E=" << E << " H=" << H << " I=" << I);
    Tensor w = empty(*b, DType::kFP4x2, E * 2 * I, H / 2), s = empty(*b, DType::kE4M3, E * 2 * I, H / 16);
    Tensor wr = empty(*b, DType::kFP4x2, E * 2 * I, H / 2), sr = empty(*b, DType::kE4M3, E * 2 * I, H / 16);
    REQUIRE(b->init_moe_w13(w, s, E, 1234, 5678, 16.0f, 64.0f).is_ok());
    REQUIRE(b->init_bytes(wr, 1234).is_ok());
    REQUIRE(b->init_e4m3(sr, 5678, 16.0f, 64.0f).is_ok());
    CHECK(download<uint8_t>(*b, w) == download<uint8_t>(*b, wr));
    CHECK(download<uint8_t>(*b, s) == download<uint8_t>(*b, sr));
  }
}

// init_moe_w2 on the CPU backend: init_bytes' and init_e4m3's bytes, row-major.
TEST_CASE("CpuBackend init_moe_w2 equals init_bytes + init_e4m3 (row-major)", "[nvfp4][layout]") {
  auto b = make_cpu_backend();
  for (const auto& [E, I, H] : {std::tuple<int64_t, int64_t, int64_t>{3, 192, 768}, {5, 48, 80}}) {
    INFO("E=" << E << " I=" << I << " H=" << H);
    Tensor w = empty(*b, DType::kFP4x2, E * H, I / 2), s = empty(*b, DType::kE4M3, E * H, I / 16);
    Tensor wr = empty(*b, DType::kFP4x2, E * H, I / 2), sr = empty(*b, DType::kE4M3, E * H, I / 16);
    REQUIRE(b->init_moe_w2(w, s, E, 4321, 8765, 16.0f, 64.0f).is_ok());
    REQUIRE(b->init_bytes(wr, 4321).is_ok());
    REQUIRE(b->init_e4m3(sr, 8765, 16.0f, 64.0f).is_ok());
    CHECK(download<uint8_t>(*b, w) == download<uint8_t>(*b, wr));
    CHECK(download<uint8_t>(*b, s) == download<uint8_t>(*b, sr));
  }
}
