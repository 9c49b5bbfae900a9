// Host emulation of the FA2 causal attention kernels of kernels/mla_attention.cu, for machines
// without a GPU. run_attention_fa2_emu.sh cuts the kernel template (namespace fa2, minus its inline-PTX
// helpers) out of the .cu into fa2_body.inc; this file supplies the helpers and runs every block of
// the grid as 256 std::threads: warp collectives (ldmatrix .x4 / .trans, mma.sync m16n8k16 bf16,
// shfl.xor) are emulated from the PTX ISA fragment definitions, cp.async copies land at
// cp.async.wait_group (the latest moment the hardware may deliver them), shared memory starts as
// 0xFF (NaN) garbage, and shared-memory addresses are bounds/alignment checked. The output is compared
// with a float64 reference at the cuda_ops_test tolerance (normwise 1e-2, max 4e-2 of max |ref|).
// usage: attention_fa2_emu T heads variant(2..5, AttentionArgs::path) [v_offset v_head_stride]
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>
#include <algorithm>

#include "kernels/mla_attention.cuh"

#undef __device__
#undef __forceinline__
#undef __global__
#undef __launch_bounds__
#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(a, b)

struct U3 { unsigned x = 0, y = 0, z = 0; };
thread_local U3 threadIdx, blockIdx;
U3 gridDim;

static float bf(uint16_t h) { uint32_t u = uint32_t(h) << 16; float f; std::memcpy(&f, &u, 4); return f; }
static uint16_t to_bf(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

namespace emu {
thread_local unsigned char* cta_smem;
unsigned char* smem_base;
size_t smem_size;
struct Warp {
  std::barrier<> bar{32};
  uint32_t u[32][12];
  float f[32][4];
};
Warp* warps;  // 8
std::barrier<>* cta_bar;
struct Copy { uint32_t dst; const void* src; bool valid; };
thread_local std::vector<Copy> pending;
std::atomic<long> oob{0};
}  // namespace emu

namespace moeprof::kern {
constexpr float kLog2e = 1.4426950408889634f;

inline void __syncthreads() { emu::cta_bar->arrive_and_wait(); }
inline emu::Warp& W() { return emu::warps[threadIdx.x >> 5]; }
inline int L() { return threadIdx.x & 31; }
inline float __shfl_xor_sync(unsigned, float v, int o) {
  auto& w = W(); w.f[L()][0] = v; w.bar.arrive_and_wait();
  float r = w.f[L() ^ o][0]; w.bar.arrive_and_wait(); return r;
}
inline void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  auto& w = W(); const int l = L();
  for (int i = 0; i < 4; ++i) w.u[l][i] = a[i];
  w.u[l][4] = b0; w.u[l][5] = b1;
  for (int i = 0; i < 4; ++i) w.f[l][i] = d[i];
  w.bar.arrive_and_wait();
  auto A = [&](int r, int k) {
    const int reg = (r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    const int lane = 4 * (r & 7) + (k & 7) / 2;
    return bf(uint16_t(w.u[lane][reg] >> (16 * (k & 1))));
  };
  auto B = [&](int k, int c) {
    const int reg = 4 + (k >= 8 ? 1 : 0);
    const int lane = 4 * c + (k & 7) / 2;
    return bf(uint16_t(w.u[lane][reg] >> (16 * (k & 1))));
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
namespace fa2 {
inline uint32_t smem_u32(const void* p) {
  const auto* c = static_cast<const unsigned char*>(p);
  if (c < emu::smem_base || c >= emu::smem_base + emu::smem_size + 1) ++emu::oob;
  return uint32_t(c - emu::smem_base);
}
inline void cp_async16(uint32_t dst, const void* src, bool valid) { emu::pending.push_back({dst, src, valid}); }
inline void cp_async_commit() {}
inline void cp_async_wait_all() {
  for (auto& c : emu::pending) {
    if (c.dst + 16 > emu::smem_size || c.dst % 16) ++emu::oob;
    if (c.valid) std::memcpy(emu::smem_base + c.dst, c.src, 16); else std::memset(emu::smem_base + c.dst, 0, 16);
  }
  emu::pending.clear();
}
inline uint16_t sm16(uint32_t addr) {
  if (addr + 2 > emu::smem_size) { ++emu::oob; return 0; }
  uint16_t v; std::memcpy(&v, emu::smem_base + addr, 2); return v;
}
inline void ldsm_impl(uint32_t (&r)[4], uint32_t addr, bool trans) {
  auto& w = W(); const int l = L();
  if (addr % 16) ++emu::oob;
  w.u[l][0] = addr; w.bar.arrive_and_wait();
  for (int j = 0; j < 4; ++j) {
    uint16_t e[2];
    for (int x = 0; x < 2; ++x) {
      if (!trans) e[x] = sm16(w.u[8 * j + (l >> 2)][0] + 2 * (2 * (l & 3) + x));
      else e[x] = sm16(w.u[8 * j + 2 * (l & 3) + x][0] + 2 * (l >> 2));
    }
    r[j] = uint32_t(e[0]) | (uint32_t(e[1]) << 16);
  }
  w.bar.arrive_and_wait();
}
inline void ldsm_x4(uint32_t (&r)[4], uint32_t addr) { ldsm_impl(r, addr, false); }
inline void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) { ldsm_impl(r, addr, true); }
inline float fast_exp2(float x) { return std::exp2(x); }
inline uint32_t cvt_bf16x2(float lo, float hi) { return uint32_t(to_bf(lo)) | (uint32_t(to_bf(hi)) << 16); }
}  // namespace fa2
#include <fa2_body.inc>  // generated by run_attention_fa2_emu.sh (-I its work folder)
}  // namespace moeprof::kern

using namespace moeprof::kern;

template <int MT, int BN>
void run(const AttentionArgs& a) {
  using C = fa2::Cfg<MT, BN>;
  const int64_t qblocks = (a.T + C::BM - 1) / C::BM;
  gridDim = U3{unsigned(a.n_heads), unsigned(qblocks), 1};
  std::vector<unsigned char> smem(C::kSmemBytes);
  emu::smem_base = smem.data(); emu::smem_size = smem.size();
  for (unsigned by = 0; by < qblocks; ++by)
    for (unsigned bx = 0; bx < a.n_heads; ++bx) {
      std::memset(smem.data(), 0xFF, smem.size());  // NaN garbage
      std::unique_ptr<emu::Warp[]> ws(new emu::Warp[8]);
      emu::warps = ws.get();
      std::barrier<> cb(256);
      emu::cta_bar = &cb;
      std::vector<std::thread> th;
      for (unsigned t = 0; t < 256; ++t)
        th.emplace_back([&, t] {
          threadIdx = U3{t, 0, 0}; blockIdx = U3{bx, by, 0}; emu::cta_smem = smem.data();
          fa2::attention_fa2_kernel<MT, BN>(a);
        });
      for (auto& x : th) x.join();
    }
}

int main(int argc, char** argv) {
  const int64_t T = atoll(argv[1]), nh = atoll(argv[2]);
  const int variant = atoi(argv[3]);
  const int64_t voff = argc > 4 ? atoll(argv[4]) : 128, vstride = argc > 5 ? atoll(argv[5]) : 256;
  const int64_t qk = 192, vd = 128;
  std::mt19937 rng(T * 7 + nh);
  std::uniform_real_distribution<float> U(-1, 1);
  std::vector<uint16_t> q(T * nh * qk), k(T * nh * qk), v(T * nh * vstride), out(T * nh * vd, 0xFFFF);
  for (auto& x : q) x = to_bf(U(rng));
  for (auto& x : k) x = to_bf(U(rng));
  for (auto& x : v) x = to_bf(U(rng));
  AttentionArgs a{};
  a.q = q.data(); a.ld_q = nh * qk; a.k = k.data(); a.ld_k = nh * qk; a.v = v.data(); a.ld_v = nh * vstride;
  a.out = out.data(); a.ld_out = nh * vd; a.T = T; a.n_heads = nh; a.qk_dim = qk; a.v_dim = vd;
  a.qk_head_stride = qk; a.v_offset = voff; a.v_head_stride = vstride; a.scale = 2.0f / std::sqrt(192.0f);
  if (variant == 2) run<1, 64>(a);
  if (variant == 3) run<2, 64>(a);
  if (variant == 4) run<2, 48>(a);
  if (variant == 5) run<2, 32>(a);
  double num = 0, den = 0, maxd = 0, maxr = 0; long nonfinite = 0;
  for (int64_t h = 0; h < nh; ++h)
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> sc(t + 1); double mx = -1e300;
      for (int64_t s = 0; s <= t; ++s) {
        double d = 0;
        for (int64_t i = 0; i < qk; ++i) d += double(bf(q[t * nh * qk + h * qk + i])) * bf(k[s * nh * qk + h * qk + i]);
        sc[s] = d * a.scale; mx = std::max(mx, sc[s]);
      }
      double l = 0; for (auto& x : sc) { x = std::exp(x - mx); l += x; }
      for (int64_t dd = 0; dd < vd; ++dd) {
        double o = 0;
        for (int64_t s = 0; s <= t; ++s) o += sc[s] * bf(v[s * nh * vstride + voff + h * vstride + dd]);
        o /= l;
        const double g = bf(out[t * nh * vd + h * vd + dd]);
        if (!std::isfinite(g)) { ++nonfinite; continue; }
        num += (g - o) * (g - o); den += o * o; maxd = std::max(maxd, std::fabs(g - o)); maxr = std::max(maxr, std::fabs(o));
      }
    }
  const double rel = std::sqrt(num / den);
  const bool ok = nonfinite == 0 && rel <= 1e-2 && maxd <= 4e-2 * maxr && emu::oob == 0;
  std::printf("T=%lld nh=%lld variant=%d: rel %.3e maxd %.3e maxr %.3e nonfinite %ld oob %ld %s\n", (long long)T,
              (long long)nh, variant, rel, maxd, maxr, nonfinite, (long)emu::oob, ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}
