#include "kernels/rope.cuh"

namespace moeprof::kern {
namespace {

__global__ void rope_kernel(uint16_t* x, int64_t ld_x, int64_t n_heads, int64_t head_stride, int64_t rot_offset,
                            int64_t rot_dim, const int32_t* positions, const float* cos_sin, int64_t ld_cs) {
  const int64_t t = blockIdx.x;
  const int64_t half = rot_dim / 2;
  const float* cs = cos_sin + static_cast<int64_t>(positions[t]) * ld_cs;
  uint16_t* row = x + t * ld_x;
  for (int64_t j = threadIdx.x; j < n_heads * half; j += blockDim.x) {
    const int64_t h = j / half, i = j - h * half;
    uint16_t* p = row + h * head_stride + rot_offset + 2 * i;
    const float x0 = ld_bf16(p), x1 = ld_bf16(p + 1);
    const float c = cs[i], s = cs[half + i];
    p[0] = f32_to_bf16(__fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)));
    p[1] = f32_to_bf16(__fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c)));
  }
}

}  // namespace

cudaError_t launch_rope(uint16_t* x, int64_t ld_x, int64_t T, int64_t n_heads, int64_t head_stride, int64_t rot_offset,
                        int64_t rot_dim, const int32_t* positions, const float* cos_sin, int64_t ld_cs,
                        cudaStream_t stream) {
  if (T <= 0 || n_heads <= 0 || rot_dim <= 0) return cudaSuccess;
  rope_kernel<<<static_cast<unsigned>(T), 128, 0, stream>>>(x, ld_x, n_heads, head_stride, rot_offset, rot_dim, positions,
                                                            cos_sin, ld_cs);
  return last_launch_error();
}

}  // namespace moeprof::kern
