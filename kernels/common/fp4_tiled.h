// The tiled layouts of the grouped GEMMs' NVFP4 weights: the same bytes in the order the
// warp-specialized producer warps read them, with contiguous 16-byte loads
// (kernels/moe_gemm_fp4.cuh, Fp4WeightLayout). A weight matrix of E experts x R rows x K elements
// (K / 2 code bytes, K / 16 e4m3 scales per row) is cut into blocks:
//  * block (e, nt, kt) holds the 256 weight rows of column tile nt of expert e at K step kt (64
//    elements): 8192 code bytes and 1024 scale bytes; blocks in (e, nt, kt) order, so one tile's
//    steps are consecutive.
//      gemm1 (kGemm1Tiled, w13: R = 2I, K = H): tile rows 0..127 are gate rows nt*128 .. +127,
//        128..255 the matching up rows I + nt*128 ..; needs H % 64 == 0 and I % 128 == 0.
//      gemm2 (kGemm2Tiled, w2: R = H, K = I): tile row br is weight row nt*256 + br; needs
//        I % 64 == 0 and H % 256 == 0.
//  * inside a block, producer thread pt (0..127) owns the 16-element items it = 0..7 of tile row
//    br = 32 it + pt / 4, k16 block kb = pt % 4 (its 8 code bytes, its scale byte); its code load j
//    (0..3) is the 16 bytes at (128 j + pt) * 16: items 2j (bytes 0..7) and 2j + 1 (bytes 8..15), so
//    a warp's load is 512 contiguous bytes; its 8 scale bytes (item order) are at pt * 8.
// Host + device: the CPU tests, the init kernel and the pack kernels share it.
#pragma once
#include <cstdint>

#include "hostdev.h"

namespace moeprof::kern {

inline constexpr int64_t kTiledCodeBlock = 8192, kTiledScaleBlock = 1024;

// Offsets inside a block of tile row br (0..255): code byte kbyte % 32 of the step, scale kblk % 4.
MOEPROF_HD int64_t tiled_code_in_block(int br, int64_t kbyte) {
  const int kb = static_cast<int>((kbyte % 32) / 8), it = br / 32, pt = (br % 32) * 4 + kb;
  return ((it / 2) * 128 + pt) * 16 + (it % 2) * 8 + kbyte % 8;
}
MOEPROF_HD int64_t tiled_scale_in_block(int br, int64_t kblk) {
  const int kb = static_cast<int>(kblk % 4), it = br / 32, pt = (br % 32) * 4 + kb;
  return pt * 8 + it;
}

MOEPROF_HD bool gemm1_tiled_ok(int64_t H, int64_t I) { return H > 0 && I > 0 && H % 64 == 0 && I % 128 == 0; }
MOEPROF_HD bool gemm2_tiled_ok(int64_t I, int64_t H) { return I > 0 && H > 0 && I % 64 == 0 && H % 256 == 0; }

// Tile row br (0..255) and block index of weight row `row` at K step kt. gemm 1: w13 rows
// 0 .. E*2I - 1, K = H, N = I; gemm 2: w2 rows 0 .. E*H - 1, K = I, N = H.
MOEPROF_HD void tiled_place(int gemm, int64_t row, int64_t kt, int64_t K, int64_t N, int64_t& block, int& br) {
  if (gemm == 1) {
    const int64_t e = row / (2 * N), r = row % (2 * N);
    const int64_t half = r / N, n = r % N;
    br = static_cast<int>(half * 128 + n % 128);
    block = (e * (N / 128) + n / 128) * (K / 64) + kt;
  } else {
    const int64_t e = row / N, n = row % N;
    br = static_cast<int>(n % 256);
    block = (e * (N / 256) + n / 256) * (K / 64) + kt;
  }
}
// Byte offset in the tiled code buffer of code byte `kbyte` (0 .. K/2 - 1) of weight row `row`.
MOEPROF_HD int64_t tiled_code_offset(int gemm, int64_t row, int64_t kbyte, int64_t K, int64_t N) {
  int64_t block;
  int br;
  tiled_place(gemm, row, kbyte / 32, K, N, block, br);
  return block * kTiledCodeBlock + tiled_code_in_block(br, kbyte);
}
// Byte offset in the tiled scale buffer of scale `kblk` (0 .. K/16 - 1) of weight row `row`.
MOEPROF_HD int64_t tiled_scale_offset(int gemm, int64_t row, int64_t kblk, int64_t K, int64_t N) {
  int64_t block;
  int br;
  tiled_place(gemm, row, kblk / 4, K, N, block, br);
  return block * kTiledScaleBlock + tiled_scale_in_block(br, kblk);
}
// The same by GEMM, with each GEMM's own argument order.
MOEPROF_HD int64_t gemm1_tiled_code_offset(int64_t row, int64_t kbyte, int64_t H, int64_t I) {
  return tiled_code_offset(1, row, kbyte, H, I);
}
MOEPROF_HD int64_t gemm1_tiled_scale_offset(int64_t row, int64_t kblk, int64_t H, int64_t I) {
  return tiled_scale_offset(1, row, kblk, H, I);
}
MOEPROF_HD int64_t gemm2_tiled_code_offset(int64_t row, int64_t kbyte, int64_t I, int64_t H) {
  return tiled_code_offset(2, row, kbyte, I, H);
}
MOEPROF_HD int64_t gemm2_tiled_scale_offset(int64_t row, int64_t kblk, int64_t I, int64_t H) {
  return tiled_scale_offset(2, row, kblk, I, H);
}

}  // namespace moeprof::kern
