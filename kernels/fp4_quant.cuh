// NVFP4 quantization of bf16 rows: blocks of 16 along the row, e4m3 block scale, fp32 global
// scale (exact semantics in src/executor/backend.h; bit-exact with the CPU backend).
#pragma once
#include "kernels/common.cuh"

namespace moeprof::kern {

// x [T, K] bf16 (K % 16 == 0) -> out [T, K/2] packed e2m1 (element 2i in the low nibble),
// scales [T, K/16] e4m3.
cudaError_t launch_fp4_quantize(const uint16_t* x, int64_t ld_x, int64_t T, int64_t K, float global_scale, uint8_t* out,
                                int64_t ld_out, uint8_t* scales, int64_t ld_scales, cudaStream_t stream);

#if defined(__CUDACC__)
// Quantizes 16 values (already rounded to what the tensor stores) to 8 packed bytes + a scale.
// s = e4m3(amax / (6 * gs)); q = e2m1(v / (s * gs)); a zero scale (all-zero block) gives codes 0.
// The 16 quotients are not computed: their codes come from thresholds of s * gs (same bits).
__device__ __forceinline__ uint8_t nvfp4_quantize16(const float (&v)[16], float gs, uint8_t (&packed)[8]) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) amax = fmaxf(amax, fabsf(v[i]));
  const uint8_t s = f32_to_e4m3(__fdiv_rn(amax, __fmul_rn(6.0f, gs)));
  const float denom = __fmul_rn(e4m3_to_f32(s), gs);
  if (e2m1_thresholds_ok(denom)) {
    // The codes of v / denom from seven thresholds of denom, bit-identical to dividing
    // (fp_formats.h, e2m1_of_quotient): no division per element.
    const E2m1Thresholds th = e2m1_thresholds(denom);
#pragma unroll
    for (int i = 0; i < 8; ++i) packed[i] = pack_e2m1(e2m1_of_quotient(v[2 * i], th), e2m1_of_quotient(v[2 * i + 1], th));
    return s;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (denom == 0.0f) {
      packed[i] = 0;
    } else {
      packed[i] = pack_e2m1(f32_to_e2m1(__fdiv_rn(v[2 * i], denom)), f32_to_e2m1(__fdiv_rn(v[2 * i + 1], denom)));
    }
  }
  return s;
}

// The 8 code bytes of a block as one 8-byte word (byte i at the i-th lowest address).
__device__ __forceinline__ uint2 pack_codes8(const uint8_t (&packed)[8]) {
  uint2 v;
  v.x = packed[0] | (packed[1] << 8) | (packed[2] << 16) | (static_cast<uint32_t>(packed[3]) << 24);
  v.y = packed[4] | (packed[5] << 8) | (packed[6] << 16) | (static_cast<uint32_t>(packed[7]) << 24);
  return v;
}

// nvfp4_quantize16 for a block of bf16 values given as 8 words of two (element 2i in the low half
// of w[i]); returns the scale and the 8 code bytes as one 8-byte word (byte i at the i-th lowest
// address). The same scale, and the same codes, from packed compares of the bf16 patterns: two
// elements per word and instruction (e2m1x2_of_bf16x2; tests/executor/nvfp4_test.cpp checks it
// for every bf16 pattern against e2m1_of_quotient). Where the thresholds do not apply it takes
// nvfp4_quantize16.
__device__ __forceinline__ uint8_t nvfp4_quantize16_bf16(const uint32_t (&w)[8], float gs, uint2& codes) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    amax = fmaxf(amax, fabsf(__uint_as_float(w[i] << 16)));
    amax = fmaxf(amax, fabsf(__uint_as_float(w[i] & 0xFFFF0000u)));
  }
  const uint8_t s = f32_to_e4m3(__fdiv_rn(amax, __fmul_rn(6.0f, gs)));
  const float denom = __fmul_rn(e4m3_to_f32(s), gs);
  if (e2m1_thresholds_ok(denom)) {
    const E2m1ThresholdsBf16x2 th = e2m1_thresholds_bf16x2(e2m1_thresholds(denom));
    uint32_t half[4];  // code bytes 2j, 2j + 1
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      // codes of elements 4j, 4j+1 in bits 0..3 / 16..19 and 4j+2, 4j+3 in bits 8..11 / 24..27
      const uint32_t t = e2m1x2_of_bf16x2(w[2 * j], th) | (e2m1x2_of_bf16x2(w[2 * j + 1], th) << 8);
      half[j] = (t | (t >> 12)) & 0xFFFFu;
    }
    codes = make_uint2(half[0] | (half[1] << 16), half[2] | (half[3] << 16));
    return s;
  }
  float v[16];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    v[2 * i] = __uint_as_float(w[i] << 16);
    v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
  uint8_t packed[8];
  nvfp4_quantize16(v, gs, packed);
  codes = pack_codes8(packed);
  return s;
}
#endif

}  // namespace moeprof::kern
