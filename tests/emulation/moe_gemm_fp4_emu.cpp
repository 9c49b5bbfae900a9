// Host emulation of the tiled FP4 grouped GEMM kernels of kernels/moe_gemm_fp4.cu (namespace v2),
// for machines without a GPU. run_moe_gemm_fp4_emu.sh cuts the kernel (minus its inline-PTX helpers)
// out of the .cu's parts (moe_gemm_fp4_{device,ws,tiled}.cuh) into v2_body.inc; this file supplies
// the helpers and runs every block of the grid as 256 std::threads: ldmatrix .x4, mma.sync
// m16n8k16 f16, shfl.up and mul.rn.f16x2 are emulated from the PTX ISA definitions, cp.async copies
// land at the cp.async.wait_group that retires their group (the latest moment the hardware may
// deliver them), shared memory starts as 0xFF garbage and
// every shared address is bounds/alignment checked. Outputs are compared with a float64 reference at
// cuda_ops_test's tolerances, and zero rows must be exactly zero; an f16 product that is not exact
// counts as a failure.
// usage: moe_gemm_fp4_emu T k E E_used H I tile [variant 0..2 (tiled), 11 / 12 (kSmallM on row-major /
// tiled weights); default 2] | moe_gemm_fp4_emu selftest
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>
#include <algorithm>

#include "kernels/common/fp4_tiled.h"
#include "kernels/common/fp_formats.h"

#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(...)
#define __grid_constant__
struct CUtensorMap { alignas(64) uint64_t opaque[16]; };  // (the TMA paths are not emulated)

struct U3 { unsigned x = 0, y = 0, z = 0; };
thread_local U3 threadIdx, blockIdx;
struct uint2 { uint32_t x, y; };
struct uint4 { uint32_t x, y, z, w; };
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
inline uint2 make_uint2(uint32_t a, uint32_t b) { return {a, b}; }
inline uint32_t __float_as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
using std::isfinite;
struct float2 { float x, y; };
inline float2 make_float2(float a, float b) { return {a, b}; }
using __half = uint16_t;

namespace emu {
thread_local unsigned char* cta_smem;
unsigned char* smem_base;
size_t smem_size;
int32_t row_src[128];
int32_t warp_tot[8];
int64_t info[3];
struct Warp {
  std::barrier<> bar{32};
  uint32_t u[32][8];
  float f[32][4];
};
Warp* warps;
std::barrier<>* cta_bar;
struct Copy { uint32_t dst; const void* src; int bytes; bool valid; };
thread_local std::vector<Copy> open_group;
thread_local std::deque<std::vector<Copy>> groups;
std::atomic<long> oob{0}, inexact{0};
}  // namespace emu

namespace moeprof::kern {
inline void __syncthreads() { emu::cta_bar->arrive_and_wait(); }
inline emu::Warp& W() { return emu::warps[threadIdx.x >> 5]; }
inline void __syncwarp() { W().bar.arrive_and_wait(); }
inline int L() { return threadIdx.x & 31; }
inline int __shfl_up_sync(unsigned, int v, int o) {
  auto& w = W(); w.u[L()][0] = uint32_t(v); w.bar.arrive_and_wait();
  const int r = L() >= o ? int(w.u[L() - o][0]) : v; w.bar.arrive_and_wait(); return r;
}
// Only reached by the wgmma variants (not emulated; their bodies are compiled out on the host).
inline int __any_sync(unsigned, int) { std::abort(); }
[[noreturn]] inline void __trap() { std::abort(); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float silu_f32(float x) { return x / (1.0f + std::exp(-x)); }  // (kernels/moe_gemm_fp4.cu's, up to its rounding)
inline uint16_t __float2half_rn(float f) { _Float16 h = static_cast<_Float16>(f); uint16_t u; std::memcpy(&u, &h, 2); return u; }
inline float h2f(uint16_t u) { _Float16 h; std::memcpy(&h, &u, 2); return static_cast<float>(h); }
inline uint16_t __half_as_ushort(uint16_t h) { return h; }
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t v = uint64_t(x) | (uint64_t(y) << 32);
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t sel = (s >> (4 * i)) & 0xF;
    uint32_t byte = (v >> (8 * (sel & 7))) & 0xFF;
    if (sel & 8) byte = (byte & 0x80) ? 0xFF : 0;
    r |= byte << (8 * i);
  }
  return r;
}
inline uint32_t pack_bf16x2(float lo, float hi) { return uint32_t(f32_to_bf16(lo)) | (uint32_t(f32_to_bf16(hi)) << 16); }
inline uint32_t hmul2_f16(uint32_t a, uint32_t b) {
  uint32_t r = 0;
  for (int h = 0; h < 2; ++h) {
    const float x = h2f(uint16_t(a >> (16 * h))), y = h2f(uint16_t(b >> (16 * h)));
    const float p = x * y;  // exact in fp32 (11 x 11 significand bits)
    const uint16_t q = __float2half_rn(p);
    if (std::isfinite(p) && h2f(q) != p) ++emu::inexact;
    r |= uint32_t(q) << (16 * h);
  }
  return r;
}
namespace v2 {
inline uint32_t smem_u32(const void* p) {
  const auto* c = static_cast<const unsigned char*>(p);
  if (c < emu::smem_base || c > emu::smem_base + emu::smem_size) ++emu::oob;
  return uint32_t(c - emu::smem_base);
}
inline void cp_async(uint32_t dst, const void* src, bool valid, int bytes) {
  if (dst % bytes || dst + bytes > emu::smem_size) ++emu::oob;
  if (valid && reinterpret_cast<uintptr_t>(src) % bytes) ++emu::oob;
  emu::open_group.push_back({dst, src, bytes, valid});
}
inline void cp_async8(uint32_t dst, const void* src, bool valid) { cp_async(dst, src, valid, 8); }
inline void cp_async4(uint32_t dst, const void* src, bool valid) { cp_async(dst, src, valid, 4); }
inline void cp_async16(uint32_t dst, const void* src, bool valid) { cp_async(dst, src, valid, 16); }
inline void cp_async_commit() { emu::groups.push_back(std::move(emu::open_group)); emu::open_group.clear(); }
template <int N>
inline void cp_async_wait() {
  while (emu::groups.size() > size_t(N)) {
    for (auto& c : emu::groups.front()) {
      if (c.dst + c.bytes > emu::smem_size) continue;
      if (c.valid) std::memcpy(emu::smem_base + c.dst, c.src, c.bytes); else std::memset(emu::smem_base + c.dst, 0, c.bytes);
    }
    emu::groups.pop_front();
  }
}
inline uint16_t sm16(uint32_t addr) {
  if (addr + 2 > emu::smem_size) { ++emu::oob; return 0; }
  uint16_t v; std::memcpy(&v, emu::smem_base + addr, 2); return v;
}
inline void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  auto& w = W(); const int l = L();
  if (addr % 16) ++emu::oob;
  w.u[l][0] = addr; w.bar.arrive_and_wait();
  for (int j = 0; j < 4; ++j) {
    uint16_t e[2];
    for (int x = 0; x < 2; ++x) e[x] = sm16(w.u[8 * j + (l >> 2)][0] + 2 * (2 * (l & 3) + x));
    r[j] = uint32_t(e[0]) | (uint32_t(e[1]) << 16);
  }
  w.bar.arrive_and_wait();
}
inline void mma_f16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  auto& w = W(); const int l = L();
  for (int i = 0; i < 4; ++i) w.u[l][i] = a[i];
  w.u[l][4] = b0; w.u[l][5] = b1;
  for (int i = 0; i < 4; ++i) w.f[l][i] = d[i];
  w.bar.arrive_and_wait();
  auto A = [&](int r, int k) {
    const int reg = (r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    const int lane = 4 * (r & 7) + (k & 7) / 2;
    return h2f(uint16_t(w.u[lane][reg] >> (16 * (k & 1))));
  };
  auto B = [&](int k, int c) {
    const int reg = 4 + (k >= 8 ? 1 : 0);
    const int lane = 4 * c + (k & 7) / 2;
    return h2f(uint16_t(w.u[lane][reg] >> (16 * (k & 1))));
  };
  const int g = l >> 2, q = l & 3;
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int r = g + (i >= 2 ? 8 : 0), c = 2 * q + (i & 1);
    double acc = w.f[l][i];
    for (int k = 0; k < 16; ++k) acc += double(A(r, k)) * B(k, c);
    out[i] = float(acc);
  }
  w.bar.arrive_and_wait();
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}
// The hardware e4m3x2 -> f16x2 conversion (cvt.rn.f16x2.e4m3x2, sm_89+) from the formats'
// definitions: byte 0 to the low half, exact (e4m3 is a subset of fp16), NaN to fp16 NaN.
inline uint32_t cvt_e4m3x2(uint32_t v) {
  uint32_t r = 0;
  for (int h = 0; h < 2; ++h) {
    const float f = e4m3_to_f32(uint8_t(v >> (8 * h)));
    const uint16_t u = std::isnan(f) ? uint16_t(0x7FFF) : __float2half_rn(f);
    if (!std::isnan(f) && h2f(u) != f) ++emu::inexact;
    r |= uint32_t(u) << (16 * h);
  }
  return r;
}
#define MOEPROF_HAVE_CVT_E4M3 1  // the kernels' scale helpers take the conversion's path
}  // namespace v2
#include <v2_body.inc>  // generated by run_moe_gemm_fp4_emu.sh (-I its work folder)
}  // namespace moeprof::kern

using namespace moeprof::kern;

int g_var = 2;  // tiled variant (argv[8]; Fp4GemmPath kTiled / kTiledSkip / kTiledStaged = 0 / 1 / 2)
template <bool kGemm1, int kVar>
void run_grid_v(v2::Args p) {
  constexpr int kCols = kGemm1 ? v2::kCols1 : v2::kCols2, kNPer = kGemm1 ? v2::kNPer1 : v2::kNPer2;
  const int64_t nt = (p.N + kCols - 1) / kCols;
  p.grid_m = int((p.P + v2::BM - 1) / v2::BM + p.E);
  p.n_groups = int((nt + kNPer - 1) / kNPer);
  std::vector<unsigned char> smem(v2::smem_bytes<kGemm1, kVar>());
  emu::smem_base = smem.data(); emu::smem_size = smem.size();
  const unsigned blocks = unsigned(p.grid_m * p.n_groups);
  for (unsigned bx = 0; bx < blocks; ++bx) {
    std::memset(smem.data(), 0xFF, smem.size());
    std::memset(emu::row_src, 0xFF, sizeof emu::row_src);
    std::unique_ptr<emu::Warp[]> ws(new emu::Warp[8]);
    emu::warps = ws.get();
    std::barrier<> cb(256);
    emu::cta_bar = &cb;
    std::vector<std::thread> th;
    for (unsigned t = 0; t < 256; ++t)
      th.emplace_back([&, t] {
        threadIdx = U3{t, 0, 0}; blockIdx = U3{bx, 0, 0}; emu::cta_smem = smem.data();
        emu::groups.clear(); emu::open_group.clear();
        v2::tiled_kernel<kGemm1, kVar>(p);
        if (!emu::open_group.empty()) ++emu::oob;  // uncommitted copies
      });
    for (auto& x : th) x.join();
  }
}

// kSmallM (small_kernel): one 128-thread CTA per (expert, column tile); variant 11 on row-major
// weights, 12 on the tiled layout (the caller passes the packed copy).
template <bool kGemm1, bool kTW>
void run_grid_small(v2::Args p) {
  const unsigned blocks = unsigned(p.E * (p.N / (kGemm1 ? v2::kCols1 : v2::kCols2)));
  std::vector<unsigned char> smem(v2::kSmSmemBytes);
  emu::smem_base = smem.data(); emu::smem_size = smem.size();
  for (unsigned bx = 0; bx < blocks; ++bx) {
    std::memset(smem.data(), 0xFF, smem.size());
    std::unique_ptr<emu::Warp[]> ws(new emu::Warp[v2::kSmThreads / 32]);
    emu::warps = ws.get();
    std::barrier<> cb(v2::kSmThreads);
    emu::cta_bar = &cb;
    std::vector<std::thread> th;
    for (unsigned t = 0; t < unsigned(v2::kSmThreads); ++t)
      th.emplace_back([&, t] {
        threadIdx = U3{t, 0, 0}; blockIdx = U3{bx, 0, 0}; emu::cta_smem = smem.data();
        emu::groups.clear(); emu::open_group.clear();
        v2::small_kernel<kGemm1, kTW>(p);
        if (!emu::open_group.empty() || !emu::groups.empty()) ++emu::oob;  // copies never waited for
      });
    for (auto& x : th) x.join();
  }
}

template <bool kGemm1>
void run_grid(v2::Args p) {
  if (g_var == 11) return run_grid_small<kGemm1, false>(p);
  if (g_var == 12) return run_grid_small<kGemm1, true>(p);
  if (g_var == 0) run_grid_v<kGemm1, 0>(p);
  else if (g_var == 1) run_grid_v<kGemm1, 1>(p);
  else run_grid_v<kGemm1, 2>(p);
}

// The tiled layout's copy of row-major codes / scales (rows x K), as launch_pack_gemm*_weights_tiled
// writes it (kernels/common/fp4_tiled.h); 16-byte aligned storage.
static void tile_weights(int gemm, const std::vector<uint8_t>& w, const std::vector<uint8_t>& ws, int64_t rows, int64_t K,
                         int64_t N, std::vector<uint8_t>& out, std::vector<uint8_t>& out_s) {
  out.assign(w.size() + 16, 0xEE);
  out_s.assign(ws.size() + 16, 0xEE);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kb = 0; kb < K / 2; ++kb) out[tiled_code_offset(gemm, r, kb, K, N)] = w[r * (K / 2) + kb];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kb = 0; kb < K / 16; ++kb) out_s[tiled_scale_offset(gemm, r, kb, K, N)] = ws[r * (K / 16) + kb];
}

static double deq(const std::vector<uint8_t>& codes, const std::vector<uint8_t>& sc, int64_t row, int64_t K, int64_t k) {
  const uint8_t b = codes[row * (K / 2) + k / 2];
  return double(e2m1_to_f32((k & 1) ? (b >> 4) : (b & 0xF))) * e4m3_to_f32(sc[row * (K / 16) + k / 16]);
}
static void quant16(const float (&v)[16], float gs, uint8_t (&packed)[8], uint8_t& s) {
  float amax = 0;
  for (float x : v) amax = std::max(amax, std::fabs(x));
  s = f32_to_e4m3(amax / (6.0f * gs));
  const float denom = e4m3_to_f32(s) * gs;
  for (int i = 0; i < 8; ++i)
    packed[i] = denom == 0.0f ? 0 : pack_e2m1(f32_to_e2m1(v[2 * i] / denom), f32_to_e2m1(v[2 * i + 1] / denom));
}

struct Norm {
  double num = 0, den = 0, maxd = 0, maxr = 0; long nonfinite = 0;
  void add(double r, double g) {
    if (!std::isfinite(g)) { ++nonfinite; return; }
    num += (g - r) * (g - r); den += r * r; maxd = std::max(maxd, std::fabs(g - r)); maxr = std::max(maxr, std::fabs(r));
  }
  bool ok(double rel, double mx) const { return nonfinite == 0 && std::sqrt(num / std::max(den, 1e-300)) <= rel && maxd <= mx * maxr; }
};

int selftest() {
  // e2m1 x e4m3 through the kernel's bit trick: every code byte and every finite scale.
  long bad = 0;
  for (int sc = 0; sc < 256; ++sc) {
    const uint32_t s2 = v2::e4m3_to_f16x2_x128(uint32_t(sc));
    for (int h = 0; h < 2; ++h) {
      const float got = h2f(uint16_t(s2 >> (16 * h))), want = e4m3_to_f32(uint8_t(sc)) * 128.0f;
      if (!(got == want || (std::isnan(got) && std::isnan(want)))) ++bad;
    }
    if ((sc & 0x7F) == 0x7F) continue;  // NaN
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t o[4], of[4];
      v2::e2m1x8_to_f16x8(b | (b << 8) | (b << 16) | (b << 24), s2, o);
      // the fast variant on a word mixing b with other bytes (cross-byte shifts must not leak)
      v2::e2m1x8_to_f16x8_fast(b | ((b ^ 0xFF) << 8) | (b << 16) | (((b * 37) & 0xFF) << 24), s2, of);
      if (of[0] != o[0] || of[2] != o[2]) ++bad;
      {  // kSmallM's order: (0, 2), (4, 6), (1, 3), (5, 7) of the fast variant's (0, 1), ..., (6, 7)
        const uint32_t w = b | ((b ^ 0xFF) << 8) | (b << 16) | (((b * 37) & 0xFF) << 24);
        uint32_t op[4], ofa[4];
        v2::e2m1x8_to_f16x8_perm(w, s2, op);
        v2::e2m1x8_to_f16x8_fast(w, s2, ofa);
        auto half = [](const uint32_t* o, int code) { return (o[code / 2] >> (16 * (code & 1))) & 0xFFFFu; };
        const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
        for (int i = 0; i < 8; ++i)
          if (half(op, i) != half(ofa, order[i])) ++bad;
      }
      {
        uint32_t oo[4];
        v2::e2m1x8_to_f16x8(b | ((b ^ 0xFF) << 8) | (b << 16) | (((b * 37) & 0xFF) << 24), s2, oo);
        for (int i = 0; i < 4; ++i) if (of[i] != oo[i]) ++bad;
      }
      for (int i = 0; i < 4; ++i)
        for (int h = 0; h < 2; ++h) {
          const double got = double(h2f(uint16_t(o[i] >> (16 * h)))) * 128.0;
          const double want = double(e2m1_to_f32(h ? (b >> 4) : (b & 0xF))) * e4m3_to_f32(uint8_t(sc));
          if (got != want || std::signbit(got) != std::signbit(want)) ++bad;
        }
    }
  }
  // kSmallM's scale helpers (the hardware conversion's path): every pair of bytes, each byte in
  // both halves x 2^7, bit for bit as e4m3_to_f16x2_x128 (NaN: any NaN); upper bits of v ignored.
  {
    long scale_bad = 0;
    auto same = [](uint32_t a, uint32_t b) {
      for (int h = 0; h < 2; ++h) {
        const float x = h2f(uint16_t(a >> (16 * h))), y = h2f(uint16_t(b >> (16 * h)));
        if (!(std::isnan(x) && std::isnan(y)) && uint16_t(a >> (16 * h)) != uint16_t(b >> (16 * h))) return false;
      }
      return true;
    };
    for (uint32_t v = 0; v < 65536; ++v) {
      uint32_t s0, s1;
      v2::e4m3x2_to_f16x2_x128(v | ((v * 2654435761u) & 0xFFFF0000u), s0, s1);
      if (!same(s0, v2::e4m3_to_f16x2_x128(v & 0xFF)) || !same(s1, v2::e4m3_to_f16x2_x128(v >> 8))) ++scale_bad;
      const uint32_t w = v | ((v ^ 0x5A5Au) << 16);
      for (uint32_t q = 0; q < 4; ++q)
        if (!same(v2::e4m3_byte_to_f16x2_x128(w, q * 0x11u), v2::e4m3_to_f16x2_x128((w >> (8 * q)) & 0xFF))) ++scale_bad;
    }
    bad += scale_bad;
    std::printf("selftest: kSmallM scale conversions wrong %ld of %d\n", scale_bad, 65536 * 6);
  }
  // e2m1x8_to_e4m3x8 (the producers' cvt path): every code in every byte position of words mixing
  // bytes, each output byte decoded as e4m3 must be e2m1 * 2^-6 exactly, sign included.
  for (uint32_t b = 0; b < 256; ++b) {
    const uint32_t w = b | (((b * 37) & 0xFF) << 8) | ((b ^ 0xA5) << 16) | (((b * 101 + 7) & 0xFF) << 24);
    uint32_t x, y;
    v2::e2m1x8_to_e4m3x8(w, x, y);
    for (int i = 0; i < 8; ++i) {
      const uint8_t code = uint8_t((w >> (4 * i)) & 0xF), e = uint8_t(((i < 4 ? x : y) >> (8 * (i & 3))) & 0xFF);
      const float got = e4m3_to_f32(e), want = e2m1_to_f32(code) * 0.015625f;
      if (got != want || std::signbit(got) != std::signbit(want)) ++bad;
    }
  }
  // kWgmmaWsRs's A-fragment byte selection: for each lane class q and random code rows (one K step,
  // 64 codes), the bytes rs_pick_bytes hands to the conversion must hold, in order, the codes
  // 16 j + 2q, 16 j + 2q + 1 (fragment a0/a1) and 16 j + 8 + 2q, + 1 (a2/a3) of blocks j = 0, 1 (w01)
  // and j = 2, 3 (w23), low nibble first.
  {
    std::mt19937 rng(20261203u);
    long pick_bad = 0;
    for (int trial = 0; trial < 4096; ++trial) {
      uint8_t row[32];
      for (auto& c : row) c = uint8_t(rng());
      auto word = [&](int w) { return uint32_t(row[4 * w]) | uint32_t(row[4 * w + 1]) << 8 | uint32_t(row[4 * w + 2]) << 16 | uint32_t(row[4 * w + 3]) << 24; };
      const uint4 u0{word(0), word(1), word(2), word(3)}, u1{word(4), word(5), word(6), word(7)};
      auto code = [&](int k) { return (row[k / 2] >> (4 * (k & 1))) & 0xF; };
      for (int q = 0; q < 4; ++q) {
        uint32_t w01, w23;
        v2::rs_pick_bytes(u0, u1, v2::rs_byte_sel(q), w01, w23);
        for (int j = 0; j < 4; ++j)
          for (int half = 0; half < 2; ++half) {  // 0: a0/a1 (k 2q, 2q + 1), 1: a2/a3 (k 8 + 2q, + 1)
            const uint32_t byte = ((j < 2 ? w01 : w23) >> (8 * (2 * (j & 1) + half))) & 0xFF;
            const int k0 = 16 * j + 8 * half + 2 * q;
            if ((byte & 0xF) != uint32_t(code(k0)) || (byte >> 4) != uint32_t(code(k0 + 1))) ++pick_bad;
          }
      }
    }
    bad += pick_bad;
    std::printf("selftest: RS fragment byte picks wrong %ld of %d\n", pick_bad, 4096 * 4 * 8);
  }
  std::printf("selftest: dequant mismatches %ld, inexact f16 products %ld %s\n", bad, (long)emu::inexact,
              bad == 0 && emu::inexact == 0 ? "ok" : "FAIL");
  return bad == 0 && emu::inexact == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "selftest") return selftest();
  const int64_t T = atoll(argv[1]), k = atoll(argv[2]), E = atoll(argv[3]), Eu = atoll(argv[4]), H = atoll(argv[5]),
                I = atoll(argv[6]), tile = atoll(argv[7]);
  if (argc > 8) g_var = atoi(argv[8]);
  std::printf("variant %d: ", g_var);
  std::mt19937 rng(unsigned(T * 31 + H + I));
  // routing: distinct experts per token among the first Eu
  std::vector<int32_t> ids(T * k);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> perm(Eu);
    for (int64_t e = 0; e < Eu; ++e) perm[e] = int32_t(e);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t j = 0; j < k; ++j) ids[t * k + j] = perm[j % Eu];
  }
  std::vector<int64_t> cnt(E, 0);
  for (auto e : ids) ++cnt[e];
  const int64_t P = T * k + E * (tile - 1);
  std::vector<int32_t> offs(E + 1, 0), p2t(P, -1);
  for (int64_t e = 0; e < E; ++e) offs[e + 1] = int32_t(offs[e] + (cnt[e] + tile - 1) / tile * tile);
  {
    std::vector<int64_t> fill(E, 0);
    for (int64_t i = 0; i < T * k; ++i) { const int e = ids[i]; p2t[offs[e] + fill[e]++] = int32_t(i / k); }
  }
  const int64_t total = offs[E];
  auto rb = [&](int64_t n) { std::vector<uint8_t> v(n); for (auto& x : v) x = uint8_t(rng()); return v; };
  auto re4 = [&](int64_t n) {
    std::uniform_real_distribution<float> U(0.05f, 1.0f);
    std::vector<uint8_t> v(n); for (auto& x : v) x = f32_to_e4m3(U(rng)); return v;
  };
  const float a_gs = 0.05f, out_gs = 0.02f;
  auto a = rb(T * H / 2), as = re4(T * H / 16), w13 = rb(E * 2 * I * H / 2), w13s = re4(E * 2 * I * H / 16);
  std::vector<float> w13gs(E);
  const float gsc0 = 1.0f / (std::sqrt(float(H)) * a_gs);
  for (auto& x : w13gs) x = std::uniform_real_distribution<float>(0.5f * gsc0, 1.5f * gsc0)(rng);
  int rc = 0, ran = 0;
  auto expert_of = [&](int64_t r) { int e = 0; while (e < E && offs[e + 1] <= r) ++e; return e; };

  std::vector<uint8_t> hq(P * I / 2, 0xAB), hs(P * I / 16, 0xAB);  // garbage: every byte must be written
  const bool small = g_var == 11 || g_var == 12;  // kSmallM: its column tiles must divide N
  if (H % 64 == 0 && (!small || I % 128 == 0)) {
    v2::Args p{};
    p.a = a.data(); p.ld_a = H / 2; p.a_sc = as.data(); p.ld_a_sc = H / 16; p.a_gs = a_gs;
    p.w = w13.data(); p.ld_w = H / 2; p.w_sc = w13s.data(); p.ld_w_sc = H / 16; p.w_gs = w13gs.data();
    std::vector<uint8_t> wt, wts;
    if (g_var == 12) {  // the kGemm1Tiled copy
      tile_weights(1, w13, w13s, E * 2 * I, H, I, wt, wts);
      p.w = wt.data(); p.w_sc = wts.data();
    }
    p.offsets = offs.data(); p.p2t = p2t.data(); p.P = P; p.E = int(E); p.K = int(H); p.N = int(I);
    p.out_gs = out_gs; p.out_q = hq.data(); p.ld_out_q = I / 2; p.out_sc = hs.data(); p.ld_out_sc = I / 16; p.q_vec = true;
    run_grid<true>(p);
    ++ran;
    long diff = 0, zero_bad = 0;
    Norm nm;
    for (int64_t r = 0; r < P; ++r) {
      const bool live = r < total && p2t[r] >= 0;
      const int e = live ? expert_of(r) : 0;
      for (int64_t b = 0; b < I / 16; ++b) {
        float hv[16];
        for (int c = 0; c < 16; ++c) {
          if (!live) { hv[c] = 0; continue; }
          const int64_t n = b * 16 + c;
          double g = 0, u = 0;
          for (int64_t kk = 0; kk < H; ++kk) {
            const double x = deq(a, as, p2t[r], H, kk);
            g += x * deq(w13, w13s, e * 2 * I + n, H, kk);
            u += x * deq(w13, w13s, e * 2 * I + I + n, H, kk);
          }
          const float gs = a_gs * w13gs[e];
          const float gate = float(g) * gs, up = float(u) * gs;
          hv[c] = round_bf16(gate / (1.0f + std::exp(-gate)) * up);
        }
        uint8_t pk[8], s;
        quant16(hv, out_gs, pk, s);
        const uint8_t gsb = hs[r * (I / 16) + b];
        if (!live && gsb != 0) ++zero_bad;
        for (int c = 0; c < 8; ++c) {
          const uint8_t gb = hq[r * (I / 2) + b * 8 + c];
          if (!live && gb != 0) ++zero_bad;
          diff += ((gb & 0xF) != (pk[c] & 0xF)) + ((gb >> 4) != (pk[c] >> 4));
          for (int h = 0; h < 2; ++h)
            nm.add(e2m1_to_f32(h ? pk[c] >> 4 : pk[c] & 0xF) * e4m3_to_f32(s) * out_gs,
                   e2m1_to_f32(h ? gb >> 4 : gb & 0xF) * e4m3_to_f32(gsb) * out_gs);
        }
      }
    }
    const double frac = double(diff) / double(P * I);
    const bool ok = frac <= 0.02 && zero_bad == 0 && nm.ok(3e-2, 0.35) && emu::oob == 0 && emu::inexact == 0;
    std::printf("gemm1 T=%lld k=%lld E=%lld H=%lld I=%lld tile=%lld P=%lld: codes differ %.3f%%, rel %.3e, zero-row errors %ld, oob %ld, inexact %ld %s\n",
                (long long)T, (long long)k, (long long)E, (long long)H, (long long)I, (long long)tile, (long long)P, frac * 100,
                std::sqrt(nm.num / nm.den), zero_bad, (long)emu::oob, (long)emu::inexact, ok ? "ok" : "FAIL");
    rc |= ok ? 0 : 1;
  } else {
    std::printf("gemm1: K=%lld, N=%lld: not a shape of this variant (skipped)\n", (long long)H, (long long)I);
  }
  if (I % 64 == 0 && (!small || H % 256 == 0)) {
    // gemm2 on random h (every row, including padding rows: the kernel must ignore them)
    auto h = rb(P * I / 2), hsc = re4(P * I / 16), w2 = rb(E * H * I / 2), w2s = re4(E * H * I / 16);
    std::vector<float> w2gs(E);
    for (auto& x : w2gs) x = std::uniform_real_distribution<float>(0.01f, 0.03f)(rng);
    const int64_t ld_out = H + 8;  // padded output rows
    std::vector<uint16_t> out(P * ld_out, 0x7FC1);
    v2::Args p{};
    p.a = h.data(); p.ld_a = I / 2; p.a_sc = hsc.data(); p.ld_a_sc = I / 16; p.a_gs = out_gs;
    p.w = w2.data(); p.ld_w = I / 2; p.w_sc = w2s.data(); p.ld_w_sc = I / 16; p.w_gs = w2gs.data();
    std::vector<uint8_t> wt, wts;
    if (g_var == 12) {  // the kGemm2Tiled copy
      tile_weights(2, w2, w2s, E * H, I, H, wt, wts);
      p.w = wt.data(); p.w_sc = wts.data();
    }
    p.offsets = offs.data(); p.p2t = p2t.data(); p.P = P; p.E = int(E); p.K = int(I); p.N = int(H);
    p.out = out.data(); p.ld_out = ld_out; p.vec_out = true;
    p.vec16_out = reinterpret_cast<uintptr_t>(out.data()) % 16 == 0 && ld_out % 8 == 0;
    run_grid<false>(p);
    ++ran;
    Norm nm;
    long zero_bad = 0, pad_touched = 0;
    for (int64_t r = 0; r < P; ++r) {
      const bool live = r < total && p2t[r] >= 0;
      const int e = live ? expert_of(r) : 0;
      for (int64_t n = 0; n < H; ++n) {
        const uint16_t gbits = out[r * ld_out + n];
        if (!live) { zero_bad += gbits != 0; continue; }
        double acc = 0;
        for (int64_t kk = 0; kk < I; ++kk) acc += deq(h, hsc, r, I, kk) * deq(w2, w2s, e * H + n, I, kk);
        nm.add(bf16_to_f32(f32_to_bf16(float(acc) * (out_gs * w2gs[e]))), bf16_to_f32(gbits));
      }
      for (int64_t n = H; n < ld_out; ++n) pad_touched += out[r * ld_out + n] != 0x7FC1;
    }
    const bool ok = zero_bad == 0 && pad_touched == 0 && nm.ok(1e-2, 4e-2) && emu::oob == 0 && emu::inexact == 0;
    std::printf("gemm2 T=%lld k=%lld E=%lld K=%lld N=%lld tile=%lld P=%lld: rel %.3e maxd/maxr %.3e, zero-row errors %ld, writes past N %ld, oob %ld %s\n",
                (long long)T, (long long)k, (long long)E, (long long)I, (long long)H, (long long)tile, (long long)P,
                std::sqrt(nm.num / nm.den), nm.maxd / nm.maxr, zero_bad, pad_touched, (long)emu::oob, ok ? "ok" : "FAIL");
    rc |= ok ? 0 : 1;
  } else {
    std::printf("gemm2: K=%lld, N=%lld: not a shape of this variant (skipped)\n", (long long)I, (long long)H);
  }
  if (ran == 0) {
    std::printf("no GEMM of this variant runs at these shapes: FAIL\n");
    return 2;
  }
  return rc;
}
