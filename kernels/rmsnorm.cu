#include "kernels/rmsnorm.cuh"

namespace moeprof::kern {
namespace {

constexpr int kThreads = 256;

// One block per row. The row is read twice (sum of squares, then normalize); for fused add the
// bf16-rounded residual is written first and re-read, so the norm sees exactly the stored value.
template <bool kFusedAdd>
__global__ void __launch_bounds__(kThreads) rmsnorm_kernel(uint16_t* x, int64_t ld_x, uint16_t* residual, int64_t ld_res,
                                                           const uint16_t* w, int64_t H, float eps, uint16_t* out,
                                                           int64_t ld_out) {
  __shared__ float scratch[33];
  const int64_t t = blockIdx.x;
  uint16_t* xr = x + t * ld_x;
  const uint16_t* src = xr;
  if constexpr (kFusedAdd) {
    uint16_t* rr = residual + t * ld_res;
    for (int64_t c = threadIdx.x; c < H; c += blockDim.x) rr[c] = f32_to_bf16(__fadd_rn(ld_bf16(xr + c), ld_bf16(rr + c)));
    __syncthreads();
    src = rr;
  }
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < H; c += blockDim.x) {
    const float v = ld_bf16(src + c);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(H) + eps);
  uint16_t* o = kFusedAdd ? xr : out + t * ld_out;
  for (int64_t c = threadIdx.x; c < H; c += blockDim.x) {
    const float v = ld_bf16(src + c);
    o[c] = f32_to_bf16(__fmul_rn(__fmul_rn(v, r), ld_bf16(w + c)));
  }
}

}  // namespace

cudaError_t launch_rmsnorm(const uint16_t* x, int64_t ld_x, const uint16_t* w, int64_t T, int64_t H, float eps,
                           uint16_t* out, int64_t ld_out, cudaStream_t stream) {
  if (T <= 0 || H <= 0) return cudaSuccess;
  rmsnorm_kernel<false><<<static_cast<unsigned>(T), kThreads, 0, stream>>>(const_cast<uint16_t*>(x), ld_x, nullptr, 0, w,
                                                                           H, eps, out, ld_out);
  return last_launch_error();
}

cudaError_t launch_fused_add_rmsnorm(uint16_t* x, int64_t ld_x, uint16_t* residual, int64_t ld_res, const uint16_t* w,
                                     int64_t T, int64_t H, float eps, cudaStream_t stream) {
  if (T <= 0 || H <= 0) return cudaSuccess;
  rmsnorm_kernel<true><<<static_cast<unsigned>(T), kThreads, 0, stream>>>(x, ld_x, residual, ld_res, w, H, eps, nullptr,
                                                                          0);
  return last_launch_error();
}

}  // namespace moeprof::kern
