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

// The same rotation, 4 pairs per thread: one 16-byte load/store of x and float4 loads of cos and
// sin (rot_dim, rot_offset and head_stride multiples of 8; x rows and cos_sin rows 16-byte aligned).
// A block takes `tpb` tokens (enough to give its threads work when a token has few 4-pair groups,
// as the single-head k_pe has); n_heads * groups < 2^24 (checked by the launch).
__global__ void rope_vec_kernel(uint16_t* x, int64_t ld_x, int64_t T, int n_heads, int64_t head_stride, int64_t rot_offset,
                                int rot_dim, const int32_t* positions, const float* cos_sin, int64_t ld_cs, int tpb) {
  const int half = rot_dim / 2, groups = half / 4, items = n_heads * groups;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * tpb;
  for (int jj = threadIdx.x; jj < tpb * items; jj += blockDim.x) {
    const int tl = jj / items, j = jj - tl * items;
    const int64_t t = t0 + tl;
    if (t >= T) break;
    const float* cs = cos_sin + static_cast<int64_t>(positions[t]) * ld_cs;
    const int h = j / groups, g = j - h * groups;
    uint4* p = reinterpret_cast<uint4*>(x + t * ld_x + h * head_stride + rot_offset + 8 * g);
    float f[8];
    bf16x8_unpack(*p, f);
    const float4 c4 = reinterpret_cast<const float4*>(cs)[g];
    const float4 s4 = reinterpret_cast<const float4*>(cs + half)[g];
    const float c[4] = {c4.x, c4.y, c4.z, c4.w}, s[4] = {s4.x, s4.y, s4.z, s4.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float x0 = f[2 * e], x1 = f[2 * e + 1];
      f[2 * e] = __fsub_rn(__fmul_rn(x0, c[e]), __fmul_rn(x1, s[e]));
      f[2 * e + 1] = __fadd_rn(__fmul_rn(x0, s[e]), __fmul_rn(x1, c[e]));
    }
    *p = bf16x8_pack(f);
  }
}

}  // namespace

cudaError_t launch_rope(uint16_t* x, int64_t ld_x, int64_t T, int64_t n_heads, int64_t head_stride, int64_t rot_offset,
                        int64_t rot_dim, const int32_t* positions, const float* cos_sin, int64_t ld_cs,
                        cudaStream_t stream) {
  if (T <= 0 || n_heads <= 0 || rot_dim <= 0) return cudaSuccess;
  const bool vec = rot_dim % 8 == 0 && rot_offset % 8 == 0 && head_stride % 8 == 0 && aligned16(x, ld_x, 2) &&
                   aligned16(cos_sin, ld_cs, 4) && n_heads * (rot_dim / 8) < (int64_t{1} << 24) && rot_dim < (int64_t{1} << 24);
  if (vec) {
    const int64_t items = n_heads * (rot_dim / 8);
    const int64_t tpb = items >= 128 ? 1 : 128 / items;
    rope_vec_kernel<<<static_cast<unsigned>((T + tpb - 1) / tpb), 128, 0, stream>>>(
        x, ld_x, T, static_cast<int>(n_heads), head_stride, rot_offset, static_cast<int>(rot_dim), positions, cos_sin,
        ld_cs, static_cast<int>(tpb));
  } else
    rope_kernel<<<static_cast<unsigned>(T), 128, 0, stream>>>(x, ld_x, n_heads, head_stride, rot_offset, rot_dim,
                                                              positions, cos_sin, ld_cs);
  return last_launch_error();
}

}  // namespace moeprof::kern
