#include "kernels/activation.cuh"

namespace moeprof::kern {
namespace {

__global__ void silu_and_mul_kernel(const uint16_t* x, int64_t ld_x, int64_t T, int64_t I, uint16_t* out, int64_t ld_out) {
  const int64_t n = T * I;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = j / I, i = j - t * I;
    const float g = ld_bf16(x + t * ld_x + i), u = ld_bf16(x + t * ld_x + I + i);
    const float s = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
    out[t * ld_out + i] = f32_to_bf16(__fmul_rn(s, u));
  }
}

__global__ void add_kernel(uint16_t* dst, int64_t ld_dst, const uint16_t* src, int64_t ld_src, int64_t rows,
                           int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = j / cols, c = j - r * cols;
    uint16_t* d = dst + r * ld_dst + c;
    *d = f32_to_bf16(__fadd_rn(ld_bf16(d), ld_bf16(src + r * ld_src + c)));
  }
}

// silu_and_mul on 16-byte vectors (8 bf16 of gate, the 8 matching of up), same arithmetic per
// element: I % 8 == 0, rows 16-byte aligned.
__global__ void silu_and_mul_vec_kernel(const uint16_t* x, int64_t ld_x, int64_t T, int64_t I, uint16_t* out,
                                        int64_t ld_out) {
  const int64_t i8 = I / 8, n = T * i8;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = j / i8, c = j - t * i8;
    const uint4* row = reinterpret_cast<const uint4*>(x + t * ld_x);
    float g[8], u[8];
    bf16x8_unpack(row[c], g);
    bf16x8_unpack(row[i8 + c], u);
#pragma unroll
    for (int e = 0; e < 8; ++e) g[e] = __fmul_rn(__fdiv_rn(g[e], __fadd_rn(1.0f, expf(-g[e]))), u[e]);
    reinterpret_cast<uint4*>(out + t * ld_out)[c] = bf16x8_pack(g);
  }
}

// dst += src on 16-byte vectors (8 bf16), same per-element __fadd_rn: rows whose width is a multiple
// of 8 with 16-byte aligned pointers and strides.
__global__ void add_vec_kernel(uint16_t* dst, int64_t ld_dst, const uint16_t* src, int64_t ld_src, int64_t rows,
                               int64_t vec_cols) {
  const int64_t n = rows * vec_cols;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = j / vec_cols, c = j - r * vec_cols;
    uint4* d = reinterpret_cast<uint4*>(dst + r * ld_dst) + c;
    float a[8], b[8];
    bf16x8_unpack(*d, a);
    bf16x8_unpack(*(reinterpret_cast<const uint4*>(src + r * ld_src) + c), b);
#pragma unroll
    for (int e = 0; e < 8; ++e) a[e] = __fadd_rn(a[e], b[e]);
    *d = bf16x8_pack(a);
  }
}

unsigned grid_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b > 65536 ? 65536 : (b < 1 ? 1 : b));
}

}  // namespace

cudaError_t launch_silu_and_mul(const uint16_t* x, int64_t ld_x, int64_t T, int64_t I, uint16_t* out, int64_t ld_out,
                                cudaStream_t stream) {
  if (T <= 0 || I <= 0) return cudaSuccess;
  if (I % 8 == 0 && aligned16(x, ld_x, 2) && aligned16(out, ld_out, 2))
    silu_and_mul_vec_kernel<<<grid_for(T * (I / 8), 256), 256, 0, stream>>>(x, ld_x, T, I, out, ld_out);
  else
    silu_and_mul_kernel<<<grid_for(T * I, 256), 256, 0, stream>>>(x, ld_x, T, I, out, ld_out);
  return last_launch_error();
}

cudaError_t launch_add_inplace(uint16_t* dst, int64_t ld_dst, const uint16_t* src, int64_t ld_src, int64_t rows,
                               int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (cols % 8 == 0 && aligned16(dst, ld_dst, 2) && aligned16(src, ld_src, 2))
    add_vec_kernel<<<grid_for(rows * (cols / 8), 256), 256, 0, stream>>>(dst, ld_dst, src, ld_src, rows, cols / 8);
  else
    add_kernel<<<grid_for(rows * cols, 256), 256, 0, stream>>>(dst, ld_dst, src, ld_src, rows, cols);
  return last_launch_error();
}

}  // namespace moeprof::kern
