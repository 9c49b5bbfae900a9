// Shared pieces of the CUDA kernels: the launch-error convention and small device helpers.
// Launchers are framework-free: `cudaError_t launch_<op>(typed pointers, sizes, strides, stream)`.
// bf16 tensors cross the launcher boundary as `uint16_t*` (raw bits), FP8 e4m3 and packed FP4 as
// `uint8_t*`, so the headers compile with any host compiler.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

// Returns early from a launcher when a CUDA call fails.
#define KERN_RETURN_IF_ERROR(expr)           \
  do {                                       \
    const cudaError_t _kern_err = (expr);    \
    if (_kern_err != cudaSuccess) return _kern_err; \
  } while (0)

#if defined(__CUDACC__)
#include <cuda_bf16.h>

#include "kernels/common/fp_formats.h"
#include "kernels/common/random.h"

namespace moeprof::kern {

// Status of the launch just made (configuration errors surface here; faults surface later).
inline cudaError_t last_launch_error() { return cudaGetLastError(); }

inline unsigned int ceil_div_u(int64_t a, int64_t b) { return static_cast<unsigned int>((a + b - 1) / b); }

__device__ __forceinline__ float ld_bf16(const uint16_t* p) { return bf16_to_f32(*p); }
__device__ __forceinline__ void st_bf16(uint16_t* p, float v) { *p = f32_to_bf16(v); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// `scratch` holds >= 33 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < nwarps ? scratch[lane] : 0.0f;
    s = warp_sum(s);
    if (lane == 0) scratch[32] = s;
  }
  __syncthreads();
  const float r = scratch[32];
  __syncthreads();
  return r;
}

// exp with (almost always) correct fp32 rounding, so results that must match the CPU reference
// bit for bit (router scores) do not depend on CUDA's 2-ulp expf.
__device__ __forceinline__ float exp_accurate(float x) { return static_cast<float>(exp(static_cast<double>(x))); }

// D = A * B + C on bf16 tensor cores, m16n8k16, fp32 accumulation. Fragment layout (g = lane / 4,
// q = lane % 4): a0 (row g, k 2q..2q+1), a1 (row g+8, same k), a2 (row g, k 2q+8..), a3 (row g+8,
// k 2q+8..); b0 (k 2q..2q+1, col g), b1 (k 2q+8.., col g); c0,c1 (row g, cols 2q, 2q+1), c2,c3 (row g+8).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats -> packed bf16x2 (lo in the low half = lower address), round to nearest even.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(f32_to_bf16(lo)) | (static_cast<uint32_t>(f32_to_bf16(hi)) << 16);
}
// The same by the hardware conversion (sm_80+): the same bits for every non-NaN value (subnormals and
// overflow to infinity included); a NaN comes out as the canonical NaN, not pack_bf16x2's
// payload-keeping quiet NaN.
__device__ __forceinline__ uint32_t cvt_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Eight bf16 in one 16-byte word (element i at bits 16*(i%2) of word i/2, i.e. memory order).
__device__ __forceinline__ void bf16x8_unpack(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}
__device__ __forceinline__ uint4 bf16x8_pack(const float (&f)[8]) {
  return make_uint4(pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]), pack_bf16x2(f[4], f[5]), pack_bf16x2(f[6], f[7]));
}
// W consecutive bf16 at p: one 16-byte access for W == 8 (p 16-byte aligned), else element by
// element. The element kernels of the memory-bound ops are their W = 1 instances, the 16-byte
// paths W = 8: the same arithmetic per element either way.
template <int W>
__device__ __forceinline__ void load_bf16(const uint16_t* p, float (&f)[W]) {
  if constexpr (W == 8) {
    bf16x8_unpack(*reinterpret_cast<const uint4*>(p), f);
  } else {
#pragma unroll
    for (int i = 0; i < W; ++i) f[i] = bf16_to_f32(p[i]);
  }
}
template <int W>
__device__ __forceinline__ void store_bf16(uint16_t* p, const float (&f)[W]) {
  if constexpr (W == 8) {
    *reinterpret_cast<uint4*>(p) = bf16x8_pack(f);
  } else {
#pragma unroll
    for (int i = 0; i < W; ++i) p[i] = f32_to_bf16(f[i]);
  }
}
// True when p is 16-byte aligned and a row stride of ld elements keeps every row so.
inline bool aligned16(const void* p, int64_t ld_elems, int elem_bytes) {
  return (reinterpret_cast<uintptr_t>(p) % 16 == 0) && ((ld_elems * elem_bytes) % 16 == 0);
}

}  // namespace moeprof::kern
#endif
