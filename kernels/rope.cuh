// Interleaved rotary position embedding (DeepSeek MLA style), in place on bf16 rows.
#pragma once
#include "kernels/common.cuh"

namespace moeprof::kern {

// For each token t and head h < n_heads, on columns h*head_stride + rot_offset + [0, rot_dim):
//   (x[2i], x[2i+1]) <- (x0*c - x1*s, x0*s + x1*c), c = cos_sin[pos[t], i], s = cos_sin[pos[t], rot_dim/2 + i]
// (products and sums rounded separately, no FMA). cos_sin is [max_pos, ld_cs] f32.
cudaError_t launch_rope(uint16_t* x, int64_t ld_x, int64_t T, int64_t n_heads, int64_t head_stride, int64_t rot_offset,
                        int64_t rot_dim, const int32_t* positions, const float* cos_sin, int64_t ld_cs,
                        cudaStream_t stream);

}  // namespace moeprof::kern
