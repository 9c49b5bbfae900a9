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

// ---- Tiled kernel (Fp4GemmPath::kTiled) -------------------------------------------------------
// CTA tile 128 padded rows x 256 weight rows x 64 along K, 8 warps as 2 (M) x 4 (N), 64 x 64 each.
// gemm1: weight rows 0..127 of the tile are gate rows n0..n0+127, rows 128..255 the up rows of the
// same columns, and warp wn holds gate and up of columns wn*32..wn*32+31 (SiLU-mul in registers).
// Row tiles are per expert (start at offsets[e] + 128 j, never straddle two experts): each CTA finds
// its (expert, tile) with a block scan of the per-expert tile counts; the spare CTAs of the grid
// (ceil(P/128) + E row tiles are launched) write the zero rows past offsets[E].
// Pipeline: FP4 codes (8-byte cp.async) and e4m3 scales (4-byte cp.async) in a kStages ring; step s+1
// is dequantized (e2m1 bits -> fp16 * fp16(scale * 2^7), exact) into one of two fp16 tiles (128-byte
// rows, 16-byte chunks XOR-swizzled by row & 7) while the tensor cores work on step s from the other
// (ldmatrix.x4 + mma.sync.m16n8k16 f16 -> fp32): one __syncthreads per K step. Every operand carries
// a 2^-7 factor, so the fp32 accumulator is 2^-14 times the bf16 kernel's; the epilogue multiplies
// by 2^14 (exact) before the global scales.
namespace v2 {

constexpr int BM = 128, BN = 256, BK = 64, kThreads = 256, kStages = 4;
constexpr int kRows = BM + BN;                           // operand rows per stage (A then B)
constexpr int kStageCodes = kRows * (BK / 2);            // 12288 bytes of e2m1 codes
constexpr int kStageBytes = kStageCodes + kRows * (BK / 16);  // + 4 scale bytes per row
constexpr int kRingBytes = kStages * kStageBytes;
constexpr int kBufBytes = kRows * BK * 2;                // one fp16 tile
constexpr int kSmemBytes = kRingBytes + 2 * kBufBytes;   // 153,600
constexpr int kHPitch = 128 + 4;                         // gemm1 epilogue: fp32 h tile pitch
static_assert(BM * kHPitch * 4 <= kSmemBytes, "gemm1 epilogue tile fits the operand smem");
constexpr int kCols1 = 128, kCols2 = 256;                // output columns per tile: gemm1, gemm2
constexpr int kNPer1 = 1, kNPer2 = 4;                    // column tiles per CTA (gemm2 reuses its A rows)
constexpr float kUnscale = 16384.0f;                     // 2^14
// Variants (template kVar; Fp4GemmPath kTiled = 0, kTiledSkip = 1, kTiledStaged = 2):
//  >= 1: fewer-instruction exact dequantization (e2m1x8_to_f16x8_fast), and a warp whose 64 A rows are all dead (row_src < 0: past the segment end or padding rows
//        inside it) skips its ldmatrix + mma (its accumulators stay 0; the epilogue still writes the
//        zeros). The other warps and the dequantization of the shared tiles are unchanged, so the
//        result is bit-identical. Cuts the padded-tile MMA work from 128- to 64-row granularity.
//  >= 2 (gemm2 only; gemm1 runs as 1): the bf16 output tile goes through a per-warp shared staging
//        tile (64 x 64 bf16, 16-byte chunks XOR-swizzled by row & 7, 64 KiB extra) and leaves with
//        16-byte row-contiguous stores (4 full 128-byte rows per warp instruction) instead of 4-byte
//        fragment stores. Same values, same rounding.
constexpr int kStageOutBytes = 64 * 64 * 2;              // per warp
//  3 (kWgmma, sm_90a): the same ring, dequantization and fp16 tiles (already the 128-byte-swizzle
//        K-major layout wgmma reads: 128-byte rows, chunk ^ (row & 7), tiles 1024-byte aligned),
//        but each warpgroup (warps 4 wg .. 4 wg + 3) multiplies its 64 A rows by all 256 B rows with
//        4 x wgmma.mma_async m64n256k16 per K step (fp32 accumulators in registers, D fragment =
//        the m16n8 layout repeated: warp w of the group owns rows 16 w .. 16 w + 15, all 256 columns).
//        The wgmmas of step s run asynchronously while the CTA dequantizes step s + 1 into the other
//        tile; wait_group 0 before the next barrier. A warpgroup whose 64 rows are all dead skips its
//        wgmmas. gemm2 stages its bf16 output per warp (16 x 256, chunk ^ (row & 7)) like variant 2.
//  4 (kWgmmaWs, sm_90a): warp-specialized: 384 threads (<= 168 registers each); warpgroups 0-1 are
//        consumers (wgmma as in 3, epilogues), warpgroup 2 the producer: it loads the FP4 codes
//        and scales of step s + 1 into registers (8-/1-byte loads) while dequantizing step s into a
//        ring of kWsStages fp16 tiles; full/empty mbarriers per tile, no CTA-wide barrier in the K
//        loop. Consumers keep one wgmma group in flight (wait_group 1) and release a tile when the
//        wgmmas reading it are done; gemm2's epilogue overlaps the producers' next column tile.
constexpr int kAlignPad = 1024;                          // wgmma: tiles 1024-byte aligned
constexpr int kWsStages = 4;                             // kWs fp16 tiles (gemm1; gemm2 uses 3)
constexpr int kProducers = 128;                          // kWs producer threads (one warpgroup)
constexpr int kPItems = (kRows * BK / 16) / kProducers;  // 12 16-element items per producer and step
// The warp-specialized kernels' register split (setmaxnreg, after the prologue): 184 per producer
// thread, 160 per consumer thread, 128 * 184 + 256 * 160 = 64,512 = 384 x 168, the registers the
// launch gave the CTA (an increase past what the consumers release never completes: the kernel
// hangs). The producers' two pointers, codes and scale per item, with the next step's loads in
// flight, fit without spills only with the extra 16; the consumers' 128 accumulators fit in 160.
constexpr int kProducerRegs = 184, kConsumerRegs = 160;
static_assert(kProducers * kProducerRegs + kThreads * kConsumerRegs <= (kThreads + kProducers) * 168,
              "the register split fits the launch's 168 registers per thread");
// Both kernels take their share right after the prologue, in their own code: the same two asm
// statements wrapped in a function left ptxas allocating for 168 (the persistent gemm2 spilled
// 116-132 bytes).
// p_op / c_op: "inc" or "dec", the direction of each role's change from the launch's 168.
#define MOEPROF_SET_ROLE_REGS_SPLIT(producer, p_op, p_regs, c_op, c_regs)                   \
  do {                                                                                      \
    if (producer) asm volatile("setmaxnreg." p_op ".sync.aligned.u32 %0;\n" ::"n"(p_regs)); \
    else asm volatile("setmaxnreg." c_op ".sync.aligned.u32 %0;\n" ::"n"(c_regs));          \
  } while (0)
#define MOEPROF_SET_ROLE_REGS(producer) MOEPROF_SET_ROLE_REGS_SPLIT(producer, "inc", kProducerRegs, "dec", kConsumerRegs)
// kVar 5 (gemm2 only differs): 4 stages, the bf16 output staged in two 128-column halves (4 KiB per
// warp) and 7 column tiles per CTA.
// kVar 6 (kWgmmaWsRs): kVar 5's warp roles, tiles and epilogues, but the consumers dequantize their
// own A rows into registers (the wgmma RS form: A from registers, B from shared memory) and the
// producers only the 256 weight rows: 8 items per producer thread and step instead of 12, a ring of
// kRsStages 32 KiB weight tiles. Each consumer thread loads its two rows' 32 code bytes and 4 scale
// bytes per K step (16- and 4-byte loads, a step ahead) and makes the 16 fp16 values of its A
// fragments with the producers' conversion (same bits). Registers: 120 per producer thread, 192 per
// consumer thread (128 accumulators, two steps' A fragments, the loaded codes).
constexpr int kRsStages = 4;
static_assert(kRsStages <= kWsStages, "the barrier array holds the weight ring's barriers");
constexpr int kRsBufBytes = BN * BK * 2;                 // one fp16 weight tile: 32 KiB
constexpr int kRsItems = kPItems - kPItems / 3;          // 8 weight items per producer thread and step
constexpr int kRsProducerRegs = 120, kRsConsumerRegs = 192;
static_assert(BM * kHPitch * 4 <= kRsStages * kRsBufBytes, "gemm1 epilogue tile fits the weight ring");
static_assert(kProducers * kRsProducerRegs + kThreads * kRsConsumerRegs <= (kThreads + kProducers) * 168,
              "the register split fits the launch's 168 registers per thread");
#define MOEPROF_SET_ROLE_REGS_RS(producer) \
  MOEPROF_SET_ROLE_REGS_SPLIT(producer, "dec", kRsProducerRegs, "inc", kRsConsumerRegs)
// kVar 9: the tiled producers need fewer registers (4 16-byte loads in flight instead of 16
// pointers and 16 loads), so the consumers get 200.
constexpr int kRsTProducerRegs = 104, kRsTConsumerRegs = 200;
static_assert(kProducers * kRsTProducerRegs + kThreads * kRsTConsumerRegs <= (kThreads + kProducers) * 168,
              "the register split fits the launch's 168 registers per thread");
#define MOEPROF_SET_ROLE_REGS_RST(producer) \
  MOEPROF_SET_ROLE_REGS_SPLIT(producer, "dec", kRsTProducerRegs, "inc", kRsTConsumerRegs)
// kVar 9 (kWgmmaWsRs on Fp4WeightLayout::kGemm1Tiled weights, gemm1 only): kVar 6, but the producers
// read the weight tile's step from its tiled block (kernels/common/fp4_tiled.h): four 16-byte code
// loads and one 8-byte scale load per thread, each warp's load contiguous (512 / 256 bytes), instead
// of 8 code and 8 scale loads touching 8 rows' lines each; the same items, tiles and bits.
constexpr bool is_rs(int kVar) { return kVar == 6 || kVar == 9; }
template <bool kGemm1, int kVar>
constexpr int ws_stages() { return is_rs(kVar) ? kRsStages : (kGemm1 || kVar == 5 ? kWsStages : 3); }
template <int kVar>
constexpr int ws_buf_bytes() { return is_rs(kVar) ? kRsBufBytes : kBufBytes; }
template <bool kGemm1, int kVar>
constexpr int ws_stage_out() { return kVar >= 5 ? kStageOutBytes / 2 : kStageOutBytes; }
template <bool kGemm1, int kVar>
constexpr int n_per() { return kGemm1 ? kNPer1 : (kVar >= 5 ? 7 : kNPer2); }
template <bool kGemm1, int kVar>
constexpr int smem_bytes() {
  if (kVar >= 4)
    return ws_stages<kGemm1, kVar>() * ws_buf_bytes<kVar>() +
           (kGemm1 ? 0 : (kThreads / 32) * ws_stage_out<kGemm1, kVar>()) + kAlignPad;
  return kSmemBytes + ((!kGemm1 && kVar >= 2) ? (kThreads / 32) * kStageOutBytes : 0) + (kVar == 3 ? kAlignPad : 0);
}

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}
// 16-byte shared store at a 32-bit shared address (the producers: no generic-to-shared address
// conversion per step).
__device__ __forceinline__ void sts128(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d));
}
__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 8 : 0) : "memory");
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t hmul2_f16(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
// ---- wgmma (sm_90a only; the kWgmma kernel is compiled only where __CUDA_ARCH_FEAT_SM90_ALL) ----
// Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row atoms of 1024 bytes (SBO), LBO
// unused (1); start address >> 4 in bits 0..13, swizzle mode 1 (128B) in bits 62..63.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t saddr) {
  return static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// D (64 x 256 fp32, 128 registers per thread) += A (64 x 16, smem desc) * B (256 x 16, smem desc)^T,
// both fp16 K-major; d[jj][j][c] = register 4 * (8 jj + j) + c of the PTX fragment.
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[4][8][4], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0][0]), "+f"(d[0][0][1]), "+f"(d[0][0][2]), "+f"(d[0][0][3]), "+f"(d[0][1][0]), "+f"(d[0][1][1]), "+f"(d[0][1][2]), "+f"(d[0][1][3]), "+f"(d[0][2][0]), "+f"(d[0][2][1]), "+f"(d[0][2][2]), "+f"(d[0][2][3]), "+f"(d[0][3][0]), "+f"(d[0][3][1]), "+f"(d[0][3][2]), "+f"(d[0][3][3]), "+f"(d[0][4][0]), "+f"(d[0][4][1]), "+f"(d[0][4][2]), "+f"(d[0][4][3]), "+f"(d[0][5][0]), "+f"(d[0][5][1]), "+f"(d[0][5][2]), "+f"(d[0][5][3]), "+f"(d[0][6][0]), "+f"(d[0][6][1]), "+f"(d[0][6][2]), "+f"(d[0][6][3]), "+f"(d[0][7][0]), "+f"(d[0][7][1]), "+f"(d[0][7][2]), "+f"(d[0][7][3]), "+f"(d[1][0][0]), "+f"(d[1][0][1]), "+f"(d[1][0][2]), "+f"(d[1][0][3]), "+f"(d[1][1][0]), "+f"(d[1][1][1]), "+f"(d[1][1][2]), "+f"(d[1][1][3]), "+f"(d[1][2][0]), "+f"(d[1][2][1]), "+f"(d[1][2][2]), "+f"(d[1][2][3]), "+f"(d[1][3][0]), "+f"(d[1][3][1]), "+f"(d[1][3][2]), "+f"(d[1][3][3]), "+f"(d[1][4][0]), "+f"(d[1][4][1]), "+f"(d[1][4][2]), "+f"(d[1][4][3]), "+f"(d[1][5][0]), "+f"(d[1][5][1]), "+f"(d[1][5][2]), "+f"(d[1][5][3]), "+f"(d[1][6][0]), "+f"(d[1][6][1]), "+f"(d[1][6][2]), "+f"(d[1][6][3]), "+f"(d[1][7][0]), "+f"(d[1][7][1]), "+f"(d[1][7][2]), "+f"(d[1][7][3]), "+f"(d[2][0][0]), "+f"(d[2][0][1]), "+f"(d[2][0][2]), "+f"(d[2][0][3]), "+f"(d[2][1][0]), "+f"(d[2][1][1]), "+f"(d[2][1][2]), "+f"(d[2][1][3]), "+f"(d[2][2][0]), "+f"(d[2][2][1]), "+f"(d[2][2][2]), "+f"(d[2][2][3]), "+f"(d[2][3][0]), "+f"(d[2][3][1]), "+f"(d[2][3][2]), "+f"(d[2][3][3]), "+f"(d[2][4][0]), "+f"(d[2][4][1]), "+f"(d[2][4][2]), "+f"(d[2][4][3]), "+f"(d[2][5][0]), "+f"(d[2][5][1]), "+f"(d[2][5][2]), "+f"(d[2][5][3]), "+f"(d[2][6][0]), "+f"(d[2][6][1]), "+f"(d[2][6][2]), "+f"(d[2][6][3]), "+f"(d[2][7][0]), "+f"(d[2][7][1]), "+f"(d[2][7][2]), "+f"(d[2][7][3]), "+f"(d[3][0][0]), "+f"(d[3][0][1]), "+f"(d[3][0][2]), "+f"(d[3][0][3]), "+f"(d[3][1][0]), "+f"(d[3][1][1]), "+f"(d[3][1][2]), "+f"(d[3][1][3]), "+f"(d[3][2][0]), "+f"(d[3][2][1]), "+f"(d[3][2][2]), "+f"(d[3][2][3]), "+f"(d[3][3][0]), "+f"(d[3][3][1]), "+f"(d[3][3][2]), "+f"(d[3][3][3]), "+f"(d[3][4][0]), "+f"(d[3][4][1]), "+f"(d[3][4][2]), "+f"(d[3][4][3]), "+f"(d[3][5][0]), "+f"(d[3][5][1]), "+f"(d[3][5][2]), "+f"(d[3][5][3]), "+f"(d[3][6][0]), "+f"(d[3][6][1]), "+f"(d[3][6][2]), "+f"(d[3][6][3]), "+f"(d[3][7][0]), "+f"(d[3][7][1]), "+f"(d[3][7][2]), "+f"(d[3][7][3])
      : "l"(da), "l"(db), "r"(1));
}
// D (64 x 256 fp32) += A (64 x 16 fp16, registers: the m16n8k16 A fragment of this thread's warp,
// a[0] rows g k 2q..2q+1, a[1] rows g + 8, a[2] rows g k 2q + 8..2q + 9, a[3] rows g + 8) * B (256 x 16,
// smem desc, K-major)^T: the RS form of wgmma_m64n256k16 (kWgmmaWsRs).
__device__ __forceinline__ void wgmma_m64n256k16_rs(float (&d)[4][8][4], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"
      : "+f"(d[0][0][0]), "+f"(d[0][0][1]), "+f"(d[0][0][2]), "+f"(d[0][0][3]), "+f"(d[0][1][0]), "+f"(d[0][1][1]), "+f"(d[0][1][2]), "+f"(d[0][1][3]), "+f"(d[0][2][0]), "+f"(d[0][2][1]), "+f"(d[0][2][2]), "+f"(d[0][2][3]), "+f"(d[0][3][0]), "+f"(d[0][3][1]), "+f"(d[0][3][2]), "+f"(d[0][3][3]), "+f"(d[0][4][0]), "+f"(d[0][4][1]), "+f"(d[0][4][2]), "+f"(d[0][4][3]), "+f"(d[0][5][0]), "+f"(d[0][5][1]), "+f"(d[0][5][2]), "+f"(d[0][5][3]), "+f"(d[0][6][0]), "+f"(d[0][6][1]), "+f"(d[0][6][2]), "+f"(d[0][6][3]), "+f"(d[0][7][0]), "+f"(d[0][7][1]), "+f"(d[0][7][2]), "+f"(d[0][7][3]), "+f"(d[1][0][0]), "+f"(d[1][0][1]), "+f"(d[1][0][2]), "+f"(d[1][0][3]), "+f"(d[1][1][0]), "+f"(d[1][1][1]), "+f"(d[1][1][2]), "+f"(d[1][1][3]), "+f"(d[1][2][0]), "+f"(d[1][2][1]), "+f"(d[1][2][2]), "+f"(d[1][2][3]), "+f"(d[1][3][0]), "+f"(d[1][3][1]), "+f"(d[1][3][2]), "+f"(d[1][3][3]), "+f"(d[1][4][0]), "+f"(d[1][4][1]), "+f"(d[1][4][2]), "+f"(d[1][4][3]), "+f"(d[1][5][0]), "+f"(d[1][5][1]), "+f"(d[1][5][2]), "+f"(d[1][5][3]), "+f"(d[1][6][0]), "+f"(d[1][6][1]), "+f"(d[1][6][2]), "+f"(d[1][6][3]), "+f"(d[1][7][0]), "+f"(d[1][7][1]), "+f"(d[1][7][2]), "+f"(d[1][7][3]), "+f"(d[2][0][0]), "+f"(d[2][0][1]), "+f"(d[2][0][2]), "+f"(d[2][0][3]), "+f"(d[2][1][0]), "+f"(d[2][1][1]), "+f"(d[2][1][2]), "+f"(d[2][1][3]), "+f"(d[2][2][0]), "+f"(d[2][2][1]), "+f"(d[2][2][2]), "+f"(d[2][2][3]), "+f"(d[2][3][0]), "+f"(d[2][3][1]), "+f"(d[2][3][2]), "+f"(d[2][3][3]), "+f"(d[2][4][0]), "+f"(d[2][4][1]), "+f"(d[2][4][2]), "+f"(d[2][4][3]), "+f"(d[2][5][0]), "+f"(d[2][5][1]), "+f"(d[2][5][2]), "+f"(d[2][5][3]), "+f"(d[2][6][0]), "+f"(d[2][6][1]), "+f"(d[2][6][2]), "+f"(d[2][6][3]), "+f"(d[2][7][0]), "+f"(d[2][7][1]), "+f"(d[2][7][2]), "+f"(d[2][7][3]), "+f"(d[3][0][0]), "+f"(d[3][0][1]), "+f"(d[3][0][2]), "+f"(d[3][0][3]), "+f"(d[3][1][0]), "+f"(d[3][1][1]), "+f"(d[3][1][2]), "+f"(d[3][1][3]), "+f"(d[3][2][0]), "+f"(d[3][2][1]), "+f"(d[3][2][2]), "+f"(d[3][2][3]), "+f"(d[3][3][0]), "+f"(d[3][3][1]), "+f"(d[3][3][2]), "+f"(d[3][3][3]), "+f"(d[3][4][0]), "+f"(d[3][4][1]), "+f"(d[3][4][2]), "+f"(d[3][4][3]), "+f"(d[3][5][0]), "+f"(d[3][5][1]), "+f"(d[3][5][2]), "+f"(d[3][5][3]), "+f"(d[3][6][0]), "+f"(d[3][6][1]), "+f"(d[3][6][2]), "+f"(d[3][6][3]), "+f"(d[3][7][0]), "+f"(d[3][7][1]), "+f"(d[3][7][2]), "+f"(d[3][7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Generic-proxy shared stores (the dequantized tiles) made visible to the async proxy (wgmma).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
#endif
// Keeps the compiler from moving accumulator reads/writes across wgmma issue / wait.
__device__ __forceinline__ void acc_fence(float (&d)[4][8][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) asm volatile("" : "+f"(d[i][j][c])::"memory");
}

// fp16 with the value 2^-14 * e2m1(code) (subnormal for code 1): sign -> bit 15, exponent and
// mantissa bits -> bits 11..9. Two codes per byte, low nibble first -> one f16x2 word per byte.
__device__ __forceinline__ void e2m1x8_to_f16x8(uint32_t w, uint32_t s2, uint32_t* o) {
  const uint32_t t0 = w & 0x0F0F0F0Fu, t1 = (w >> 4) & 0x0F0F0F0Fu;
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const uint32_t sel = static_cast<uint32_t>(b | (b << 4) | ((4 + b) << 8) | ((4 + b) << 12));
    const uint32_t u = __byte_perm(t0, t1, sel);  // bytes: lo, lo, hi, hi nibble of byte b
    const uint32_t x = ((u << 9) & 0x0E000E00u) | ((u << 12) & 0x80008000u);
    o[b] = hmul2_f16(x, s2);                       // 2^-14 * v * (s * 2^7 * ... ) exact: see above
  }
}

// The 8 codes of w, one byte each in code order (x: codes 0..3, y: 4..7): each code's bits e1 e0 m
// shifted to bits kShift + 2 .. kShift, its sign to bit 7. Built once per word (low nibbles into
// lo: codes 0, 2, 4, 6; high nibbles into hi: 1, 3, 5, 7) and interleaved by two byte permutes.
// kShift 1: the high byte of fp16 2^-14 * e2m1 (e2m1x8_to_f16x8_fast); kShift 2: the e4m3 byte of
// e2m1 * 2^-6 (e2m1x8_to_e4m3x8).
template <int kShift>
__device__ __forceinline__ void e2m1x8_bytes(uint32_t w, uint32_t& x, uint32_t& y) {
  constexpr uint32_t kBits = 0x07070707u << kShift;
  const uint32_t lo = ((w << kShift) & kBits) | ((w << 4) & 0x80808080u);
  const uint32_t hi = ((w >> (4 - kShift)) & kBits) | (w & 0x80808080u);
  x = __byte_perm(lo, hi, 0x5140u);
  y = __byte_perm(lo, hi, 0x7362u);
}

// Same result with fewer instructions (variants >= 1): the fp16 high bytes of all 8 codes come
// from e2m1x8_bytes<1> (mantissa/exponent bits -> fp16 bits 9..11, sign -> 15), then each output
// word is one permute of x or y with a zero register (high byte of each half, zero low bytes) and
// the scale multiply: 17 instead of ~26 integer ops per 8 codes (19 with an AND per word instead
// of the zero register). Checked exhaustively against e2m1x8_to_f16x8 by the emulation selftest.
__device__ __forceinline__ void e2m1x8_to_f16x8_fast(uint32_t w, uint32_t s2, uint32_t* o) {
  uint32_t x, y;
  e2m1x8_bytes<1>(w, x, y);
  o[0] = hmul2_f16(__byte_perm(x, 0u, 0x1404u), s2);
  o[1] = hmul2_f16(__byte_perm(x, 0u, 0x3424u), s2);
  o[2] = hmul2_f16(__byte_perm(y, 0u, 0x1404u), s2);
  o[3] = hmul2_f16(__byte_perm(y, 0u, 0x3424u), s2);
}

// The 8 codes of w as e4m3 bytes holding e2m1(code) * 2^-6 (for the hardware conversion below):
// code bits e1 e0 m -> e4m3 exponent bits 1..0 and the top mantissa bit (bits 4..2), sign -> bit 7.
// e2m1's subnormal (e = 0: m * 0.5) maps to e4m3's subnormal (m * 2^-7), its normals
// 2^(e-1) (1 + m/2) to 2^(e-7) (1 + m/2): exact for all 16 codes. x: codes 0..3, y: codes 4..7.
__device__ __forceinline__ void e2m1x8_to_e4m3x8(uint32_t w, uint32_t& x, uint32_t& y) { e2m1x8_bytes<2>(w, x, y); }

// kWgmmaWsRs's byte selection (host-testable: the emulator's selftest checks it). A consumer lane
// with q = lane % 4 needs, of each k16 block j of its A row, codes 16 j + 2q, + 1 (the m16n8k16
// fragment's a0 / a1) and 16 j + 8 + 2q, + 1 (a2 / a3): byte q of the row's code words 2 j and
// 2 j + 1 (word w = codes 8 w .. 8 w + 7, two per byte, low nibble first). From the step's words
// u0 (0..3) and u1 (4..7), w01 gets byte q of words 0..3 and w23 of words 4..7, in word order.
__device__ __forceinline__ uint32_t rs_byte_sel(int q) { return static_cast<uint32_t>(q | ((q + 4) << 4)) * 0x101u; }
__device__ __forceinline__ void rs_pick_bytes(uint4 u0, uint4 u1, uint32_t sel, uint32_t& w01, uint32_t& w23) {
  w01 = __byte_perm(__byte_perm(u0.x, u0.y, sel), __byte_perm(u0.z, u0.w, sel), 0x5410u);
  w23 = __byte_perm(__byte_perm(u1.x, u1.y, sel), __byte_perm(u1.z, u1.w, sel), 0x5410u);
}

// fp16x2 (both halves) holding e4m3(v) * 2^7, exact (|.| <= 57344); NaN (0x7F / 0xFF) stays NaN.
// e4m3 exponent/mantissa bits -> fp16 bits 13..7 give e4m3 * 2^-8 (fp16 subnormal for e4m3
// subnormals), then one exact multiply by 2^15.
__device__ __forceinline__ uint32_t e4m3_to_f16x2_x128(uint32_t sc) {
  uint32_t hb = ((sc << 7) & 0x3F80u) | ((sc << 8) & 0x8000u);
  hb = (sc & 0x7Fu) == 0x7Fu ? 0x7E00u : hb;
  return hmul2_f16(hb * 0x10001u, 0x78007800u);  // 0x7800 = fp16 32768
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The hardware conversion (sm_89+) of the low / high two e4m3 bytes of v to fp16x2: e4m3 is a
// subset of fp16 (its subnormals included), so it is exact; NaN stays NaN.
__device__ __forceinline__ uint32_t cvt_e4m3x2_lo(uint32_t v) {
  uint32_t h;
  asm("{\n.reg .b16 t, u;\nmov.b32 {t, u}, %1;\ncvt.rn.f16x2.e4m3x2 %0, t;\n}\n" : "=r"(h) : "r"(v));
  return h;
}
__device__ __forceinline__ uint32_t cvt_e4m3x2_hi(uint32_t v) {
  uint32_t h;
  asm("{\n.reg .b16 t, u;\nmov.b32 {t, u}, %1;\ncvt.rn.f16x2.e4m3x2 %0, u;\n}\n" : "=r"(h) : "r"(v));
  return h;
}
// fp16x2 (both halves) holding e4m3(sc) * 2^-1, exact (e4m3's smallest subnormal 2^-9 halves to
// 2^-10, an fp16 normal); NaN stays NaN.
__device__ __forceinline__ uint32_t e4m3_to_f16x2_half_cvt(uint32_t sc) {
  return hmul2_f16(cvt_e4m3x2_lo(sc * 0x101u), 0x38003800u);  // 0x3800 = fp16 0.5
}
// The warp-specialized producers' dequantization: codes -> e4m3 bytes (e2m1 * 2^-6, above), four
// hardware conversions, one multiply by sh = scale / 2 each. The product e2m1 * scale * 2^-7 is
// the one e2m1x8_to_f16x8_fast makes from 2^-14 e2m1 and scale * 2^7, with one rounding of the
// same exact operands: the same fp16 bits, in 15 instead of 17 PTX operations per 8 codes (the
// SASS was not counted; the measured speed-up is 0-1%, docs/performance.md, fifth session).
__device__ __forceinline__ void e2m1x8_to_f16x8_cvt(uint32_t w, uint32_t sh, uint32_t* o) {
  uint32_t x, y;
  e2m1x8_to_e4m3x8(w, x, y);
  o[0] = hmul2_f16(cvt_e4m3x2_lo(x), sh);
  o[1] = hmul2_f16(cvt_e4m3x2_hi(x), sh);
  o[2] = hmul2_f16(cvt_e4m3x2_lo(y), sh);
  o[3] = hmul2_f16(cvt_e4m3x2_hi(y), sh);
}
#endif

struct Args {
  const uint8_t* a; int64_t ld_a; const uint8_t* a_sc; int64_t ld_a_sc; float a_gs;
  const uint8_t* w; int64_t ld_w; const uint8_t* w_sc; int64_t ld_w_sc; const float* w_gs;
  const int32_t* offsets; const int32_t* p2t; int64_t P; int E;
  int K, N;
  int grid_m, n_groups;
  float out_gs; uint8_t* out_q; int64_t ld_out_q; uint8_t* out_sc; int64_t ld_out_sc; bool q_vec;  // gemm1
  uint16_t* out; int64_t ld_out; bool vec_out; bool vec16_out;                                   // gemm2
  bool tma_out;  // kWgmmaPersist's gemm2: the output tensor map (persist_kernel's out_map) is valid
};

// gemm2's output tile from wgmma fragments (kWgmma, and kWgmmaWs without the half staging): this
// warp owns tile rows row_w + (g, g + 8), columns 8 j + 2 q (+1), j = 0..31 (acc[j / 8][j % 8]),
// staged as 16 rows x 512 bytes in `stg` (16-byte chunk ^ (row & 7)), then stored one full row
// (32 chunks) per warp instruction; dead rows get zeros.
__device__ __forceinline__ void store_out_tile_staged(const Args& p, const float (&acc)[4][8][4], unsigned char* stg,
                                                      const int32_t* row_src, int row_w, int nt, int nrows, int64_t r0,
                                                      float gsc, int lane) {
  const int g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int lr = g + hh * 8;
    const bool live = row_src[row_w + lr] >= 0;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const float v0 = __fmul_rn(__fmul_rn(acc[j >> 3][j & 7][2 * hh], kUnscale), gsc);
      const float v1 = __fmul_rn(__fmul_rn(acc[j >> 3][j & 7][2 * hh + 1], kUnscale), gsc);
      *reinterpret_cast<uint32_t*>(stg + lr * 512 + ((j ^ (lr & 7)) << 4) + q * 4) = live ? pack_bf16x2(v0, v1) : 0u;
    }
  }
  __syncwarp();
  const int col = nt * kCols2 + lane * 8;
#pragma unroll 4
  for (int lr = 0; lr < 16; ++lr) {
    const int row = row_w + lr;
    if (row >= nrows) break;
    const uint4 v = *reinterpret_cast<const uint4*>(stg + lr * 512 + ((lane ^ (lr & 7)) << 4));
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
}

// The epilogues' scaling: acc * 2^14 is exact (|acc| stays far below 2^100 for sums of fp16
// products), so round(round(acc * 2^14) * gsc) == round(acc * g14) with g14 = gsc * 2^14, itself
// exact whenever it is finite. kFold (taken when g14 is finite) saves one multiply per value.
template <bool kFold>
__device__ __forceinline__ float unscale(float a, float gsc, float g14) {
  return kFold ? __fmul_rn(a, g14) : __fmul_rn(__fmul_rn(a, kUnscale), gsc);
}

// gemm1's h value from the m64n256 wgmma fragments: gate column 8 j + 2 q (+1) in acc[j / 8][j % 8]
// (j = 0..15), the matching up column in j + 16; element i of the fragment (2 hh + c).
// silu(gate) * up in fp32 (silu_mul) and bf16(silu(gate) * up) (silu_mul_h), as the legacy epilogue
// computes it but for silu_f32 (the SFU's exp2 and reciprocal instead of expf and __fdiv_rn).
template <bool kFold>
__device__ __forceinline__ float silu_mul(const float (&acc)[4][8][4], int j, int i, float gsc, float g14) {
  const float gate = unscale<kFold>(acc[j >> 3][j & 7][i], gsc, g14);
  const float up = unscale<kFold>(acc[(j + 16) >> 3][(j + 16) & 7][i], gsc, g14);
  return __fmul_rn(silu_f32(gate), up);
}
template <bool kFold>
__device__ __forceinline__ float silu_mul_h(const float (&acc)[4][8][4], int j, int i, float gsc, float g14) {
  return round_bf16(silu_mul<kFold>(acc, j, i, gsc, g14));
}
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// pack_bf16x2(round_bf16(lo), round_bf16(hi)) (which is pack_bf16x2(lo, hi)) by one hardware
// conversion: the same bits for every non-NaN value; a NaN takes the software form (its
// payload-keeping quiet NaN, where the hardware gives the canonical one). (The persistent kernels'
// epilogue only; not in the CPU emulator's build.)
__device__ __forceinline__ uint32_t bf16x2_rn(float lo, float hi) {
  if (isnan(lo) || isnan(hi)) return pack_bf16x2(lo, hi);
  return cvt_bf16x2(lo, hi);
}
#endif

// gemm2's output tile in two 128-column halves through a 16 x 256-byte staging tile per warp
// (`stg`, 4 KiB, chunk ^ (row & 7)): this warp owns tile rows row_w .. row_w + 15 as in
// store_out_tile_staged; two full 256-byte rows leave per warp instruction; dead rows get zeros.
template <bool kFold>
__device__ __forceinline__ void store_out_tile_half_staged_k(const Args& p, const float (&acc)[4][8][4],
                                                             unsigned char* stg, const int32_t* row_src, int row_w,
                                                             int nt, int nrows, int64_t r0, float gsc, float g14,
                                                             int lane) {
  const int g = lane >> 2, q = lane & 3;
  // Two 128-column halves through a 16 x 256-byte staging tile (chunk ^ (row & 7)).
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int lr = g + hh * 8;
      const bool live = row_src[row_w + lr] >= 0;
#pragma unroll
      for (int jl = 0; jl < 16; ++jl) {
        const int j = half * 16 + jl;
        const float v0 = unscale<kFold>(acc[j >> 3][j & 7][2 * hh], gsc, g14);
        const float v1 = unscale<kFold>(acc[j >> 3][j & 7][2 * hh + 1], gsc, g14);
        *reinterpret_cast<uint32_t*>(stg + lr * 256 + ((jl ^ (lr & 7)) << 4) + q * 4) = live ? pack_bf16x2(v0, v1) : 0u;
      }
    }
    __syncwarp();
    // Two rows (256 bytes each) per warp instruction: lane -> row 2 it + lane / 16, chunk lane % 16.
    const int ch = lane & 15, col = nt * kCols2 + half * 128 + ch * 8;
#pragma unroll 4
    for (int it = 0; it < 8; ++it) {
      const int lr = 2 * it + (lane >> 4);
      const int row = row_w + lr;
      if (row < nrows) {
        const uint4 v = *reinterpret_cast<const uint4*>(stg + lr * 256 + ((ch ^ (lr & 7)) << 4));
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
    }
    __syncwarp();  // staging tile free for the second half
  }
}
__device__ __forceinline__ void store_out_tile_half_staged(const Args& p, const float (&acc)[4][8][4], unsigned char* stg,
                                                           const int32_t* row_src, int row_w, int nt, int nrows,
                                                           int64_t r0, float gsc, int lane) {
  const float g14 = __fmul_rn(gsc, kUnscale);
  if (isfinite(g14))
    store_out_tile_half_staged_k<true>(p, acc, stg, row_src, row_w, nt, nrows, r0, gsc, g14, lane);
  else
    store_out_tile_half_staged_k<false>(p, acc, stg, row_src, row_w, nt, nrows, r0, gsc, g14, lane);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// kWgmmaPersist's gemm2 epilogue when the output has a tensor map (p.tma_out) and all 16 rows of this
// warp are in the tile (row_w + 15 < nrows): the same bf16 values as store_out_tile_half_staged_k,
// staged per 128-column half as two 16 x 64-column boxes (`stg`, 2 x 2 KiB, 1024-byte aligned,
// 16-byte chunk c of row r at r * 128 + (c ^ (r & 7)) * 16: TMA's 128-byte swizzle) and written by
// two TMA stores (cp.async.bulk.tensor, bulk group) issued by lane 0. The warp's global stores and
// their wait for memory go to the TMA unit; the staging is rewritten only after lane 0's
// wait_group.read (the second half's values are computed before that wait). Columns past N are
// clipped by the map; padding rows are zeros as in the staged path.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, int c0, int c1, uint32_t src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(src)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read0() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
template <bool kFold>
__device__ __forceinline__ void store_out_tile_tma_k(const Args& p, const CUtensorMap* out_map, const float (&acc)[4][8][4],
                                                     unsigned char* stg, const int32_t* row_src, int row_w, int nt,
                                                     int64_t r0, float gsc, float g14, int lane) {
  const int g = lane >> 2, q = lane & 3;
  const uint32_t sbase = smem_u32(stg);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    uint32_t v[2][16];
    // The values of this half by the hardware conversion (about a third of the instructions of
    // f32_to_bf16's software rounding with its per-value NaN branch); a NaN input's half is then
    // replaced, without a branch, by f32_to_bf16's payload-keeping quiet NaN.
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const bool live = row_src[row_w + g + hh * 8] >= 0;
#pragma unroll
      for (int jl = 0; jl < 16; ++jl) {
        const int j = half * 16 + jl;
        const float v0 = unscale<kFold>(acc[j >> 3][j & 7][2 * hh], gsc, g14);
        const float v1 = unscale<kFold>(acc[j >> 3][j & 7][2 * hh + 1], gsc, g14);
        uint32_t r = cvt_bf16x2(v0, v1);
        if (v0 != v0) r = (r & 0xFFFF0000u) | (__float_as_uint(v0) >> 16) | 0x40u;
        if (v1 != v1) r = (r & 0x0000FFFFu) | (__float_as_uint(v1) & 0xFFFF0000u) | 0x400000u;
        v[hh][jl] = live ? r : 0u;
      }
    }
    if (half == 1) {  // the first half's boxes must have been read before the staging is rewritten
      if (lane == 0) bulk_wait_read0();
      __syncwarp();
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int lr = g + hh * 8;
#pragma unroll
      for (int jl = 0; jl < 16; ++jl)  // column chunk jl (8 bf16) of the half: box jl / 8, chunk jl % 8
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(sbase + (jl >> 3) * 2048 + lr * 128 + (((jl & 7) ^ (lr & 7)) << 4) + q * 4),
                     "r"(v[hh][jl])
                     : "memory");
    }
    fence_proxy_async();  // this thread's staging writes, visible to the TMA unit
    __syncwarp();
    if (lane == 0) {
      const int col = nt * kCols2 + half * 128;
      tma_store_2d(out_map, col, static_cast<int>(r0 + row_w), sbase);
      tma_store_2d(out_map, col + 64, static_cast<int>(r0 + row_w), sbase + 2048);
      bulk_commit();
    }
  }
}
#endif

// gemm1's requantization of one 16-column block of the bf16 h tile (w: its 16 values as 8 packed
// pairs, element 2c in the low half of w[c]) to NVFP4 codes + scale at padded row r, column n; a
// dead row (padding) gets codes and scale 0.
__device__ __forceinline__ void store_requant_words(const Args& p, const uint32_t (&w)[8], bool live, int64_t r, int n) {
  uint2 codes = make_uint2(0u, 0u);
  uint8_t sq = 0;
  if (live) sq = nvfp4_quantize16_bf16(w, p.out_gs, codes);
  uint8_t* dq = p.out_q + r * p.ld_out_q + n / 2;
  if (p.q_vec) {
    *reinterpret_cast<uint2*>(dq) = codes;
  } else {
#pragma unroll
    for (int c = 0; c < 8; ++c) dq[c] = static_cast<uint8_t>((c < 4 ? codes.x : codes.y) >> (8 * (c & 3)));
  }
  p.out_sc[r * p.ld_out_sc + n / 16] = sq;
}
// store_requant_block: the same from the 16 values as floats (hs; bf16-valued, exact in float).
__device__ __forceinline__ void store_requant_block(const Args& p, const float* hs, bool live, int64_t r, int n) {
  uint32_t w[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) w[c] = (__float_as_uint(hs[2 * c]) >> 16) | (__float_as_uint(hs[2 * c + 1]) & 0xFFFF0000u);
  store_requant_words(p, w, live, r, n);
}

// The global weight row behind B row br (0..255) of expert e's column tile nt; -1 past N. gemm1's
// 256 rows are the tile's 128 gate rows, then the matching 128 up rows.
template <bool kGemm1>
__device__ __forceinline__ int64_t weight_row(const Args& p, int e, int nt, int br) {
  if (kGemm1) {
    const int half = br >= kCols1 ? 1 : 0;
    const int n = nt * kCols1 + (br & (kCols1 - 1));
    return n < p.N ? static_cast<int64_t>(e) * 2 * p.N + half * p.N + n : -1;
  }
  const int n = nt * kCols2 + br;
  return n < p.N ? static_cast<int64_t>(e) * p.N + n : -1;
}

__device__ __forceinline__ void seg_of(const Args& p, int e, int64_t& s, int64_t& t) {
  int64_t a = p.offsets[e], b = p.offsets[e + 1];
  a = a < 0 ? 0 : (a > p.P ? p.P : a);
  b = b < a ? a : (b > p.P ? p.P : b);
  s = a;
  t = b;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void mbar_init(uint32_t addr, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(addr), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t addr) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(addr) : "memory");
}
// try_wait may suspend the thread until the phase completes, for at most kSuspendNs: waiting
// warps then sleep instead of re-issuing the test (their spinning took issue slots and ALU
// cycles from the producer warps).
constexpr uint32_t kSuspendNs = 0x989680;  // 10 ms
__device__ __forceinline__ void mbar_wait(uint32_t addr, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity), "n"(kSuspendNs)
        : "memory");
  } while (!done);
}
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void bar_consumers() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

// The warp-specialized producers' per-thread chunk offsets in a tile row. Item it's tile row is
// it * 32 + pt / 4, so its row & 7 (the swizzle) is the same for every item: the two 16-byte chunk
// offsets are per-thread constants and each item adds an immediate.
static_assert((kProducers / 4) % 8 == 0, "items of one thread share row & 7");
__device__ __forceinline__ void ws_chunk_offsets(int pt, uint32_t& off0, uint32_t& off1) {
  const int kb = pt & 3;
  off0 = (pt >> 2) * 128 + (((2 * kb) ^ ((pt >> 2) & 7)) << 4);
  off1 = (pt >> 2) * 128 + (((2 * kb + 1) ^ ((pt >> 2) & 7)) << 4);
}

constexpr uint32_t kItemBytes = (kProducers / 4) * 128;  // one producer item's 32 tile rows of 128 bytes

// One 16-element item per thread: codes c (8 bytes) with scale byte sc, dequantized to fp16 and stored
// as the thread's two 16-byte chunks (offsets off0 / off1) of the item's rows at shared address rowp.
// ws_item_store_sh takes the scale already as fp16x2 scale / 2 (sh).
__device__ __forceinline__ void ws_item_store_sh(uint32_t rowp, uint32_t off0, uint32_t off1, uint32_t cx, uint32_t cy,
                                                 uint32_t sh) {
  uint32_t o[8];
  e2m1x8_to_f16x8_cvt(cx, sh, o);
  e2m1x8_to_f16x8_cvt(cy, sh, o + 4);
  sts128(rowp + off0, o[0], o[1], o[2], o[3]);
  sts128(rowp + off1, o[4], o[5], o[6], o[7]);
}
__device__ __forceinline__ void ws_item_store(uint32_t rowp, uint32_t off0, uint32_t off1, uint2 c, uint32_t sc) {
  ws_item_store_sh(rowp, off0, off1, c.x, c.y, e4m3_to_f16x2_half_cvt(sc));
}

// One producer K step s into fp16 tile s % NB of the ring at shared address `tiles`: wait until
// the consumers freed it, dequantize the thread's NI items (codes c2, scales s2: 12, or kWgmmaWsRs's 8
// weight items in its 32 KiB tiles) into it, publish it to the async proxy and arrive on its full barrier.
template <int NB, int NI = kPItems, int kTileBytes = kBufBytes>
__device__ __forceinline__ void ws_fill_tile(uint32_t tiles, uint32_t full0, uint32_t empty0, int s, uint32_t off0,
                                             uint32_t off1, const uint2 (&c2)[NI],
                                             const uint32_t (&s2)[NI]) {
  const int b = s % NB;
  mbar_wait(empty0 + b * 8, ((s / NB) & 1) ^ 1);
  const uint32_t buf = tiles + b * kTileBytes;
#pragma unroll
  for (int it = 0; it < NI; ++it) ws_item_store(buf + it * kItemBytes, off0, off1, c2[it], s2[it]);
  fence_proxy_async();
  mbar_arrive(full0 + b * 8);
}

// The warp-specialized producers' global loads (codes: 8 bytes, scales: 1 byte, read-only) with the
// L2::256B prefetch-size hint: a miss brings the 256 bytes around the address into L2, so the next
// steps' codes of the same row (32 bytes a step) and scales (4 bytes a step) hit in L2 instead of
// waiting for DRAM. Same values as __ldg; measured in docs/performance.md (2026-12-01, fourth session).
__device__ __forceinline__ uint2 ldg_code_l2(const uint8_t* ptr) {
  uint2 v;
  asm("ld.global.nc.L2::256B.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(ptr));
  return v;
}
__device__ __forceinline__ uint32_t ldg_scale_l2(const uint8_t* ptr) {
  uint32_t v;
  asm("ld.global.nc.L2::256B.u8 %0, [%1];\n" : "=r"(v) : "l"(ptr));
  return v;
}

// The producer warpgroup's K loop of kWgmmaWs / kWgmmaWs2 (kWgmmaPersist runs a copy of it, see
// there): steps 0 .. nsteps - 1 over column tiles nt0, nt0 + 1, ... of expert e. Thread pt owns 12
// 16-element items (row (it * 128 + pt) / 4, k-block pt % 4): A rows 0..127 (source row
// a_src(it, row), < 0 = dead), then 256 weight rows (gemm1: 128 gate and the matching 128 up rows).
// Codes (8-byte loads) and scales (1-byte) of step s + 1 are loaded into registers while step s is
// dequantized into fp16 tile s % NB, once the consumers freed it (empty barrier); the tile is
// published to the async proxy and the full barrier. kRs (kWgmmaWsRs): the consumers make the A
// fragments themselves; the 8 items are the weight rows only, in 32 KiB tiles.
template <bool kGemm1, int NB, bool kRs = false, class ASrc>
__device__ __forceinline__ void ws_produce(const Args& p, unsigned char* smem, uint32_t full0, uint32_t empty0, int pt, int e,
                                           int KT, int nt0, int nsteps, ASrc a_src) {
  constexpr int NI = kRs ? kRsItems : kPItems;
  constexpr int kAItems = kRs ? 0 : kPItems / 3;
  const int kb = pt & 3;  // every item of this thread has the same k-block (c & 3 == pt & 3)
  const uint8_t* code_p[NI];
  const uint8_t* sc_p[NI];
  // A dead item (padding row, weight row past N) reads row 0 of its operand: its values reach only
  // outputs that are never written from them (dead rows are stored as zeros, columns past N are
  // skipped or clipped), so the loads need no test (measured: docs/performance.md, 2026-12-02,
  // seventh session).
  auto set_ptrs = [&](int nt) {
#pragma unroll
    for (int it = 0; it < NI; ++it) {
      const int row = (it * kProducers + pt) >> 2;
      int64_t r;
      const uint8_t *cb, *sb;
      int64_t lc, ls;
      if (it < kAItems) {
        const int32_t src = a_src(it, row);
        r = src >= 0 ? src : 0;
        cb = p.a; sb = p.a_sc; lc = p.ld_a; ls = p.ld_a_sc;
      } else {
        const int64_t wr = weight_row<kGemm1>(p, e, nt, kRs ? row : row - BM);
        r = wr >= 0 ? wr : 0;
        cb = p.w; sb = p.w_sc; lc = p.ld_w; ls = p.ld_w_sc;
      }
      code_p[it] = cb + r * lc + kb * 8;
      sc_p[it] = sb + r * ls + kb;
    }
  };
  uint2 cd[NI];
  uint32_t sc[NI];
  auto load = [&](int kt) {
#pragma unroll
    for (int it = 0; it < NI; ++it) {
      cd[it] = ldg_code_l2(code_p[it] + kt * 32);
      sc[it] = ldg_scale_l2(sc_p[it] + kt * 4);
    }
  };
  const uint32_t tiles = smem_u32(smem);
  uint32_t off0, off1;
  ws_chunk_offsets(pt, off0, off1);
  set_ptrs(nt0);
  load(0);
  int kn = 0, ntn = nt0;  // k tile and column tile of step s + 1 (counters: no division per step)
  for (int s = 0; s < nsteps; ++s) {
    uint2 c2[NI];
    uint32_t s2[NI];
#pragma unroll
    for (int it = 0; it < NI; ++it) { c2[it] = cd[it]; s2[it] = sc[it]; }
    if (s + 1 < nsteps) {
      if (++kn == KT) {
        kn = 0;
        set_ptrs(++ntn);
      }
      load(kn);
    }
    ws_fill_tile<NB, NI, kRs ? kRsBufBytes : kBufBytes>(tiles, full0, empty0, s, off0, off1, c2, s2);
  }
}

// kVar 9's producers: the 8 weight items of step s come from block (e, nt0, 0) + s of the tiled
// layout (kernels/common/fp4_tiled.h; a column tile's steps are consecutive blocks): four 16-byte
// code loads (items 2j, 2j + 1) and one 8-byte scale load (items 0..7), the next step's in flight
// while step s is dequantized, as ws_produce does. L1::no_allocate: no reuse in the SM.
__device__ __forceinline__ uint4 ldg128_na(const uint8_t* ptr) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(ptr));
  return v;
}
__device__ __forceinline__ uint2 ldg64_na(const uint8_t* ptr) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(ptr));
  return v;
}
// One tiled block's 8 weight items of this thread (codes cd[j]: items 2j, 2j + 1; scale bytes in item
// order in sc), dequantized into the 8 item rows of the fp16 tile at shared address buf.
__device__ __forceinline__ void ws_tiled_items_store(uint32_t buf, uint32_t off0, uint32_t off1, const uint4 (&cd)[4],
                                                     uint2 sc) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    // scale / 2 of items 2j, 2j + 1 as an fp16 pair (exact), then one per item.
    const uint32_t f =
        hmul2_f16(j & 1 ? cvt_e4m3x2_hi(j < 2 ? sc.x : sc.y) : cvt_e4m3x2_lo(j < 2 ? sc.x : sc.y), 0x38003800u);
    ws_item_store_sh(buf + (2 * j) * kItemBytes, off0, off1, cd[j].x, cd[j].y, __byte_perm(f, 0u, 0x1010u));
    ws_item_store_sh(buf + (2 * j + 1) * kItemBytes, off0, off1, cd[j].z, cd[j].w, __byte_perm(f, 0u, 0x3232u));
  }
}
template <int NB>
// s0: the ring step of the first step (the persistent kernel's running count; 0 otherwise).
__device__ __forceinline__ void ws_produce_tiled(const Args& p, unsigned char* smem, uint32_t full0, uint32_t empty0,
                                                 int pt, int e, int KT, int nt0, int nsteps, int s0 = 0) {
  const int64_t blk0 = (static_cast<int64_t>(e) * (p.N / kCols1) + nt0) * KT;
  const uint8_t* const cp = p.w + blk0 * kTiledCodeBlock + pt * 16;
  const uint8_t* const sp = p.w_sc + blk0 * kTiledScaleBlock + pt * 8;
  // (32-bit step offsets: one tile's steps span less than 2^31 bytes)
  auto load = [&](int s, uint4 (&cd)[4], uint2& sc) {
    const uint32_t co = static_cast<uint32_t>(s) * static_cast<uint32_t>(kTiledCodeBlock);
#pragma unroll
    for (int j = 0; j < 4; ++j) cd[j] = ldg128_na(cp + co + j * 2048);
    sc = ldg64_na(sp + static_cast<uint32_t>(s) * static_cast<uint32_t>(kTiledScaleBlock));
  };
  const uint32_t tiles = smem_u32(smem);
  uint32_t off0, off1;
  ws_chunk_offsets(pt, off0, off1);
  auto fill = [&](int sl, const uint4 (&cd)[4], uint2 sc) {
    const int s = s0 + sl;
    const int b = s % NB;
    mbar_wait(empty0 + b * 8, ((s / NB) & 1) ^ 1);
    ws_tiled_items_store(tiles + b * kRsBufBytes, off0, off1, cd, sc);
    fence_proxy_async();
    mbar_arrive(full0 + b * 8);
  };
  // Two register sets, the step loop unrolled by 2: step s + 1's loads go into the set step s - 1 used.
  uint4 ca[4], cb[4];
  uint2 sa, sb;
  load(0, ca, sa);
  for (int s = 0; s < nsteps; s += 2) {
    if (s + 1 < nsteps) load(s + 1, cb, sb);
    fill(s, ca, sa);
    if (s + 1 < nsteps) {
      if (s + 2 < nsteps) load(s + 2, ca, sa);
      fill(s + 1, cb, sb);
    }
  }
}

// kWgmmaWsRs's consumer-side A operand: this thread's two fragment rows (ra, ra + 8) of one K step,
// 32 code bytes and 4 scale bytes each (16- and 4-byte read-only loads with the L2::256B hint).
struct RsRaw {
  uint4 a0, a1, b0, b1;
  uint32_t sa, sb;
};
__device__ __forceinline__ uint4 ldg128_l2(const uint8_t* ptr) {
  uint4 v;
  asm("ld.global.nc.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(ptr));
  return v;
}
__device__ __forceinline__ uint2 ldg64_l2(const uint8_t* ptr) {
  uint2 v;
  asm("ld.global.nc.L2::256B.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(ptr));
  return v;
}
__device__ __forceinline__ uint32_t ldg32_l2(const uint8_t* ptr) {
  uint32_t v;
  asm("ld.global.nc.L2::256B.u32 %0, [%1];\n" : "=r"(v) : "l"(ptr));
  return v;
}
__device__ __forceinline__ void rs_load(RsRaw& r, const uint8_t* ca, const uint8_t* cb, const uint8_t* xa,
                                        const uint8_t* xb, int kt) {
  r.a0 = ldg128_l2(ca + kt * 32);
  r.a1 = ldg128_l2(ca + kt * 32 + 16);
  r.b0 = ldg128_l2(cb + kt * 32);
  r.b1 = ldg128_l2(cb + kt * 32 + 16);
  r.sa = ldg32_l2(xa + kt * 4);
  r.sb = ldg32_l2(xb + kt * 4);
}
// One row's step (code words u0, u1: k 0..31 and 32..63; 4 scale bytes sc, one per k16 block) ->
// this thread's f16x2 values of the row in each k16 block j: lo[j] codes 16 j + 2q, + 1 (byte q of
// code word 2 j), hi[j] codes 16 j + 8 + 2q, + 1 (byte q of word 2 j + 1), picked by rs_pick_bytes
// with sel = rs_byte_sel(q). The values are ws_item_store's: e4m3 bytes e2m1 * 2^-6, the hardware
// conversion, one multiply by scale / 2 (the same fp16 bits).
__device__ __forceinline__ void rs_row(uint4 u0, uint4 u1, uint32_t sc, uint32_t sel, uint32_t (&lo)[4],
                                       uint32_t (&hi)[4]) {
  uint32_t w01, w23;
  rs_pick_bytes(u0, u1, sel, w01, w23);
  const uint32_t f01 = hmul2_f16(cvt_e4m3x2_lo(sc), 0x38003800u);  // scale / 2 of blocks 0, 1
  const uint32_t f23 = hmul2_f16(cvt_e4m3x2_hi(sc), 0x38003800u);  // blocks 2, 3
  const uint32_t f[4] = {__byte_perm(f01, 0u, 0x1010u), __byte_perm(f01, 0u, 0x3232u), __byte_perm(f23, 0u, 0x1010u),
                         __byte_perm(f23, 0u, 0x3232u)};
  uint32_t x, y;
  e2m1x8_to_e4m3x8(w01, x, y);
  lo[0] = hmul2_f16(cvt_e4m3x2_lo(x), f[0]);
  hi[0] = hmul2_f16(cvt_e4m3x2_hi(x), f[0]);
  lo[1] = hmul2_f16(cvt_e4m3x2_lo(y), f[1]);
  hi[1] = hmul2_f16(cvt_e4m3x2_hi(y), f[1]);
  e2m1x8_to_e4m3x8(w23, x, y);
  lo[2] = hmul2_f16(cvt_e4m3x2_lo(x), f[2]);
  hi[2] = hmul2_f16(cvt_e4m3x2_hi(x), f[2]);
  lo[3] = hmul2_f16(cvt_e4m3x2_lo(y), f[3]);
  hi[3] = hmul2_f16(cvt_e4m3x2_hi(y), f[3]);
}
// The 4 k16 blocks' A fragments (wgmma_m64n256k16_rs order: row ra lo, row ra + 8 lo, ra hi, ra + 8 hi).
__device__ __forceinline__ void rs_fragments(const RsRaw& r, uint32_t sel, uint32_t (&f)[4][4]) {
  uint32_t alo[4], ahi[4], blo[4], bhi[4];
  rs_row(r.a0, r.a1, r.sa, sel, alo, ahi);
  rs_row(r.b0, r.b1, r.sb, sel, blo, bhi);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    f[j][0] = alo[j];
    f[j][1] = blo[j];
    f[j][2] = ahi[j];
    f[j][3] = bhi[j];
  }
}

// The RS consumers' A operand (kVar 6 / 9, persist_rs_kernel): this thread's fragment rows ra and
// ra + 8 of the tile (row sources sra / srb; a dead row reads row 0, as the producers' dead items
// do), their codes and scales loaded a K step ahead into raw. kPair (kVar 9, persist_rs_kernel): the
// two rows' scales of K tiles 2m and 2m + 1 in one 8-byte load each at the even tile (spa / spb),
// the odd tile's fragments taking the second word: half the consumers' scale loads (measured 1%
// faster, docs/performance.md, tenth session). The callers' K loops are unrolled by 2, so the
// parity of each make() is static (kPar). Rows not 8-byte aligned, and the last tile of an odd KT,
// load 4 bytes.
template <bool kPair>
struct RsA {
  const uint8_t *ca, *cb, *xa, *xb;
  RsRaw raw;
  uint2 spa, spb;
  bool pair_ok;
  __device__ __forceinline__ RsA(const Args& p, int32_t sra, int32_t srb)
      : ca(p.a + static_cast<int64_t>(sra >= 0 ? sra : 0) * p.ld_a),
        cb(p.a + static_cast<int64_t>(srb >= 0 ? srb : 0) * p.ld_a),
        xa(p.a_sc + static_cast<int64_t>(sra >= 0 ? sra : 0) * p.ld_a_sc),
        xb(p.a_sc + static_cast<int64_t>(srb >= 0 ? srb : 0) * p.ld_a_sc),
        spa(make_uint2(0u, 0u)),
        spb(make_uint2(0u, 0u)),
        pair_ok(((reinterpret_cast<uintptr_t>(p.a_sc) | static_cast<uintptr_t>(p.ld_a_sc)) & 7u) == 0) {}
  __device__ __forceinline__ void load(int kt, int KT) {
    if constexpr (kPair) {
      raw.a0 = ldg128_l2(ca + kt * 32);
      raw.a1 = ldg128_l2(ca + kt * 32 + 16);
      raw.b0 = ldg128_l2(cb + kt * 32);
      raw.b1 = ldg128_l2(cb + kt * 32 + 16);
      if ((kt & 1) == 0) {
        if (kt + 1 < KT && pair_ok) {
          spa = ldg64_l2(xa + kt * 4);
          spb = ldg64_l2(xb + kt * 4);
        } else {
          spa.x = ldg32_l2(xa + kt * 4);
          spb.x = ldg32_l2(xb + kt * 4);
          if (kt + 1 < KT) {
            spa.y = ldg32_l2(xa + kt * 4 + 4);
            spb.y = ldg32_l2(xb + kt * 4 + 4);
          }
        }
      }
    } else {
      rs_load(raw, ca, cb, xa, xb, kt);
    }
  }
  template <int kPar>
  __device__ __forceinline__ void make(uint32_t (&f)[4][4], uint32_t sel) {
    if constexpr (kPair) {
      raw.sa = kPar ? spa.y : spa.x;
      raw.sb = kPar ? spb.y : spb.x;
    }
    rs_fragments(raw, sel, f);
  }
};

// An RS consumer K step's wgmmas: wait for weight tile s % NB, issue the 4 RS wgmmas (A fragments
// cur; skipped when the warpgroup's rows are all dead) and wait until only this step's group is in
// flight, so step s - 1's tile may be released.
template <int NB>
__device__ __forceinline__ void rs_wgmma_step(float (&acc)[4][8][4], const uint32_t (&cur)[4][4], uint32_t tiles,
                                              uint32_t full0, int s, bool warp_live) {
  const int b = s % NB;
  mbar_wait(full0 + b * 8, (s / NB) & 1);
  const uint32_t bbase = tiles + b * kRsBufBytes;
  if (warp_live) {
    acc_fence(acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) wgmma_m64n256k16_rs(acc, cur[kk], wgmma_desc(bbase + kk * 32));
    wgmma_commit();
  }
  wgmma_wait<1>();
  acc_fence(acc);
}

// One consumer K step (both warp-specialized kernels): wait for fp16 tile s % NB, issue its 4 wgmmas
// (warpgroup wm's 64 rows x all 256 weight rows; skipped when the rows are all dead), and wait
// until only this step's group is in flight, so step s - 1's tile may be released.
template <int NB>
__device__ __forceinline__ void ws_consume_step(float (&acc)[4][8][4], uint32_t tiles, uint32_t full0, int s, int wm,
                                                bool warp_live) {
  const int b = s % NB;
  mbar_wait(full0 + b * 8, (s / NB) & 1);
  const uint32_t buf = tiles + b * kBufBytes;
  const uint32_t a_base = buf + wm * 64 * 128, b_base = buf + BM * 128;
  if (warp_live) {
    acc_fence(acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) wgmma_m64n256k16(acc, wgmma_desc(a_base + kk * 32), wgmma_desc(b_base + kk * 32));
    wgmma_commit();
  }
  wgmma_wait<1>();
  acc_fence(acc);
}

// Warp-specialized main loop + epilogues of variants 4-6 (see the comment at kWsStages). Called by all
// 384 threads after the tile setup; tid < 256: consumers (same fragment/epilogue code as variant 3),
// tid >= 256: the producer warpgroup.
template <bool kGemm1, int kVar>
__device__ __forceinline__ void ws_body(const Args& p, unsigned char* smem, const int32_t* row_src, uint64_t* mbar, int e,
                                        int64_t r0, int nrows, int nt0, int nt1, bool warp_live) {
  constexpr int NB = ws_stages<kGemm1, kVar>();
  constexpr bool kHalf = ws_stage_out<kGemm1, kVar>() < kStageOutBytes;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int KT = p.K / BK;
  const int nsteps = (nt1 - nt0) * KT;
  const uint32_t full0 = smem_u32(mbar), empty0 = full0 + NB * 8;
  if (tid == 0) {
    for (int i = 0; i < NB; ++i) {
      mbar_init(full0 + i * 8, kProducers);  // producer arrivals
      mbar_init(empty0 + i * 8, kThreads);   // 256 consumer arrivals
    }
  }
  __syncthreads();
  if constexpr (kVar == 9)
    MOEPROF_SET_ROLE_REGS_RST(tid >= kThreads);
  else if constexpr (kVar == 6)
    MOEPROF_SET_ROLE_REGS_RS(tid >= kThreads);
  else
    MOEPROF_SET_ROLE_REGS(tid >= kThreads);

  if (tid >= kThreads) {
    // ---------------- producers ----------------
    if constexpr (kVar == 9)
      ws_produce_tiled<NB>(p, smem, full0, empty0, tid - kThreads, e, KT, nt0, nsteps);
    else
      ws_produce<kGemm1, NB, is_rs(kVar)>(p, smem, full0, empty0, tid - kThreads, e, KT, nt0, nsteps,
                                        [&](int, int row) { return row_src[row]; });
    return;
  }

  // ---------------- consumers ----------------
  const int g = lane >> 2, q = lane & 3;
  const int wm = warp >> 2, wn = warp & 3;
  const float gsc = __fmul_rn(p.a_gs, p.w_gs[e]);
  float acc[4][8][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;
  const uint32_t tiles = smem_u32(smem);
  // gemm2: column tile nt's output after its last K step s (all wgmmas waited for), accumulators reset.
  auto column_epilogue = [&](int s) {
    if constexpr (!kGemm1) {
      if (s % KT == KT - 1) {
        wgmma_wait<0>();
        acc_fence(acc);
        const int nt = nt0 + s / KT;
        const int row_w = wm * 64 + wn * 16;
        unsigned char* const stg = smem + NB * ws_buf_bytes<kVar>();
        if constexpr (!kHalf)
          store_out_tile_staged(p, acc, stg + warp * kStageOutBytes, row_src, row_w, nt, nrows, r0, gsc, lane);
        else
          store_out_tile_half_staged(p, acc, stg + warp * (kStageOutBytes / 2), row_src, row_w, nt, nrows, r0, gsc,
                                     lane);
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;
      }
    }
  };
  if constexpr (is_rs(kVar)) {
    // This thread's A fragment rows: ra and ra + 8 of the tile. A rows do not depend on the column
    // tile: step s is K tile s % KT (kl). kVar 9 pairs the scale loads: gemm1 has one column tile,
    // so step s is K tile s and the parity of each make() is static.
    const int ra = wm * 64 + wn * 16 + g;
    RsA<kVar == 9> A(p, row_src[ra], row_src[ra + 8]);
    const uint32_t sel = rs_byte_sel(q);
    int kl = 0;  // K tile of the codes in A.raw
    uint32_t fa0[4][4], fa1[4][4];
    if (warp_live) {
      A.load(0, KT);
      A.template make<0>(fa0, sel);
      if (nsteps > 1) {
        kl = KT > 1 ? 1 : 0;
        A.load(kl, KT);
      }
    }
    // Step s: wgmmas of step s from cur; once step s - 1's are done, its weight tile goes back to the
    // producers and step s + 1's fragments are made into nxt (step s - 1's registers) from A.raw,
    // which then takes step s + 2's codes.
    auto step = [&](int s, uint32_t(&cur)[4][4], uint32_t(&nxt)[4][4], auto par_next) {
      rs_wgmma_step<NB>(acc, cur, tiles, full0, s, warp_live);
      if (s > 0) mbar_arrive(empty0 + ((s - 1) % NB) * 8);
      if (warp_live && s + 1 < nsteps) {
        A.template make<decltype(par_next)::value>(nxt, sel);
        if (s + 2 < nsteps) {
          if (++kl == KT) kl = 0;
          A.load(kl, KT);
        }
      }
      column_epilogue(s);
    };
    for (int s = 0; s < nsteps; s += 2) {
      step(s, fa0, fa1, std::integral_constant<int, 1>{});
      if (s + 1 < nsteps) step(s + 1, fa1, fa0, std::integral_constant<int, 0>{});
    }
  } else {
    for (int s = 0; s < nsteps; ++s) {
      ws_consume_step<NB>(acc, tiles, full0, s, wm, warp_live);  // step s - 1's tile goes back to the producers:
      if (s > 0) mbar_arrive(empty0 + ((s - 1) % NB) * 8);
      column_epilogue(s);
    }
  }
  wgmma_wait<0>();
  acc_fence(acc);
  if constexpr (kGemm1) {
    // Both consumer warpgroups are done with the tiles (Hs aliases them); the producers finished
    // writing before the last full barrier completed.
    bar_consumers();
    float* Hs = reinterpret_cast<float*>(smem);
    const int row_w = wm * 64 + wn * 16 + g;
    const int nt = nt0;
    const float g14 = __fmul_rn(gsc, kUnscale);
    auto silu_tile = [&](auto fold) {
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          float hv[2];
#pragma unroll
          for (int c = 0; c < 2; ++c) hv[c] = silu_mul_h<decltype(fold)::value>(acc, j, 2 * hh + c, gsc, g14);
          *reinterpret_cast<float2*>(Hs + (row_w + hh * 8) * kHPitch + j * 8 + 2 * q) = make_float2(hv[0], hv[1]);
        }
    };
    if (isfinite(g14))
      silu_tile(std::true_type{});
    else
      silu_tile(std::false_type{});
    bar_consumers();
#pragma unroll 1
    for (int it = 0; it < (BM * kCols1 / 16) / kThreads; ++it) {
      const int item = it * kThreads + tid;
      const int row = item >> 3, blk = item & 7;
      const int n = nt * kCols1 + blk * 16;
      if (row >= nrows || n >= p.N) continue;
      store_requant_block(p, Hs + row * kHPitch + blk * 16, row_src[row] >= 0, r0 + row, n);
    }
  }
}
#endif

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

bool aligned(const void* ptr, int64_t ld, int a) {
  return (reinterpret_cast<uintptr_t>(ptr) % a == 0) && (ld % a == 0);
}

// Preconditions of the tiled kernel (else the legacy kernel runs).
bool supported(const Args& p) {
  return p.K % BK == 0 && p.K > 0 && aligned(p.a, p.ld_a, 8) && aligned(p.w, p.ld_w, 8) && aligned(p.a_sc, p.ld_a_sc, 4) &&
         aligned(p.w_sc, p.ld_w_sc, 4) && p.P < (int64_t{1} << 31);
}

// Opts the kernel into its 150 KiB of dynamic shared memory; false (error cleared) where the device
// cannot give that much. Called before every launch (cheap, host side; the attribute is per context).
template <bool kGemm1, int kVar>
bool smem_ok() {
  if (cudaFuncSetAttribute(tiled_kernel<kGemm1, kVar>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           smem_bytes<kGemm1, kVar>()) == cudaSuccess)
    return true;
  (void)cudaGetLastError();
  return false;
}

template <bool kGemm1, int kVar>
cudaError_t launch(Args p, cudaStream_t stream) {
  if (p.P <= 0 || p.N <= 0) return cudaSuccess;
  constexpr int kCols = kGemm1 ? kCols1 : kCols2;
  constexpr int kNPer = n_per<kGemm1, kVar>();
  const int64_t nt = (p.N + kCols - 1) / kCols;
  const int64_t grid_m = (p.P + BM - 1) / BM + p.E;
  const int64_t n_groups = (nt + kNPer - 1) / kNPer;
  if (grid_m * n_groups >= (int64_t{1} << 31)) return cudaErrorInvalidConfiguration;
  p.grid_m = static_cast<int>(grid_m);
  p.n_groups = static_cast<int>(n_groups);
  tiled_kernel<kGemm1, kVar><<<static_cast<unsigned>(grid_m * n_groups), kVar >= 4 ? kThreads + kProducers : kThreads,
                               smem_bytes<kGemm1, kVar>(), stream>>>(p);
  return last_launch_error();
}

// kWgmmaPersist's gemm2 output as a TMA tensor map: bf16 [P][N] (row stride ld_out), 16 x 64-element
// boxes with the 128-byte swizzle (store_out_tile_tma_k). False (the kernel then stores with
// st.global as the other paths do) where the driver lacks cuTensorMapEncodeTiled or the output is
// not 16-byte aligned with 16-byte row strides.
bool make_out_map(const Args& p, CUtensorMap& m) {
  using Encode = PFN_cuTensorMapEncodeTiled_v12000;
  static const Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return Encode{nullptr};
    }
    return reinterpret_cast<Encode>(fn);
  }();
  if (encode == nullptr || !p.vec16_out || p.P >= (int64_t{1} << 31)) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(p.N), static_cast<cuuint64_t>(p.P)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(p.ld_out) * 2};
  const cuuint32_t box[2] = {64, 16}, ones[2] = {1, 1};
  return encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p.out, dims, strides, box, ones, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// kWgmmaPersist (variant 7) / kWgmmaPersistRA (variant 8, kResA): one CTA per SM, each walking its
// share of the work items.
template <bool kGemm1, bool kResA, bool kTW = false>
bool persist_smem_ok() {
  if (cudaFuncSetAttribute(persist_kernel<kGemm1, kResA, kTW>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           persist_smem_bytes()) == cudaSuccess)
    return true;
  (void)cudaGetLastError();
  return false;
}
template <bool kGemm1, bool kResA, bool kTW = false>
cudaError_t persist_launch(Args p, cudaStream_t stream) {
  if (p.P <= 0 || p.N <= 0) return cudaSuccess;
  constexpr int kCols = kGemm1 ? kCols1 : kCols2;
  constexpr int kNPer = n_per<kGemm1, 5>();
  const int64_t nt = (p.N + kCols - 1) / kCols;
  p.n_groups = static_cast<int>((nt + kNPer - 1) / kNPer);
  p.grid_m = 0;  // (unused: the kernel counts the row tiles)
  if (((p.P + BM - 1) / BM + p.E) * p.n_groups >= (int64_t{1} << 31)) return cudaErrorInvalidConfiguration;
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      sms <= 0) {
    (void)cudaGetLastError();
    return cudaErrorInvalidDevice;
  }
  CUtensorMap out_map{};
  p.tma_out = !kGemm1 && make_out_map(p, out_map);
  persist_kernel<kGemm1, kResA, kTW>
      <<<static_cast<unsigned>(sms), kThreads + kProducers, persist_smem_bytes(), stream>>>(p, out_map);
  return last_launch_error();
}

// Variant 13 (persist_rs_kernel): one CTA per SM, like persist_launch.
bool persist_rs_smem_ok() {
  if (cudaFuncSetAttribute(persist_rs_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, persist_rs_smem_bytes()) ==
      cudaSuccess)
    return true;
  (void)cudaGetLastError();
  return false;
}
cudaError_t persist_rs_launch(Args p, cudaStream_t stream) {
  if (p.P <= 0 || p.N <= 0) return cudaSuccess;
  const int64_t nt = p.N / kCols1;
  p.n_groups = static_cast<int>(nt);
  p.grid_m = 0;  // (unused: the kernel counts the row tiles)
  if (((p.P + BM - 1) / BM + p.E) * nt >= (int64_t{1} << 31)) return cudaErrorInvalidConfiguration;
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      sms <= 0) {
    (void)cudaGetLastError();
    return cudaErrorInvalidDevice;
  }
  persist_rs_kernel<<<static_cast<unsigned>(sms), kThreads + kProducers, persist_rs_smem_bytes(), stream>>>(p);
  return last_launch_error();
}

// kWgmma (variant 3) runs only where the kernels were built for sm_90a (MOEPROF_HAVE_SM90A, set by
// kernels/CMakeLists.txt) and the current device is compute capability 9.0 exactly (sm_90a code
// runs nowhere else).
bool wgmma_ok() {
#if defined(MOEPROF_HAVE_SM90A)
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return major == 9 && minor == 0;
#else
  return false;
#endif
}

// Runs tiled variant `var` (0..3) when its preconditions hold and the shared memory is grantable.
// Returns false (nothing launched) otherwise.
template <bool kGemm1>
bool try_launch(const Args& p, int var, cudaStream_t stream, cudaError_t& err) {
  if (!supported(p)) return false;
  switch (var) {
    case 0: if (!smem_ok<kGemm1, 0>()) return false; err = launch<kGemm1, 0>(p, stream); return true;
    case 1: if (!smem_ok<kGemm1, 1>()) return false; err = launch<kGemm1, 1>(p, stream); return true;
    case 2: if (!smem_ok<kGemm1, 2>()) return false; err = launch<kGemm1, 2>(p, stream); return true;
    case 3: if (!wgmma_ok() || !smem_ok<kGemm1, 3>()) return false; err = launch<kGemm1, 3>(p, stream); return true;
    case 4: if (!wgmma_ok() || !smem_ok<kGemm1, 4>()) return false; err = launch<kGemm1, 4>(p, stream); return true;
    case 5: if (!wgmma_ok() || !smem_ok<kGemm1, 5>()) return false; err = launch<kGemm1, 5>(p, stream); return true;
    case 6:  // the consumers' 16-byte A code loads
      if (!wgmma_ok() || !aligned(p.a, p.ld_a, 16) || !smem_ok<kGemm1, 6>()) return false;
      err = launch<kGemm1, 6>(p, stream);
      return true;
    case 7: if (!wgmma_ok() || !persist_smem_ok<kGemm1, false>()) return false; err = persist_launch<kGemm1, false>(p, stream); return true;
    case 9:  // kWgmmaWsRs on tiled weights (gemm1 only): 16-byte code / 8-byte scale loads of the blocks
      if constexpr (kGemm1) {
        if (!wgmma_ok() || !aligned(p.a, p.ld_a, 16) || !gemm1_tiled_ok(p.K, p.N) || !aligned(p.w, 16, 16) ||
            !aligned(p.w_sc, 8, 8) || !smem_ok<true, 9>())
          return false;
        err = launch<true, 9>(p, stream);
        return true;
      }
      return false;
    case 13:  // variant 9 as a persistent kernel (gemm1 only, tiled weights)
      if constexpr (kGemm1) {
        if (!wgmma_ok() || !aligned(p.a, p.ld_a, 16) || !gemm1_tiled_ok(p.K, p.N) || !aligned(p.w, 16, 16) ||
            !aligned(p.w_sc, 8, 8) || !persist_rs_smem_ok())
          return false;
        err = persist_rs_launch(p, stream);
        return true;
      }
      return false;
    case 10:  // kWgmmaPersist on kGemm2Tiled weights (gemm2 only)
    case 11:  // kWgmmaPersistRA on kGemm2Tiled weights (gemm2 only; kWgmmaPersist's layout where K > kRaMaxK)
      if constexpr (!kGemm1) {
        if (!wgmma_ok() || !gemm2_tiled_ok(p.K, p.N) || !aligned(p.w, 16, 16) || !aligned(p.w_sc, 8, 8)) return false;
        if (var == 11 && p.K <= kRaMaxK) {
          if (!persist_smem_ok<false, true, true>()) return false;
          err = persist_launch<false, true, true>(p, stream);
          return true;
        }
        if (!persist_smem_ok<false, false, true>()) return false;
        err = persist_launch<false, false, true>(p, stream);
        return true;
      }
      return false;
    default:
      // Resident A tiles: gemm2 with K <= kRaMaxK; elsewhere (gemm1, larger K) the kWgmmaPersist layout.
      if constexpr (!kGemm1) {
        if (p.K <= kRaMaxK) {
          if (!wgmma_ok() || !persist_smem_ok<false, true>()) return false;
          err = persist_launch<false, true>(p, stream);
          return true;
        }
      }
      if (!wgmma_ok() || !persist_smem_ok<kGemm1, false>()) return false;
      err = persist_launch<kGemm1, false>(p, stream);
      return true;
  }
}

// kAuto's gemm1 on kGemm1Tiled weights: 9 (tiled_kernel<true, 9>) or 13 (persist_rs_kernel). 13:
// 1.8-2.3% faster at the bench shape, 4.4% at H = 3584, 6.5% at H = 1792 (interleaved A/B,
// docs/performance.md, eleventh session): it saves a fixed time per tile.
constexpr int kDefaultGemm1TiledVariant = 13;

// Path -> variant; kAuto takes kDefaultPath (change it there after measuring).
int variant_of(Fp4GemmPath path, bool gemm1) {
  if (path == Fp4GemmPath::kAuto) path = gemm1 ? kDefaultGemm1Path : kDefaultGemm2Path;
  switch (path) {
    case Fp4GemmPath::kTiled: return 0;
    case Fp4GemmPath::kTiledSkip: return 1;
    case Fp4GemmPath::kWgmma: return 3;
    case Fp4GemmPath::kWgmmaWs: return 4;
    case Fp4GemmPath::kWgmmaWs2: return 5;
    case Fp4GemmPath::kWgmmaWsRs: return 6;
    case Fp4GemmPath::kWgmmaPersist: return 7;
    case Fp4GemmPath::kWgmmaPersistRA: return 8;
    default: return 2;
  }
}

}  // namespace v2

bool aligned8(const void* ptr, int64_t ld) { return (reinterpret_cast<uintptr_t>(ptr) % 8 == 0) && (ld % 8 == 0); }

template <bool kGemm1>
cudaError_t launch(const GemmArgs& p, cudaStream_t stream) {
  if (p.P <= 0 || p.N <= 0) return cudaSuccess;
  const int n_per_block = kGemm1 ? kBN / 2 : kBN;
  const dim3 grid(ceil_div_u(p.P, kBM), ceil_div_u(p.N, n_per_block));
  if (grid.y > 65535) return cudaErrorInvalidConfiguration;
  moe_gemm_fp4_kernel<kGemm1><<<grid, kThreads, 0, stream>>>(p);
  return last_launch_error();
}

}  // namespace

cudaError_t launch_moe_gemm1_fp4(const uint8_t* a, int64_t ld_a, const uint8_t* a_scales, int64_t ld_a_scales,
                                 float a_gs, const uint8_t* w13, int64_t ld_w, const uint8_t* w13_scales,
                                 int64_t ld_w_scales, const float* w13_gs, const int32_t* offsets,
                                 const int32_t* permuted_to_token, int64_t P, int64_t E, int64_t H, int64_t I,
                                 float out_gs, uint8_t* out, int64_t ld_out, uint8_t* out_scales,
                                 int64_t ld_out_scales, cudaStream_t stream, Fp4GemmPath path,
                                 Fp4WeightLayout w_layout) {
  if (H % 16 != 0 || I % 16 != 0 || H <= 0 || I <= 0 || E <= 0) return cudaErrorInvalidValue;
  if (w_layout == Fp4WeightLayout::kGemm2Tiled) return cudaErrorInvalidValue;  // (gemm2's layout)
  const bool tiled = w_layout == Fp4WeightLayout::kGemm1Tiled;
  if (tiled) {  // (row strides of the tiled weights are implied: H / 2 and H / 16)
    ld_w = H / 2;
    ld_w_scales = H / 16;
  }
  if (!aligned8(a, ld_a) || !aligned8(w13, ld_w)) return cudaErrorMisalignedAddress;
  v2::Args t{};
  t.a = a; t.ld_a = ld_a; t.a_sc = a_scales; t.ld_a_sc = ld_a_scales; t.a_gs = a_gs;
  t.w = w13; t.ld_w = ld_w; t.w_sc = w13_scales; t.ld_w_sc = ld_w_scales; t.w_gs = w13_gs;
  t.offsets = offsets; t.p2t = permuted_to_token; t.P = P; t.E = static_cast<int>(E);
  t.K = static_cast<int>(H); t.N = static_cast<int>(I);
  t.out_gs = out_gs; t.out_q = out; t.ld_out_q = ld_out; t.out_sc = out_scales; t.ld_out_sc = ld_out_scales;
  t.q_vec = v2::aligned(out, ld_out, 8);
  cudaError_t err = cudaSuccess;
  if (tiled) {
    // Only kWgmmaWsRs (variant 9) and its persistent form (kWgmmaPersist: variant 13) read the tiled
    // layout: no fallback (the row-major paths would misread it).
    int var = -1;
    if (path == Fp4GemmPath::kAuto) var = v2::kDefaultGemm1TiledVariant;
    if (path == Fp4GemmPath::kWgmmaWsRs) var = 9;
    if (path == Fp4GemmPath::kWgmmaPersist) var = 13;
    if (var >= 0 && v2::try_launch<true>(t, var, stream, err)) return err;
    // kAuto: the other of the two where the default cannot run (its shared memory not grantable).
    if (path == Fp4GemmPath::kAuto && v2::try_launch<true>(t, var == 13 ? 9 : 13, stream, err)) return err;
    return cudaErrorInvalidValue;
  }
  if (path != Fp4GemmPath::kLegacy) {
    if (v2::try_launch<true>(t, v2::variant_of(path, true), stream, err)) return err;
    if (path != Fp4GemmPath::kAuto) return cudaErrorInvalidValue;
    // kAuto: a default that cannot run here (no sm_90a, too little shared memory) falls back to
    // kWgmmaWs2, kTiledStaged, then kTiled.
    if (v2::try_launch<true>(t, 5, stream, err)) return err;
    if (v2::try_launch<true>(t, 2, stream, err)) return err;
    if (v2::try_launch<true>(t, 0, stream, err)) return err;
  }
  GemmArgs p{};
  p.a = a; p.ld_a = ld_a; p.a_sc = a_scales; p.ld_a_sc = ld_a_scales; p.a_gs = a_gs;
  p.w = w13; p.ld_w = ld_w; p.w_sc = w13_scales; p.ld_w_sc = ld_w_scales; p.w_gs = w13_gs;
  p.offsets = offsets; p.p2t = permuted_to_token; p.P = P; p.E = static_cast<int>(E);
  p.K = static_cast<int>(H); p.N = static_cast<int>(I);
  p.out_gs = out_gs; p.out_q = out; p.ld_out_q = ld_out; p.out_sc = out_scales; p.ld_out_sc = ld_out_scales;
  return launch<true>(p, stream);
}

cudaError_t launch_moe_gemm2_fp4(const uint8_t* h, int64_t ld_h, const uint8_t* h_scales, int64_t ld_h_scales,
                                 float h_gs, const uint8_t* w2, int64_t ld_w, const uint8_t* w2_scales,
                                 int64_t ld_w_scales, const float* w2_gs, const int32_t* offsets,
                                 const int32_t* permuted_to_token, int64_t P, int64_t E, int64_t I, int64_t H,
                                 uint16_t* out, int64_t ld_out, cudaStream_t stream, Fp4GemmPath path,
                                 Fp4WeightLayout w_layout) {
  if (I % 16 != 0 || I <= 0 || H <= 0 || E <= 0) return cudaErrorInvalidValue;
  if (w_layout == Fp4WeightLayout::kGemm1Tiled) return cudaErrorInvalidValue;  // (gemm1's layout)
  const bool tiled = w_layout == Fp4WeightLayout::kGemm2Tiled;
  if (tiled) {  // (row strides of the tiled weights are implied: I / 2 and I / 16)
    ld_w = I / 2;
    ld_w_scales = I / 16;
    // Only the persistent kernels read the tiled layout: no fallback (the others would misread it).
    if (path != Fp4GemmPath::kAuto && path != Fp4GemmPath::kWgmmaPersist && path != Fp4GemmPath::kWgmmaPersistRA)
      return cudaErrorInvalidValue;
  }
  if (!aligned8(h, ld_h) || !aligned8(w2, ld_w)) return cudaErrorMisalignedAddress;
  if (path != Fp4GemmPath::kLegacy) {
    v2::Args t{};
    t.a = h; t.ld_a = ld_h; t.a_sc = h_scales; t.ld_a_sc = ld_h_scales; t.a_gs = h_gs;
    t.w = w2; t.ld_w = ld_w; t.w_sc = w2_scales; t.ld_w_sc = ld_w_scales; t.w_gs = w2_gs;
    t.offsets = offsets; t.p2t = permuted_to_token; t.P = P; t.E = static_cast<int>(E);
    t.K = static_cast<int>(I); t.N = static_cast<int>(H);
    t.out = out; t.ld_out = ld_out;
    t.vec_out = v2::aligned(out, ld_out, 2) && reinterpret_cast<uintptr_t>(out) % 4 == 0;
    t.vec16_out = reinterpret_cast<uintptr_t>(out) % 16 == 0 && ld_out % 8 == 0;
    cudaError_t err = cudaSuccess;
    if (tiled) return v2::try_launch<false>(t, path == Fp4GemmPath::kWgmmaPersist ? 10 : 11, stream, err) ? err
                                                                                                       : cudaErrorInvalidValue;
    if (v2::try_launch<false>(t, v2::variant_of(path, false), stream, err)) return err;
    if (path != Fp4GemmPath::kAuto) return cudaErrorInvalidValue;
    // kAuto: a default that cannot run here (no sm_90a, too little shared memory) falls back to
    // kWgmmaWs2, kTiledStaged, then kTiled.
    if (v2::try_launch<false>(t, 5, stream, err)) return err;
    if (v2::try_launch<false>(t, 2, stream, err)) return err;
    if (v2::try_launch<false>(t, 0, stream, err)) return err;
  }
  GemmArgs p{};
  p.a = h; p.ld_a = ld_h; p.a_sc = h_scales; p.ld_a_sc = ld_h_scales; p.a_gs = h_gs;
  p.w = w2; p.ld_w = ld_w; p.w_sc = w2_scales; p.ld_w_sc = ld_w_scales; p.w_gs = w2_gs;
  p.offsets = offsets; p.p2t = permuted_to_token; p.P = P; p.E = static_cast<int>(E);
  p.K = static_cast<int>(I); p.N = static_cast<int>(H);
  p.out = out; p.ld_out = ld_out;
  p.vec_out = reinterpret_cast<uintptr_t>(out) % 16 == 0 && ld_out % 8 == 0;
  return launch<false>(p, stream);
}

namespace {
// One thread per 8 code bytes (a 16-element item) of a weight row: the item's codes and its scale
// byte go to their tiled places (kernels/common/fp4_tiled.h). K: the row's elements; gemm1: K = H,
// N = I; gemm2: K = I, N = H.
template <bool kGemm1>
__global__ void pack_tiled_kernel(const uint8_t* w, int64_t ld_w, const uint8_t* w_sc, int64_t ld_w_sc, int64_t rows,
                                  int64_t K, int64_t N, uint8_t* out, uint8_t* out_sc) {
  const int64_t items = K / 16;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < rows * items;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = idx / items, kblk = idx % items;
    const uint2 c = *reinterpret_cast<const uint2*>(w + row * ld_w + kblk * 8);
    *reinterpret_cast<uint2*>(out + tiled_code_offset(kGemm1 ? 1 : 2, row, kblk * 8, K, N)) = c;
    out_sc[tiled_scale_offset(kGemm1 ? 1 : 2, row, kblk, K, N)] = w_sc[row * ld_w_sc + kblk];
  }
}
template <bool kGemm1>
cudaError_t pack_tiled(const uint8_t* w, int64_t ld_w, const uint8_t* w_sc, int64_t ld_w_sc, int64_t rows, int64_t K,
                       int64_t N, uint8_t* out, uint8_t* out_sc, cudaStream_t stream) {
  if (!aligned8(w, ld_w) || reinterpret_cast<uintptr_t>(out) % 8 != 0) return cudaErrorMisalignedAddress;
  const int64_t n = rows * (K / 16);
  const unsigned blocks = static_cast<unsigned>(n / 256 + 1 < 65536 ? n / 256 + 1 : 65536);
  pack_tiled_kernel<kGemm1><<<blocks, 256, 0, stream>>>(w, ld_w, w_sc, ld_w_sc, rows, K, N, out, out_sc);
  return last_launch_error();
}
}  // namespace

bool gemm1_tiled_supported(int64_t H, int64_t I) {
  return gemm1_tiled_ok(H, I) && v2::wgmma_ok() && (v2::persist_rs_smem_ok() || v2::smem_ok<true, 9>());
}

bool gemm2_tiled_supported(int64_t I, int64_t H) {
  return gemm2_tiled_ok(I, H) && v2::wgmma_ok() && v2::persist_smem_ok<false, false, true>() &&
         (I > v2::kRaMaxK || v2::persist_smem_ok<false, true, true>());
}

cudaError_t launch_pack_gemm1_weights_tiled(const uint8_t* w13, int64_t ld_w, const uint8_t* w13_scales,
                                            int64_t ld_w_scales, int64_t E, int64_t H, int64_t I, uint8_t* out,
                                            uint8_t* out_scales, cudaStream_t stream) {
  if (E <= 0 || !gemm1_tiled_ok(H, I)) return cudaErrorInvalidValue;
  return pack_tiled<true>(w13, ld_w, w13_scales, ld_w_scales, E * 2 * I, H, I, out, out_scales, stream);
}

cudaError_t launch_pack_gemm2_weights_tiled(const uint8_t* w2, int64_t ld_w, const uint8_t* w2_scales,
                                            int64_t ld_w_scales, int64_t E, int64_t I, int64_t H, uint8_t* out,
                                            uint8_t* out_scales, cudaStream_t stream) {
  if (E <= 0 || !gemm2_tiled_ok(I, H)) return cudaErrorInvalidValue;
  return pack_tiled<false>(w2, ld_w, w2_scales, ld_w_scales, E * H, I, H, out, out_scales, stream);
}

}  // namespace moeprof::kern
