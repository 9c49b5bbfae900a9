#include "kernels/mla_decode.cuh"

#include "kernels/attention_ptx.cuh"
#include "kernels/common/mla_split.h"

namespace moeprof::kern {
namespace {

constexpr int kThreads = 256;
constexpr int kRows = 8;      // query rows per block (q_absorb)
constexpr int kAbsCols = 128; // output columns per block (q_absorb)
constexpr int kUpRows = 8;    // rows per block (v_up)
constexpr int kUpJ = 4;       // output columns per warp (v_up)
constexpr int kUpCols = kUpJ * 8;  // output columns per block of 8 warps (v_up)
constexpr int kHeads = 16;    // heads per block (paged attention)
constexpr int kTile = 16;     // cache positions per tile (paged attention)

__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

__global__ void kv_cache_store_kernel(const uint16_t* latent, int64_t ld_latent, int64_t L, const uint16_t* k_pe,
                                      int64_t ld_kpe, int64_t R, const int32_t* slots, uint16_t* cache, int64_t ld_cache) {
  const int64_t n = blockIdx.x;
  uint16_t* dst = cache + static_cast<int64_t>(slots[n]) * ld_cache;
  for (int64_t c = threadIdx.x; c < L + R; c += blockDim.x) dst[c] = c < L ? latent[n * ld_latent + c] : k_pe[n * ld_kpe + (c - L)];
}

// Block: kRows query rows of one head and kAbsCols output columns; thread: one column c (the
// weight column read once per block, coalesced), kRows accumulators in the reference's order.
__global__ void __launch_bounds__(kAbsCols) q_absorb_kernel(const uint16_t* q, int64_t ld_q, const uint16_t* w, int64_t ld_w,
                                                            int64_t kvl, int64_t N, int64_t nope, int64_t rope, int64_t v_dim,
                                                            uint16_t* out, int64_t ld_out) {
  extern __shared__ float q_s[];  // [kRows][nope]
  const int64_t h = blockIdx.y, n0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int rows = static_cast<int>(imin(kRows, N - n0));
  const int64_t qk = nope + rope;
  // Row by row: no 64-bit division per element (it cost more than the block's arithmetic).
  for (int r = 0; r < kRows; ++r)
    for (int i = static_cast<int>(threadIdx.x); i < nope; i += blockDim.x)
      q_s[r * nope + i] = r < rows ? ld_bf16(q + (n0 + r) * ld_q + h * qk + i) : 0.0f;
  __syncthreads();
  const uint16_t* wh = w + h * (nope + v_dim) * ld_w;
  const int64_t c = static_cast<int64_t>(blockIdx.z) * kAbsCols + threadIdx.x;
  if (c < kvl) {
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
#pragma unroll 8
    for (int64_t i = 0; i < nope; ++i) {
      const float wv = ld_bf16(wh + i * ld_w + c);
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] = __fadd_rn(acc[r], __fmul_rn(q_s[r * nope + i], wv));
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (r < rows) st_bf16(out + (n0 + r) * ld_out + h * (kvl + rope) + c, acc[r]);
  }
  if (blockIdx.z != 0) return;
  for (int64_t idx = threadIdx.x; idx < rows * rope; idx += blockDim.x) {
    const int64_t r = idx / rope, j = idx - r * rope;
    out[(n0 + r) * ld_out + h * (kvl + rope) + kvl + j] = q[(n0 + r) * ld_q + h * qk + nope + j];
  }
}

// Block: one query row, up to kHeads heads. Shared: the heads' queries, a tile of cache rows, the
// tile's scores, the running max / sum / rescale per head, the output accumulators.
__global__ void paged_attention_kernel(const uint16_t* q_abs, int64_t ld_q, const uint16_t* cache, int64_t D,
                                       const int32_t* req_to_token, int64_t C, const int32_t* row_req, const int32_t* row_pos,
                                       int64_t heads, int64_t kvl, float scale, uint16_t* out, int64_t ld_out) {
  extern __shared__ float sm[];
  const int64_t n = blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y) * kHeads;
  const int hg = static_cast<int>(imin(kHeads, heads - h0));
  float* q_s = sm;                      // [kHeads][D]
  float* k_s = q_s + kHeads * D;        // [kTile][D]
  float* s_s = k_s + kTile * D;         // [kTile][kHeads]
  float* m_s = s_s + kTile * kHeads;    // [kHeads]
  float* l_s = m_s + kHeads;            // [kHeads]
  float* c_s = l_s + kHeads;            // [kHeads] rescale of the accumulators
  float* acc = c_s + kHeads;            // [kHeads][kvl]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  const int32_t* slots = req_to_token + static_cast<int64_t>(row_req[n]) * C;
  const int64_t L = static_cast<int64_t>(row_pos[n]) + 1;
  for (int64_t idx = tid; idx < hg * D; idx += blockDim.x) q_s[idx] = ld_bf16(q_abs + n * ld_q + h0 * D + idx);
  for (int64_t idx = tid; idx < hg * kvl; idx += blockDim.x) acc[idx] = 0.0f;
  if (tid < kHeads) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.0f;
  }
  __syncthreads();
  for (int64_t t0 = 0; t0 < L; t0 += kTile) {
    const int nt = static_cast<int>(imin(kTile, L - t0));
    for (int64_t idx = tid; idx < nt * D; idx += blockDim.x) {
      const int64_t j = idx / D, d = idx - j * D;
      k_s[idx] = ld_bf16(cache + static_cast<int64_t>(slots[t0 + j]) * D + d);
    }
    __syncthreads();
    for (int pair = warp; pair < nt * hg; pair += nwarps) {
      const int j = pair / hg, hh = pair - j * hg;
      float dot = 0.0f;
      for (int64_t d = lane; d < D; d += 32) dot += q_s[hh * D + d] * k_s[j * D + d];
      dot = warp_sum(dot);
      if (lane == 0) s_s[j * kHeads + hh] = scale * dot;
    }
    __syncthreads();
    if (tid < hg) {
      float m = m_s[tid];
      for (int j = 0; j < nt; ++j) m = fmaxf(m, s_s[j * kHeads + tid]);
      const float corr = expf(m_s[tid] - m);  // exp(-inf) = 0 on the first tile
      float l = l_s[tid] * corr;
      for (int j = 0; j < nt; ++j) {
        const float p = expf(s_s[j * kHeads + tid] - m);
        s_s[j * kHeads + tid] = p;
        l += p;
      }
      m_s[tid] = m;
      l_s[tid] = l;
      c_s[tid] = corr;
    }
    __syncthreads();
    for (int64_t idx = tid; idx < hg * kvl; idx += blockDim.x) {
      const int64_t hh = idx / kvl, c = idx - hh * kvl;
      float a = acc[idx] * c_s[hh];
      for (int j = 0; j < nt; ++j) a += s_s[j * kHeads + hh] * k_s[j * D + c];
      acc[idx] = a;
    }
    __syncthreads();
  }
  for (int64_t idx = tid; idx < hg * kvl; idx += blockDim.x) {
    const int64_t hh = idx / kvl, c = idx - hh * kvl;
    st_bf16(out + n * ld_out + (h0 + hh) * kvl + c, acc[idx] / l_s[hh]);
  }
}

namespace mlad {
// The absorbed attention on bf16 tensor cores (mma.sync m16n8k16, fp32 accumulation), for
// D = kvl + rope a multiple of 16 up to 576 and kvl a multiple of 16 up to 512 (every model of
// the family: 576 / 512). CTA: one query row, 16 heads (the mma's M; missing heads are zero rows),
// 8 warps; cache positions in tiles of 32, double buffered with cp.async (tile i+1 streams in while
// tile i is computed). Per tile:
//  S = Q K^T [16 x 32]: warp w takes positions 16 (w & 1) .. +16 and the k-steps w/2, w/2 + 4, ...
//    of D (its Q fragments stay in registers for the whole loop); the four partial sums meet in
//    shared memory;
//  online softmax: thread t owns head t / 16 and positions 2 (t % 16), +1; its running max and
//    sum stay in registers; P goes to shared memory as two bf16 parts, P = hi + lo (lo = the
//    rounding error of hi), so that P V loses nothing to P's rounding (about 2^-17 relative, as
//    the CPU reference's fp32 P; one bf16 P alone puts errors of 2^-9 of max |V| on the output);
//    the rescale of the output rows goes to shared memory as fp32;
//  O += P V [16 x kvl]: warp w owns the 16-column groups w, w + 8, ... of kvl in registers
//    (V = the cache rows' first kvl columns, read by ldmatrix.trans from the same tile).
// Shared rows are padded by 16 bytes (an odd number of 16-byte units per row: ldmatrix is
// conflict-free). Positions past the row's context are zero rows with P = 0.
constexpr int kWarps = 8, kThreads = kWarps * 32, kM = 16, kBN = 32, kMaxD = 576, kMaxKvl = 512;
constexpr int kQSteps = kMaxD / 16 / 4;      // k-steps of Q per warp
constexpr int kGroups = kMaxKvl / 16 / kWarps;  // 16-column groups of O per warp
constexpr int kPP = kBN + 8;                  // P's pitch in elements

// Stages of the cache-tile ring (kStages - 1 tiles stream in while one is computed). Two keep two
// blocks (104 KiB each) on an SM; three or four leave room for one, and the split form then ran at
// 45% of an H100's copy bandwidth instead of 66% (docs/performance.md): a block is bound by its own
// instructions, not by the tiles in flight. The kernel takes any S >= 2 (the emulator runs 3).
constexpr int kStages = 2;
inline size_t smem_bytes(int64_t D, int stages = kStages) {
  const int64_t dp = D + 8;
  return static_cast<size_t>(kM * dp * 2 + stages * kBN * dp * 2 + 4 * kM * kBN * 4 + 2 * kM * kPP * 2 + 2 * kM * 4 +
                             stages * kBN * 4);
}
inline bool supported(int64_t D, int64_t kvl) { return mla_decode_tensor_core_shape(D, kvl); }
static_assert(kBN % kWarps == 0 && kBN == kMlaDecodeTile && kM == kMlaDecodeHeadsPerBlock && kMaxD == 576 && kMaxKvl == 512,
              "kernels/common/mla_split.h describes this kernel's tiles");

// kFull: D and kvl are kMaxD and kMaxKvl (576 / 512, every model of the family), known at compile
// time, so the k-step and column-group guards and the address arithmetic fold away.
template <int S, bool kFull>
__global__ void __launch_bounds__(kThreads) paged_attention_mma_kernel(
    const uint16_t* q_abs, int64_t ld_q, const uint16_t* cache, int D_in, const int32_t* req_to_token, int64_t C,
    const int32_t* row_req, const int32_t* row_pos, int heads, int kvl_in, float scale, uint16_t* out, int64_t ld_out,
    int splits, float* ws) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int D = kFull ? kMaxD : D_in, kvl = kFull ? kMaxKvl : kvl_in;
  const int DP = D + 8;
  uint16_t* q_s = reinterpret_cast<uint16_t*>(smem_raw);  // [kM][DP]
  uint16_t* k_s = q_s + kM * DP;                          // S stages of [kBN][DP]
  float* s_f = reinterpret_cast<float*>(k_s + S * kBN * DP);  // [4][kM][kBN] partial scores
  uint16_t* p_s = reinterpret_cast<uint16_t*>(s_f + 4 * kM * kBN);  // [2][kM][kPP]: P's hi and lo parts
  float* corr_s = reinterpret_cast<float*>(p_s + 2 * kM * kPP);  // [kM]
  float* l_s = corr_s + kM;                                  // [kM]
  int32_t* slot_s = reinterpret_cast<int32_t*>(l_s + kM);    // [S][kBN]: the page table's slots of S tiles
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int64_t n = blockIdx.x;
  const int h0 = static_cast<int>(blockIdx.y) * kM;
  const int hg = heads - h0 < kM ? heads - h0 : kM;
  const int32_t* slots = req_to_token + static_cast<int64_t>(row_req[n]) * C;
  // This block's positions [t_begin, L): all of them, or split blockIdx.z's tile-aligned range.
  int64_t t_begin = 0, L = static_cast<int64_t>(row_pos[n]) + 1;
  if (splits > 1) mla_decode_split_range(L, splits, blockIdx.z, &t_begin, &L);
  const int chunks = D / 8;  // 16-byte chunks per cache row

  // The page table is read ahead of the copies: tile i's slots wait in slot_s[i % S] (-1 past the
  // range), written an iteration before the copy that reads them, and thread j < kBN holds the slot
  // of row j of the tile after those in `pre`. So a copy's addresses never wait on a load of the
  // table. Tile i is copied into stage i % S, S - 1 iterations before it is computed; every
  // iteration commits one group (empty past the range), so wait_group S - 1 finds tile i landed.
  auto slot_of = [&](int64_t t) -> int32_t { return t < L ? slots[t] : -1; };
  auto load_tile = [&](int i) {
    if (t_begin + static_cast<int64_t>(i) * kBN < L) {
      // Warp w copies rows 4 w .. 4 w + 3 of the tile, lane l the 16-byte chunks l, l + 32, l + 64
      // of each (D <= 576: at most 72 chunks): one source address per row, predicated copies at
      // constant offsets from it (no branch, no division).
      const int32_t* sl = slot_s + (i % S) * kBN;
      const uint32_t dst = smem_u32(k_s + (i % S) * kBN * DP + 8 * lane);
#pragma unroll
      for (int r = 0; r < kBN / kWarps; ++r) {
        const int j = warp * (kBN / kWarps) + r;
        const int32_t slot = sl[j];
        const bool valid = slot >= 0;
        const uint16_t* row = cache + (valid ? static_cast<int64_t>(slot) * D : 0) + 8 * lane;
#pragma unroll
        for (int k = 0; k < (kMaxD / 8 + 31) / 32; ++k)
          cp_async16_if(dst + static_cast<uint32_t>(j * DP + 256 * k) * 2u, row + 256 * k, valid, lane + 32 * k < chunks);
      }
    }
    cp_async_commit();
  };
  int32_t pre = -1;
  if (tid < kBN) {
#pragma unroll
    for (int i = 0; i < S; ++i) slot_s[i * kBN + tid] = slot_of(t_begin + i * kBN + tid);
    pre = slot_of(t_begin + S * kBN + tid);
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < S - 1; ++i) load_tile(i);
  for (int idx = tid; idx < kM * D; idx += kThreads) {
    const int hh = idx / D, d = idx - hh * D;
    q_s[hh * DP + d] = hh < hg ? q_abs[n * ld_q + static_cast<int64_t>(h0 + hh) * D + d] : uint16_t{0};
  }
  __syncthreads();
  // Q fragments (k-steps ks = quarter + 4 i) in registers.
  const int npair = warp & 1, quarter = warp >> 1, ksteps = D / 16;
  uint32_t qf[kQSteps][4];
#pragma unroll
  for (int i = 0; i < kQSteps; ++i) {
    const int ks = quarter + 4 * i;
    if (ks < ksteps) {
      const int j = lane >> 3;
      ldsm_x4(qf[i], smem_u32(q_s + ((lane & 7) + 8 * (j & 1)) * DP + ks * 16 + 8 * (j >> 1)));
    }
  }
  float acc[kGroups][2][4];
#pragma unroll
  for (int i = 0; i < kGroups; ++i)
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][b][e] = 0.0f;
  const int my_h = tid >> 4, my_c = tid & 15;  // softmax: head, position pair
  float m_run = -INFINITY, l_run = 0.0f;
  const int g = lane >> 2, q4 = lane & 3;

  int it = 0;
  for (int64_t t0 = t_begin; t0 < L; t0 += kBN, ++it) {
    load_tile(it + S - 1);
    cp_async_wait_n<S - 1>();
    // slot_s[it % S] served this tile's copy S - 1 iterations ago: it takes the slots of tile
    // it + S, which the next iteration copies.
    if (tid < kBN) {
      slot_s[(it % S) * kBN + tid] = pre;
      pre = slot_of(t0 + (S + 1) * kBN + tid);
    }
    __syncthreads();
    const uint16_t* kt = k_s + (it % S) * kBN * DP;
    // S partials.
    {
      float d0[4] = {0, 0, 0, 0}, d1[4] = {0, 0, 0, 0};
      const int j = lane >> 3;
      const uint16_t* brow = kt + (16 * npair + (lane & 7) + 8 * (j >> 1)) * DP + 8 * (j & 1);
#pragma unroll
      for (int i = 0; i < kQSteps; ++i) {
        const int ks = quarter + 4 * i;
        if (ks < ksteps) {
          uint32_t b[4];
          ldsm_x4(b, smem_u32(brow + ks * 16));
          mma_bf16_16816(d0, qf[i], b[0], b[1]);
          mma_bf16_16816(d1, qf[i], b[2], b[3]);
        }
      }
      float* sf = s_f + quarter * kM * kBN;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e >> 1), col = 16 * npair + 2 * q4 + (e & 1);
        sf[row * kBN + col] = d0[e];
        sf[row * kBN + col + 8] = d1[e];
      }
    }
    __syncthreads();
    // Online softmax of head my_h over this tile's positions 2 my_c, 2 my_c + 1.
    {
      float s2[2];
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const int col = 2 * my_c + x;
        float v = 0.0f;
#pragma unroll
        for (int qq = 0; qq < 4; ++qq) v += s_f[(qq * kM + my_h) * kBN + col];
        s2[x] = t0 + col < L ? v * scale : -INFINITY;
      }
      float tmax = fmaxf(s2[0], s2[1]);
#pragma unroll
      for (int o = 8; o >= 1; o >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
      const float m_new = fmaxf(m_run, tmax);  // finite: position t0 is always inside the context
      const float corr = expf(m_run - m_new);  // 0 on the first tile
      const float p0 = expf(s2[0] - m_new), p1 = expf(s2[1] - m_new);
      float psum = p0 + p1;
#pragma unroll
      for (int o = 8; o >= 1; o >>= 1) psum += __shfl_xor_sync(0xffffffffu, psum, o);
      m_run = m_new;
      l_run = l_run * corr + psum;
      const uint32_t hi = cvt_bf16x2(p0, p1);
      *reinterpret_cast<uint32_t*>(p_s + my_h * kPP + 2 * my_c) = hi;
      *reinterpret_cast<uint32_t*>(p_s + (kM + my_h) * kPP + 2 * my_c) =
          cvt_bf16x2(p0 - __uint_as_float(hi << 16), p1 - __uint_as_float(hi & 0xFFFF0000u));
      if (my_c == 0) corr_s[my_h] = corr;
    }
    __syncthreads();
    // O = O * corr + P V.
    {
      const float c_lo = corr_s[g], c_hi = corr_s[g + 8];
#pragma unroll
      for (int i = 0; i < kGroups; ++i)
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          acc[i][b][0] *= c_lo;
          acc[i][b][1] *= c_lo;
          acc[i][b][2] *= c_hi;
          acc[i][b][3] *= c_hi;
        }
      const int j = lane >> 3;
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) {
        uint32_t a[4], a_lo[4];
        const uint16_t* prow = p_s + ((lane & 7) + 8 * (j & 1)) * kPP + kk * 16 + 8 * (j >> 1);
        ldsm_x4(a, smem_u32(prow));
        ldsm_x4(a_lo, smem_u32(prow + kM * kPP));
        const uint16_t* vrow = kt + (kk * 16 + (lane & 7) + 8 * (j & 1)) * DP + 8 * (j >> 1);
#pragma unroll
        for (int i = 0; i < kGroups; ++i) {
          const int grp = warp + kWarps * i;
          if (grp * 16 < kvl) {
            uint32_t b[4];
            ldsm_x4_trans(b, smem_u32(vrow + grp * 16));
            mma_bf16_16816(acc[i][0], a, b[0], b[1]);
            mma_bf16_16816(acc[i][1], a, b[2], b[3]);
            mma_bf16_16816(acc[i][0], a_lo, b[0], b[1]);
            mma_bf16_16816(acc[i][1], a_lo, b[2], b[3]);
          }
        }
      }
    }
    __syncthreads();  // the stage and P are overwritten next
  }
  if (splits > 1) {
    // Split: the unnormalized partial output and (max, sum) of each head go to the workspace
    // (an empty range leaves zeros and (-inf, 0)); mla_decode_combine_kernel merges the splits.
    const int64_t N = gridDim.x, base = (static_cast<int64_t>(blockIdx.z) * N + n) * heads + h0;
    if (my_c == 0 && my_h < hg) {
      float* ml = ws + static_cast<int64_t>(splits) * N * heads * kvl + 2 * (base + my_h);
      ml[0] = m_run;
      ml[1] = l_run;
    }
#pragma unroll
    for (int i = 0; i < kGroups; ++i) {
      const int grp = warp + kWarps * i;
      if (grp * 16 >= kvl) continue;
#pragma unroll
      for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          const int row = g + 8 * (e >> 1), col = grp * 16 + 8 * b + 2 * q4;
          if (row < hg)
            *reinterpret_cast<float2*>(ws + (base + row) * kvl + col) = make_float2(acc[i][b][e], acc[i][b][e + 1]);
        }
    }
    return;
  }
  if (my_c == 0) l_s[my_h] = l_run;
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kGroups; ++i) {
    const int grp = warp + kWarps * i;
    if (grp * 16 >= kvl) continue;
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e >> 1), col = grp * 16 + 8 * b + 2 * q4 + (e & 1);
        if (row < hg) st_bf16(out + n * ld_out + static_cast<int64_t>(h0 + row) * kvl + col, acc[i][b][e] / l_s[row]);
      }
  }
}
// Block: one query row and head; thread: columns c, tid + k * blockDim. out = sum_s w_s o_s /
// sum_s w_s l_s with w_s = exp(m_s - max_s m_s) (0 for an empty split).
__global__ void mla_decode_combine_kernel(const float* ws, int splits, int heads, int kvl, uint16_t* out, int64_t ld_out) {
  const int64_t N = gridDim.x, n = blockIdx.x, h = blockIdx.y;
  const float* ml = ws + static_cast<int64_t>(splits) * N * heads * kvl;
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, ml[2 * ((s * N + n) * heads + h)]);
  float denom = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float* p = ml + 2 * ((s * N + n) * heads + h);
    denom += p[0] == -INFINITY ? 0.0f : expf(p[0] - m) * p[1];
  }
  for (int c = threadIdx.x; c < kvl; c += blockDim.x) {
    float acc = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float ms = ml[2 * ((s * N + n) * heads + h)];
      if (ms != -INFINITY) acc += expf(ms - m) * ws[((s * N + n) * heads + h) * kvl + c];
    }
    st_bf16(out + n * ld_out + h * kvl + c, acc / denom);
  }
}

// v_up on bf16 tensor cores (mma.sync m16n8k16, fp32 accumulation), for kvl % 32 == 0, v_dim % 8
// == 0 and 16-byte aligned rows: out[n, h, j] = sum_c lat[n, h, c] * W_UV[h, j, c]. A warp computes
// 16 rows x 8 columns of one head straight from global memory (the operands are small and stay in
// L2): lane (g, t) loads the 16-byte chunks [c0 + 8t, c0 + 8t + 8) of lat rows g and g + 8 and of
// W_UV row (output column) g, and elements 0-3 and 4-7 of them feed two MMAs (A's a0/a1 and B's b0
// hold elements 0, 1 of the lane's chunks, a2/a3 and b1 elements 2, 3; then 4-7). A and B give each
// k slot the same element, so every c is summed once. 8 warps per block, no shared memory.
constexpr int kVuWarps = 8;
inline bool v_up_mma_shape(int64_t kvl, int64_t v_dim, int64_t ld_lat, int64_t ld_w, const void* lat, const void* w) {
  return kvl % 32 == 0 && v_dim % 8 == 0 && ld_lat % 8 == 0 && ld_w % 8 == 0 && reinterpret_cast<uintptr_t>(lat) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}
__global__ void __launch_bounds__(kVuWarps * 32) v_up_mma_kernel(const uint16_t* lat, int64_t ld_lat, const uint16_t* w,
                                                                 int64_t ld_w, int kvl, int N, int nope, int v_dim, uint16_t* out,
                                                                 int64_t ld_out) {
  const int lane = static_cast<int>(threadIdx.x) & 31, g = lane >> 2, t = lane & 3;
  const int col_tiles = v_dim / 8, row_tiles = (N + 15) / 16;
  const int wid = static_cast<int>(blockIdx.x) * kVuWarps + (static_cast<int>(threadIdx.x) >> 5);
  if (wid >= row_tiles * col_tiles) return;  // whole warps
  const int h = static_cast<int>(blockIdx.y), rt = wid / col_tiles, ct = wid - rt * col_tiles;
  const int r0 = rt * 16 + g, r1 = r0 + 8;
  const bool ok0 = r0 < N, ok1 = r1 < N;
  const uint16_t* ap0 = lat + static_cast<int64_t>(ok0 ? r0 : 0) * ld_lat + static_cast<int64_t>(h) * kvl + 8 * t;
  const uint16_t* ap1 = lat + static_cast<int64_t>(ok1 ? r1 : 0) * ld_lat + static_cast<int64_t>(h) * kvl + 8 * t;
  const uint16_t* bp = w + (static_cast<int64_t>(h) * (nope + v_dim) + nope + ct * 8 + g) * ld_w + 8 * t;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  for (int c0 = 0; c0 < kvl; c0 += 32) {
    const uint4 x0 = ok0 ? *reinterpret_cast<const uint4*>(ap0 + c0) : zero;
    const uint4 x1 = ok1 ? *reinterpret_cast<const uint4*>(ap1 + c0) : zero;
    const uint4 y = *reinterpret_cast<const uint4*>(bp + c0);
    const uint32_t a01[4] = {x0.x, x1.x, x0.y, x1.y}, a45[4] = {x0.z, x1.z, x0.w, x1.w};
    mma_bf16_16816(acc, a01, y.x, y.y);
    mma_bf16_16816(acc, a45, y.z, y.w);
  }
  // acc[0], acc[1]: row g, columns 2t, 2t + 1; acc[2], acc[3]: row g + 8.
  const int64_t col = static_cast<int64_t>(h) * v_dim + ct * 8 + 2 * t;
  if (ok0) {
    st_bf16(out + r0 * ld_out + col, acc[0]);
    st_bf16(out + r0 * ld_out + col + 1, acc[1]);
  }
  if (ok1) {
    st_bf16(out + r1 * ld_out + col, acc[2]);
    st_bf16(out + r1 * ld_out + col + 1, acc[3]);
  }
}
}  // namespace mlad

// Block: kUpRows rows of one head and kUpCols output columns j; warp: kUpJ of them at once, its
// lanes reading each weight row (contiguous over c) 8 elements at a time when rows are 16-byte
// aligned (Vec), one at a time otherwise; a warp sum per row and column.
template <bool Vec>
__global__ void __launch_bounds__(kThreads) v_up_kernel(const uint16_t* lat, int64_t ld_lat, const uint16_t* w, int64_t ld_w,
                                                        int64_t kvl, int64_t N, int64_t nope, int64_t v_dim, uint16_t* out,
                                                        int64_t ld_out) {
  extern __shared__ float lat_s[];  // [kUpRows][kvl]
  const int64_t h = blockIdx.y, n0 = static_cast<int64_t>(blockIdx.x) * kUpRows;
  const int rows = static_cast<int>(imin(kUpRows, N - n0));
  for (int r = 0; r < kUpRows; ++r)  // row by row: no 64-bit division per element
    for (int c = static_cast<int>(threadIdx.x); c < kvl; c += blockDim.x)
      lat_s[r * kvl + c] = r < rows ? ld_bf16(lat + (n0 + r) * ld_lat + h * kvl + c) : 0.0f;
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t j0 = static_cast<int64_t>(blockIdx.z) * kUpCols + warp * kUpJ;
  float acc[kUpJ][kUpRows];
#pragma unroll
  for (int q = 0; q < kUpJ; ++q)
#pragma unroll
    for (int r = 0; r < kUpRows; ++r) acc[q][r] = 0.0f;
  const uint16_t* wr[kUpJ];
#pragma unroll
  for (int q = 0; q < kUpJ; ++q) wr[q] = w + (h * (nope + v_dim) + nope + imin(j0 + q, v_dim - 1)) * ld_w;
  if (Vec) {
    for (int64_t c = 8 * lane; c < kvl; c += 8 * 32) {
      float x[kUpRows][8];
#pragma unroll
      for (int r = 0; r < kUpRows; ++r) {
        const float4 a = *reinterpret_cast<const float4*>(lat_s + r * kvl + c);
        const float4 b = *reinterpret_cast<const float4*>(lat_s + r * kvl + c + 4);
        x[r][0] = a.x, x[r][1] = a.y, x[r][2] = a.z, x[r][3] = a.w, x[r][4] = b.x, x[r][5] = b.y, x[r][6] = b.z, x[r][7] = b.w;
      }
#pragma unroll
      for (int q = 0; q < kUpJ; ++q) {
        const uint4 v = *reinterpret_cast<const uint4*>(wr[q] + c);
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float wv = __uint_as_float(e & 1 ? (u[e >> 1] & 0xFFFF0000u) : (u[e >> 1] << 16));
#pragma unroll
          for (int r = 0; r < kUpRows; ++r) acc[q][r] += x[r][e] * wv;
        }
      }
    }
  } else {
    for (int64_t c = lane; c < kvl; c += 32) {
#pragma unroll
      for (int q = 0; q < kUpJ; ++q) {
        const float wv = ld_bf16(wr[q] + c);
#pragma unroll
        for (int r = 0; r < kUpRows; ++r) acc[q][r] += lat_s[r * kvl + c] * wv;
      }
    }
  }
#pragma unroll
  for (int q = 0; q < kUpJ; ++q)
#pragma unroll
    for (int r = 0; r < kUpRows; ++r) {
      const float v = warp_sum(acc[q][r]);
      if (lane == 0 && r < rows && j0 + q < v_dim) st_bf16(out + (n0 + r) * ld_out + h * v_dim + j0 + q, v);
    }
}

// Dynamic shared memory above the default 48 KiB needs the kernel's opt-in.
template <typename Kernel>
cudaError_t allow_smem(Kernel k, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

}  // namespace

cudaError_t launch_kv_cache_store(const uint16_t* latent, int64_t ld_latent, int64_t L, const uint16_t* k_pe, int64_t ld_kpe,
                                  int64_t R, int64_t N, const int32_t* slots, uint16_t* cache, int64_t ld_cache,
                                  cudaStream_t stream) {
  if (N <= 0) return cudaSuccess;
  kv_cache_store_kernel<<<static_cast<unsigned>(N), 128, 0, stream>>>(latent, ld_latent, L, k_pe, ld_kpe, R, slots, cache, ld_cache);
  return last_launch_error();
}

cudaError_t launch_mla_q_absorb(const uint16_t* q, int64_t ld_q, const uint16_t* kv_b, int64_t ld_w, int64_t kvl, int64_t N,
                                int64_t heads, int64_t nope, int64_t rope, int64_t v_dim, uint16_t* q_abs, int64_t ld_out,
                                cudaStream_t stream) {
  if (N <= 0 || heads <= 0) return cudaSuccess;
  const size_t smem = static_cast<size_t>(kRows * nope) * sizeof(float);
  KERN_RETURN_IF_ERROR(allow_smem(q_absorb_kernel, smem));
  const dim3 grid(ceil_div_u(N, kRows), static_cast<unsigned>(heads), ceil_div_u(kvl, kAbsCols));
  q_absorb_kernel<<<grid, kAbsCols, smem, stream>>>(q, ld_q, kv_b, ld_w, kvl, N, nope, rope, v_dim, q_abs, ld_out);
  return last_launch_error();
}

cudaError_t launch_mla_paged_attention(const uint16_t* q_abs, int64_t ld_q, const uint16_t* cache, int64_t D,
                                       const int32_t* req_to_token, int64_t C, const int32_t* row_req, const int32_t* row_pos,
                                       int64_t N, int64_t heads, int64_t kvl, float scale, uint16_t* out, int64_t ld_out,
                                       float* workspace, cudaStream_t stream) {
  if (N <= 0 || heads <= 0) return cudaSuccess;
  const int64_t splits = workspace ? mla_decode_splits(N, heads, D, kvl) : 1;
  if (mlad::supported(D, kvl)) {
    const size_t smem = mlad::smem_bytes(D);
    const bool full = D == mlad::kMaxD && kvl == mlad::kMaxKvl;
    auto* kernel = full ? mlad::paged_attention_mma_kernel<mlad::kStages, true> : mlad::paged_attention_mma_kernel<mlad::kStages, false>;
    KERN_RETURN_IF_ERROR(allow_smem(kernel, smem));
    const dim3 grid(static_cast<unsigned>(N), ceil_div_u(heads, mlad::kM), static_cast<unsigned>(splits));
    kernel<<<grid, mlad::kThreads, smem, stream>>>(
        q_abs, ld_q, cache, static_cast<int>(D), req_to_token, C, row_req, row_pos, static_cast<int>(heads), static_cast<int>(kvl),
        scale, out, ld_out, static_cast<int>(splits), workspace);
    KERN_RETURN_IF_ERROR(last_launch_error());
    if (splits > 1) {
      mlad::mla_decode_combine_kernel<<<dim3(static_cast<unsigned>(N), static_cast<unsigned>(heads)), 128, 0, stream>>>(
          workspace, static_cast<int>(splits), static_cast<int>(heads), static_cast<int>(kvl), out, ld_out);
      return last_launch_error();
    }
    return cudaSuccess;
  }
  const size_t smem = static_cast<size_t>(kHeads * D + kTile * D + kTile * kHeads + 3 * kHeads + kHeads * kvl) * sizeof(float);
  KERN_RETURN_IF_ERROR(allow_smem(paged_attention_kernel, smem));
  const dim3 grid(static_cast<unsigned>(N), ceil_div_u(heads, kHeads));
  paged_attention_kernel<<<grid, kThreads, smem, stream>>>(q_abs, ld_q, cache, D, req_to_token, C, row_req, row_pos, heads, kvl,
                                                            scale, out, ld_out);
  return last_launch_error();
}

cudaError_t launch_mla_v_up(const uint16_t* lat, int64_t ld_lat, const uint16_t* kv_b, int64_t ld_w, int64_t kvl, int64_t N,
                            int64_t heads, int64_t nope, int64_t v_dim, uint16_t* out, int64_t ld_out, cudaStream_t stream) {
  if (N <= 0 || heads <= 0) return cudaSuccess;
  if (mlad::v_up_mma_shape(kvl, v_dim, ld_lat, ld_w, lat, kv_b) && N <= (int64_t{1} << 30) && kvl <= (int64_t{1} << 30)) {
    const int64_t warps = ((N + 15) / 16) * (v_dim / 8);
    const dim3 grid(ceil_div_u(warps, mlad::kVuWarps), static_cast<unsigned>(heads));
    mlad::v_up_mma_kernel<<<grid, mlad::kVuWarps * 32, 0, stream>>>(lat, ld_lat, kv_b, ld_w, static_cast<int>(kvl),
                                                                    static_cast<int>(N), static_cast<int>(nope),
                                                                    static_cast<int>(v_dim), out, ld_out);
    return last_launch_error();
  }
  const size_t smem = static_cast<size_t>(kUpRows * kvl) * sizeof(float);
  const dim3 grid(ceil_div_u(N, kUpRows), static_cast<unsigned>(heads), ceil_div_u(v_dim, kUpCols));
  const bool vec = kvl % 8 == 0 && ld_w % 8 == 0 && reinterpret_cast<uintptr_t>(kv_b) % 16 == 0;
  if (vec) {
    KERN_RETURN_IF_ERROR(allow_smem(v_up_kernel<true>, smem));
    v_up_kernel<true><<<grid, kThreads, smem, stream>>>(lat, ld_lat, kv_b, ld_w, kvl, N, nope, v_dim, out, ld_out);
  } else {
    KERN_RETURN_IF_ERROR(allow_smem(v_up_kernel<false>, smem));
    v_up_kernel<false><<<grid, kThreads, smem, stream>>>(lat, ld_lat, kv_b, ld_w, kvl, N, nope, v_dim, out, ld_out);
  }
  return last_launch_error();
}

}  // namespace moeprof::kern
