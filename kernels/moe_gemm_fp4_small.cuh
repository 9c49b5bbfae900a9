// small_kernel<kGemm1, kTiledW>, the grouped FP4 GEMMs for few rows per expert (Fp4GemmPath::kSmallM,
// what kAuto runs at decode): the weights are the MMA's M side and the expert's rows its N side
// ("swap AB"), so a segment of up to 16 rows costs mma.sync m16n8k16 work for 8 or 16 rows, not
// the 64- or 128-row tiles of the other paths, and the kernel is bound by reading the weights.
// A part of kernels/moe_gemm_fp4.cu, which includes the parts in the order of their definitions: the
// FP4 GEMMs are one translation unit (docs/kernels.md, "SASS of the parts"). Not for other files.
//
// One CTA (4 warps) per (expert e, column tile nt): the tile's 256 weight rows over all of K, in the
// order of the kGemm1Tiled / kGemm2Tiled layouts (kernels/common/fp4_tiled.h): gemm1 tile rows
// 0..127 are gate rows nt*128 + 0..127, 128..255 the matching up rows; gemm2 tile row br is weight
// row nt*256 + br. Lane l of warp w is the layout's producer thread pt = 32 w + l: per K step (64
// elements) it owns the 16-byte chunks j = 0..3, each the 16 codes of tile rows 64 j + pt/4 and
// 64 j + 32 + pt/4 at k16 block pt % 4, and their 8 scale bytes. Those two rows are the rows g and
// g + 8 (g = l / 4) of the warp's m16n8k16 A fragments, and its k16 block is q = l % 4, so the four
// lanes of a quad each bring a different k16 block into the same MMA. Because every operand is
// dequantized with its own block scale before the MMA (e2m1 * e4m3 * 2^-7, exact in fp16: the
// values of the other paths' e2m1x8_to_f16x8_fast, by e2m1x8_to_f16x8_perm, which orders them
// differently with two permutes fewer), which k16 block (and which code) supplies which k slot does
// not change the sum: mma m (0..3) takes four codes of the lane's block (the same four on both
// operands), and the B fragment of lane (g, q) is those codes of row g of the pass, read by that
// lane itself. Each lane thus
// copies (cp.async, a private 3-stage ring per warp, no barrier in the K loop) exactly what it
// reads: the weight chunks, the scale bytes and one 8-code activation item per 8 rows.
// Passes of 16 rows over the expert's segment (the second 8 only where the pass has more than 8);
// fp32 accumulators, 2^-14 undone in the epilogue with the global scales as the other tiled paths
// do; gemm1's SiLU-mul and NVFP4 requantization and gemm2's bf16 rows go through shared memory
// (aliasing the rings) to row-contiguous stores. Dead rows (padding, past offsets[E]) get zeros.
#pragma once
#include "kernels/moe_gemm_fp4_persist.cuh"

namespace moeprof::kern {
namespace {

namespace v2 {

// Three stages and at most 96 registers: 5 CTAs (20 warps) per SM (36,864 B of shared memory each).
// Against four stages and 4 CTAs per SM: the same speed or slightly faster on an H100 at batches 8,
// 64 and 256 (docs/performance.md, "The expert GEMMs at decode batches").
constexpr int kSmThreads = 128, kSmStages = 3, kSmPass = 16, kSmMinBlocks = 5;
// One stage of a warp's ring: weight codes (4 chunks x 32 lanes x 16 B), weight scales (32 x 8 B),
// activation codes (2 row groups x 32 x 8 B), activation scale words (2 x 32 x 4 B).
constexpr int kSmWScales = 2048, kSmACodes = 2304, kSmAScales = 2816, kSmStage = 3072;
constexpr int kSmSmemBytes = (kSmThreads / 32) * kSmStages * kSmStage;  // 36,864
constexpr int kSmHPitch = 128 + 8, kSmOPitch = 256 + 8;                 // epilogue tiles (bf16)
static_assert(kSmPass * kSmOPitch * 2 <= kSmSmemBytes && kSmPass * kSmHPitch * 2 <= kSmSmemBytes,
              "the epilogue tiles fit the rings");
// kAuto takes kSmallM where the padded rows average at most this many per expert (P <= 32 E):
// decode batches; prefill keeps the 128-row tiles. At Kimi-K2.5's rank shapes on an H100
// (bench_moe_decode, docs/performance.md) kSmallM's gemm1 + gemm2 beat the 128-row paths at every
// batch measured, 1 to 512 tokens (P = 25.7 E at 512); larger batches were not measured.
constexpr int64_t kSmAutoRowsPerExpert = 32;

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

template <bool kGemm1, bool kTW>
__global__ void __launch_bounds__(kSmThreads, kSmMinBlocks) small_kernel(Args p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  constexpr int kCols = kGemm1 ? kCols1 : kCols2;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int pt = warp * 32 + lane;
  const uint32_t asel = static_cast<uint32_t>(q) * 0x11u;  // byte q of an activation scale word, twice
  const int ntiles = p.N / kCols;
  const int e = static_cast<int>(blockIdx.x / ntiles), nt = static_cast<int>(blockIdx.x % ntiles);
  const int KT = p.K / BK;
  int64_t total = p.offsets[p.E];
  total = total < 0 ? 0 : (total > p.P ? p.P : total);
  int64_t seg0 = p.offsets[e], seg1 = p.offsets[e + 1];
  seg0 = seg0 < 0 ? 0 : seg0;
  seg1 = seg1 > total ? total : seg1;
  const float gsc = __fmul_rn(p.a_gs, p.w_gs[e]);
  const float g14 = __fmul_rn(gsc, kUnscale);
  const bool fold = isfinite(g14);
  auto unsc = [&](float a) { return fold ? unscale<true>(a, gsc, g14) : unscale<false>(a, gsc, g14); };
  unsigned char* const ring = smem_raw + warp * (kSmStages * kSmStage);
  const uint32_t ring_s = smem_u32(ring);
  // Weight row of tile row 32 it + pt / 4 (row-major weights).
  auto wrow = [&](int it) -> int64_t {
    const int br = 32 * it + (pt >> 2);
    if (kGemm1) return static_cast<int64_t>(e) * 2 * p.N + (br >= 128 ? p.N : 0) + nt * 128 + (br & 127);
    return static_cast<int64_t>(e) * p.N + nt * 256 + br;
  };

  for (int64_t r0 = seg0; r0 < seg1; r0 += kSmPass) {
    const int ng = seg1 - r0 > 8 ? 2 : 1;  // the same in every thread of the CTA
    const uint8_t* a_src[2];
    const uint8_t* as_src[2];
    bool a_ok[2];
#pragma unroll
    for (int tg = 0; tg < 2; ++tg) {
      const int64_t r = r0 + tg * 8 + g;
      const int32_t t = r < seg1 ? p.p2t[r] : -1;
      a_ok[tg] = t >= 0;
      const int64_t src = a_ok[tg] ? (kGemm1 ? static_cast<int64_t>(t) : r) : 0;
      a_src[tg] = p.a + src * p.ld_a + q * 8;
      as_src[tg] = p.a_sc + src * p.ld_a_sc;
    }
    // NG (the pass's 8-row groups, 1 or 2) is a compile-time constant of the K loop below, so its
    // copies, dequantization and MMAs carry no per-step branch on it.
    auto issue = [&](int kt, int slot, auto ngc) {
      constexpr int NG = decltype(ngc)::value;
      const uint32_t st = ring_s + slot * kSmStage;
      if constexpr (kTW) {
        const int64_t blk = (static_cast<int64_t>(e) * ntiles + nt) * KT + kt;
        const uint8_t* c = p.w + blk * kTiledCodeBlock + pt * 16;
#pragma unroll
        for (int j = 0; j < 4; ++j) cp_async16(st + j * 512 + lane * 16, c + j * 2048, true);
        cp_async8(st + kSmWScales + lane * 8, p.w_sc + blk * kTiledScaleBlock + pt * 8, true);
      } else {
        const int64_t kc = static_cast<int64_t>(kt) * 32 + (pt & 3) * 8, ks = static_cast<int64_t>(kt) * 4 + (pt & 3);
        uint32_t sw[2] = {0u, 0u};
#pragma unroll
        for (int it = 0; it < 8; ++it) {
          const int64_t row = wrow(it);
          cp_async8(st + (it >> 1) * 512 + lane * 16 + (it & 1) * 8, p.w + row * p.ld_w + kc, true);
          sw[it >> 2] |= static_cast<uint32_t>(p.w_sc[row * p.ld_w_sc + ks]) << (8 * (it & 3));
        }
        *reinterpret_cast<uint2*>(ring + slot * kSmStage + kSmWScales + lane * 8) = make_uint2(sw[0], sw[1]);
      }
#pragma unroll
      for (int tg = 0; tg < NG; ++tg) {
        cp_async8(st + kSmACodes + tg * 256 + lane * 8, a_src[tg] + static_cast<int64_t>(kt) * 32, a_ok[tg]);
        cp_async4(st + kSmAScales + tg * 128 + lane * 4, as_src[tg] + static_cast<int64_t>(kt) * 4, a_ok[tg]);
      }
    };

    float acc[2][4][4];
#pragma unroll
    for (int tg = 0; tg < 2; ++tg)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[tg][j][c] = 0.0f;

    auto k_loop = [&](auto ngc) {
      constexpr int NG = decltype(ngc)::value;
#pragma unroll
      for (int s = 0; s < kSmStages - 1; ++s) {
        if (s < KT) issue(s, s, ngc);
        cp_async_commit();
      }
      for (int kt = 0; kt < KT; ++kt) {
        if (kt + kSmStages - 1 < KT) issue(kt + kSmStages - 1, (kt + kSmStages - 1) % kSmStages, ngc);
        cp_async_commit();
        cp_async_wait<kSmStages - 1>();  // this lane's copies of step kt have landed
        const unsigned char* st = ring + (kt % kSmStages) * kSmStage;
        const uint2 wsc = *reinterpret_cast<const uint2*>(st + kSmWScales + lane * 8);
        uint32_t wsh[8];  // step j's scales: wsh[2 j] (row g) and wsh[2 j + 1] (row g + 8), x 2^7
        e4m3x2_to_f16x2_x128(wsc.x, wsh[0], wsh[1]);
        e4m3x2_to_f16x2_x128(wsc.x >> 16, wsh[2], wsh[3]);
        e4m3x2_to_f16x2_x128(wsc.y, wsh[4], wsh[5]);
        e4m3x2_to_f16x2_x128(wsc.y >> 16, wsh[6], wsh[7]);
        uint32_t b[2][8];
#pragma unroll
        for (int tg = 0; tg < NG; ++tg) {
          const uint2 ac = *reinterpret_cast<const uint2*>(st + kSmACodes + tg * 256 + lane * 8);
          const uint32_t asw = *reinterpret_cast<const uint32_t*>(st + kSmAScales + tg * 128 + lane * 4);
          const uint32_t s2 = e4m3_byte_to_f16x2_x128(asw, asel);
          e2m1x8_to_f16x8_perm(ac.x, s2, b[tg]);
          e2m1x8_to_f16x8_perm(ac.y, s2, b[tg] + 4);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint4 c = *reinterpret_cast<const uint4*>(st + j * 512 + lane * 16);
          const uint32_t s0 = wsh[2 * j], s1 = wsh[2 * j + 1];
          uint32_t w0[8], w1[8];
          e2m1x8_to_f16x8_perm(c.x, s0, w0);
          e2m1x8_to_f16x8_perm(c.y, s0, w0 + 4);
          e2m1x8_to_f16x8_perm(c.z, s1, w1);
          e2m1x8_to_f16x8_perm(c.w, s1, w1 + 4);
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            const uint32_t a[4] = {w0[2 * m], w1[2 * m], w0[2 * m + 1], w1[2 * m + 1]};
            mma_f16_16816(acc[0][j], a, b[0][2 * m], b[0][2 * m + 1]);
            if constexpr (NG > 1) mma_f16_16816(acc[1][j], a, b[1][2 * m], b[1][2 * m + 1]);
          }
        }
      }
    };
    if (ng == 1) k_loop(std::integral_constant<int, 1>{});
    else k_loop(std::integral_constant<int, 2>{});
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with its ring: the epilogue tile aliases them

    // Accumulator (tg, j, 2 hh + c): pass row tg * 8 + 2q + c, tile row 64 j + 8 warp + g + 32 hh.
    uint16_t* tile = reinterpret_cast<uint16_t*>(smem_raw);
    if constexpr (kGemm1) {
#pragma unroll
      for (int tg = 0; tg < 2; ++tg) {
        if (tg >= ng) break;
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float gate = unsc(acc[tg][j][i]), up = unsc(acc[tg][j + 2][i]);
            const int row = tg * 8 + 2 * q + (i & 1), col = 64 * j + 8 * warp + g + 32 * (i >> 1);
            tile[row * kSmHPitch + col] = f32_to_bf16(__fmul_rn(silu_f32(gate), up));
          }
      }
      __syncthreads();
      {  // 16 rows x 8 blocks of 16 columns: one block per thread
        const int row = tid >> 3, blk = tid & 7;
        const int64_t r = r0 + row;
        if (r < seg1) {
          const uint32_t* src = reinterpret_cast<const uint32_t*>(tile + row * kSmHPitch + blk * 16);
          uint32_t w[8];
#pragma unroll
          for (int c = 0; c < 8; ++c) w[c] = src[c];
          store_requant_words(p, w, p.p2t[r] >= 0, r, nt * 128 + blk * 16);
        }
      }
    } else {
#pragma unroll
      for (int tg = 0; tg < 2; ++tg) {
        if (tg >= ng) break;
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int row = tg * 8 + 2 * q + (i & 1), col = 64 * j + 8 * warp + g + 32 * (i >> 1);
            tile[row * kSmOPitch + col] = f32_to_bf16(unsc(acc[tg][j][i]));
          }
      }
      __syncthreads();
      // 16 rows x 32 chunks of 8 columns, row-contiguous.
      for (int i = tid; i < kSmPass * 32; i += kSmThreads) {
        const int row = i >> 5, ch = i & 31;
        const int64_t r = r0 + row;
        if (r >= seg1) continue;
        const bool live = p.p2t[r] >= 0;
        const uint16_t* src = tile + row * kSmOPitch + ch * 8;
        uint16_t* dst = p.out + r * p.ld_out + nt * 256 + ch * 8;
        if (p.vec16_out) {
          *reinterpret_cast<uint4*>(dst) = live ? *reinterpret_cast<const uint4*>(src) : make_uint4(0u, 0u, 0u, 0u);
        } else {
#pragma unroll
          for (int c = 0; c < 8; ++c) dst[c] = live ? src[c] : uint16_t{0};
        }
      }
    }
    __syncthreads();  // the tile is read before the next pass's copies land in the rings
  }

  // Rows past the last segment (offsets[E] .. P - 1): zeros, rows total + e + E i for this CTA.
  for (int64_t r = total + e; r < p.P; r += p.E) {
    if constexpr (kGemm1) {
      if (tid < 64) p.out_q[r * p.ld_out_q + nt * 64 + tid] = 0;
      if (tid < 8) p.out_sc[r * p.ld_out_sc + nt * 8 + tid] = 0;
    } else {
      for (int c = tid; c < 256; c += kSmThreads) p.out[r * p.ld_out + nt * 256 + c] = 0;
    }
  }
}

}  // namespace v2
}  // namespace
}  // namespace moeprof::kern
