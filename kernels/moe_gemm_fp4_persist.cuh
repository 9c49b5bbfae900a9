// The persistent kernels of the grouped FP4 GEMMs (sm_90a) and their epilogue: persist_kernel
// (kWgmmaPersist, kWgmmaPersistRA, and both on kGemm2Tiled weights) and persist_rs_kernel
// (kWgmmaPersist on kGemm1Tiled weights).
// A part of kernels/moe_gemm_fp4.cu, which includes the parts in the order of their definitions: the
// FP4 GEMMs are one translation unit (docs/kernels.md, "SASS of the parts"). Not for other files.
#pragma once
#include "kernels/moe_gemm_fp4_ws.cuh"

namespace moeprof::kern {
namespace {

namespace v2 {

// ---- Persistent warp-specialized kernel (kVar 7, Fp4GemmPath::kWgmmaPersist) -------------------
// kWgmmaWs2's tiles, warp roles, items, dequantization, wgmmas and epilogues (the same results, bit
// for bit), but one CTA per SM walks the work items w = blockIdx.x, + gridDim.x, ... (w = row tile *
// n_groups + column group, the order of the other paths' grids), so the producer warpgroup runs on
// into the next tile while the consumers finish the last one: a CTA's prologue, last epilogue and
// launch no longer cost producer time. Differences from kWgmmaWs2:
//  - the producers find each tile's expert themselves (a warp-wide scan of the experts' tile counts
//    from a cursor that only moves forward) and hand the tile (first row, rows, expert) and its 128
//    row sources to the consumers in tile_info[ti & 1] / rsrc[ti & 1], published by the full barrier
//    of the tile's first step; the consumers free the slot (tile_free) after the tile's epilogue;
//  - every K step's tile is released as soon as its wgmmas are done, the last one of a column tile
//    before that tile's epilogue;
//  - gemm1's h tile has its own 32 KiB bf16 buffer (16-byte chunks ^ (row & 7)) instead of aliasing
//    the fp16 ring, so the producers can fill the ring during the epilogue;
//  - the zero rows past offsets[E] are written by the consumers of all CTAs, grid-strided, first.
constexpr int kEpiBytes = 32768;  // gemm1: 128 x 128 bf16 h tile; gemm2: 8 warps x 4 KiB staging
constexpr int persist_smem_bytes() { return kWsStages * kBufBytes + kEpiBytes + kAlignPad; }
// kWgmmaPersistRA (gemm2 with K <= kRaMaxK): the 128 A rows of a work item stay resident as fp16 for
// all K (KT <= 8 tiles of 128 x 64, kRaATile bytes each, the 128-byte-swizzle layout of the A half of
// a kBufBytes tile), dequantized once, in the item's first column tile, and read by the wgmmas of all
// its 7 column tiles; the ring holds only the 256 weight rows (kRaStages tiles of kRaBTile bytes).
// The same 230,400 bytes as the other layout: 128 KiB A + 2 x 32 KiB B + 32 KiB output staging.
constexpr int kRaMaxK = 512, kRaKT = kRaMaxK / BK, kRaStages = 2;
constexpr int kRaATile = BM * BK * 2, kRaBTile = BN * BK * 2;
static_assert(kRaKT * kRaATile + kRaStages * kRaBTile == kWsStages * kBufBytes, "resident-A layout: the same bytes");
static_assert(kRaATile == (kPItems / 3) * (kProducers / 4) * 128 && kRaBTile == (kPItems - kPItems / 3) * (kProducers / 4) * 128,
              "A items 0..3 fill an A tile, items 4..11 a B tile");
struct TileInfo {
  int64_t r0;
  int e, nrows;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The persistent kernels' producers: expert e, first padded row r0 and rows (<= BM) of row tile m
// (tiles in expert order, ceil(rows_e / BM) per expert). A warp-wide scan from the cursor (ce: an
// expert whose tiles start at tile index cbase), which only moves forward: a CTA's tiles come in
// increasing order. Every producer warp finds the same values; m < the tile count ends the loop.
__device__ __forceinline__ void find_row_tile(const Args& p, int m, int lane, int& ce, int& cbase, int& e, int64_t& r0,
                                              int& nrows) {
  for (;;) {
    const int ex = ce + lane;
    int64_t sa = 0, ta = 0;
    int c = 0;
    if (ex < p.E) {
      seg_of(p, ex, sa, ta);
      c = static_cast<int>((ta - sa + BM - 1) / BM);
    }
    int incl = c;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += y;
    }
    const int excl = incl - c;
    const unsigned ball = __ballot_sync(0xffffffffu, c > 0 && m >= cbase + excl && m < cbase + incl);
    if (ball != 0u) {
      const int L = __ffs(ball) - 1;
      const int ex_l = __shfl_sync(0xffffffffu, excl, L);
      const int64_t s_l = __shfl_sync(0xffffffffu, sa, L), t_l = __shfl_sync(0xffffffffu, ta, L);
      e = ce + L;
      r0 = s_l + static_cast<int64_t>(m - cbase - ex_l) * BM;
      nrows = static_cast<int>(t_l - r0 < BM ? t_l - r0 : BM);
      cbase += ex_l;
      ce = e;
      return;
    }
    cbase += __shfl_sync(0xffffffffu, incl, 31);
    ce += 32;
  }
}

// The persistent kernels' prologue (all threads): the row tiles in all, the sum over experts of
// ceil(rows_e / BM) (red: one int per warp), and the barriers: full[nb] (producer arrivals),
// empty[nb] and tile_free[2] (consumer arrivals); thread 0 then runs more_init (a kernel's own).
template <class MoreInit>
__device__ __forceinline__ int persist_prologue(const Args& p, int32_t* red, int nb, uint32_t full0, uint32_t empty0,
                                                uint32_t free0, MoreInit more_init) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int cnt = 0;
  for (int e = tid; e < p.E; e += kThreads + kProducers) {
    int64_t s, t;
    seg_of(p, e, s, t);
    cnt += static_cast<int>((t - s + BM - 1) / BM);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) cnt += __shfl_xor_sync(0xffffffffu, cnt, o);
  if (lane == 0) red[warp] = cnt;
  if (tid == 0) {
    for (int i = 0; i < nb; ++i) {
      mbar_init(full0 + i * 8, kProducers);
      mbar_init(empty0 + i * 8, kThreads);
    }
    mbar_init(free0, kThreads);
    mbar_init(free0 + 8, kThreads);
    more_init();
  }
  __syncthreads();
  int tiles = 0;
#pragma unroll
  for (int w = 0; w < (kThreads + kProducers) / 32; ++w) tiles += red[w];
  return tiles;
}

// The persistent kernels' consumers, first: zero rows [offsets[E], P), all columns: one row per
// consumer warp at a time, the warps of all CTAs striding over the rows, the lanes over the row's
// columns (16-byte stores where the output allows them). No division: an element-wise loop with a
// 64-bit divide per element took about a tenth of the consumers' time in gemm2 (Nsight Compute
// source counters, docs/performance.md).
template <bool kGemm1>
__device__ __forceinline__ void zero_tail_rows(const Args& p, int warp, int lane) {
  int64_t total = p.offsets[p.E];
  total = total < 0 ? 0 : (total > p.P ? p.P : total);
  const int64_t wstride = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  for (int64_t r = total + static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + warp; r < p.P; r += wstride) {
    if constexpr (kGemm1) {
      for (int c = lane; c < p.N / 2; c += 32) p.out_q[r * p.ld_out_q + c] = 0;
      for (int c = lane; c < p.N / 16; c += 32) p.out_sc[r * p.ld_out_sc + c] = 0;
    } else if (p.vec16_out) {
      uint16_t* const row = p.out + r * p.ld_out;
      const int n8 = p.N & ~7;
      for (int c = lane * 8; c < n8; c += 32 * 8) *reinterpret_cast<uint4*>(row + c) = make_uint4(0u, 0u, 0u, 0u);
      if (lane < p.N - n8) row[n8 + lane] = 0;
    } else {
      for (int c = lane; c < p.N; c += 32) p.out[r * p.ld_out + c] = 0;
    }
  }
}

// The persistent kernels' gemm1 epilogue of column tile nt: h = silu(gate) * up (bf16) through the
// 128 x 128 bf16 tile at `epi` (16-byte chunks ^ (row & 7)), then NVFP4 requant and stores. All
// 256 consumer threads; the two named barriers order the tile's reuse. The epilogue does not
// overlap the tensor cores' work (about 9% of gemm1's time, docs/performance.md), so its h tile
// folds the global scales into one multiply where gsc * 2^14 is finite (unscale) and packs each
// bf16 pair with one hardware conversion (bf16x2_rn): the bits of silu_mul_h + pack_bf16x2 with
// fewer instructions (0.6% of gemm1's time, measured).
template <bool kFold>
__device__ __forceinline__ void gemm1_h_tile(const float (&acc)[4][8][4], unsigned char* epi, int row_w, int q,
                                             float gsc, float g14) {
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = row_w + hh * 8;
      *reinterpret_cast<uint32_t*>(epi + row * 256 + ((j ^ (row & 7)) << 4) + q * 4) =
          bf16x2_rn(silu_mul<kFold>(acc, j, 2 * hh, gsc, g14), silu_mul<kFold>(acc, j, 2 * hh + 1, gsc, g14));
    }
}
__device__ __forceinline__ void gemm1_persist_epilogue(const Args& p, const float (&acc)[4][8][4], unsigned char* epi,
                                                       const int32_t* row_src, int64_t r0, int nrows, int nt,
                                                       float gsc, int tid) {
  const int lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3, wm = warp >> 2, wn = warp & 3;
  bar_consumers();  // every consumer is done reading the previous tile's h
  const int row_w = wm * 64 + wn * 16 + g;
  const float g14 = __fmul_rn(gsc, kUnscale);
  if (isfinite(g14))
    gemm1_h_tile<true>(acc, epi, row_w, q, gsc, g14);
  else
    gemm1_h_tile<false>(acc, epi, row_w, q, gsc, g14);
  bar_consumers();
#pragma unroll 1
  for (int it = 0; it < (BM * kCols1 / 16) / kThreads; ++it) {
    const int item = it * kThreads + tid;
    const int row = item >> 3, blk = item & 7;
    const int n = nt * kCols1 + blk * 16;
    if (row >= nrows || n >= p.N) continue;
    const uint4 u0 = *reinterpret_cast<const uint4*>(epi + row * 256 + (((2 * blk) ^ (row & 7)) << 4));
    const uint4 u1 = *reinterpret_cast<const uint4*>(epi + row * 256 + (((2 * blk + 1) ^ (row & 7)) << 4));
    const uint32_t u[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
    store_requant_words(p, u, row_src[row] >= 0, r0 + row, n);
  }
}
#endif

// kTW (gemm2 only): the weights in the Fp4WeightLayout::kGemm2Tiled layout (kernels/common/fp4_tiled.h):
// the producers load a step's 8 weight items with four 16-byte code loads and one 8-byte scale load
// of the column tile's block, as kVar 9's producers do for gemm1; the A items and everything else
// are unchanged (same tiles, same bits).
template <bool kGemm1, bool kResA, bool kTW>
__global__ void __launch_bounds__(kThreads + kProducers, 1)
    persist_kernel(Args p, const __grid_constant__ CUtensorMap out_map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(!(kGemm1 && kResA), "resident A tiles: gemm2 only (gemm1 has one column tile per item)");
  static_assert(!(kGemm1 && kTW), "tiled weights in the persistent kernel: gemm2 only");
  constexpr int NB = kResA ? kRaStages : kWsStages;
  constexpr int kCols = kGemm1 ? kCols1 : kCols2;
  constexpr int kNPer = n_per<kGemm1, 5>();
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* const smem = smem_raw + ((kAlignPad - (smem_u32(smem_raw) & (kAlignPad - 1))) & (kAlignPad - 1));
  unsigned char* const epi = smem + kWsStages * kBufBytes;  // (both layouts: after 196,608 operand bytes)
  __shared__ __align__(8) uint64_t mbar[2 * NB + 2 + (kResA ? kRaKT : 0)];  // full[NB], empty[NB], tile_free[2],
                                                                           // kResA: a_free[kRaKT]
  __shared__ int32_t rsrc[2][BM];
  __shared__ TileInfo tile_info[2];
  __shared__ int32_t red[(kThreads + kProducers) / 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int NT = (p.N + kCols - 1) / kCols;
  const int KT = p.K / BK;
  const uint32_t full0 = smem_u32(mbar), empty0 = full0 + NB * 8, free0 = empty0 + NB * 8;
  const uint32_t afree0 = free0 + 2 * 8;  // kResA: A tile kt is free once all consumers arrived on afree0 + 8 kt

  const int tiles = persist_prologue(p, red, NB, full0, empty0, free0, [&] {
    if constexpr (kResA)
      for (int i = 0; i < kRaKT; ++i) mbar_init(afree0 + i * 8, kThreads);
  });
  const int64_t work = static_cast<int64_t>(tiles) * p.n_groups;  // < 2^31: the host checks (P / BM + E) * n_groups
  const volatile int& work_s = red[0];  // (the consumers re-read it: one register less in their loop)
  __syncthreads();
  if (tid == 0) red[0] = static_cast<int>(work);
  __syncthreads();

  MOEPROF_SET_ROLE_REGS(tid >= kThreads);
  if (tid >= kThreads) {
    // ---------------- producers ----------------
    // (The K loop below is ws_produce's, kept as its own copy: ws_produce inlined here compiles to a
    // different instruction stream, one more integer op per fp16 store, and this loop is the one
    // measured in docs/performance.md. Like ws_produce, dead items read row 0 and the loads have no
    // test; with its register split (MOEPROF_SET_ROLE_REGS) it does not spill.)
    const int pt = tid - kThreads;
    const int kb = pt & 3;
    const uint32_t tiles_p = smem_u32(smem);
    uint32_t off0, off1;
    ws_chunk_offsets(pt, off0, off1);
    int ce = 0, cbase = 0;  // scan cursor: expert ce's tiles start at tile index cbase
    int s = 0, ti = 0;
    constexpr int kRowItems = kTW ? kPItems / 3 : kPItems;  // items read row by row (kTW: the A items)
    const uint8_t* code_p[kRowItems];
    const uint8_t* sc_p[kRowItems];
    const uint8_t* wt_code = nullptr;  // kTW: this thread's bytes of the column tile's first block
    const uint8_t* wt_sc = nullptr;
    int32_t a_src[kPItems / 3];
    uint2 cd[kRowItems];
    uint32_t sc[kRowItems];
    uint4 wcd[4] = {};  // kTW: the weight items' codes (items 2j, 2j + 1 in wcd[j]) and scales
    uint2 wsc = make_uint2(0u, 0u);
    for (int64_t w = blockIdx.x; w < work; w += gridDim.x, ++ti) {
      const int m = static_cast<int>(w / p.n_groups), ng = static_cast<int>(w % p.n_groups);
      int e = 0, nrows = 0;
      int64_t r0 = 0;
      find_row_tile(p, m, lane, ce, cbase, e, r0, nrows);
      const int nt0 = ng * kNPer, nt1 = nt0 + kNPer < NT ? nt0 + kNPer : NT;
      auto src_of = [&](int row) -> int32_t {
        if (row >= nrows) return -1;
        const int32_t t = p.p2t[r0 + row];
        return t < 0 ? -1 : (kGemm1 ? t : static_cast<int32_t>(r0 + row));
      };
      // Publish the tile in slot ti & 1 (free once the consumers are done with tile ti - 2).
      if (ti >= 2) mbar_wait(free0 + (ti & 1) * 8, ((ti >> 1) - 1) & 1);
      rsrc[ti & 1][pt] = src_of(pt);
      if (pt == 0) tile_info[ti & 1] = TileInfo{r0, e, nrows};
#pragma unroll
      for (int it = 0; it < kPItems / 3; ++it) a_src[it] = src_of((it * kProducers + pt) >> 2);
      // A dead item reads row 0 of its operand, as in ws_produce: no test per load.
      auto set_ptrs = [&](int nt) {
        if constexpr (kTW) {
          const int64_t blk = (static_cast<int64_t>(e) * NT + nt) * KT;
          wt_code = p.w + blk * kTiledCodeBlock + pt * 16;
          wt_sc = p.w_sc + blk * kTiledScaleBlock + pt * 8;
        }
#pragma unroll
        for (int it = 0; it < kRowItems; ++it) {
          const int row = (it * kProducers + pt) >> 2;
          if (it < kPItems / 3) {
            const int64_t src = a_src[it] >= 0 ? a_src[it] : 0;
            code_p[it] = p.a + src * p.ld_a + kb * 8;
            sc_p[it] = p.a_sc + src * p.ld_a_sc + kb;
          } else {
            int64_t wr = weight_row<kGemm1>(p, e, nt, row - BM);
            wr = wr >= 0 ? wr : 0;
            code_p[it] = p.w + wr * p.ld_w + kb * 8;
            sc_p[it] = p.w_sc + wr * p.ld_w_sc + kb;
          }
        }
      };
      auto load_into = [&](uint2 (&cdx)[kRowItems], uint32_t (&scx)[kRowItems], uint4 (&wcx)[4], uint2& wsx, int kt,
                           bool with_a) {
#pragma unroll
        for (int it = 0; it < kRowItems; ++it) {
          if (kResA && it < kPItems / 3 && !with_a) continue;
          cdx[it] = ldg_code_l2(code_p[it] + kt * 32);
          scx[it] = ldg_scale_l2(sc_p[it] + kt * 4);
        }
        if constexpr (kTW) {  // (32-bit step offsets: one tile's steps span less than 2^31 bytes)
          const uint32_t co = static_cast<uint32_t>(kt) * static_cast<uint32_t>(kTiledCodeBlock);
#pragma unroll
          for (int j = 0; j < 4; ++j) wcx[j] = ldg128_na(wt_code + co + j * 2048);
          wsx = ldg64_na(wt_sc + static_cast<uint32_t>(kt) * static_cast<uint32_t>(kTiledScaleBlock));
        }
      };
      // Step j's tile (s: the CTA's running step) from codes c2 / scales s2 (kTW: the weight items
      // from w2c / w2s).
      auto fill = [&](int j, int s, const uint2 (&c2)[kRowItems], const uint32_t (&s2)[kRowItems],
                      const uint4 (&w2c)[4], uint2 w2s) {
        if constexpr (kResA) {
          // B tile of step s into ring slot s % 2; in the item's first column tile (j < KT) also A
          // tile j, once the consumers are done with the previous item's A tile j (its last column
          // tile's step j). One full barrier publishes both (and, at j = 0, rsrc / tile_info).
          const int b = s & 1;
          mbar_wait(empty0 + b * 8, ((s >> 1) & 1) ^ 1);
          if (j < KT) {
            if (ti > 0) mbar_wait(afree0 + j * 8, (ti - 1) & 1);
            const uint32_t abuf = tiles_p + j * kRaATile;
#pragma unroll
            for (int it = 0; it < kPItems / 3; ++it) ws_item_store(abuf + it * kItemBytes, off0, off1, c2[it], s2[it]);
          }
          const uint32_t bbuf = tiles_p + kRaKT * kRaATile + b * kRaBTile;
          if constexpr (kTW) {
            ws_tiled_items_store(bbuf, off0, off1, w2c, w2s);
          } else {
#pragma unroll
            for (int it = kPItems / 3; it < kPItems; ++it)
              ws_item_store(bbuf + (it - kPItems / 3) * kItemBytes, off0, off1, c2[it], s2[it]);
          }
          fence_proxy_async();
          mbar_arrive(full0 + b * 8);
        } else if constexpr (kTW) {  // ws_fill_tile with the weight items from their block
          const int b = s % NB;
          mbar_wait(empty0 + b * 8, ((s / NB) & 1) ^ 1);
          const uint32_t buf = tiles_p + b * kBufBytes;
#pragma unroll
          for (int it = 0; it < kPItems / 3; ++it) ws_item_store(buf + it * kItemBytes, off0, off1, c2[it], s2[it]);
          ws_tiled_items_store(buf + (kPItems / 3) * kItemBytes, off0, off1, w2c, w2s);
          fence_proxy_async();
          mbar_arrive(full0 + b * 8);
        } else {
          ws_fill_tile<NB>(tiles_p, full0, empty0, s, off0, off1, c2, s2);  // (the tile's first step also
                                                                             // publishes rsrc / tile_info)
        }
      };
      const int nsteps = (nt1 - nt0) * KT;
      set_ptrs(nt0);
      load_into(cd, sc, wcd, wsc, 0, true);
      int kn = 0, ntn = nt0;  // k tile and column tile of step j + 1 (as in ws_produce)
      auto next = [&](int j) {  // advance (kn, ntn) to step j + 1
        if (++kn == KT) {
          kn = 0;
          set_ptrs(++ntn);
        }
        return j + 1 < KT;
      };
      for (int j = 0; j < nsteps; ++j, ++s) {
        uint2 c2[kRowItems];
        uint32_t s2[kRowItems];
        uint4 w2c[4];
        const uint2 w2s = wsc;
#pragma unroll
        for (int it = 0; it < kRowItems; ++it) { c2[it] = cd[it]; s2[it] = sc[it]; }
#pragma unroll
        for (int i = 0; i < 4; ++i) w2c[i] = wcd[i];
        if (j + 1 < nsteps) {
          const bool wa = next(j);
          load_into(cd, sc, wcd, wsc, kn, wa);
        }
        fill(j, s, c2, s2, w2c, w2s);
      }
    }
    return;
  }

  // ---------------- consumers ----------------
  zero_tail_rows<kGemm1>(p, warp, lane);
  const int wm = warp >> 2, wn = warp & 3;
  const uint32_t tiles_u32 = smem_u32(smem);
  float acc[4][8][4];
  int s = 0, ti = 0;
  // Few values stay live across the K loop (the accumulators take 128 of the consumers' 160
  // registers): the tile's row, rows and scale are read from tile_info again where they are used.
  const volatile TileInfo* vinfo = tile_info;
  for (int w = blockIdx.x; w < work_s; w += gridDim.x, ++ti) {
    const int ng = w % p.n_groups;
    const int nt0 = ng * kNPer, nt1 = nt0 + kNPer < NT ? nt0 + kNPer : NT;
    // The tile's first step publishes it.
    mbar_wait(full0 + (s % NB) * 8, (s / NB) & 1);
    const int32_t* row_src = rsrc[ti & 1];
    bool warp_live = false;
#pragma unroll 8
    for (int r = 0; r < 64; ++r) warp_live |= row_src[wm * 64 + r] >= 0;
    warp_live = __any_sync(0xffffffffu, warp_live);  // warp-uniform around the wgmmas (C7518)
    for (int nt = nt0; nt < nt1; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;
      if constexpr (kResA) {
        // A from the resident tile kt, B from ring slot s % 2. In the item's last column tile each
        // A tile is released with the B tile of the same step.
        const bool last_col = nt + 1 == nt1;
        for (int kt = 0; kt < KT; ++kt, ++s) {
          const int b = s & 1;
          mbar_wait(full0 + b * 8, (s >> 1) & 1);
          const uint32_t a_base = tiles_u32 + kt * kRaATile + wm * 64 * 128;
          const uint32_t b_base = tiles_u32 + kRaKT * kRaATile + b * kRaBTile;
          if (warp_live) {
            acc_fence(acc);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk)
              wgmma_m64n256k16(acc, wgmma_desc(a_base + kk * 32), wgmma_desc(b_base + kk * 32));
            wgmma_commit();
          }
          wgmma_wait<1>();
          acc_fence(acc);
          if (kt > 0) {
            mbar_arrive(empty0 + ((s - 1) & 1) * 8);
            if (last_col) mbar_arrive(afree0 + (kt - 1) * 8);
          }
        }
        wgmma_wait<0>();
        acc_fence(acc);
        mbar_arrive(empty0 + ((s - 1) & 1) * 8);
        if (last_col) mbar_arrive(afree0 + (KT - 1) * 8);
      } else {
        for (int kt = 0; kt < KT; ++kt, ++s) {
          ws_consume_step<NB>(acc, tiles_u32, full0, s, wm, warp_live);  // step s - 1's tile goes back:
          if (kt > 0) mbar_arrive(empty0 + ((s - 1) % NB) * 8);
        }
        wgmma_wait<0>();
        acc_fence(acc);
        mbar_arrive(empty0 + ((s - 1) % NB) * 8);  // the column tile's last step
      }
      if constexpr (!kGemm1) {
        const int64_t r0 = vinfo[ti & 1].r0;
        const int nrows = vinfo[ti & 1].nrows;
        const float gsc = __fmul_rn(p.a_gs, p.w_gs[vinfo[ti & 1].e]);
        const int row_w = wm * 64 + wn * 16;
        unsigned char* const stg = epi + warp * (kStageOutBytes / 2);
        // The previous tile's TMA boxes (the same staging) must have been read; long done by now.
        if (p.tma_out && lane == 0) bulk_wait_read0();
        __syncwarp();
        const float g14 = __fmul_rn(gsc, kUnscale);
        if (p.tma_out && row_w + 16 <= nrows) {
          if (isfinite(g14))
            store_out_tile_tma_k<true>(p, &out_map, acc, stg, row_src, row_w, nt, r0, gsc, g14, lane);
          else
            store_out_tile_tma_k<false>(p, &out_map, acc, stg, row_src, row_w, nt, r0, gsc, g14, lane);
        } else {
          store_out_tile_half_staged(p, acc, stg, row_src, row_w, nt, nrows, r0, gsc, lane);
        }
        __syncwarp();
      }
    }
    if constexpr (kGemm1)
      gemm1_persist_epilogue(p, acc, epi, row_src, vinfo[ti & 1].r0, vinfo[ti & 1].nrows, nt0,
                             __fmul_rn(p.a_gs, p.w_gs[vinfo[ti & 1].e]), tid);
    mbar_arrive(free0 + (ti & 1) * 8);  // rsrc / tile_info slot ti & 1 may take tile ti + 2
  }
  if (!kGemm1 && p.tma_out && lane == 0) bulk_wait_read0();  // the staging outlives the last TMA store's reads
#else
  __trap();
#endif
}

// kWgmmaPersist on kGemm1Tiled weights (variant 13, gemm1 only): kVar 9 (the RS consumers, the tiled
// weight-only ring) as a persistent kernel: one CTA per SM walks its share of the (row tile, column
// tile) work items like persist_kernel, so the prologue (expert scan, barriers, register split) runs
// once per SM instead of once per tile, and the producers run on into the next item's weight steps
// while the consumers do the epilogue (SiLU-mul + requant through their own 32 KiB bf16 h tile,
// gemm1_persist_epilogue). The ring step s counts on across items; rsrc / tile_info are double
// buffered (free barriers) as in persist_kernel. Same items, fragments and epilogue values:
// bit-identical to kVar 9.
constexpr int persist_rs_smem_bytes() { return kRsStages * kRsBufBytes + kEpiBytes + kAlignPad; }
__global__ void __launch_bounds__(kThreads + kProducers, 1) persist_rs_kernel(Args p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int NB = kRsStages;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* const smem = smem_raw + ((kAlignPad - (smem_u32(smem_raw) & (kAlignPad - 1))) & (kAlignPad - 1));
  unsigned char* const epi = smem + NB * kRsBufBytes;
  __shared__ __align__(8) uint64_t mbar[2 * NB + 2];  // full[NB], empty[NB], tile_free[2]
  __shared__ int32_t rsrc[2][BM];
  __shared__ TileInfo tile_info[2];
  __shared__ int32_t red[(kThreads + kProducers) / 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int NT = p.N / kCols1;  // (kGemm1Tiled: I % 128 == 0)
  const int KT = p.K / BK;
  const uint32_t full0 = smem_u32(mbar), empty0 = full0 + NB * 8, free0 = empty0 + NB * 8;
  const int tiles = persist_prologue(p, red, NB, full0, empty0, free0, [] {});
  const int work = tiles * NT;  // < 2^31: the host checks (P / BM + E) * NT
  MOEPROF_SET_ROLE_REGS_RST(tid >= kThreads);

  if (tid >= kThreads) {
    // ---------------- producers ----------------
    const int pt = tid - kThreads;
    int ce = 0, cbase = 0, s = 0, ti = 0;
    for (int w = blockIdx.x; w < work; w += gridDim.x, ++ti) {
      const int m = w / NT, nt = w % NT;
      int e = 0, nrows = 0;
      int64_t r0 = 0;
      find_row_tile(p, m, lane, ce, cbase, e, r0, nrows);
      // Publish the item in slot ti & 1 (free once the consumers are done with item ti - 2); the
      // first step's full barrier makes it visible.
      if (ti >= 2) mbar_wait(free0 + (ti & 1) * 8, ((ti >> 1) - 1) & 1);
      int32_t src = -1;
      if (pt < nrows) src = p.p2t[r0 + pt];
      rsrc[ti & 1][pt] = src < 0 ? -1 : src;
      if (pt == 0) tile_info[ti & 1] = TileInfo{r0, e, nrows};
      ws_produce_tiled<NB>(p, smem, full0, empty0, pt, e, KT, nt, KT, s);
      s += KT;
    }
    return;
  }

  // ---------------- consumers ----------------
  zero_tail_rows<true>(p, warp, lane);
  const int g = lane >> 2, q = lane & 3;
  const int wm = warp >> 2, wn = warp & 3;
  const uint32_t tiles_u32 = smem_u32(smem);
  const uint32_t sel = rs_byte_sel(q);
  const volatile TileInfo* vinfo = tile_info;
  float acc[4][8][4];
  int s = 0, ti = 0;
  for (int w = blockIdx.x; w < work; w += gridDim.x, ++ti) {
    const int nt = w % NT;
    mbar_wait(full0 + (s % NB) * 8, (s / NB) & 1);  // the item's first step publishes it
    const int32_t* row_src = rsrc[ti & 1];
    bool warp_live = false;
#pragma unroll 8
    for (int r = 0; r < 64; ++r) warp_live |= row_src[wm * 64 + r] >= 0;
    warp_live = __any_sync(0xffffffffu, warp_live);  // warp-uniform around the wgmmas (C7518)
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;
    // kVar 9's consumer loop (ws_body), K tile kt at ring step s + kt.
    const int ra = wm * 64 + wn * 16 + g;
    RsA<true> A(p, row_src[ra], row_src[ra + 8]);
    uint32_t fa0[4][4], fa1[4][4];
    if (warp_live) {
      A.load(0, KT);
      A.make<0>(fa0, sel);
      if (KT > 1) A.load(1, KT);
    }
    auto step = [&](int kt, uint32_t(&cur)[4][4], uint32_t(&nxt)[4][4], auto par_next) {
      rs_wgmma_step<NB>(acc, cur, tiles_u32, full0, s + kt, warp_live);
      if (kt > 0) mbar_arrive(empty0 + ((s + kt - 1) % NB) * 8);
      if (warp_live && kt + 1 < KT) {
        A.make<decltype(par_next)::value>(nxt, sel);
        if (kt + 2 < KT) A.load(kt + 2, KT);
      }
    };
    for (int kt = 0; kt < KT; kt += 2) {
      step(kt, fa0, fa1, std::integral_constant<int, 1>{});
      if (kt + 1 < KT) step(kt + 1, fa1, fa0, std::integral_constant<int, 0>{});
    }
    wgmma_wait<0>();
    acc_fence(acc);
    s += KT;
    mbar_arrive(empty0 + ((s - 1) % NB) * 8);  // the item's last step
    gemm1_persist_epilogue(p, acc, epi, row_src, vinfo[ti & 1].r0, vinfo[ti & 1].nrows, nt,
                           __fmul_rn(p.a_gs, p.w_gs[vinfo[ti & 1].e]), tid);
    mbar_arrive(free0 + (ti & 1) * 8);  // rsrc / tile_info slot ti & 1 may take item ti + 2
  }
#else
  __trap();
#endif
}

}  // namespace v2
}  // namespace
}  // namespace moeprof::kern
