// MLA causal prefill attention (non-absorbed path) at T=16384, 16 local heads (Kimi-K2.5 TP=4),
// qk dim 192, v dim 128 (v read from the kv_b output layout [k_nope | v] per head, stride 256).
// FLOPs counted for the causal half only: heads * T^2 * (qk + v)  (2*T*T/2 per dot dim).
// Times the default kernel (the RESULT line without a suffix), then every FA2 variant, the wgmma
// kernel (path 10) and the generic tensor-core kernel (AttentionArgs::path), and cross-checks
// every FA2 / wgmma variant against the
// generic kernel on the same inputs, at T and at small odd sizes (normwise <= 1e-2, max <= 4e-2 of
// max |ref|, as tests/gpu/cuda_ops_test.cpp). Exit status 1 on a mismatch. The last two lines: the
// check summary and the default kernel's RESULT line again.
// Usage: bench_attention [T] [heads]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench/gpu/bench_util.h"
#include "kernels/init.cuh"
#include "kernels/mla_attention.cuh"

using namespace moeprof::kern;

namespace {

constexpr int64_t kQk = 192, kVd = 128, kKvStride = 256;

struct Inputs {
  int64_t T = 0, nh = 0;
  uint16_t *q = nullptr, *k = nullptr, *kv = nullptr, *out = nullptr, *out_ref = nullptr;
  Inputs(int64_t T_, int64_t nh_, uint64_t seed, cudaStream_t s) : T(T_), nh(nh_) {
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&q), T * nh * kQk * 2));
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&k), T * nh * kQk * 2));
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&kv), T * nh * kKvStride * 2));
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&out), T * nh * kVd * 2));
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&out_ref), T * nh * kVd * 2));
    BENCH_CHECK(launch_init_uniform(q, true, T, nh * kQk, nh * kQk, seed + 1, 1.0f, s));
    BENCH_CHECK(launch_init_uniform(k, true, T, nh * kQk, nh * kQk, seed + 2, 1.0f, s));
    BENCH_CHECK(launch_init_uniform(kv, true, T, nh * kKvStride, nh * kKvStride, seed + 3, 1.0f, s));
  }
  ~Inputs() { cudaFree(q); cudaFree(k); cudaFree(kv); cudaFree(out); cudaFree(out_ref); }
  AttentionArgs args(uint16_t* o, int path, float scale) const {
    AttentionArgs a{};
    a.q = q; a.ld_q = nh * kQk; a.k = k; a.ld_k = nh * kQk; a.v = kv; a.ld_v = nh * kKvStride;
    a.out = o; a.ld_out = nh * kVd;
    a.T = T; a.n_heads = nh; a.qk_dim = kQk; a.v_dim = kVd; a.qk_head_stride = kQk; a.v_offset = 128;
    a.v_head_stride = kKvStride; a.scale = scale;
    a.path = path;
    return a;
  }
};

double bf16_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Fills both outputs with 0xFF (NaN) first, so rows a kernel never writes show up as non-finite.
bool cross_check(const Inputs& in, int path, float scale, cudaStream_t s) {
  const size_t n = static_cast<size_t>(in.T * in.nh * kVd);
  BENCH_CHECK(cudaMemsetAsync(in.out, 0xFF, n * 2, s));
  BENCH_CHECK(cudaMemsetAsync(in.out_ref, 0xFF, n * 2, s));
  BENCH_CHECK(launch_causal_attention(in.args(in.out, path, scale), s));
  BENCH_CHECK(launch_causal_attention(in.args(in.out_ref, 1, scale), s));
  BENCH_CHECK(cudaStreamSynchronize(s));
  std::vector<uint16_t> ha(n), hr(n);
  BENCH_CHECK(cudaMemcpy(ha.data(), in.out, n * 2, cudaMemcpyDeviceToHost));
  BENCH_CHECK(cudaMemcpy(hr.data(), in.out_ref, n * 2, cudaMemcpyDeviceToHost));
  double num = 0, den = 0, maxd = 0, maxr = 0;
  size_t nonfinite = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = bf16_value(ha[i]), y = bf16_value(hr[i]);
    if (!std::isfinite(x) || !std::isfinite(y)) { ++nonfinite; continue; }
    num += (x - y) * (x - y);
    den += y * y;
    maxd = std::max(maxd, std::fabs(x - y));
    maxr = std::max(maxr, std::fabs(y));
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  const bool ok = nonfinite == 0 && den > 0 && rel <= 1e-2 && maxd <= 4e-2 * maxr;
  std::printf("CHECK path=%d vs generic T=%lld heads=%lld: normwise rel %.3e, max abs diff %.3e of max |ref| %.3e, "
              "non-finite %zu: %s\n",
              path, (long long)in.T, (long long)in.nh, rel, maxd, maxr, nonfinite, ok ? "ok" : "MISMATCH");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (!have_gpu()) return 0;
  const int64_t T = argc > 1 ? std::atoll(argv[1]) : 16384;
  const int64_t nh = argc > 2 ? std::atoll(argv[2]) : 16;
  const float scale = 1.0f / std::sqrt(192.0f);
  cudaStream_t s;
  BENCH_CHECK(cudaStreamCreate(&s));
  const double flops = static_cast<double>(nh) * T * T * (kQk + kVd);
  bool ok = true;
  double ms_default = 0;
  {
    Inputs in(T, nh, 0, s);
    std::printf("bench_attention: T=%lld heads=%lld qk=%lld v=%lld causal\n", (long long)T, (long long)nh,
                (long long)kQk, (long long)kVd);
    const AttentionArgs a = in.args(in.out, 0, scale);
    ms_default = time_ms(s, 2, 7, [&] { BENCH_CHECK(launch_causal_attention(a, s)); });
    std::printf("RESULT attention_mla_causal ms=%.3f tflops=%.1f\n", ms_default, flops / (ms_default * 1e-3) / 1e12);
    for (int path : {2, 3, 4, 5, 10, 1}) {
      const AttentionArgs ap = in.args(in.out, path, scale);
      const double msp = time_ms(s, path == 1 ? 1 : 2, path == 1 ? 3 : 7,
                                 [&] { BENCH_CHECK(launch_causal_attention(ap, s)); });
      std::printf("RESULT attention_mla_causal_path%d ms=%.3f tflops=%.1f\n", path, msp,
                  flops / (msp * 1e-3) / 1e12);
    }
    for (int path : {0, 2, 3, 4, 5, 10}) ok = cross_check(in, path, scale, s) && ok;
  }
  // Tile edges: T around multiples of 32 / 48 / 64 / 128 / 256, and a sharper softmax.
  for (int64_t t : {1, 2, 37, 48, 63, 129, 255, 256, 257, 300, 1000, 1100}) {
    Inputs in(t, 3, 100 + t, s);
    for (int path : {2, 3, 4, 5, 10}) ok = cross_check(in, path, 4.0f * scale, s) && ok;
  }
  std::printf("CHECK summary: %s\n", ok ? "all ok" : "MISMATCH");
  // The headline again, last (scripts/device_all.sh shows the log's last two lines).
  std::printf("RESULT attention_mla_causal ms=%.3f tflops=%.1f\n", ms_default, flops / (ms_default * 1e-3) / 1e12);
  cudaStreamDestroy(s);
  return ok ? 0 : 1;
}
