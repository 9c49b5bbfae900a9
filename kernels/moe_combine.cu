#include "kernels/moe_combine.cuh"

namespace moeprof::kern {
namespace {

constexpr int kMaxK = 32;

// One block per token; each thread owns W adjacent columns (W = 8: 16-byte loads of each gathered
// row), W c .. W c + W - 1 for c = threadIdx.x, threadIdx.x + blockDim, ...; acc = acc + w * g in j
// order, then + shared (or + 0), with __fmul_rn / __fadd_rn: the same bits for both W.
template <int W>
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
  for (int64_t c = threadIdx.x; c < H / W; c += blockDim.x) {
    float acc[W];
#pragma unroll
    for (int e = 0; e < W; ++e) acc[e] = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      if (rows[j] < 0) continue;
      float g[W];
      load_bf16<W>(g2 + rows[j] * ld_g2 + W * c, g);
#pragma unroll
      for (int e = 0; e < W; ++e) acc[e] = __fadd_rn(acc[e], __fmul_rn(weights[j], g[e]));
    }
    float s[W];
    if (shared) {
      load_bf16<W>(shared + t * ld_shared + W * c, s);
    } else {
#pragma unroll
      for (int e = 0; e < W; ++e) s[e] = 0.0f;
    }
#pragma unroll
    for (int e = 0; e < W; ++e) acc[e] = __fadd_rn(acc[e], s[e]);
    store_bf16<W>(out + t * ld_out + W * c, acc);
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
    moe_combine_kernel<8><<<static_cast<unsigned>(T), 128, 0, stream>>>(gemm2_out, ld_g2, expanded_to_permuted, topk_weights,
                                                                        ld_w, shared, ld_shared, k, H, out, ld_out);
  else
    moe_combine_kernel<1><<<static_cast<unsigned>(T), 256, 0, stream>>>(gemm2_out, ld_g2, expanded_to_permuted, topk_weights,
                                                                        ld_w, shared, ld_shared, k, H, out, ld_out);
  return last_launch_error();
}

}  // namespace moeprof::kern
