// The reference path of the grouped FP4 GEMMs (Fp4GemmPath::kLegacy, and every fallback's last):
// moe_gemm_fp4_kernel, bf16 mma.sync on LUT-dequantized operands, IEEE SiLU in gemm1; and silu_f32,
// the SFU SiLU of the tiled paths' gemm1 epilogues.
// A part of kernels/moe_gemm_fp4.cu, which includes the parts in the order of their definitions: the
// FP4 GEMMs are one translation unit (docs/kernels.md, "SASS of the parts"). Not for other files.
#pragma once
#include "kernels/moe_gemm_fp4.cuh"

#include "kernels/common/fp4_tiled.h"
#include "kernels/fp4_quant.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <type_traits>

namespace moeprof::kern {
namespace {

// Block tile: 64 padded rows x 128 weight rows x 64 along K; 8 warps as 2 (M) x 4 (N), 32 x 32 each.
constexpr int kBM = 64, kBN = 128, kBK = 64, kThreads = 256;
constexpr int kPitch = kBK + 8;       // bf16 elements per smem row (144 B: conflict-free 32-bit fragment loads)
constexpr int kCPitch = kBN + 4;      // fp32 epilogue tile pitch
constexpr int kSmemAB = (kBM + kBN) * kPitch * 2;
constexpr int kSmemC = kBM * kCPitch * 4;
constexpr int kSmem = kSmemAB > kSmemC ? kSmemAB : kSmemC;

struct GemmArgs {
  const uint8_t* a; int64_t ld_a; const uint8_t* a_sc; int64_t ld_a_sc; float a_gs;
  const uint8_t* w; int64_t ld_w; const uint8_t* w_sc; int64_t ld_w_sc; const float* w_gs;
  const int32_t* offsets; const int32_t* p2t; int64_t P; int E;
  int K;        // reduction length (elements)
  int N;        // gemm1: I (output columns; 2I weight rows per expert); gemm2: H
  float out_gs; uint8_t* out_q; int64_t ld_out_q; uint8_t* out_sc; int64_t ld_out_sc;  // gemm1
  uint16_t* out; int64_t ld_out; bool vec_out;                                         // gemm2
};

// silu(x) = x / (1 + e^-x) in fp32, as the tiled kernels' gemm1 epilogues compute it (every path
// but kLegacy): e^-x by the SFU's exp2 (__expf) and the division by its reciprocal (__fdividef,
// which gives 0 where 1 + e^-x > 2^126, i.e. x < -87.3, instead of a value under 2^-119). A few
// instructions instead of expf's and __fdiv_rn's sequences; h = bf16(silu(gate) * up) then differs
// from the IEEE form only where the exact value sits within the intrinsics' error (a few fp32 ulps,
// growing with |x| for __expf) of a bf16 rounding boundary. kLegacy keeps the IEEE form, so
// bench_moe_gemm's cross-checks of every tiled path against it measure the difference
// (docs/performance.md). The CPU emulator of the tiled kernels supplies its own.
__device__ __forceinline__ float silu_f32(float x) { return __fdividef(x, __fadd_rn(1.0f, __expf(-x))); }

// One 16-element FP4 block in flight: 8 code bytes + its e4m3 scale (scale 0 / codes 0 = zeros).
struct Item {
  uint2 codes;
  uint32_t scale;
};

__device__ __forceinline__ Item load_item(const uint8_t* codes_row, const uint8_t* scale_row, int kblk, bool valid) {
  Item it{make_uint2(0u, 0u), 0u};
  if (valid) {
    it.codes = *reinterpret_cast<const uint2*>(codes_row + kblk * 8);
    it.scale = scale_row[kblk];
  }
  return it;
}

// Dequantizes 16 values into 32 bytes of shared memory: byte -> bf16x2 via the LUT, times the
// block scale (exact: e2m1 * e4m3 fits bf16's 8-bit significand).
__device__ __forceinline__ void store_item(uint16_t* dst, const Item& it, const uint32_t* lut) {
  const __nv_bfloat16 s = __float2bfloat16_rn(e4m3_to_f32(static_cast<uint8_t>(it.scale)));
  const __nv_bfloat162 s2 = __halves2bfloat162(s, s);
  uint32_t v[8];
  const uint32_t words[2] = {it.codes.x, it.codes.y};
#pragma unroll
  for (int b = 0; b < 8; ++b) {
    const uint32_t byte = (words[b >> 2] >> ((b & 3) * 8)) & 0xFFu;
    uint32_t pair = lut[byte];
    __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&pair);
    x = __hmul2(x, s2);
    v[b] = *reinterpret_cast<uint32_t*>(&x);
  }
  uint4* d = reinterpret_cast<uint4*>(dst);
  d[0] = make_uint4(v[0], v[1], v[2], v[3]);
  d[1] = make_uint4(v[4], v[5], v[6], v[7]);
}

template <bool kGemm1>
__global__ void __launch_bounds__(kThreads) moe_gemm_fp4_kernel(GemmArgs p) {
  __shared__ __align__(16) unsigned char smem[kSmem];
  __shared__ uint32_t lut[256];
  __shared__ int32_t row_src[kBM];  // gemm1: token; gemm2: padded row; -1 = produce zeros
  uint16_t* As = reinterpret_cast<uint16_t*>(smem);
  uint16_t* Bs = As + kBM * kPitch;
  float* Cs = reinterpret_cast<float*>(smem);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;
  const int wm = warp >> 2, wn = warp & 3;
  const int64_t R = static_cast<int64_t>(blockIdx.x) * kBM;
  const int n_tile0 = blockIdx.y * (kGemm1 ? kBN / 2 : kBN);  // first output column of this block

  {
    const float lo = e2m1_to_f32(tid & 15), hi = e2m1_to_f32(tid >> 4);
    lut[tid] = pack_bf16x2(lo, hi);  // exact
  }

  const int64_t total = p.offsets[p.E];
  const int64_t row_end = R + kBM < p.P ? R + kBM : p.P;
  const int KT = (p.K + kBK - 1) / kBK;
  const int kblocks = p.K / 16;

  int64_t r0 = R;
  while (r0 < row_end && r0 < total) {
    // Expert of row r0: last e with offsets[e] <= r0 (offsets[e+1] > r0 then holds).
    int lo = 0, hi = p.E;  // invariant offsets[lo] <= r0 < offsets[hi]
    while (hi - lo > 1) {
      const int mid = (lo + hi) >> 1;
      if (p.offsets[mid] <= r0) lo = mid; else hi = mid;
    }
    const int e = lo;
    const int64_t seg_end_full = p.offsets[e + 1];
    const int64_t seg_end = seg_end_full < row_end ? seg_end_full : row_end;
    // Non-increasing offsets (corrupt input) would never advance r0: stop rather than hang. The
    // condition is the same in every thread of the block, so the exit is uniform.
    if (seg_end <= r0) break;

    __syncthreads();  // previous segment's epilogue is done with smem / row_src
    if (tid < kBM) {
      const int64_t r = R + tid;
      int32_t src = -1;
      if (r >= r0 && r < seg_end) {
        const int32_t t = p.p2t[r];
        src = t < 0 ? -1 : (kGemm1 ? t : static_cast<int32_t>(r));
      }
      row_src[tid] = src;
    }
    __syncthreads();

    // Operand rows this thread loads: A item (tid: row tid/4, k-block tid%4), W items (tid, tid+256).
    const int a_row = tid >> 2, a_kb = tid & 3;
    const int32_t a_src = row_src[a_row];
    const uint8_t* a_codes = a_src >= 0 ? p.a + a_src * p.ld_a : nullptr;
    const uint8_t* a_scs = a_src >= 0 ? p.a_sc + a_src * p.ld_a_sc : nullptr;
    const uint8_t* w_codes[2];
    const uint8_t* w_scs[2];
    int w_row[2], w_kb[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int item = tid + j * kThreads;
      w_row[j] = item >> 2;
      w_kb[j] = item & 3;
      int64_t wr = -1;
      if (kGemm1) {
        const int half = w_row[j] >= kBN / 2;  // 0 gate, 1 up
        const int n = n_tile0 + (w_row[j] - half * (kBN / 2));
        if (n < p.N) wr = static_cast<int64_t>(e) * 2 * p.N + half * p.N + n;
      } else {
        const int n = n_tile0 + w_row[j];
        if (n < p.N) wr = static_cast<int64_t>(e) * p.N + n;
      }
      w_codes[j] = wr >= 0 ? p.w + wr * p.ld_w : nullptr;
      w_scs[j] = wr >= 0 ? p.w_sc + wr * p.ld_w_sc : nullptr;
    }

    float acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;

    auto load_tile = [&](int kt, Item& ia, Item (&iw)[2]) {
      const int kb = kt * (kBK / 16);
      ia = load_item(a_codes, a_scs, kb + a_kb, a_codes != nullptr && kb + a_kb < kblocks);
#pragma unroll
      for (int j = 0; j < 2; ++j) iw[j] = load_item(w_codes[j], w_scs[j], kb + w_kb[j], w_codes[j] != nullptr && kb + w_kb[j] < kblocks);
    };

    Item ia, iw[2];
    load_tile(0, ia, iw);
    for (int kt = 0; kt < KT; ++kt) {
      __syncthreads();  // everyone is done reading the previous tile
      store_item(As + a_row * kPitch + a_kb * 16, ia, lut);
#pragma unroll
      for (int j = 0; j < 2; ++j) store_item(Bs + w_row[j] * kPitch + w_kb[j] * 16, iw[j], lut);
      __syncthreads();
      if (kt + 1 < KT) load_tile(kt + 1, ia, iw);  // in flight during the MMAs

#pragma unroll
      for (int kk = 0; kk < kBK; kk += 16) {
        uint32_t af[2][4];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const uint16_t* base = As + (wm * 32 + i * 16 + g) * kPitch + kk + 2 * q;
          af[i][0] = *reinterpret_cast<const uint32_t*>(base);
          af[i][1] = *reinterpret_cast<const uint32_t*>(base + 8 * kPitch);
          af[i][2] = *reinterpret_cast<const uint32_t*>(base + 8);
          af[i][3] = *reinterpret_cast<const uint32_t*>(base + 8 * kPitch + 8);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint16_t* base = Bs + (wn * 32 + j * 8 + g) * kPitch + kk + 2 * q;
          const uint32_t b0 = *reinterpret_cast<const uint32_t*>(base);
          const uint32_t b1 = *reinterpret_cast<const uint32_t*>(base + 8);
#pragma unroll
          for (int i = 0; i < 2; ++i) mma_bf16_16816(acc[i][j], af[i], b0, b1);
        }
      }
    }

    // Epilogue: scaled accumulators to shared memory (aliases the operand tiles).
    const float gsc = __fmul_rn(p.a_gs, p.w_gs[e]);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int row = wm * 32 + i * 16 + g, col = wn * 32 + j * 8 + 2 * q;
        Cs[row * kCPitch + col] = __fmul_rn(acc[i][j][0], gsc);
        Cs[row * kCPitch + col + 1] = __fmul_rn(acc[i][j][1], gsc);
        Cs[(row + 8) * kCPitch + col] = __fmul_rn(acc[i][j][2], gsc);
        Cs[(row + 8) * kCPitch + col + 1] = __fmul_rn(acc[i][j][3], gsc);
      }
    __syncthreads();

    if constexpr (kGemm1) {
      // 64 rows x 4 output blocks of 16 columns: one item per thread.
      const int row = tid >> 2, blk = tid & 3;
      const int64_t r = R + row;
      const int n = n_tile0 + blk * 16;
      if (r >= r0 && r < seg_end && n < p.N) {
        uint8_t packed[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        uint8_t s = 0;
        if (row_src[row] >= 0) {
          float hv[16];
#pragma unroll
          for (int c = 0; c < 16; ++c) {
            const float gate = Cs[row * kCPitch + blk * 16 + c];
            const float up = Cs[row * kCPitch + kBN / 2 + blk * 16 + c];
            const float silu = __fdiv_rn(gate, __fadd_rn(1.0f, expf(-gate)));  // (the exact form: kLegacy)
            hv[c] = round_bf16(__fmul_rn(silu, up));
          }
          s = nvfp4_quantize16(hv, p.out_gs, packed);
        }
        uint8_t* dq = p.out_q + r * p.ld_out_q + n / 2;
#pragma unroll
        for (int c = 0; c < 8; ++c) dq[c] = packed[c];
        p.out_sc[r * p.ld_out_sc + n / 16] = s;
      }
    } else {
      // 64 rows x 16 chunks of 8 columns: four per thread.
#pragma unroll
      for (int it = 0; it < 4; ++it) {
        const int item = tid + it * kThreads;
        const int row = item >> 4, ch = item & 15;
        const int64_t r = R + row;
        const int n = n_tile0 + ch * 8;
        if (r < r0 || r >= seg_end || n >= p.N) continue;
        const bool live = row_src[row] >= 0;
        uint16_t* dst = p.out + r * p.ld_out + n;
        const float* src = Cs + row * kCPitch + ch * 8;
        if (p.vec_out && n + 8 <= p.N) {
          uint4 v;
          v.x = live ? pack_bf16x2(src[0], src[1]) : 0u;
          v.y = live ? pack_bf16x2(src[2], src[3]) : 0u;
          v.z = live ? pack_bf16x2(src[4], src[5]) : 0u;
          v.w = live ? pack_bf16x2(src[6], src[7]) : 0u;
          *reinterpret_cast<uint4*>(dst) = v;
        } else {
          for (int c = 0; c < 8 && n + c < p.N; ++c) dst[c] = live ? f32_to_bf16(src[c]) : uint16_t{0};
        }
      }
    }
    r0 = seg_end;
  }

  // Rows past the last expert segment: zeros.
  const int64_t z0 = total > R ? total : R;
  for (int64_t idx = tid; idx < (row_end - z0) * (kGemm1 ? kBN / 2 : kBN); idx += kThreads) {
    if (z0 >= row_end) break;
    const int64_t r = z0 + idx / (kGemm1 ? kBN / 2 : kBN);
    const int c = static_cast<int>(idx % (kGemm1 ? kBN / 2 : kBN));
    const int n = n_tile0 + c;
    if (n >= p.N) continue;
    if constexpr (kGemm1) {
      if ((n & 1) == 0) p.out_q[r * p.ld_out_q + n / 2] = 0;
      if ((n & 15) == 0) p.out_sc[r * p.ld_out_sc + n / 16] = 0;
    } else {
      p.out[r * p.ld_out + n] = 0;
    }
  }
}

}  // namespace
}  // namespace moeprof::kern
