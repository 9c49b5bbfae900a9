// How the absorbed MLA attention of serving (executor/backend.h, "paged MLA") splits each query
// row's positions over thread blocks (flash-decoding). A pure function of the shapes, so every
// backend allocates the same workspace for the same op, a CUDA graph captured for a batch size
// keeps its grid whatever the context, and the CPU reference combines the same partial sums.
#pragma once
#include <cstdint>

#include "kernels/common/hostdev.h"

namespace moeprof::kern {

// Query heads one block of the tensor-core kernel serves (kernels/mla_decode.cu).
inline constexpr int64_t kMlaDecodeHeadsPerBlock = 16;
// The blocks the split aims at: two per SM of a 132-SM Hopper (H100 SXM, H200), the residency the
// tensor-core kernel's 104 KiB of shared memory allows. Fewer rows x head groups than half of this
// split; each row's positions are cut into at most kMlaDecodeMaxSplits tile-aligned ranges.
inline constexpr int64_t kMlaDecodeTargetBlocks = 264;
inline constexpr int64_t kMlaDecodeMaxSplits = 32;
// Positions one block reads per tile; split ranges start on a tile.
inline constexpr int64_t kMlaDecodeTile = 32;

// True where the tensor-core kernel runs (cache row D = kvl + rope columns).
MOEPROF_HD bool mla_decode_tensor_core_shape(int64_t D, int64_t kvl) {
  return D % 16 == 0 && D <= 576 && kvl % 16 == 0 && kvl <= 512 && kvl <= D && kvl > 0;
}

// Ranges each of N query rows' positions is split into (1: no split, no workspace).
MOEPROF_HD int64_t mla_decode_splits(int64_t N, int64_t n_heads, int64_t D, int64_t kvl) {
  if (N <= 0 || n_heads <= 0 || !mla_decode_tensor_core_shape(D, kvl)) return 1;
  const int64_t blocks = N * ((n_heads + kMlaDecodeHeadsPerBlock - 1) / kMlaDecodeHeadsPerBlock);
  if (2 * blocks > kMlaDecodeTargetBlocks) return 1;
  const int64_t s = kMlaDecodeTargetBlocks / blocks;
  return s < kMlaDecodeMaxSplits ? s : kMlaDecodeMaxSplits;
}

// The split's f32 workspace: S x N x n_heads partial outputs of kvl columns (unnormalized), then
// S x N x n_heads (running max, sum) pairs. 0 when the positions are not split.
MOEPROF_HD int64_t mla_decode_workspace_floats(int64_t N, int64_t n_heads, int64_t D, int64_t kvl) {
  const int64_t s = mla_decode_splits(N, n_heads, D, kvl);
  return s <= 1 ? 0 : s * N * n_heads * (kvl + 2);
}

// The tile-aligned positions [begin, end) of split s of a row that attends to positions [0, L).
MOEPROF_HD void mla_decode_split_range(int64_t L, int64_t splits, int64_t s, int64_t* begin, int64_t* end) {
  const int64_t tiles = (L + kMlaDecodeTile - 1) / kMlaDecodeTile;
  const int64_t per = (tiles + splits - 1) / splits;
  int64_t b = s * per * kMlaDecodeTile, e = (s + 1) * per * kMlaDecodeTile;
  if (b > L) b = L;
  if (e > L) e = L;
  *begin = b;
  *end = e;
}

}  // namespace moeprof::kern
