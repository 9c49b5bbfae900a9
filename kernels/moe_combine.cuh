// Weighted combine of the expert outputs back to token order (bit-exact: no FMA, fixed order).
#pragma once
#include "kernels/common.cuh"

namespace moeprof::kern {

// out[t, n] = bf16(acc + shared[t, n]) with acc = 0, then acc = acc + w[t, j] * g2[e2p[t*k + j], n]
// for j = 0..k-1 (rounded multiply, then add). e2p < 0 contributes nothing; shared may be null.
cudaError_t launch_moe_combine(const uint16_t* gemm2_out, int64_t ld_g2, const int32_t* expanded_to_permuted,
                               const float* topk_weights, int64_t ld_w, const uint16_t* shared, int64_t ld_shared,
                               int64_t T, int64_t k, int64_t H, uint16_t* out, int64_t ld_out, cudaStream_t stream);

}  // namespace moeprof::kern
