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
#endif

}  // namespace moeprof::kern
