// The tile constants, argument struct (v2::Args) and device helpers shared by the tiled, wgmma and
// persistent paths of the grouped FP4 GEMMs: PTX wrappers, e2m1/e4m3 dequantization to fp16, the
// output epilogues and the gemm1 requantization, the XOR swizzles of the shared tiles.
// A part of kernels/moe_gemm_fp4.cu, which includes the parts in the order of their definitions: the
// FP4 GEMMs are one translation unit (docs/kernels.md, "SASS of the parts"). Not for other files.
#pragma once
#include "kernels/moe_gemm_fp4_ref.cuh"  // (silu_f32)

namespace moeprof::kern {
namespace {

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

// e2m1x8_to_f16x8_fast's values in another order, two permutes fewer (15 integer and fp16
// operations per 8 codes instead of 17): the high bytes of the even codes (lo) and of the odd ones
// (hi) go straight into the words, so o[0] = codes (0, 2), o[1] = (4, 6), o[2] = (1, 3), o[3] =
// (5, 7) (low half first). For kSmallM, whose A and B operands both go through it: a dot product
// over a k16 block does not depend on which k slot holds which code.
__device__ __forceinline__ void e2m1x8_to_f16x8_perm(uint32_t w, uint32_t s2, uint32_t* o) {
  constexpr uint32_t kBits = 0x07070707u << 1;
  const uint32_t lo = ((w << 1) & kBits) | ((w << 4) & 0x80808080u);
  const uint32_t hi = ((w >> 3) & kBits) | (w & 0x80808080u);
  o[0] = hmul2_f16(__byte_perm(lo, 0u, 0x1404u), s2);
  o[1] = hmul2_f16(__byte_perm(lo, 0u, 0x3424u), s2);
  o[2] = hmul2_f16(__byte_perm(hi, 0u, 0x1404u), s2);
  o[3] = hmul2_f16(__byte_perm(hi, 0u, 0x3424u), s2);
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

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define MOEPROF_HAVE_CVT_E4M3 1
// The hardware conversion (sm_89+) of the two e4m3 bytes in bits 0..15 of v to fp16x2 (byte 0 to
// the low half): exact, e4m3 being a subset of fp16; NaN stays NaN. (The host emulator defines
// MOEPROF_HAVE_CVT_E4M3 and its own cvt_e4m3x2 from the formats' definitions.)
__device__ __forceinline__ uint32_t cvt_e4m3x2(uint32_t v) {
  uint32_t h;
  asm("{\n.reg .b16 t, u;\nmov.b32 {t, u}, %1;\ncvt.rn.f16x2.e4m3x2 %0, t;\n}\n" : "=r"(h) : "r"(v));
  return h;
}
#endif

// kSmallM's scales: the two e4m3 bytes in bits 0..15 of v, each x 2^7 in both halves of an fp16x2
// (s0 from byte 0, s1 from byte 1): e4m3_to_f16x2_x128 of each byte, the same bits (NaN stays NaN).
// With the hardware conversion: 1 conversion, 1 multiply and 2 permutes for both bytes instead of
// about 12 integer operations.
__device__ __forceinline__ void e4m3x2_to_f16x2_x128(uint32_t v, uint32_t& s0, uint32_t& s1) {
#if defined(MOEPROF_HAVE_CVT_E4M3)
  const uint32_t h = hmul2_f16(cvt_e4m3x2(v), 0x58005800u);  // 0x5800 = fp16 128
  s0 = __byte_perm(h, 0u, 0x1010u);
  s1 = __byte_perm(h, 0u, 0x3232u);
#else
  s0 = e4m3_to_f16x2_x128(v & 0xFFu);
  s1 = e4m3_to_f16x2_x128((v >> 8) & 0xFFu);
#endif
}
// Byte q of w (sel = 0x11 q) x 2^7 in both halves, as e4m3_to_f16x2_x128((w >> 8 q) & 0xFF).
__device__ __forceinline__ uint32_t e4m3_byte_to_f16x2_x128(uint32_t w, uint32_t sel) {
#if defined(MOEPROF_HAVE_CVT_E4M3)
  return hmul2_f16(cvt_e4m3x2(__byte_perm(w, 0u, sel)), 0x58005800u);
#else
  return e4m3_to_f16x2_x128(__byte_perm(w, 0u, sel) & 0xFFu);
#endif
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

}  // namespace v2
}  // namespace
}  // namespace moeprof::kern
