// SiLU-and-mul and elementwise residual add on bf16.
#pragma once
#include "kernels/common.cuh"

namespace moeprof::kern {

// out[t, i] = bf16(silu(x[t, i]) * x[t, I + i]), silu(g) = g / (1 + exp(-g)).
cudaError_t launch_silu_and_mul(const uint16_t* x, int64_t ld_x, int64_t T, int64_t I, uint16_t* out, int64_t ld_out,
                                cudaStream_t stream);
// dst = bf16(dst + src).
cudaError_t launch_add_inplace(uint16_t* dst, int64_t ld_dst, const uint16_t* src, int64_t ld_src, int64_t rows,
                               int64_t cols, cudaStream_t stream);

}  // namespace moeprof::kern
