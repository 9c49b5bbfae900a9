// Deterministic initialization (bit-identical to the CPU backend; see executor/backend.h).
// All take a rows x cols view with row stride `ld` (elements); the hash index is row * cols + col.
#pragma once
#include "kernels/common.cuh"

namespace moeprof::kern {

// bf16 (is_bf16) or f32: v = scale * (2u - 1).
cudaError_t launch_init_uniform(void* out, bool is_bf16, int64_t rows, int64_t cols, int64_t ld, uint64_t seed,
                                float scale, cudaStream_t stream);
// e4m3: v = e4m3_rne(lo + (hi - lo) * u), without FMA.
cudaError_t launch_init_e4m3(uint8_t* out, int64_t rows, int64_t cols, int64_t ld, uint64_t seed, float lo, float hi,
                             cudaStream_t stream);
// bytes: hash & 0xFF.
cudaError_t launch_init_bytes(uint8_t* out, int64_t rows, int64_t cols, int64_t ld, uint64_t seed, cudaStream_t stream);
// A grouped GEMM's expert weights in its tiled layout (kernels/common/fp4_tiled.h): gemm 1: w13,
// E*2N rows of K = H elements (N = I); gemm 2: w2, E*N rows of K = I elements (N = H). Code byte
// (row, c) = launch_init_bytes's value for index row * (K/2) + c, scale (row, b) =
// launch_init_e4m3's for row * (K/16) + b, each stored at its tiled offset.
cudaError_t launch_init_moe_tiled(int gemm, uint8_t* codes, uint8_t* scales, int64_t E, int64_t K, int64_t N,
                                  uint64_t seed_codes, uint64_t seed_scales, float lo, float hi, cudaStream_t stream);
// i32: lo + hash % (hi - lo).
cudaError_t launch_init_ints(int32_t* out, int64_t rows, int64_t cols, int64_t ld, uint64_t seed, int32_t lo,
                             int32_t hi, cudaStream_t stream);
// i32: start + i.
cudaError_t launch_iota(int32_t* out, int64_t rows, int64_t cols, int64_t ld, int32_t start, cudaStream_t stream);

}  // namespace moeprof::kern
