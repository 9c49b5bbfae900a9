#include "kernels/mla_attention.cuh"

#include <cmath>

#include "kernels/attention_ptx.cuh"

namespace moeprof::kern {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

// ---- tensor-core path ----------------------------------------------------------------------
// Block: 64 queries of one head, 4 warps x 16 query rows; key tiles of 64. D / DV: padded dims.
constexpr int kBM = 64, kBN = 64, kWarps = 4, kThreads = kWarps * 32;

template <int D, int DV>
struct Smem {
  static constexpr int kQPitch = D + 8, kVPitch = DV + 8;  // conflict-free 32-bit fragment loads
  static constexpr size_t kBytes = (static_cast<size_t>(kBM) * kQPitch + kBN * kQPitch + kBN * kVPitch) * 2;
};

// Copies rows [r0, r0+64) x cols [0, dim) of a head into smem (pitch `pitch`), zero-filling
// columns >= dim up to `dpad` and rows >= T.
__device__ __forceinline__ void load_tile(uint16_t* dst, int pitch, int dpad, const uint16_t* src, int64_t ld,
                                          int64_t col0, int64_t r0, int64_t T, int64_t dim, bool vec) {
  const int chunks = dpad / 8;
  for (int idx = threadIdx.x; idx < 64 * chunks; idx += blockDim.x) {
    const int r = idx / chunks, c = (idx - r * chunks) * 8;
    uint16_t* d = dst + r * pitch + c;
    const int64_t row = r0 + r;
    if (row < T && c + 8 <= dim && vec) {
      *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(src + row * ld + col0 + c);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) d[j] = (row < T && c + j < dim) ? src[row * ld + col0 + c + j] : uint16_t{0};
    }
  }
}

template <int D, int DV>
__global__ void __launch_bounds__(kThreads) attention_tc_kernel(AttentionArgs a, bool vec) {
  using S = Smem<D, DV>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* Qs = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* Ks = Qs + kBM * S::kQPitch;
  uint16_t* Vs = Ks + kBN * S::kQPitch;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q4 = lane & 3;
  const int qb = gridDim.x - 1 - blockIdx.x;  // longest rows first
  const int64_t h = blockIdx.y;
  const int64_t q0 = static_cast<int64_t>(qb) * kBM;
  const int64_t qk_col = h * a.qk_head_stride, v_col = a.v_offset + h * a.v_head_stride;

  load_tile(Qs, S::kQPitch, D, a.q, a.ld_q, qk_col, q0, a.T, a.qk_dim, vec);
  __syncthreads();
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint16_t* base = Qs + (warp * 16 + g) * S::kQPitch + kk * 16 + 2 * q4;
    qf[kk][0] = *reinterpret_cast<const uint32_t*>(base);
    qf[kk][1] = *reinterpret_cast<const uint32_t*>(base + 8 * S::kQPitch);
    qf[kk][2] = *reinterpret_cast<const uint32_t*>(base + 8);
    qf[kk][3] = *reinterpret_cast<const uint32_t*>(base + 8 * S::kQPitch + 8);
  }

  float o[DV / 8][4];
#pragma unroll
  for (int j = 0; j < DV / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float sl2 = a.scale * kLog2e;
  const int64_t row_a = q0 + warp * 16 + g, row_b = row_a + 8;

  for (int kb = 0; kb <= qb; ++kb) {
    const int64_t k0 = static_cast<int64_t>(kb) * kBN;
    __syncthreads();
    load_tile(Ks, S::kQPitch, D, a.k, a.ld_k, qk_col, k0, a.T, a.qk_dim, vec);
    load_tile(Vs, S::kVPitch, DV, a.v, a.ld_v, v_col, k0, a.T, a.v_dim, vec);
    __syncthreads();

    float s[kBN / 8][4];
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const uint16_t* base = Ks + (j * 8 + g) * S::kQPitch + kk * 16 + 2 * q4;
        mma_bf16_16816(s[j], qf[kk], *reinterpret_cast<const uint32_t*>(base),
                       *reinterpret_cast<const uint32_t*>(base + 8));
      }
    }

    const bool need_mask = (kb == qb) || (k0 + kBN > a.T);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float v = s[j][c] * sl2;
        if (need_mask) {
          const int64_t key = k0 + j * 8 + 2 * q4 + (c & 1);
          const int64_t row = (c < 2) ? row_a : row_b;
          if (key > row || key >= a.T) v = -INFINITY;
        }
        s[j][c] = v;
        mx[c >> 1] = fmaxf(mx[c >> 1], v);
      }
    }
    float alpha[2], mu[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float mn = fmaxf(m[r], mx[r]);
      mu[r] = mn == -INFINITY ? 0.0f : mn;
      alpha[r] = exp2f(m[r] - mu[r]);
      m[r] = mn;
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int j = 0; j < DV / 8; ++j) {
      o[j][0] *= alpha[0]; o[j][1] *= alpha[0];
      o[j][2] *= alpha[1]; o[j][3] *= alpha[1];
    }
    // P (bf16) as A fragments of the P.V product; l sums the rounded values actually used.
    uint32_t pf[kBN / 16][4];
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      float p[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        p[c] = round_bf16(exp2f(s[j][c] - mu[c >> 1]));
        l[c >> 1] += p[c];
      }
      pf[j >> 1][(j & 1) * 2 + 0] = pack_bf16x2(p[0], p[1]);
      pf[j >> 1][(j & 1) * 2 + 1] = pack_bf16x2(p[2], p[3]);
    }
#pragma unroll
    for (int t = 0; t < kBN / 16; ++t) {
      const int kr = t * 16 + 2 * q4;
#pragma unroll
      for (int j = 0; j < DV / 8; ++j) {
        const int col = j * 8 + g;
        const uint32_t b0 = static_cast<uint32_t>(Vs[kr * S::kVPitch + col]) |
                            (static_cast<uint32_t>(Vs[(kr + 1) * S::kVPitch + col]) << 16);
        const uint32_t b1 = static_cast<uint32_t>(Vs[(kr + 8) * S::kVPitch + col]) |
                            (static_cast<uint32_t>(Vs[(kr + 9) * S::kVPitch + col]) << 16);
        mma_bf16_16816(o[j], pf[t], b0, b1);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  const float inv_a = l[0] > 0.0f ? 1.0f / l[0] : 0.0f, inv_b = l[1] > 0.0f ? 1.0f / l[1] : 0.0f;
#pragma unroll
  for (int j = 0; j < DV / 8; ++j) {
    const int col = j * 8 + 2 * q4;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int64_t row = c < 2 ? row_a : row_b;
      const int d = col + (c & 1);
      if (row < a.T && d < a.v_dim) a.out[row * a.ld_out + h * a.v_dim + d] = f32_to_bf16(o[j][c] * (c < 2 ? inv_a : inv_b));
    }
  }
}

// ---- FA2-style path for the MLA shape (qk_dim 192, v_dim 128) -------------------------------
namespace fa2 {
// CTA: 8 warps, each owning MT 16-row mma tiles of queries (BM = 128 * MT queries of one head);
// key/value tiles of BN rows (64, 48 or 32), double buffered with cp.async (tile i+1 streams in
// while tile i is computed). MT = 1 keeps the warp's Q fragments in registers for the whole key
// loop; MT = 2 reads them from shared memory at every tile but uses every K/V fragment for two row
// tiles (about 2/3 of the shared-memory traffic per FLOP). Key tiles run from the diagonal down to
// 0, so only the diagonal band needs the causal mask, and a warp skips a tile whose keys all lie
// after its rows. Shared rows are padded by 16 bytes (pitch 400 / 272 bytes: eight consecutive rows
// fall on eight distinct 16-byte bank groups, so ldmatrix is conflict-free).
constexpr int D = 192, DV = 128, kWarps = 8, kThreads = kWarps * 32;
constexpr int QP = D + 8, VP = DV + 8;  // shared pitches in elements
template <int MT, int BN_>
struct Cfg {
  static constexpr int BM = kWarps * 16 * MT, BN = BN_;
  static constexpr int kQElems = BM * QP, kKElems = BN * QP, kVElems = BN * VP;
  static constexpr size_t kSmemBytes = static_cast<size_t>(kQElems + 2 * (kKElems + kVElems)) * 2;
  static_assert(BN % 16 == 0 && BN <= kThreads / 4 && BM % (kThreads / 4) == 0, "tile shapes");
};

template <int MT, int BN>
__global__ void __launch_bounds__(kThreads, 1) attention_fa2_kernel(AttentionArgs a) {
  using C = Cfg<MT, BN>;
  constexpr int BM = C::BM, kQElems = C::kQElems, kKElems = C::kKElems, kVElems = C::kVElems;
  constexpr bool kQInRegs = MT == 1;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* Qs = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* Ks = Qs + kQElems;      // 2 stages of kKElems
  uint16_t* Vs = Ks + 2 * kKElems;  // 2 stages of kVElems

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q4 = lane & 3;
  const int64_t h = blockIdx.x;
  const int qb = static_cast<int>(gridDim.y) - 1 - static_cast<int>(blockIdx.y);  // longest rows first
  // Row / key indices fit in int (the launcher checks T <= INT_MAX - BM); addresses use int64.
  const int T = static_cast<int>(a.T);
  const int q0 = qb * BM;
  const int q_end = q0 + BM < T ? q0 + BM : T;
  const int n_kb = (q_end + BN - 1) / BN;  // key tiles 0 .. n_kb-1 hold keys <= q_end-1
  const uint16_t* qg = a.q + h * a.qk_head_stride;
  const uint16_t* kg = a.k + h * a.qk_head_stride;
  const uint16_t* vg = a.v + a.v_offset + h * a.v_head_stride;

  // Copies: thread t moves 16-byte chunks (t & 3) + 4 i of row t / 4 (+ 64 j for Q; K/V rows
  // >= BN idle): one row pointer per thread and constant offsets. Q tile (rows >= T zero-filled) and
  // the first (diagonal) K/V tile form the first cp.async group.
  constexpr int kRowsPerPass = kThreads / 4;
  const int cp_row = tid >> 2, cp_col = (tid & 3) * 8;
  static_assert((D / 8) % 4 == 0 && (DV / 8) % 4 == 0, "copy mapping");
#pragma unroll
  for (int j = 0; j < BM / kRowsPerPass; ++j) {
    const int r = cp_row + j * kRowsPerPass;
    const int row = q0 + r;
    const bool ok = row < T;
    const uint16_t* src = ok ? qg + static_cast<int64_t>(row) * a.ld_q + cp_col : a.q;
    const uint32_t dst = smem_u32(Qs + r * QP + cp_col);
#pragma unroll
    for (int i = 0; i < D / 32; ++i) cp_async16(dst + i * 64, ok ? src + i * 32 : src, ok);
  }
  // (cp_row >= BN: addresses never used)
  const uint32_t k_cp_dst = smem_u32(Ks + cp_row * QP + cp_col), v_cp_dst = smem_u32(Vs + cp_row * VP + cp_col);
  auto load_kv = [&](int kb, int stage) {
    if (BN < kRowsPerPass && cp_row >= BN) return;
    const int key = kb * BN + cp_row;
    const bool ok = key < T;
    const uint16_t* ksrc = ok ? kg + static_cast<int64_t>(key) * a.ld_k + cp_col : a.k;
    const uint16_t* vsrc = ok ? vg + static_cast<int64_t>(key) * a.ld_v + cp_col : a.v;
    const uint32_t kd = k_cp_dst + stage * kKElems * 2, vd = v_cp_dst + stage * kVElems * 2;
#pragma unroll
    for (int i = 0; i < D / 32; ++i) cp_async16(kd + i * 64, ok ? ksrc + i * 32 : ksrc, ok);
#pragma unroll
    for (int i = 0; i < DV / 32; ++i) cp_async16(vd + i * 64, ok ? vsrc + i * 32 : vsrc, ok);
  };
  load_kv(n_kb - 1, 0);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  // Q A-fragments (m16k16): lanes 0-15 address rows 0-15 at k 0, lanes 16-31 rows 0-15 at k 8, so
  // the four matrices are a0 (rows 0-7, k 0-7), a1 (rows 8-15, k 0-7), a2 (rows 0-7, k 8-15), a3.
  // Warp w owns rows w*16*MT .. w*16*MT + 16*MT - 1 of the block; m-tile mt is 16 of them.
  const uint32_t q_lane = smem_u32(Qs + (warp * 16 * MT + (lane & 15)) * QP + (lane >> 4) * 8);
  uint32_t qreg[kQInRegs ? D / 16 : 1][4];
  if constexpr (kQInRegs) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) ldsm_x4(qreg[kk], q_lane + kk * 16 * 2);
  }
  // Per-lane ldmatrix offsets (bytes) inside a K / V stage.
  // K (non-transposed, B of S = Q K^T): matrices (keys 0-7, k 0-7), (keys 0-7, k 8-15),
  // (keys 8-15, k 0-7), (keys 8-15, k 8-15) -> b0,b1 of key tile 2jj, b0,b1 of key tile 2jj+1.
  const uint32_t k_lane_off = (((lane & 7) + ((lane >> 4) << 3)) * QP + ((lane >> 3) & 1) * 8) * 2;
  // V (transposed, B of O = P V): matrices (keys 0-7, d 0-7), (keys 8-15, d 0-7), (keys 0-7, d 8-15),
  // (keys 8-15, d 8-15) -> b0,b1 of dim tile 2jj, b0,b1 of dim tile 2jj+1.
  const uint32_t v_lane_off = (((lane & 7) + (((lane >> 3) & 1) << 3)) * VP + (lane >> 4) * 8) * 2;
  const uint32_t ks_u32 = smem_u32(Ks), vs_u32 = smem_u32(Vs);

  float o[MT][DV / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < DV / 8; ++j) o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0.0f;
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
  const float sl2 = a.scale * kLog2e;
  const int warp_row_lo = q0 + warp * 16 * MT, warp_row_hi = warp_row_lo + 16 * MT - 1;
  const bool warp_live = warp_row_lo < T;

  for (int it = 0; it < n_kb; ++it) {
    const int kb = n_kb - 1 - it, stage = it & 1;
    // Prefetch the next tile into the other stage (its readers finished at the last barrier).
    if (it + 1 < n_kb) {
      load_kv(kb - 1, stage ^ 1);
      cp_async_commit();
    }
    const int k0 = kb * BN;
    // Warp-uniform: skip a tile whose keys all lie after this warp's rows (it adds nothing).
    if (warp_live && k0 <= warp_row_hi) {
      const uint32_t kst = ks_u32 + stage * kKElems * 2 + k_lane_off;
      const uint32_t vst = vs_u32 + stage * kVElems * 2 + v_lane_off;
      float s[MT][BN / 8][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t qf[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (kQInRegs) {
#pragma unroll
            for (int x = 0; x < 4; ++x) qf[mt][x] = qreg[kk][x];
          } else {
            ldsm_x4(qf[mt], q_lane + (mt * 16 * QP + kk * 16) * 2);
          }
        }
#pragma unroll
        for (int jj = 0; jj < BN / 16; ++jj) {
          uint32_t b[4];
          ldsm_x4(b, kst + (jj * 16 * QP + kk * 16) * 2);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_bf16_16816(s[mt][2 * jj], qf[mt], b[0], b[1]);
            mma_bf16_16816(s[mt][2 * jj + 1], qf[mt], b[2], b[3]);
          }
        }
      }
      uint32_t pf[MT][BN / 16][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int row_a = warp_row_lo + mt * 16 + g, row_b = row_a + 8;
        // Causal mask where some key of the tile lies after some row of this m-tile; keys >= T are
        // after every valid row (row <= T-1), and their zero-filled K/V rows keep the invalid rows
        // (>= T, never stored) finite.
        const bool need_mask = k0 + BN - 1 > warp_row_lo + mt * 16;
        // m holds raw (unscaled) row maxima; the launcher guarantees sl2 > 0, so scaling commutes
        // with max and exponents are one FFMA: 2^(s * sl2 - m * sl2).
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            if (need_mask) {
              const int key = k0 + j * 8 + 2 * q4 + (c & 1);
              if (key > ((c < 2) ? row_a : row_b)) s[mt][j][c] = -INFINITY;
            }
            mx[c >> 1] = fmaxf(mx[c >> 1], s[mt][j][c]);
          }
        }
        float alpha[2], mu[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
          mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
          const float mn = fmaxf(m[mt][r], mx[r]);
          // Row fully masked so far: mu = 0 keeps alpha and p at exactly 0 (no inf - inf).
          mu[r] = mn == -INFINITY ? 0.0f : mn * sl2;
          alpha[r] = fast_exp2(m[mt][r] * sl2 - mu[r]);
          m[mt][r] = mn;
          l[mt][r] *= alpha[r];
        }
#pragma unroll
        for (int j = 0; j < DV / 8; ++j) {
          o[mt][j][0] *= alpha[0]; o[mt][j][1] *= alpha[0];
          o[mt][j][2] *= alpha[1]; o[mt][j][3] *= alpha[1];
        }
        // P (bf16) as A fragments of P.V: S tile j's accumulator is (row g | g+8, keys j*8+2q..+1).
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          float p[4];
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            p[c] = fast_exp2(fmaf(s[mt][j][c], sl2, -mu[c >> 1]));
            l[mt][c >> 1] += p[c];
          }
          pf[mt][j >> 1][(j & 1) * 2 + 0] = cvt_bf16x2(p[0], p[1]);
          pf[mt][j >> 1][(j & 1) * 2 + 1] = cvt_bf16x2(p[2], p[3]);
        }
      }
#pragma unroll
      for (int t = 0; t < BN / 16; ++t) {
#pragma unroll
        for (int jj = 0; jj < DV / 16; ++jj) {
          uint32_t b[4];
          ldsm_x4_trans(b, vst + (t * 16 * VP + jj * 16) * 2);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_bf16_16816(o[mt][2 * jj], pf[mt][t], b[0], b[1]);
            mma_bf16_16816(o[mt][2 * jj + 1], pf[mt][t], b[2], b[3]);
          }
        }
      }
    }
    // The prefetched tile has landed and is visible to all; nobody reads this stage any more.
    cp_async_wait_all();
    __syncthreads();
  }

  if (!warp_live) return;  // warp-uniform; no shuffles below skip a lane
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float lr = l[mt][r];
      lr += __shfl_xor_sync(0xffffffffu, lr, 1);
      lr += __shfl_xor_sync(0xffffffffu, lr, 2);
      inv[r] = lr > 0.0f ? 1.0f / lr : 0.0f;
    }
    const int row_a = warp_row_lo + mt * 16 + g, row_b = row_a + 8;
    uint16_t* out_a = a.out + static_cast<int64_t>(row_a) * a.ld_out + h * DV + 2 * q4;
    uint16_t* out_b = out_a + 8 * a.ld_out;
#pragma unroll
    for (int j = 0; j < DV / 8; ++j) {
      if (row_a < T)
        *reinterpret_cast<uint32_t*>(out_a + j * 8) = cvt_bf16x2(o[mt][j][0] * inv[0], o[mt][j][1] * inv[0]);
      if (row_b < T)
        *reinterpret_cast<uint32_t*>(out_b + j * 8) = cvt_bf16x2(o[mt][j][2] * inv[1], o[mt][j][3] * inv[1]);
    }
  }
}
}  // namespace fa2

// ---- scalar fallback (any head dims): one warp per (query, head), online softmax over keys ----
__global__ void attention_fallback_kernel(AttentionArgs a) {
  extern __shared__ float fb_smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * nw + warp;
  if (item >= a.T * a.n_heads) return;
  const int64_t t = item / a.n_heads, h = item - t * a.n_heads;
  float* acc = fb_smem + static_cast<int64_t>(warp) * a.v_dim;
  for (int64_t d = lane; d < a.v_dim; d += 32) acc[d] = 0.0f;
  const uint16_t* qr = a.q + t * a.ld_q + h * a.qk_head_stride;
  float m = -INFINITY, l = 0.0f;
  for (int64_t s = 0; s <= t; ++s) {
    const uint16_t* kr = a.k + s * a.ld_k + h * a.qk_head_stride;
    float dot = 0.0f;
    for (int64_t d = lane; d < a.qk_dim; d += 32) dot += bf16_to_f32(qr[d]) * bf16_to_f32(kr[d]);
    dot = warp_sum(dot) * a.scale;
    const float mn = fmaxf(m, dot);
    const float alpha = expf(m - mn), p = expf(dot - mn);
    l = l * alpha + p;
    m = mn;
    const uint16_t* vr = a.v + s * a.ld_v + a.v_offset + h * a.v_head_stride;
    for (int64_t d = lane; d < a.v_dim; d += 32) acc[d] = acc[d] * alpha + p * bf16_to_f32(vr[d]);
  }
  for (int64_t d = lane; d < a.v_dim; d += 32) a.out[t * a.ld_out + h * a.v_dim + d] = f32_to_bf16(acc[d] / l);
}

bool al16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The FA2 kernels copy 16-byte chunks (8 bf16) of every row and store bf16 pairs: all bases 16-byte
// aligned and all element offsets multiples of 8. Grid: heads on x, query blocks on y (<= 65535).
template <int MT, int BN>
bool fa2_applies(const AttentionArgs& a) {
  constexpr int BM = fa2::Cfg<MT, BN>::BM;
  return a.qk_dim == fa2::D && a.v_dim == fa2::DV && al16(a.q) && al16(a.k) && al16(a.v) && al16(a.out) &&
         a.ld_q % 8 == 0 && a.ld_k % 8 == 0 && a.ld_v % 8 == 0 && a.ld_out % 8 == 0 && a.qk_head_stride % 8 == 0 &&
         a.v_offset % 8 == 0 && a.v_head_stride % 8 == 0 && a.ld_q >= 0 && a.ld_k >= 0 && a.ld_v >= 0 &&
         a.ld_out >= 0 && a.qk_head_stride >= 0 && a.v_offset >= 0 && a.v_head_stride >= 0 &&
         a.T <= 0x7fffffff - BM && (a.T + BM - 1) / BM <= 65535 && a.n_heads <= 0x7fffffff && a.scale > 0.0f &&
         std::isfinite(a.scale * kLog2e);
}

template <int MT, int BN>
cudaError_t launch_fa2(const AttentionArgs& a, cudaStream_t stream) {
  constexpr size_t smem = fa2::Cfg<MT, BN>::kSmemBytes;
  constexpr int BM = fa2::Cfg<MT, BN>::BM;
  KERN_RETURN_IF_ERROR(cudaFuncSetAttribute(fa2::attention_fa2_kernel<MT, BN>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const int64_t qblocks = (a.T + BM - 1) / BM;
  fa2::attention_fa2_kernel<MT, BN>
      <<<dim3(static_cast<unsigned>(a.n_heads), static_cast<unsigned>(qblocks)), fa2::kThreads, smem, stream>>>(a);
  return last_launch_error();
}

// Path 0 takes the warp-specialized wgmma kernel (path 10) where it applies, else FA2 variant 4.
constexpr int kDefaultPath = 10, kDefaultFa2Path = 4;

}  // namespace

cudaError_t launch_causal_attention(const AttentionArgs& a, cudaStream_t stream) {
  if (a.T <= 0 || a.n_heads <= 0) return cudaSuccess;
  if (a.qk_dim <= 0 || a.v_dim <= 0 || (a.path >= 6 && a.path <= 9)) return cudaErrorInvalidValue;
  if (a.path == 0 || (a.path >= 2 && a.path <= 10)) {
    int variant = a.path == 0 ? kDefaultPath : a.path;
    if (variant == 10 && detail::attention_wgmma_applies(a)) return detail::launch_attention_wgmma(a, stream);
    if (a.path == 0) variant = kDefaultFa2Path;
    if (variant == 2 && fa2_applies<1, 64>(a)) return launch_fa2<1, 64>(a, stream);
    if (variant == 3 && fa2_applies<2, 64>(a)) return launch_fa2<2, 64>(a, stream);
    if (variant == 4 && fa2_applies<2, 48>(a)) return launch_fa2<2, 48>(a, stream);
    if (variant == 5 && fa2_applies<2, 32>(a)) return launch_fa2<2, 32>(a, stream);
  }
  if (a.qk_dim <= 192 && a.v_dim <= 128) {
    constexpr int D = 192, DV = 128;
    const bool vec = al16(a.q) && al16(a.k) && al16(a.v) && a.ld_q % 8 == 0 && a.ld_k % 8 == 0 && a.ld_v % 8 == 0 &&
                     a.qk_head_stride % 8 == 0 && a.v_offset % 8 == 0 && a.v_head_stride % 8 == 0;
    const size_t smem = Smem<D, DV>::kBytes;
    KERN_RETURN_IF_ERROR(cudaFuncSetAttribute(attention_tc_kernel<D, DV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem)));
    const int64_t qblocks = (a.T + kBM - 1) / kBM;
    if (qblocks > 0x7fffffff || a.n_heads > 65535) return cudaErrorInvalidConfiguration;
    attention_tc_kernel<D, DV><<<dim3(static_cast<unsigned>(qblocks), static_cast<unsigned>(a.n_heads)), kThreads, smem,
                                 stream>>>(a, vec);
    return last_launch_error();
  }
  const int warps = 4;
  const size_t smem = static_cast<size_t>(warps) * a.v_dim * sizeof(float);
  if (smem > 48 * 1024)
    KERN_RETURN_IF_ERROR(cudaFuncSetAttribute(attention_fallback_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem)));
  attention_fallback_kernel<<<ceil_div_u(a.T * a.n_heads, warps), warps * 32, smem, stream>>>(a);
  return last_launch_error();
}

}  // namespace moeprof::kern
