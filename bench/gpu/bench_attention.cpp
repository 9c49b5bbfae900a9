// MLA causal prefill attention (non-absorbed path) at T=16384, 16 local heads (Kimi-K2.5 TP=4),
// qk dim 192, v dim 128 (v read from the kv_b output layout [k_nope | v] per head, stride 256).
// FLOPs counted for the causal half only: heads * T^2 * (qk + v)  (2*T*T/2 per dot dim).
// Usage: bench_attention [T] [heads]
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "bench/gpu/bench_util.h"
#include "kernels/init.cuh"
#include "kernels/mla_attention.cuh"

using namespace moeprof::kern;

int main(int argc, char** argv) {
  if (!have_gpu()) return 0;
  const int64_t T = argc > 1 ? std::atoll(argv[1]) : 16384;
  const int64_t nh = argc > 2 ? std::atoll(argv[2]) : 16;
  const int64_t qk = 192, vd = 128, kv_stride = 256;
  cudaStream_t s;
  BENCH_CHECK(cudaStreamCreate(&s));
  uint16_t *q, *k, *kv, *out;
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&q), T * nh * qk * 2));
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&k), T * nh * qk * 2));
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&kv), T * nh * kv_stride * 2));
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&out), T * nh * vd * 2));
  BENCH_CHECK(launch_init_uniform(q, true, T, nh * qk, nh * qk, 1, 1.0f, s));
  BENCH_CHECK(launch_init_uniform(k, true, T, nh * qk, nh * qk, 2, 1.0f, s));
  BENCH_CHECK(launch_init_uniform(kv, true, T, nh * kv_stride, nh * kv_stride, 3, 1.0f, s));
  AttentionArgs a{};
  a.q = q; a.ld_q = nh * qk; a.k = k; a.ld_k = nh * qk; a.v = kv; a.ld_v = nh * kv_stride;
  a.out = out; a.ld_out = nh * vd;
  a.T = T; a.n_heads = nh; a.qk_dim = qk; a.v_dim = vd; a.qk_head_stride = qk; a.v_offset = 128;
  a.v_head_stride = kv_stride; a.scale = 1.0f / std::sqrt(192.0f);
  const double ms = time_ms(s, 2, 7, [&] { BENCH_CHECK(launch_causal_attention(a, s)); });
  const double flops = static_cast<double>(nh) * T * T * (qk + vd);
  std::printf("bench_attention: T=%lld heads=%lld qk=%lld v=%lld causal\n", (long long)T, (long long)nh, (long long)qk,
              (long long)vd);
  std::printf("RESULT attention_mla_causal ms=%.3f tflops=%.1f\n", ms, flops / (ms * 1e-3) / 1e12);
  cudaFree(q); cudaFree(k); cudaFree(kv); cudaFree(out);
  return 0;
}
