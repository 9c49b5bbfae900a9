// Causal MLA attention on Hopper warpgroup MMA (wgmma, sm_90a): AttentionArgs::path 10, the default
// where it applies. This translation unit is compiled for sm_90a only (kernels/CMakeLists.txt); see
// docs/kernels.md "Causal attention".
//
// CTA: 3 warpgroups (384 threads), 128 queries of one head; computing warpgroup w (0, 1) owns query
// rows 64w .. 64w+63, warpgroup 2 copies. Key/value tiles of BN = 128 rows, two K and two V buffers
// filled with cp.async (16-byte copies, rows >= T zero-filled). Q, K and V live in shared memory in
// the 128-byte-swizzled layout that wgmma reads through matrix descriptors: a tile of R rows x C
// columns is stored as C/64 column blocks of R rows x 128 bytes, 16-byte chunk c of row r at chunk
// position c ^ (r & 7) (1024-byte aligned 8-row atoms).
//  - S = Q K^T: wgmma m64n128k16, A = Q and B = K both K-major from shared memory (SS form),
//    12 k-steps over the 192 qk columns (descriptor start +32 bytes per k-step inside a 64-column
//    block; stride byte offset 1024 = one 8-row atom).
//  - Online softmax in registers (the accumulator fragment of m64nN is the mma.sync m16n8 one per
//    warp: row 16*warp + lane/4 (+8), columns 8j + 2*(lane%4) (+1)), exp2 domain as the FA2 kernel.
//  - O += P V: wgmma m64n128k16 with A = P straight from registers (RS form; the S accumulator
//    layout is the A fragment layout, so P needs no shuffles) and B = V from shared memory,
//    MN-major (V rows are keys, d contiguous: imm-trans-b = 1; leading byte offset = the distance
//    between the two 64-wide d blocks, stride byte offset 1024 = 8 keys).
//  - The softmax of tile j overlaps the P.V product of tile j-1, a copier warpgroup hands tiles over
//    with mbarriers instead of CTA barriers, and the two computing warpgroups take ping-pong turns
//    at the tensor cores (attention_wgmma_ws_kernel). Paths 6 to 9, measured variants of this kernel
//    without some of these steps (docs/performance.md, "MLA attention on wgmma"), were removed.
#include <cmath>

#include "kernels/attention_ptx.cuh"
#include "kernels/mla_attention.cuh"

namespace moeprof::kern {
namespace wgfa {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int D = 192, DV = 128, BM = 128;

constexpr int BN = 128;  // keys per tile
struct Cfg {
  static constexpr int kQBytes = BM * D * 2;  // [3][BM][64]
  static constexpr int kKBytes = BN * D * 2;  // [3][BN][64]
  static constexpr int kVBytes = BN * DV * 2; // [2][BN][64]
  static constexpr int kStageBytes = kKBytes + kVBytes;
  static constexpr size_t kSmemBytes = static_cast<size_t>(kQBytes + 2 * kStageBytes) + 1024;  // + alignment
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MOEPROF_WGMMA_DEVICE 1
#endif

#ifdef MOEPROF_WGMMA_DEVICE
// cp.async writes through the generic proxy; wgmma reads through the async proxy.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// mbarrier / named-barrier helpers (path 10).
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0;
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Arrives on `bar` once every cp.async this thread issued so far has landed (count not raised).
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void named_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
// Shared-memory matrix descriptor, 128-byte swizzle: start address, leading / stride byte offsets.
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}
// ---- wgmma wrappers (D: the m64nN f32 accumulator fragment of this thread) ----
__device__ __forceinline__ void wgmma_ss_m64n128(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(scale_d));
}
// B from shared memory, MN-major (transposed: imm-trans-b = 1); D += A * B.
__device__ __forceinline__ void wgmma_rs_m64n128_tb(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}


// Register "fence": keeps the compiler from moving reads / writes of wgmma accumulator registers
// across a wgmma wait (the asm statements' outputs say nothing about when the async MMA finishes).
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

#endif  // MOEPROF_WGMMA_DEVICE

// ---- path 10: warp-specialized, ping-pong (FA3's schedule, on cp.async instead of TMA) ----
// 384 threads: warpgroups 0 and 1 compute (64 query rows each), warpgroup 2 only copies
// (setmaxnreg: 40 registers for the copier, 232 for the two computing warpgroups). The copier streams
// K_0, K_1, V_0, K_2, V_1, ... into the two K and two V buffers with cp.async, each buffer's "full"
// mbarrier completing when its copies have landed (cp.async.mbarrier.arrive.noinc, 128 arrivals);
// the consumers release a buffer on its "empty" mbarrier (256 arrivals) once their wgmma reading it
// has completed. No CTA-wide barrier in the key loop: the two warpgroups take turns issuing their
// products (named barriers 1 and 2), so one's softmax runs while the other's S = Q K^T and P.V
// occupy the tensor cores. Turn j of a warpgroup issues S_j (j < n) and P_{j-1} V_{j-1} (j > 0);
// there are n + 1 turns.
constexpr int kWsThreads = 384;
__global__ void __launch_bounds__(kWsThreads, 1) attention_wgmma_ws_kernel(AttentionArgs a) {
#ifdef MOEPROF_WGMMA_DEVICE
  using C = Cfg;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw_u32 = smem_u32(smem_raw);
  const uint32_t sQ = (raw_u32 + 1023u) & ~1023u;
  const uint32_t sK = sQ + C::kQBytes;      // 2 x kKBytes
  const uint32_t sV = sK + 2 * C::kKBytes;  // 2 x kVBytes
  const uint32_t sBar = sV + 2 * C::kVBytes;
  // mbarriers (8 bytes each): fullK[2], fullV[2], emptyK[2], emptyV[2]
  auto full_k = [&](int b) { return sBar + 8u * b; };
  auto full_v = [&](int b) { return sBar + 16u + 8u * b; };
  auto empty_k = [&](int b) { return sBar + 32u + 8u * b; };
  auto empty_v = [&](int b) { return sBar + 48u + 8u * b; };

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t h = blockIdx.x;
  const int qb = static_cast<int>(gridDim.y) - 1 - static_cast<int>(blockIdx.y);  // longest rows first
  const int T = static_cast<int>(a.T);
  const int q0 = qb * BM;
  const int n_kb = qb + 1;
  if (tid == 0) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      mbar_init(full_k(b), 128);
      mbar_init(full_v(b), 128);
      mbar_init(empty_k(b), 256);
      mbar_init(empty_v(b), 256);
    }
  }
  __syncthreads();

  if (warp >= 8) {  // copier: thread moves chunk (t & 7) of rows t/8 + 16 i of each 64-column block
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    const int ptid = tid - 256, cr = ptid >> 3, cc = ptid & 7;
    const uint32_t sw = static_cast<uint32_t>(cr * 128 + ((cc ^ (cr & 7)) << 4));
    const uint16_t* kg = a.k + h * a.qk_head_stride + cc * 8;
    const uint16_t* vg = a.v + a.v_offset + h * a.v_head_stride + cc * 8;
    for (int j = 0; j <= n_kb; ++j) {
      if (j < n_kb) {
        if (j >= 2) mbar_wait(empty_k(j & 1), ((j >> 1) - 1) & 1);
        const uint32_t dst = sK + (j & 1) * C::kKBytes + sw;
        const int key0 = (n_kb - 1 - j) * BN + cr;
#pragma unroll
        for (int i = 0; i < BN / 16; ++i) {
          const int key = key0 + 16 * i;
          const bool ok = key < T;
          const uint16_t* src = ok ? kg + static_cast<int64_t>(key) * a.ld_k : a.k;
#pragma unroll
          for (int blk = 0; blk < D / 64; ++blk)
            cp_async16(dst + blk * BN * 128 + i * 2048, ok ? src + blk * 64 : src, ok);
        }
        cp_async_mbar_arrive(full_k(j & 1));
      }
      if (j >= 1) {
        const int t = j - 1;
        if (t >= 2) mbar_wait(empty_v(t & 1), ((t >> 1) - 1) & 1);
        const uint32_t dst = sV + (t & 1) * C::kVBytes + sw;
        const int key0 = (n_kb - 1 - t) * BN + cr;
#pragma unroll
        for (int i = 0; i < BN / 16; ++i) {
          const int key = key0 + 16 * i;
          const bool ok = key < T;
          const uint16_t* src = ok ? vg + static_cast<int64_t>(key) * a.ld_v : a.v;
#pragma unroll
          for (int blk = 0; blk < DV / 64; ++blk)
            cp_async16(dst + blk * BN * 128 + i * 2048, ok ? src + blk * 64 : src, ok);
        }
        cp_async_mbar_arrive(full_v(t & 1));
      }
    }
    cp_async_wait_all();
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int wg = warp >> 2, wq = warp & 3, wtid = tid & 127;
    const int g = lane >> 2, q4 = lane & 3;
    {  // this warpgroup's 64 Q rows (rows >= T zero-filled)
      const int cr = wtid >> 3, cc = wtid & 7;
      const uint16_t* qg = a.q + h * a.qk_head_stride + cc * 8;
      const uint32_t sw = static_cast<uint32_t>((wg * 64 + cr) * 128 + ((cc ^ (cr & 7)) << 4));
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = q0 + wg * 64 + cr + 16 * i;
        const bool ok = row < T;
        const uint16_t* src = ok ? qg + static_cast<int64_t>(row) * a.ld_q : a.q;
#pragma unroll
        for (int blk = 0; blk < D / 64; ++blk)
          cp_async16(sQ + blk * BM * 128 + i * 2048 + sw, ok ? src + blk * 64 : src, ok);
      }
      cp_async_commit();
      cp_async_wait_all();
      fence_proxy_async();
      named_sync(3 + wg, 128);
    }

    float o[64], s[BN / 2];
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.0f;
    uint32_t pf[BN / 16][4];
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const float sl2 = a.scale * kLog2e;
    const int warp_lo = q0 + wg * 64 + wq * 16;
    const int row_a = warp_lo + g, row_b = row_a + 8;
    const uint32_t q_desc_base = sQ + wg * 64 * 128;
    const int my_turn = 1 + wg, other_turn = 2 - wg;
    if (wg == 1) named_arrive(other_turn, 256);  // warpgroup 0 issues first

    for (int j = 0; j < n_kb; ++j) {
      const bool has_pv = j > 0;
      mbar_wait(full_k(j & 1), (j >> 1) & 1);
      if (has_pv) mbar_wait(full_v((j - 1) & 1), ((j - 1) >> 1) & 1);
      fence_proxy_async();
      named_sync(my_turn, 256);
      wgmma_fence();
      {
        const uint32_t kst = sK + (j & 1) * C::kKBytes;
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
          const uint64_t da = make_desc(q_desc_base + (ks >> 2) * BM * 128 + (ks & 3) * 32, 16, 1024);
          const uint64_t db = make_desc(kst + (ks >> 2) * BN * 128 + (ks & 3) * 32, 16, 1024);
          wgmma_ss_m64n128(s, da, db, ks > 0 ? 1 : 0);
        }
        wgmma_commit();
      }
      // (issue, hand over the turn and wait in one branch: no accumulator register moves while the
      // P.V product is in flight)
      if (has_pv) {
        const uint32_t vst = sV + ((j - 1) & 1) * C::kVBytes;
        wgmma_fence();
#pragma unroll
        for (int t = 0; t < BN / 16; ++t) wgmma_rs_m64n128_tb(o, pf[t], make_desc(vst + t * 16 * 128, BN * 128, 1024));
        wgmma_commit();
        named_arrive(other_turn, 256);
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
      } else {
        named_arrive(other_turn, 256);
        wgmma_wait0();
      }
      fence_regs(s);
      mbar_arrive(empty_k(j & 1));

      const int k0 = (n_kb - 1 - j) * BN;
      float mx[2] = {-INFINITY, -INFINITY};
      if (j == 0) {
#pragma unroll
        for (int jj = 0; jj < BN / 8; ++jj)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int key = k0 + jj * 8 + 2 * q4 + (c & 1);
            if (key > ((c < 2) ? row_a : row_b)) s[jj * 4 + c] = -INFINITY;
          }
      }
#pragma unroll
      for (int jj = 0; jj < BN / 8; ++jj)
#pragma unroll
        for (int c = 0; c < 4; ++c) mx[c >> 1] = fmaxf(mx[c >> 1], s[jj * 4 + c]);
      float alpha[2], mu[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        const float mn = fmaxf(m[r], mx[r]);
        mu[r] = mn == -INFINITY ? 0.0f : mn * sl2;
        alpha[r] = fast_exp2(m[r] * sl2 - mu[r]);
        m[r] = mn;
      }
      float rs[2] = {0.0f, 0.0f};
#pragma unroll
      for (int jj = 0; jj < BN / 8; ++jj)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          s[jj * 4 + c] = fast_exp2(fmaf(s[jj * 4 + c], sl2, -mu[c >> 1]));
          rs[c >> 1] += s[jj * 4 + c];
        }
      l[0] = l[0] * alpha[0] + rs[0];
      l[1] = l[1] * alpha[1] + rs[1];
      if (has_pv) {
        wgmma_wait0();
        fence_regs(o);
        mbar_arrive(empty_v((j - 1) & 1));
        if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
          for (int jj = 0; jj < 16; ++jj) {
            o[jj * 4 + 0] *= alpha[0]; o[jj * 4 + 1] *= alpha[0];
            o[jj * 4 + 2] *= alpha[1]; o[jj * 4 + 3] *= alpha[1];
          }
        }
      }
#pragma unroll
      for (int jj = 0; jj < BN / 8; ++jj) {
        pf[jj >> 1][(jj & 1) * 2 + 0] = cvt_bf16x2(s[jj * 4 + 0], s[jj * 4 + 1]);
        pf[jj >> 1][(jj & 1) * 2 + 1] = cvt_bf16x2(s[jj * 4 + 2], s[jj * 4 + 3]);
      }
    }
    {  // turn n: the last P.V
      mbar_wait(full_v((n_kb - 1) & 1), ((n_kb - 1) >> 1) & 1);
      fence_proxy_async();
      named_sync(my_turn, 256);
      const uint32_t vst = sV + ((n_kb - 1) & 1) * C::kVBytes;
      wgmma_fence();
#pragma unroll
      for (int t = 0; t < BN / 16; ++t) wgmma_rs_m64n128_tb(o, pf[t], make_desc(vst + t * 16 * 128, BN * 128, 1024));
      wgmma_commit();
      if (wg == 0) named_arrive(other_turn, 256);
      wgmma_wait0();
      fence_regs(o);
    }

    if (q0 + wg * 64 < T) {  // warpgroup-uniform
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
      }
      const float inv_a = l[0] > 0.0f ? 1.0f / l[0] : 0.0f, inv_b = l[1] > 0.0f ? 1.0f / l[1] : 0.0f;
      uint16_t* out_a = a.out + static_cast<int64_t>(row_a) * a.ld_out + h * DV + 2 * q4;
      uint16_t* out_b = out_a + 8 * a.ld_out;
#pragma unroll
      for (int jj = 0; jj < 16; ++jj) {
        if (row_a < T)
          *reinterpret_cast<uint32_t*>(out_a + jj * 8) = cvt_bf16x2(o[jj * 4 + 0] * inv_a, o[jj * 4 + 1] * inv_a);
        if (row_b < T)
          *reinterpret_cast<uint32_t*>(out_b + jj * 8) = cvt_bf16x2(o[jj * 4 + 2] * inv_b, o[jj * 4 + 3] * inv_b);
      }
    }
  }  // consumers
#else
  __trap();
#endif
}

cudaError_t launch_ws(const AttentionArgs& a, cudaStream_t stream) {
  constexpr size_t smem = Cfg::kSmemBytes + 64;  // + 8 mbarriers
  cudaError_t e = cudaFuncSetAttribute(attention_wgmma_ws_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  const int64_t qblocks = (a.T + BM - 1) / BM;
  attention_wgmma_ws_kernel<<<dim3(static_cast<unsigned>(a.n_heads), static_cast<unsigned>(qblocks)), kWsThreads,
                              smem, stream>>>(a);
  return cudaGetLastError();
}
}  // namespace wgfa

namespace detail {
bool attention_wgmma_applies(const AttentionArgs& a) {
  auto al16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return a.qk_dim == wgfa::D && a.v_dim == wgfa::DV && al16(a.q) && al16(a.k) && al16(a.v) && al16(a.out) &&
         a.ld_q % 8 == 0 && a.ld_k % 8 == 0 && a.ld_v % 8 == 0 && a.ld_out % 8 == 0 && a.qk_head_stride % 8 == 0 &&
         a.v_offset % 8 == 0 && a.v_head_stride % 8 == 0 && a.ld_q >= 0 && a.ld_k >= 0 && a.ld_v >= 0 &&
         a.ld_out >= 0 && a.qk_head_stride >= 0 && a.v_offset >= 0 && a.v_head_stride >= 0 &&
         a.T <= 0x7fffffff - 256 && (a.T + wgfa::BM - 1) / wgfa::BM <= 65535 && a.n_heads <= 0x7fffffff &&
         a.scale > 0.0f && std::isfinite(a.scale * wgfa::kLog2e);
}
cudaError_t launch_attention_wgmma(const AttentionArgs& a, cudaStream_t stream) { return wgfa::launch_ws(a, stream); }
}  // namespace detail

}  // namespace moeprof::kern
