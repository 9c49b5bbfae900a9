#include "kernels/rmsnorm.cuh"

namespace moeprof::kern {
namespace {

constexpr int kThreads = 256;

// One block per row. The row is read twice (sum of squares, then normalize); for fused add the
// bf16-rounded residual is written first and re-read, so the norm sees exactly the stored value.
// The fallback for rows that are not 16-byte vectors (H % 8 != 0, odd strides, H > 8192). Fused
// add with out == nullptr writes the norm back into x, else into out.
template <bool kFusedAdd>
__global__ void __launch_bounds__(kThreads) rmsnorm_kernel(uint16_t* x, int64_t ld_x, uint16_t* residual, int64_t ld_res,
                                                           const uint16_t* w, int64_t H, float eps, uint16_t* out,
                                                           int64_t ld_out) {
  __shared__ float scratch[33];
  const int64_t t = blockIdx.x;
  uint16_t* xr = x + t * ld_x;
  const uint16_t* src = xr;
  if constexpr (kFusedAdd) {
    uint16_t* rr = residual + t * ld_res;
    for (int64_t c = threadIdx.x; c < H; c += blockDim.x) rr[c] = f32_to_bf16(__fadd_rn(ld_bf16(xr + c), ld_bf16(rr + c)));
    __syncthreads();
    src = rr;
  }
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < H; c += blockDim.x) {
    const float v = ld_bf16(src + c);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(H) + eps);
  uint16_t* o = kFusedAdd && out == nullptr ? xr : out + t * ld_out;
  for (int64_t c = threadIdx.x; c < H; c += blockDim.x) {
    const float v = ld_bf16(src + c);
    o[c] = f32_to_bf16(__fmul_rn(__fmul_rn(v, r), ld_bf16(w + c)));
  }
}

// Vectorized rows: 16-byte loads and stores (8 bf16), the row held in registers between the sum
// of squares and the scaling, so it is read once and written once (fused: x and residual read
// once, both written once). kTpr threads per row (32, 64 or 128), 128 / kTpr rows per block, at
// most kMaxVec vectors per thread (H <= 8192). Same per-element arithmetic as the fallback
// (bf16(x + r) with __fadd_rn; bf16((v * r) * w) with __fmul_rn); only the order of the
// sum of squares differs.
constexpr int kVecThreads = 128;
constexpr int kMaxVec = 8;

template <bool kFusedAdd, int kTpr>
__global__ void __launch_bounds__(kVecThreads) rmsnorm_vec_kernel(uint16_t* x, int64_t ld_x, uint16_t* residual,
                                                                  int64_t ld_res, const uint16_t* w, int64_t T, int64_t H,
                                                                  float eps, uint16_t* out, int64_t ld_out) {
  constexpr int kRows = kVecThreads / kTpr;
  __shared__ float partial[kRows][kTpr / 32];
  const int sub = threadIdx.x / kTpr, lt = threadIdx.x % kTpr;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRows + sub;
  const bool active = t < T;
  const int nvec = static_cast<int>(H / 8);
  uint4 v[kMaxVec];
  float ss = 0.0f;
  if (active) {
    const uint16_t* xr = x + t * ld_x;
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i) {
      const int c = lt + i * kTpr;
      if (c < nvec) {
        uint4 a = *reinterpret_cast<const uint4*>(xr + 8 * c);
        float f[8];
        if constexpr (kFusedAdd) {
          uint4* rp = reinterpret_cast<uint4*>(residual + t * ld_res + 8 * c);
          float fa[8], fr[8];
          bf16x8_unpack(a, fa);
          bf16x8_unpack(*rp, fr);
#pragma unroll
          for (int e = 0; e < 8; ++e) f[e] = __fadd_rn(fa[e], fr[e]);
          a = bf16x8_pack(f);
          *rp = a;
        }
        bf16x8_unpack(a, f);
#pragma unroll
        for (int e = 0; e < 8; ++e) ss += f[e] * f[e];
        v[i] = a;
      }
    }
  }
  ss = warp_sum(ss);
  if constexpr (kTpr > 32) {
    if ((lt & 31) == 0) partial[sub][lt / 32] = ss;
    __syncthreads();
    ss = 0.0f;
#pragma unroll
    for (int i = 0; i < kTpr / 32; ++i) ss += partial[sub][i];
  }
  if (!active) return;
  const float r = 1.0f / sqrtf(ss / static_cast<float>(H) + eps);
  uint16_t* o = kFusedAdd && out == nullptr ? x + t * ld_x : out + t * ld_out;
#pragma unroll
  for (int i = 0; i < kMaxVec; ++i) {
    const int c = lt + i * kTpr;
    if (c < nvec) {
      float f[8], fw[8];
      bf16x8_unpack(v[i], f);
      bf16x8_unpack(*reinterpret_cast<const uint4*>(w + 8 * c), fw);
#pragma unroll
      for (int e = 0; e < 8; ++e) f[e] = __fmul_rn(__fmul_rn(f[e], r), fw[e]);
      *reinterpret_cast<uint4*>(o + 8 * c) = bf16x8_pack(f);
    }
  }
}

// Threads per row for the vector path (0: use the fallback).
int vec_threads_per_row(int64_t H) {
  if (H % 8 != 0) return 0;
  const int64_t nvec = H / 8;
  for (int tpr : {32, 64, 128})
    if (nvec <= static_cast<int64_t>(tpr) * kMaxVec) return tpr;
  return 0;
}

template <bool kFusedAdd>
cudaError_t launch_any(uint16_t* x, int64_t ld_x, uint16_t* residual, int64_t ld_res, const uint16_t* w, int64_t T,
                       int64_t H, float eps, uint16_t* out, int64_t ld_out, cudaStream_t stream) {
  const int tpr = vec_threads_per_row(H);
  const bool vec = tpr > 0 && aligned16(x, ld_x, 2) && aligned16(w, 0, 2) &&
                   (!kFusedAdd || aligned16(residual, ld_res, 2)) && (out == nullptr || aligned16(out, ld_out, 2));
  if (!vec) {
    rmsnorm_kernel<kFusedAdd><<<static_cast<unsigned>(T), kThreads, 0, stream>>>(x, ld_x, residual, ld_res, w, H, eps, out,
                                                                                ld_out);
    return last_launch_error();
  }
  const unsigned blocks = ceil_div_u(T, kVecThreads / tpr);
  if (tpr == 32)
    rmsnorm_vec_kernel<kFusedAdd, 32><<<blocks, kVecThreads, 0, stream>>>(x, ld_x, residual, ld_res, w, T, H, eps, out, ld_out);
  else if (tpr == 64)
    rmsnorm_vec_kernel<kFusedAdd, 64><<<blocks, kVecThreads, 0, stream>>>(x, ld_x, residual, ld_res, w, T, H, eps, out, ld_out);
  else
    rmsnorm_vec_kernel<kFusedAdd, 128><<<blocks, kVecThreads, 0, stream>>>(x, ld_x, residual, ld_res, w, T, H, eps, out, ld_out);
  return last_launch_error();
}

}  // namespace

cudaError_t launch_rmsnorm(const uint16_t* x, int64_t ld_x, const uint16_t* w, int64_t T, int64_t H, float eps,
                           uint16_t* out, int64_t ld_out, cudaStream_t stream) {
  if (T <= 0 || H <= 0) return cudaSuccess;
  return launch_any<false>(const_cast<uint16_t*>(x), ld_x, nullptr, 0, w, T, H, eps, out, ld_out, stream);
}

cudaError_t launch_fused_add_rmsnorm(uint16_t* x, int64_t ld_x, uint16_t* residual, int64_t ld_res, const uint16_t* w,
                                     int64_t T, int64_t H, float eps, cudaStream_t stream) {
  if (T <= 0 || H <= 0) return cudaSuccess;
  return launch_any<true>(x, ld_x, residual, ld_res, w, T, H, eps, nullptr, 0, stream);
}

cudaError_t launch_add_rmsnorm(const uint16_t* x, int64_t ld_x, uint16_t* residual, int64_t ld_res, const uint16_t* w,
                               int64_t T, int64_t H, float eps, uint16_t* out, int64_t ld_out, cudaStream_t stream) {
  if (T <= 0 || H <= 0) return cudaSuccess;
  if (out == nullptr) return cudaErrorInvalidValue;
  return launch_any<true>(const_cast<uint16_t*>(x), ld_x, residual, ld_res, w, T, H, eps, out, ld_out, stream);
}

}  // namespace moeprof::kern
