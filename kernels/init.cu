#include "kernels/init.cuh"

#include "kernels/common/fp4_tiled.h"

namespace moeprof::kern {
namespace {

enum class InitKind { kUniformBf16, kUniformF32, kE4m3, kBytes, kInts, kIota };

struct InitArgs {
  void* out;
  int64_t rows, cols, ld;
  uint64_t seed;
  float a, b;       // scale | lo, hi
  int32_t ilo, ihi;  // ints range | iota start
  // tiled 1 / 2: gemm1's w13 / gemm2's w2 in their tiled layouts (kernels/common/fp4_tiled.h;
  // tiled_k / tiled_n: the GEMM's K and N)
  int tiled = 0;
  int64_t tiled_k = 0, tiled_n = 0;
};

template <InitKind K>
__global__ void init_kernel(InitArgs p) {
  const int64_t n = p.rows * p.cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / p.cols, c = i - r * p.cols;
    int64_t at = r * p.ld + c;
    if constexpr (K == InitKind::kBytes || K == InitKind::kE4m3)
      if (p.tiled != 0)
        at = K == InitKind::kBytes ? tiled_code_offset(p.tiled, r, c, p.tiled_k, p.tiled_n)
                                   : tiled_scale_offset(p.tiled, r, c, p.tiled_k, p.tiled_n);
    if constexpr (K == InitKind::kUniformBf16 || K == InitKind::kUniformF32) {
      const float u = hash_unit(p.seed, static_cast<uint64_t>(i));
      const float v = __fmul_rn(p.a, __fsub_rn(__fmul_rn(2.0f, u), 1.0f));
      if constexpr (K == InitKind::kUniformBf16) static_cast<uint16_t*>(p.out)[at] = f32_to_bf16(v);
      else static_cast<float*>(p.out)[at] = v;
    } else if constexpr (K == InitKind::kE4m3) {
      const float u = hash_unit(p.seed, static_cast<uint64_t>(i));
      const float v = __fadd_rn(p.a, __fmul_rn(__fsub_rn(p.b, p.a), u));
      static_cast<uint8_t*>(p.out)[at] = f32_to_e4m3(v);
    } else if constexpr (K == InitKind::kBytes) {
      static_cast<uint8_t*>(p.out)[at] = static_cast<uint8_t>(hash64(p.seed, static_cast<uint64_t>(i)) & 0xFFu);
    } else if constexpr (K == InitKind::kInts) {
      static_cast<int32_t*>(p.out)[at] = hash_int(p.seed, static_cast<uint64_t>(i), p.ilo, p.ihi);
    } else {
      static_cast<int32_t*>(p.out)[at] = static_cast<int32_t>(p.ilo + i);
    }
  }
}

template <InitKind K>
cudaError_t run(const InitArgs& p, cudaStream_t stream) {
  const int64_t n = p.rows * p.cols;
  if (n <= 0) return cudaSuccess;
  const int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 65536) blocks = 65536;
  init_kernel<K><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(p);
  return last_launch_error();
}

}  // namespace

cudaError_t launch_init_uniform(void* out, bool is_bf16, int64_t rows, int64_t cols, int64_t ld, uint64_t seed,
                                float scale, cudaStream_t stream) {
  InitArgs p{out, rows, cols, ld, seed, scale, 0.0f, 0, 0};
  return is_bf16 ? run<InitKind::kUniformBf16>(p, stream) : run<InitKind::kUniformF32>(p, stream);
}
cudaError_t launch_init_e4m3(uint8_t* out, int64_t rows, int64_t cols, int64_t ld, uint64_t seed, float lo, float hi,
                             cudaStream_t stream) {
  return run<InitKind::kE4m3>(InitArgs{out, rows, cols, ld, seed, lo, hi, 0, 0}, stream);
}
cudaError_t launch_init_bytes(uint8_t* out, int64_t rows, int64_t cols, int64_t ld, uint64_t seed, cudaStream_t stream) {
  return run<InitKind::kBytes>(InitArgs{out, rows, cols, ld, seed, 0.0f, 0.0f, 0, 0}, stream);
}
cudaError_t launch_init_moe_tiled(int gemm, uint8_t* codes, uint8_t* scales, int64_t E, int64_t K, int64_t N,
                                  uint64_t seed_codes, uint64_t seed_scales, float lo, float hi, cudaStream_t stream) {
  if (E <= 0 || (gemm != 1 && gemm != 2) || !(gemm == 1 ? gemm1_tiled_ok(K, N) : gemm2_tiled_ok(K, N)))
    return cudaErrorInvalidValue;
  const int64_t rows = E * (gemm == 1 ? 2 * N : N);
  InitArgs c{codes, rows, K / 2, K / 2, seed_codes, 0.0f, 0.0f, 0, 0, gemm, K, N};
  KERN_RETURN_IF_ERROR(run<InitKind::kBytes>(c, stream));
  InitArgs sc{scales, rows, K / 16, K / 16, seed_scales, lo, hi, 0, 0, gemm, K, N};
  return run<InitKind::kE4m3>(sc, stream);
}
cudaError_t launch_init_ints(int32_t* out, int64_t rows, int64_t cols, int64_t ld, uint64_t seed, int32_t lo,
                             int32_t hi, cudaStream_t stream) {
  if (hi <= lo) return cudaErrorInvalidValue;
  return run<InitKind::kInts>(InitArgs{out, rows, cols, ld, seed, 0.0f, 0.0f, lo, hi}, stream);
}
cudaError_t launch_iota(int32_t* out, int64_t rows, int64_t cols, int64_t ld, int32_t start, cudaStream_t stream) {
  return run<InitKind::kIota>(InitArgs{out, rows, cols, ld, 0, 0.0f, 0.0f, start, 0}, stream);
}

}  // namespace moeprof::kern
