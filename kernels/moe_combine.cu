#include "kernels/moe_combine.cuh"

namespace moeprof::kern {
namespace {

constexpr int kMaxK = 32;

// One block per token; each thread owns columns c, c + blockDim, ...
__global__ void moe_combine_kernel(const uint16_t* g2, int64_t ld_g2, const int32_t* e2p, const float* w, int64_t ld_w,
                                   const uint16_t* shared, int64_t ld_shared, int64_t k, int64_t H, uint16_t* out,
                                   int64_t ld_out) {
  __shared__ int64_t rows[kMaxK];
  __shared__ float weights[kMaxK];
  const int64_t t = blockIdx.x;
  if (threadIdx.x < k) {
    rows[threadIdx.x] = e2p[t * k + threadIdx.x];
    weights[threadIdx.x] = w[t * ld_w + threadIdx.x];
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < H; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      if (rows[j] < 0) continue;
      acc = __fadd_rn(acc, __fmul_rn(weights[j], bf16_to_f32(g2[rows[j] * ld_g2 + c])));
    }
    const float s = shared ? bf16_to_f32(shared[t * ld_shared + c]) : 0.0f;
    out[t * ld_out + c] = f32_to_bf16(__fadd_rn(acc, s));
  }
}

// The same sums on 16-byte vectors: each thread owns 8 adjacent columns (loads of 8 bf16 per
// gathered row), accumulating in the same j order with the same roundings (bit-identical).
__global__ void moe_combine_vec_kernel(const uint16_t* g2, int64_t ld_g2, const int32_t* e2p, const float* w, int64_t ld_w,
                                       const uint16_t* shared, int64_t ld_shared, int64_t k, int64_t H, uint16_t* out,
                                       int64_t ld_out) {
  __shared__ int64_t rows[kMaxK];
  __shared__ float weights[kMaxK];
  const int64_t t = blockIdx.x;
  if (threadIdx.x < k) {
    rows[threadIdx.x] = e2p[t * k + threadIdx.x];
    weights[threadIdx.x] = w[t * ld_w + threadIdx.x];
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < H / 8; c += blockDim.x) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = 0; j < k; ++j) {
      if (rows[j] < 0) continue;
      float g[8];
      bf16x8_unpack(*(reinterpret_cast<const uint4*>(g2 + rows[j] * ld_g2) + c), g);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] = __fadd_rn(acc[e], __fmul_rn(weights[j], g[e]));
    }
    if (shared) {
      float s[8];
      bf16x8_unpack(*(reinterpret_cast<const uint4*>(shared + t * ld_shared) + c), s);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] = __fadd_rn(acc[e], s[e]);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] = __fadd_rn(acc[e], 0.0f);
    }
    *(reinterpret_cast<uint4*>(out + t * ld_out) + c) = bf16x8_pack(acc);
  }
}

}  // namespace

cudaError_t launch_moe_combine(const uint16_t* gemm2_out, int64_t ld_g2, const int32_t* expanded_to_permuted,
                               const float* topk_weights, int64_t ld_w, const uint16_t* shared, int64_t ld_shared,
                               int64_t T, int64_t k, int64_t H, uint16_t* out, int64_t ld_out, cudaStream_t stream) {
  if (k > kMaxK || k <= 0) return cudaErrorInvalidValue;
  if (T <= 0 || H <= 0) return cudaSuccess;
  if (H % 8 == 0 && aligned16(gemm2_out, ld_g2, 2) && aligned16(out, ld_out, 2) &&
      (shared == nullptr || aligned16(shared, ld_shared, 2)))
    moe_combine_vec_kernel<<<static_cast<unsigned>(T), 128, 0, stream>>>(gemm2_out, ld_g2, expanded_to_permuted, topk_weights,
                                                                         ld_w, shared, ld_shared, k, H, out, ld_out);
  else
    moe_combine_kernel<<<static_cast<unsigned>(T), 256, 0, stream>>>(gemm2_out, ld_g2, expanded_to_permuted, topk_weights,
                                                                     ld_w, shared, ld_shared, k, H, out, ld_out);
  return last_launch_error();
}

}  // namespace moeprof::kern
