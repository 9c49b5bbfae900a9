#include "kernels/activation.cuh"

namespace moeprof::kern {
namespace {

// out = silu(gate) * up per element, W adjacent elements per thread (W = 8: 16-byte loads of gate
// and up, I % 8 == 0 and rows 16-byte aligned); the same arithmetic for both W.
template <int W>
__global__ void silu_and_mul_kernel(const uint16_t* x, int64_t ld_x, int64_t T, int64_t I, uint16_t* out, int64_t ld_out) {
  const int64_t iw = I / W, n = T * iw;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = j / iw, i = W * (j - t * iw);
    float g[W], u[W];
    load_bf16<W>(x + t * ld_x + i, g);
    load_bf16<W>(x + t * ld_x + I + i, u);
#pragma unroll
    for (int e = 0; e < W; ++e) g[e] = __fmul_rn(__fdiv_rn(g[e], __fadd_rn(1.0f, expf(-g[e]))), u[e]);
    store_bf16<W>(out + t * ld_out + i, g);
  }
}

// dst += src per element, W adjacent elements per thread (W = 8: cols % 8 == 0, rows 16-byte
// aligned); the same __fadd_rn for both W.
template <int W>
__global__ void add_kernel(uint16_t* dst, int64_t ld_dst, const uint16_t* src, int64_t ld_src, int64_t rows,
                           int64_t cols) {
  const int64_t cw = cols / W, n = rows * cw;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = j / cw, c = W * (j - r * cw);
    float a[W], b[W];
    load_bf16<W>(dst + r * ld_dst + c, a);
    load_bf16<W>(src + r * ld_src + c, b);
#pragma unroll
    for (int e = 0; e < W; ++e) a[e] = __fadd_rn(a[e], b[e]);
    store_bf16<W>(dst + r * ld_dst + c, a);
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
    silu_and_mul_kernel<8><<<grid_for(T * (I / 8), 256), 256, 0, stream>>>(x, ld_x, T, I, out, ld_out);
  else
    silu_and_mul_kernel<1><<<grid_for(T * I, 256), 256, 0, stream>>>(x, ld_x, T, I, out, ld_out);
  return last_launch_error();
}

cudaError_t launch_add_inplace(uint16_t* dst, int64_t ld_dst, const uint16_t* src, int64_t ld_src, int64_t rows,
                               int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (cols % 8 == 0 && aligned16(dst, ld_dst, 2) && aligned16(src, ld_src, 2))
    add_kernel<8><<<grid_for(rows * (cols / 8), 256), 256, 0, stream>>>(dst, ld_dst, src, ld_src, rows, cols);
  else
    add_kernel<1><<<grid_for(rows * cols, 256), 256, 0, stream>>>(dst, ld_dst, src, ld_src, rows, cols);
  return last_launch_error();
}

}  // namespace moeprof::kern
