// tiled_kernel<kGemm1, kVar>, the kernel template of the grouped FP4 GEMMs' mma.sync tiled path
// (kVar 0-2: kTiled, kTiledSkip, kTiledStaged) and wgmma paths (3-6: kWgmma, kWgmmaWs, kWgmmaWs2,
// kWgmmaWsRs; 9: kWgmmaWsRs on kGemm1Tiled weights).
// A part of kernels/moe_gemm_fp4.cu, which includes the parts in the order of their definitions: the
// FP4 GEMMs are one translation unit (docs/kernels.md, "SASS of the parts"). Not for other files.
#pragma once
#include "kernels/moe_gemm_fp4_ws.cuh"

namespace moeprof::kern {
namespace {

namespace v2 {

// kWs instantiations return after ws_body: the rest of the body is unreachable there (warning 128).
#pragma nv_diag_suppress 128
template <bool kGemm1, int kVar>
__global__ void __launch_bounds__(kVar >= 4 ? kThreads + kProducers : kThreads, 1) tiled_kernel(Args p) {
  constexpr bool kSkip = kVar >= 1, kStaged = !kGemm1 && kVar >= 2, kWg = kVar >= 3, kWs = kVar >= 4;
  constexpr int kNT = kWs ? kThreads + kProducers : kThreads;  // kWs: + 1 producer warpgroup
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // kWg: operand tiles 1024-byte aligned (swizzle atoms); the dynamic buffer has kAlignPad spare bytes.
  unsigned char* const smem = kWg ? smem_raw + ((kAlignPad - (smem_u32(smem_raw) & (kAlignPad - 1))) & (kAlignPad - 1)) : smem_raw;
  __shared__ int32_t row_src[BM];
  __shared__ int32_t warp_tot[kNT / 32];
  __shared__ __align__(8) uint64_t mbar[2 * kWsStages];  // kWs: full[NB], empty[NB]
  __shared__ int64_t info[3];  // expert, first padded row, rows

  constexpr int kCols = kGemm1 ? kCols1 : kCols2;
  constexpr int kNPer = n_per<kGemm1, kVar>();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;
  const int wm = warp >> 2, wn = warp & 3;
  const int m_idx = static_cast<int>(blockIdx.x / p.n_groups), ng = static_cast<int>(blockIdx.x % p.n_groups);
  const int NT = (p.N + kCols - 1) / kCols;
  const int nt0 = ng * kNPer, nt1 = nt0 + kNPer < NT ? nt0 + kNPer : NT;
  if (nt0 >= NT) return;

  // ---- which (expert, row tile) this CTA owns: block scan of ceil(rows_e / BM)
  {
    const int chunk = (p.E + kThreads - 1) / kThreads;
    const int e_lo = tid * chunk < p.E ? tid * chunk : p.E;
    const int e_hi = e_lo + chunk < p.E ? e_lo + chunk : p.E;
    int cnt = 0;
    for (int e = e_lo; e < e_hi; ++e) {
      int64_t s, t;
      seg_of(p, e, s, t);
      cnt += static_cast<int>((t - s + BM - 1) / BM);
    }
    int v = cnt;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, v, o);
      if (lane >= o) v += y;
    }
    if (lane == 31) warp_tot[warp] = v;
    if (tid == 0) info[0] = -1;
    __syncthreads();
    int base = 0, tot = 0;
#pragma unroll
    for (int w = 0; w < kNT / 32; ++w) {
      base += w < warp ? warp_tot[w] : 0;
      tot += warp_tot[w];
    }
    const int excl = base + v - cnt;
    if (m_idx >= excl && m_idx < excl + cnt) {
      int local = m_idx - excl;
      for (int e = e_lo; e < e_hi; ++e) {
        int64_t s, t;
        seg_of(p, e, s, t);
        const int n = static_cast<int>((t - s + BM - 1) / BM);
        if (local < n) {
          const int64_t r0 = s + static_cast<int64_t>(local) * BM;
          info[0] = e;
          info[1] = r0;
          info[2] = t - r0 < BM ? t - r0 : BM;
          break;
        }
        local -= n;
      }
    }
    if (tid == 0 && m_idx >= tot) info[1] = tot;  // spare CTA: remember the tile count
    __syncthreads();
  }
  if (info[0] < 0) {
    // Spare CTA: zeros for rows [offsets[E], P) in this CTA's columns, grid-strided over BM-row chunks.
    const int tot = static_cast<int>(info[1]);
    if (m_idx < tot) return;  // (cannot happen: every tile index below tot is owned)
    int64_t total = p.offsets[p.E];
    total = total < 0 ? 0 : (total > p.P ? p.P : total);
    const int spare = p.grid_m - tot;
    const int c_lo = nt0 * kCols, c_hi = nt1 * kCols < p.N ? nt1 * kCols : p.N;
    for (int64_t z0 = total + static_cast<int64_t>(m_idx - tot) * BM; z0 < p.P; z0 += static_cast<int64_t>(spare) * BM) {
      const int64_t z1 = z0 + BM < p.P ? z0 + BM : p.P;
      if constexpr (kGemm1) {
        const int cb = (c_hi - c_lo) / 2, sb = (c_hi - c_lo) / 16;
        for (int64_t idx = tid; idx < (z1 - z0) * (cb + sb); idx += kNT) {
          const int64_t r = z0 + idx / (cb + sb);
          const int c = static_cast<int>(idx % (cb + sb));
          if (c < cb) p.out_q[r * p.ld_out_q + c_lo / 2 + c] = 0;
          else p.out_sc[r * p.ld_out_sc + c_lo / 16 + (c - cb)] = 0;
        }
      } else {
        const int w = c_hi - c_lo;
        for (int64_t idx = tid; idx < (z1 - z0) * w; idx += kNT) {
          const int64_t r = z0 + idx / w;
          p.out[r * p.ld_out + c_lo + idx % w] = 0;
        }
      }
    }
    return;
  }
  const int e = static_cast<int>(info[0]);
  const int64_t r0 = info[1];
  const int nrows = static_cast<int>(info[2]);
  if (tid < BM) {
    int32_t src = -1;
    if (tid < nrows) {
      const int32_t t = p.p2t[r0 + tid];
      src = t < 0 ? -1 : (kGemm1 ? t : static_cast<int32_t>(r0 + tid));
    }
    row_src[tid] = src;
  }
  __syncthreads();
  // kSkip: does this warp's 64-row slice hold any live row? (warp-uniform: same shared reads)
  bool warp_live = true;
  if constexpr (kSkip) {
    warp_live = false;
#pragma unroll 8
    for (int r = 0; r < 64; ++r) warp_live |= row_src[(wm & 1) * 64 + r] >= 0;  // (kWs producers: unused)
    // kWg: a vote makes the flag provably warp-uniform (a branch the compiler thinks divergent around
    // wgmma makes ptxas serialize the wgmmas, C7518); it is the same in the whole warpgroup anyway.
    if constexpr (kWg) warp_live = __any_sync(0xffffffffu, warp_live);
  }
  if constexpr (kWs) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    ws_body<kGemm1, kVar>(p, smem, row_src, mbar, e, r0, nrows, nt0, nt1, warp_live);
#else
    __trap();
#endif
    return;
  }

  // ---- per-thread copy assignments (the same (row, k-block) items are dequantized by this thread)
  // code items c = it * 256 + tid, it 0..5: row c >> 2 (0..127 A, 128..383 B), k-block c & 3.
  // scale rows: tid and tid + 256 (< 384).
  const uint8_t* a_code[2];
#pragma unroll
  for (int it = 0; it < 2; ++it) {
    const int c = it * kThreads + tid;
    const int32_t src = row_src[c >> 2];
    a_code[it] = src >= 0 ? p.a + src * p.ld_a + (c & 3) * 8 : nullptr;
  }
  const uint8_t* a_scale = nullptr;
  if (tid < BM) {
    const int32_t src = row_src[tid];
    a_scale = src >= 0 ? p.a_sc + src * p.ld_a_sc : nullptr;
  }
  auto w_row = [&](int br, int nt) -> int64_t { return weight_row<kGemm1>(p, e, nt, br); };

  const int KT = p.K / BK;
  const int nsteps = (nt1 - nt0) * KT;
  const uint32_t ring = smem_u32(smem);
  unsigned char* const bufs = smem + kRingBytes;

  auto load_stage = [&](int s) {
    const int nt = nt0 + s / KT, kt = s % KT;
    const uint32_t st = ring + (s % kStages) * kStageBytes;
#pragma unroll
    for (int it = 0; it < 6; ++it) {
      const int c = it * kThreads + tid;
      const uint32_t dst = st + (c >> 2) * 32 + (c & 3) * 8;
      if (it < 2) {
        cp_async8(dst, a_code[it] ? a_code[it] + kt * 32 : p.a, a_code[it] != nullptr);
      } else {
        const int64_t wr = w_row((c >> 2) - BM, nt);
        cp_async8(dst, wr >= 0 ? p.w + wr * p.ld_w + (c & 3) * 8 + kt * 32 : p.w, wr >= 0);
      }
    }
    // scales
    {
      const uint32_t dst = st + kStageCodes + tid * 4;
      if (tid < BM) {
        cp_async4(dst, a_scale ? a_scale + kt * 4 : p.a_sc, a_scale != nullptr);
      } else {
        const int64_t wr = w_row(tid - BM, nt);
        cp_async4(dst, wr >= 0 ? p.w_sc + wr * p.ld_w_sc + kt * 4 : p.w_sc, wr >= 0);
      }
      if (tid < kRows - kThreads) {
        const int64_t wr = w_row(tid + kThreads - BM, nt);
        cp_async4(dst + kThreads * 4, wr >= 0 ? p.w_sc + wr * p.ld_w_sc + kt * 4 : p.w_sc, wr >= 0);
      }
    }
  };
  auto dequant_item = [&](int s, int it) {
    const unsigned char* st = smem + (s % kStages) * kStageBytes;
    unsigned char* buf = bufs + (s & 1) * kBufBytes;
    const int c = it * kThreads + tid;
    const int row = c >> 2, kb = c & 3;
    const uint2 codes = *reinterpret_cast<const uint2*>(st + row * 32 + kb * 8);
    const uint8_t sc = st[kStageCodes + row * 4 + kb];
    const uint32_t s2 = e4m3_to_f16x2_x128(sc);
    uint32_t o[8];
    if constexpr (kVar >= 1) {
      e2m1x8_to_f16x8_fast(codes.x, s2, o);
      e2m1x8_to_f16x8_fast(codes.y, s2, o + 4);
    } else {
      e2m1x8_to_f16x8(codes.x, s2, o);
      e2m1x8_to_f16x8(codes.y, s2, o + 4);
    }
    unsigned char* rowp = buf + row * 128;
    *reinterpret_cast<uint4*>(rowp + (((2 * kb) ^ (row & 7)) << 4)) = make_uint4(o[0], o[1], o[2], o[3]);
    *reinterpret_cast<uint4*>(rowp + (((2 * kb + 1) ^ (row & 7)) << 4)) = make_uint4(o[4], o[5], o[6], o[7]);
  };

  // ldmatrix row offsets (bytes within a tile); the swizzle term is lane & 7 for every row used.
  uint32_t a_off[4], b_off[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) a_off[i] = (wm * 64 + i * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * 128;
#pragma unroll
  for (int jp = 0; jp < 4; ++jp) {
    const int j = 2 * jp + (lane >> 4);
    const int br = kGemm1 ? (j < 4 ? wn * 32 + j * 8 : kCols1 + wn * 32 + (j - 4) * 8) : wn * 64 + j * 8;
    b_off[jp] = (BM + br + (lane & 7)) * 128;
  }
  const uint32_t sw = lane & 7;
  const uint32_t a_ch = lane >> 4, b_ch = (lane >> 3) & 1;

  float acc[4][8][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;

  const float gsc = __fmul_rn(p.a_gs, p.w_gs[e]);

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nsteps) load_stage(s);
    cp_async_commit();
  }
  cp_async_wait<kStages - 2>();
  __syncthreads();
#pragma unroll
  for (int it = 0; it < 6; ++it) dequant_item(0, it);
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (kWg) fence_proxy_async();
#endif

  for (int s = 0; s < nsteps; ++s) {
    if (s + kStages - 1 < nsteps) load_stage(s + kStages - 1);
    cp_async_commit();
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const uint32_t buf = smem_u32(bufs + (s & 1) * kBufBytes);
    const bool next = s + 1 < nsteps;
    if constexpr (kWg) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
      // This warpgroup's 64 A rows (tile rows 64 wm ..) times all 256 B rows, 4 k16 steps: +32 bytes
      // of start address per step inside the 128-byte swizzled rows.
      const uint32_t a_base = buf + wm * 64 * 128, b_base = buf + BM * 128;
      if (warp_live) {
        acc_fence(acc);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) wgmma_m64n256k16(acc, wgmma_desc(a_base + kk * 32), wgmma_desc(b_base + kk * 32));
        wgmma_commit();
      }
      if (next) {
#pragma unroll
        for (int it = 0; it < 6; ++it) dequant_item(s + 1, it);
        fence_proxy_async();  // before the next barrier: the next step's wgmmas read these stores
      }
      wgmma_wait0();  // unconditional (no-op without pending wgmmas): every path sees the wait
      acc_fence(acc);
#else
      __trap();  // kWgmma needs sm_90a (never launched otherwise: the host checks MOEPROF_HAVE_SM90A)
#endif
    } else {
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      if (!kSkip || warp_live) {
      uint32_t af[4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) ldsm_x4(af[i], buf + a_off[i] + (((2 * kk + a_ch) ^ sw) << 4));
#pragma unroll
      for (int jp = 0; jp < 4; ++jp) {
        uint32_t bf[4];
        ldsm_x4(bf, buf + b_off[jp] + (((2 * kk + b_ch) ^ sw) << 4));
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          mma_f16_16816(acc[i][2 * jp], af[i], bf[0], bf[1]);
          mma_f16_16816(acc[i][2 * jp + 1], af[i], bf[2], bf[3]);
        }
      }
      }
      if (next) {
        // 6 items over the 4 k16 steps: 1, 2, 1, 2
#pragma unroll
        for (int it = (kk * 6) / 4; it < ((kk + 1) * 6) / 4; ++it) dequant_item(s + 1, it);
      }
    }
    }

    if constexpr (!kGemm1) {
      if (kWg && s % KT == KT - 1) {
        const int nt = nt0 + s / KT;
        const int row_w = wm * 64 + wn * 16;
        store_out_tile_staged(p, acc, smem + kSmemBytes + warp * kStageOutBytes, row_src, row_w, nt, nrows, r0, gsc, lane);
        __syncwarp();  // staging tile free for the next column tile
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;
      } else if (kStaged && s % KT == KT - 1) {
        // Fragments -> this warp's 64 x 64 bf16 staging tile (row pitch 128 B, chunk ^ (row & 7)).
        const int nt = nt0 + s / KT;
        unsigned char* stg = smem + kSmemBytes + warp * kStageOutBytes;
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int lr = i * 16 + g + hh * 8;
            const bool live = row_src[wm * 64 + lr] >= 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              const float v0 = __fmul_rn(__fmul_rn(acc[i][j][2 * hh], kUnscale), gsc);
              const float v1 = __fmul_rn(__fmul_rn(acc[i][j][2 * hh + 1], kUnscale), gsc);
              *reinterpret_cast<uint32_t*>(stg + lr * 128 + ((j ^ (lr & 7)) << 4) + q * 4) =
                  live ? pack_bf16x2(v0, v1) : 0u;
            }
          }
        __syncwarp();
        // 64 rows x 8 chunks of 16 bytes: lane -> (row it * 4 + lane / 8, chunk lane % 8).
        const int col0 = nt * kCols2 + wn * 64;
#pragma unroll 4
        for (int it = 0; it < 16; ++it) {
          const int lr = it * 4 + (lane >> 3), ch = lane & 7;
          const int row = wm * 64 + lr;
          if (row >= nrows) continue;
          const int col = col0 + ch * 8;
          const uint4 v = *reinterpret_cast<const uint4*>(stg + lr * 128 + ((ch ^ (lr & 7)) << 4));
          uint16_t* dst = p.out + (r0 + row) * p.ld_out + col;
          if (p.vec16_out && col + 8 <= p.N) {
            *reinterpret_cast<uint4*>(dst) = v;
          } else {
            const uint32_t w4[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int c = 0; c < 8; ++c)
              if (col + c < p.N) dst[c] = static_cast<uint16_t>(w4[c >> 1] >> ((c & 1) * 16));
          }
        }
        __syncwarp();  // staging tile free for the next column tile
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;
      } else if (s % KT == KT - 1) {
        const int nt = nt0 + s / KT;
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int row = wm * 64 + i * 16 + g + hh * 8;
            if (row >= nrows) continue;
            const bool live = row_src[row] >= 0;
            uint16_t* dst = p.out + (r0 + row) * p.ld_out;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              const int col = nt * kCols2 + wn * 64 + j * 8 + 2 * q;
              const float v0 = __fmul_rn(__fmul_rn(acc[i][j][2 * hh], kUnscale), gsc);
              const float v1 = __fmul_rn(__fmul_rn(acc[i][j][2 * hh + 1], kUnscale), gsc);
              if (p.vec_out && col + 1 < p.N) {
                *reinterpret_cast<uint32_t*>(dst + col) = live ? pack_bf16x2(v0, v1) : 0u;
              } else {
                if (col < p.N) dst[col] = live ? f32_to_bf16(v0) : uint16_t{0};
                if (col + 1 < p.N) dst[col + 1] = live ? f32_to_bf16(v1) : uint16_t{0};
              }
            }
          }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;
      }
    }
  }

  if constexpr (kGemm1) {
    // h = bf16(silu(gate) * up) into shared memory (aliases the operand tiles; SiLU by silu_f32),
    // then NVFP4 per 16-column block exactly as the legacy epilogue does.
    cp_async_wait<0>();
    __syncthreads();
    float* Hs = reinterpret_cast<float*>(smem);
    if constexpr (kWg) {
      // wgmma fragments: rows 64 wm + 16 wn + g (+8), gate column 8 j + 2 q (+1) in acc[j / 8][j % 8],
      // j = 0..15; the matching up column in j + 16.
      const int row_w = wm * 64 + wn * 16 + g;
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          float hv[2];
#pragma unroll
          for (int c = 0; c < 2; ++c) hv[c] = silu_mul_h<false>(acc, j, 2 * hh + c, gsc, 0.0f);
          *reinterpret_cast<float2*>(Hs + (row_w + hh * 8) * kHPitch + j * 8 + 2 * q) = make_float2(hv[0], hv[1]);
        }
    } else {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int row = wm * 64 + i * 16 + g + (c >> 1) * 8;
          const int col = wn * 32 + j * 8 + 2 * q + (c & 1);
          const float gate = __fmul_rn(__fmul_rn(acc[i][j][c], kUnscale), gsc);
          const float up = __fmul_rn(__fmul_rn(acc[i][j + 4][c], kUnscale), gsc);
          const float silu = silu_f32(gate);
          Hs[row * kHPitch + col] = round_bf16(__fmul_rn(silu, up));
        }
    }
    __syncthreads();
#pragma unroll 1
    for (int it = 0; it < (BM * kCols1 / 16) / kThreads; ++it) {
      const int item = it * kThreads + tid;
      const int row = item >> 3, blk = item & 7;
      const int n = nt0 * kCols1 + blk * 16;
      if (row >= nrows || n >= p.N) continue;
      store_requant_block(p, Hs + row * kHPitch + blk * 16, row_src[row] >= 0, r0 + row, n);
    }
  }
}

#pragma nv_diag_default 128

}  // namespace v2
}  // namespace
}  // namespace moeprof::kern
