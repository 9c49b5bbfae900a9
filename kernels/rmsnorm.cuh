// RMSNorm and fused residual-add + RMSNorm over rows of bf16 (fp32 math, one rounding per store).
#pragma once
#include "kernels/common.cuh"

namespace moeprof::kern {

// out[t, :] = bf16(x * (1 / sqrt(mean(x^2) + eps)) * w); out may alias x.
cudaError_t launch_rmsnorm(const uint16_t* x, int64_t ld_x, const uint16_t* w, int64_t T, int64_t H, float eps,
                           uint16_t* out, int64_t ld_out, cudaStream_t stream);
// residual = bf16(x + residual); x = rmsnorm(residual) (both in place).
cudaError_t launch_fused_add_rmsnorm(uint16_t* x, int64_t ld_x, uint16_t* residual, int64_t ld_res, const uint16_t* w,
                                     int64_t T, int64_t H, float eps, cudaStream_t stream);
// residual = bf16(x + residual); out = rmsnorm(residual); x is only read (out must not overlap x or
// residual). One pass over the rows; where x, residual and out all have 16-byte vector rows it
// gives the bits of launch_add_inplace(residual, x) then launch_rmsnorm(residual, out) (the same
// sums in the same order), elsewhere the same values up to the order of the sum of squares.
cudaError_t launch_add_rmsnorm(const uint16_t* x, int64_t ld_x, uint16_t* residual, int64_t ld_res, const uint16_t* w,
                               int64_t T, int64_t H, float eps, uint16_t* out, int64_t ld_out, cudaStream_t stream);

}  // namespace moeprof::kern
