// Host emulation of one CUDA thread block for the tensor-core kernels' tests without a GPU
// (attention_fa2_emu.cpp, mla_decode_emu.cpp): a block runs as 256 std::threads; warp collectives
// (ldmatrix .x4 / .trans, mma.sync m16n8k16 bf16, shfl.xor) are emulated from the PTX ISA fragment
// definitions; cp.async copies land at cp.async.wait_group (the latest moment the hardware may
// deliver them: wait_group 1 leaves the newest committed group in flight); shared memory is one
// buffer whose addresses are bounds/alignment checked (emu::oob counts violations).
// Include after <cuda_runtime_api.h>-based kernel headers and before the cut-out kernel body.
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#undef __device__
#undef __forceinline__
#undef __global__
#undef __launch_bounds__
#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(...)

struct U3 { unsigned x = 0, y = 0, z = 0; };
inline thread_local U3 threadIdx, blockIdx, blockDim;
inline U3 gridDim;

static float bf(uint16_t h) { uint32_t u = uint32_t(h) << 16; float f; std::memcpy(&f, &u, 4); return f; }
static uint16_t to_bf(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

namespace emu {
inline thread_local unsigned char* cta_smem;
inline unsigned char* smem_base;
inline size_t smem_size;
struct Warp {
  std::barrier<> bar{32};
  uint32_t u[32][12];
  float f[32][4];
};
inline Warp* warps;  // 8
inline std::barrier<>* cta_bar;
struct Copy { uint32_t dst; const void* src; bool valid; };
inline thread_local std::vector<Copy> pending;              // issued, not committed
inline thread_local std::vector<std::vector<Copy>> groups;  // committed, oldest first
inline std::atomic<long> oob{0};

// Runs block (bx, by, bz) as 256 threads calling kernel(): shared memory (`smem`, which emu::smem_base
// must point at) refilled with 0xFF (NaN garbage), fresh warps and block barrier.
template <class Kernel>
void run_block(std::vector<unsigned char>& smem, unsigned bx, unsigned by, unsigned bz, Kernel&& kernel) {
  std::memset(smem.data(), 0xFF, smem.size());
  std::unique_ptr<Warp[]> ws(new Warp[8]);
  warps = ws.get();
  std::barrier<> cb(256);
  cta_bar = &cb;
  std::vector<std::thread> th;
  for (unsigned t = 0; t < 256; ++t)
    th.emplace_back([&, t] {
      threadIdx = U3{t, 0, 0};
      blockIdx = U3{bx, by, bz};
      blockDim = U3{256, 1, 1};
      cta_smem = smem.data();
      kernel();
    });
  for (auto& x : th) x.join();
}
}  // namespace emu

namespace moeprof::kern {
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
inline uint32_t smem_u32(const void* p) {
  const auto* c = static_cast<const unsigned char*>(p);
  if (c < emu::smem_base || c >= emu::smem_base + emu::smem_size + 1) ++emu::oob;
  return uint32_t(c - emu::smem_base);
}
inline void cp_async16(uint32_t dst, const void* src, bool valid) { emu::pending.push_back({dst, src, valid}); }
inline void cp_async16_if(uint32_t dst, const void* src, bool valid, bool issue) {
  if (issue) cp_async16(dst, src, valid);
}
inline void cp_async_commit() {
  emu::groups.push_back(std::move(emu::pending));
  emu::pending.clear();
}
inline void cp_async_wait_group(size_t keep) {  // cp.async.wait_group keep
  while (emu::groups.size() > keep) {
    for (auto& c : emu::groups.front()) {
      if (c.dst + 16 > emu::smem_size || c.dst % 16) ++emu::oob;
      if (c.valid) std::memcpy(emu::smem_base + c.dst, c.src, 16); else std::memset(emu::smem_base + c.dst, 0, 16);
    }
    emu::groups.erase(emu::groups.begin());
  }
}
inline void cp_async_wait_all() {
  cp_async_commit();  // the FA2 kernels wait on copies they may not have committed yet
  cp_async_wait_group(0);
}
inline void cp_async_wait_one() { cp_async_wait_group(1); }
template <int N>
inline void cp_async_wait_n() { cp_async_wait_group(N); }
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
inline void st_bf16(uint16_t* p, float v) { *p = to_bf(v); }
inline float __uint_as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
}  // namespace moeprof::kern
