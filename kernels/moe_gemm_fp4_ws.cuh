// The warp-specialized pipeline (sm_90a only) of the grouped FP4 GEMMs' wgmma paths (tiled_kernel
// variants 4-6 and 9) and persistent paths: mbarriers, the producer warpgroup's loads,
// dequantization and swizzled stores, the RS consumers' register fragments, the consumers' wgmma
// steps and ws_body.
// A part of kernels/moe_gemm_fp4.cu, which includes the parts in the order of their definitions: the
// FP4 GEMMs are one translation unit (docs/kernels.md, "SASS of the parts"). Not for other files.
#pragma once
#include "kernels/moe_gemm_fp4_device.cuh"

namespace moeprof::kern {
namespace {

namespace v2 {

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

}  // namespace v2
}  // namespace
}  // namespace moeprof::kern
