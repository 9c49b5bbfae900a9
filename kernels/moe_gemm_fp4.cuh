// Grouped NVFP4 x NVFP4 GEMMs of the routed experts over expert-contiguous, tile-padded rows
// (see moe_permute.cuh). Both operands are dequantized (e2m1 * e4m3, exact in bf16) into shared
// memory and multiplied on bf16 tensor cores with fp32 accumulation (Hopper has no FP4 MMA).
#pragma once
#include "kernels/common.cuh"

namespace moeprof::kern {

// Which kernel runs the grouped FP4 GEMMs. kAuto runs kDefaultGemm1Path / kDefaultGemm2Path (below)
// when its preconditions hold, else kWgmmaWs2, else kTiledStaged, else kTiled, else kLegacy. Tiled
// preconditions: K % 64 == 0, code pointers/row strides 8-byte aligned, scale pointers/row strides
// 4-byte aligned, P < 2^31, the path's dynamic shared memory grantable; the wgmma paths (kWgmma,
// kWgmmaWs, kWgmmaWs2, kWgmmaPersist, kWgmmaPersistRA, kWgmmaWsRs) also need the kernels built for
// sm_90a (kernels/CMakeLists.txt does this for the default architecture 90) and a compute capability
// 9.0 device. Any forced tiled path that cannot run returns cudaErrorInvalidValue.
// kLegacy: the first 64x128 kernel (any K % 16 == 0).
// kTiled: 128 x 256 x 64 CTA tiles per expert, FP4 codes + scales through a 4-stage cp.async ring,
// dequantized (exactly) to fp16 in shared memory one K step ahead of ldmatrix + mma.sync; same
// epilogues and rounding rules as kLegacy, fp32 accumulation in a different order.
// kTiledSkip: kTiled, but a warp whose 64 rows are all dead (padding / past the segment) skips its
// MMAs (bit-identical results). kTiledStaged: kTiledSkip plus, in gemm2, the bf16 output tile staged
// in shared memory (64 KiB more) and written with 16-byte row-contiguous stores (gemm1: = kTiledSkip).
// kWgmma: the kTiledStaged pipeline with Hopper wgmma.mma_async m64n256k16 (both operands from the
// swizzled fp16 tiles through shared-memory descriptors, one warpgroup per 64 rows, fp32
// accumulators in registers) instead of ldmatrix + mma.sync.
// kWgmmaWs: the same wgmma tiles, warp-specialized: 384 threads, 2 consumer warpgroups issue the
// wgmmas and run the epilogues, 1 producer warpgroup loads the FP4 codes/scales into registers and
// dequantizes into a ring of fp16 tiles (4 for gemm1, 3 for gemm2), full/empty mbarriers.
// kWgmmaWs2: kWgmmaWs with gemm2 on 4 fp16 tiles, its output staged in two 128-column halves and 7
// column tiles per CTA (gemm1 identical to kWgmmaWs). kWgmmaPersist: kWgmmaWs2's tiles, warp roles
// and epilogues in a persistent kernel: one CTA per SM walks its share of the tiles, and the
// producers run on into the next tile during the consumers' epilogue (gemm1's h tile gets its own
// 32 KiB). kWgmmaPersistRA: kWgmmaPersist, but gemm2 with K <= 512 keeps the work item's 128 A
// rows resident in shared memory as fp16 for all K (dequantized once per item instead of once per
// column tile) and rings only the weight rows (2 tiles); gemm1 and larger K run kWgmmaPersist.
// kWgmmaWsRs: kWgmmaWs2, but the consumer warpgroups dequantize their own A rows into registers and
// multiply with the wgmma RS form (A from registers, B from shared memory); the producers dequantize
// only the weight rows, into a ring of 4 weight tiles (32 KiB each). Also needs 16-byte aligned A code rows.
// All paths give bit-identical results.
enum class Fp4GemmPath : int {
  kAuto = 0, kLegacy = 1, kTiled = 2, kTiledSkip = 3, kTiledStaged = 4, kWgmma = 5, kWgmmaWs = 6, kWgmmaWs2 = 7,
  kWgmmaPersist = 8, kWgmmaPersistRA = 9, kWgmmaWsRs = 10, kSmallM = 11
};
// kSmallM (no sm_90a-only instruction: mma.sync and cp.async; run only on H100s so far; K % 64 == 0,
// gemm1 I % 128 == 0, gemm2 H % 256 == 0, 8-byte aligned A code rows, 4-byte aligned A scale rows;
// either weight layout): the decode form.
// One 128-thread CTA per (expert, 256 weight rows) reads those rows once over all K and multiplies
// them (mma.sync m16n8k16, the weights as the M side) by the expert's rows, 16 at a time, so a
// segment of a few rows costs what its weights take to read (kernels/moe_gemm_fp4_small.cuh).
// kAuto runs it where P <= 32 E (at most 32 padded rows per expert on average: decode batches),
// and the paths above elsewhere.
// The tiled variants kAuto runs (the production paths), one per GEMM. Change them after measuring
// bench_moe_gemm on the GPU (it times every variant and cross-checks each against kLegacy).
// The persistent kernels are faster for gemm2 (kWgmmaPersistRA the fastest at K <= 512, where it
// differs from kWgmmaPersist) and, on row-major weights, slower for gemm1 (docs/performance.md);
// on kGemm1Tiled weights kAuto runs kWgmmaWsRs's persistent form (below).
inline constexpr Fp4GemmPath kDefaultGemm1Path = Fp4GemmPath::kWgmmaWsRs;
inline constexpr Fp4GemmPath kDefaultGemm2Path = Fp4GemmPath::kWgmmaPersistRA;

// The weights' layout: kRowMajor (w13 [E*2I, H/2] codes + [E*2I, H/16] scales, w2 [E*H, I/2] +
// [E*H, I/16], with row strides ld_w / ld_w_scales), or the same bytes in the order the producers
// of the production kernels load them (kernels/common/fp4_tiled.h; 16-byte aligned codes, 8-byte
// aligned scales; ld_w / ld_w_scales are ignored):
//  kGemm1Tiled (gemm1's w13; H % 64 == 0, I % 128 == 0): read only by kWgmmaWsRs, kWgmmaPersist
//    (kWgmmaWsRs's consumers and producers as a persistent kernel), kSmallM and kAuto (kSmallM
//    where it prefers it, else the persistent one, else kWgmmaWsRs), and only where they can run
//    (sm_90a, 16-byte aligned A code rows; kSmallM: its own conditions);
//  kGemm2Tiled (gemm2's w2; I % 64 == 0, H % 256 == 0): read only by kAuto / kWgmmaPersistRA (the
//    resident-A kernel at I <= 512, kWgmmaPersist's above), kWgmmaPersist (both on sm_90a) and
//    kSmallM (kAuto's choice where it prefers it).
// Elsewhere (and for the other GEMM's layout) the launch returns cudaErrorInvalidValue, so a caller
// picks the layout with gemm1_tiled_supported() / gemm2_tiled_supported().
enum class Fp4WeightLayout : int { kRowMajor = 0, kGemm1Tiled = 1, kGemm2Tiled = 2 };

// gemm1: for padded row r of expert e (offsets[e] <= r < offsets[e+1]) with t = permuted_to_token[r]:
//   acc[n] = sum_k deq(a[t, k]) * deq(w13[e*2I + n, k]); gate = acc[n] * (a_gs * w13_gs[e]),
//   up = acc[I + n] * (a_gs * w13_gs[e]); h = bf16(silu(gate) * up) -> NVFP4 with out_gs into
//   out [P, I/2] + out_scales [P, I/16]. Rows with t < 0 (padding, rows >= offsets[E]) get zeros.
// a [*, H/2] fp4x2 + a_scales [*, H/16]; w13 [E*2I, H/2] + w13_scales [E*2I, H/16]; w13_gs [E].
// Requires H % 16 == 0, I % 16 == 0, 8-byte aligned code rows (pointers and row strides).
cudaError_t launch_moe_gemm1_fp4(const uint8_t* a, int64_t ld_a, const uint8_t* a_scales, int64_t ld_a_scales,
                                 float a_gs, const uint8_t* w13, int64_t ld_w, const uint8_t* w13_scales,
                                 int64_t ld_w_scales, const float* w13_gs, const int32_t* offsets,
                                 const int32_t* permuted_to_token, int64_t P, int64_t E, int64_t H, int64_t I,
                                 float out_gs, uint8_t* out, int64_t ld_out, uint8_t* out_scales,
                                 int64_t ld_out_scales, cudaStream_t stream,
                                 Fp4GemmPath path = Fp4GemmPath::kAuto,
                                 Fp4WeightLayout w_layout = Fp4WeightLayout::kRowMajor);

// True where gemm1 can read kGemm1Tiled weights of these sizes on the current device (the sizes'
// conditions, an sm_90a build, a compute capability 9.0 device, the kernel's shared memory);
// the A code rows must still be 16-byte aligned at each launch.
bool gemm1_tiled_supported(int64_t H, int64_t I);

// Copies row-major w13 codes / scales (as launch_moe_gemm1_fp4 takes them) into the kGemm1Tiled
// layout: out [E*2I*H/2] bytes, out_scales [E*2I*H/16] bytes (no overlap with the inputs).
cudaError_t launch_pack_gemm1_weights_tiled(const uint8_t* w13, int64_t ld_w, const uint8_t* w13_scales,
                                            int64_t ld_w_scales, int64_t E, int64_t H, int64_t I, uint8_t* out,
                                            uint8_t* out_scales, cudaStream_t stream);

// gemm2: out[r, n] = bf16(sum_k deq(h[r, k]) * deq(w2[e*H + n, k]) * (h_gs * w2_gs[e])) for rows
// r < offsets[E] with permuted_to_token[r] >= 0; all other rows of out [P, H] are zeros.
cudaError_t launch_moe_gemm2_fp4(const uint8_t* h, int64_t ld_h, const uint8_t* h_scales, int64_t ld_h_scales,
                                 float h_gs, const uint8_t* w2, int64_t ld_w, const uint8_t* w2_scales,
                                 int64_t ld_w_scales, const float* w2_gs, const int32_t* offsets,
                                 const int32_t* permuted_to_token, int64_t P, int64_t E, int64_t I, int64_t H,
                                 uint16_t* out, int64_t ld_out, cudaStream_t stream,
                                 Fp4GemmPath path = Fp4GemmPath::kAuto,
                                 Fp4WeightLayout w_layout = Fp4WeightLayout::kRowMajor);

// True where gemm2 can read kGemm2Tiled weights of these sizes on the current device (the sizes'
// conditions, an sm_90a build, a compute capability 9.0 device, the kernels' shared memory).
bool gemm2_tiled_supported(int64_t I, int64_t H);

// Copies row-major w2 codes / scales into the kGemm2Tiled layout: out [E*H*I/2] bytes, out_scales
// [E*H*I/16] bytes (no overlap with the inputs).
cudaError_t launch_pack_gemm2_weights_tiled(const uint8_t* w2, int64_t ld_w, const uint8_t* w2_scales,
                                            int64_t ld_w_scales, int64_t E, int64_t I, int64_t H, uint8_t* out,
                                            uint8_t* out_scales, cudaStream_t stream);

}  // namespace moeprof::kern
