// FP4 grouped MoE GEMMs at Kimi-K2.5 TP=4 rank shapes: T=16384 tokens, top-8 of E=384 experts,
// gemm1 (gate+up) N=2*512, K=7168; gemm2 (down) N=7168, K=512; expert rows padded to tile=64.
// Beside it, cuBLASLt bf16 on the same shapes with pre-dequantized (bf16) weights, two ways:
//   "grouped": one cublasLtMatmul per expert over its real rows (E calls, the realistic baseline);
//   "single":  one GEMM over all P padded rows against one expert's weights (an upper bound:
//              no grouping, best-case weight reuse).
// TFLOP/s count useful FLOPs only: 2 * (T*k) * N * K (padding rows excluded).
// Usage: bench_moe_gemm [T] [E] [k]
#include <cublasLt.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/gpu/bench_util.h"
#include "kernels/init.cuh"
#include "kernels/moe_gemm_fp4.cuh"
#include "kernels/moe_permute.cuh"

using namespace moeprof::kern;

#define LT_CHECK(expr)                                                                   \
  do {                                                                                   \
    const cublasStatus_t _s = (expr);                                                    \
    if (_s != CUBLAS_STATUS_SUCCESS) {                                                   \
      std::fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #expr, int(_s)); \
      std::exit(3);                                                                      \
    }                                                                                    \
  } while (0)

namespace {

// out[M, N] (row-major bf16) = x[M, K] @ w[N, K]^T through cuBLASLt (same mapping as CudaBackend::linear).
struct LtGemm {
  cublasLtHandle_t h;
  void* ws;
  size_t ws_bytes = 32u << 20;
  cublasLtMatmulDesc_t desc{};
  cublasLtMatrixLayout_t a{}, b{}, c{};
  cublasLtMatmulAlgo_t algo{};
  void plan(int64_t M, int64_t N, int64_t K) {
    if (desc) {
      cublasLtMatrixLayoutDestroy(a); cublasLtMatrixLayoutDestroy(b); cublasLtMatrixLayoutDestroy(c);
      cublasLtMatmulDescDestroy(desc);
    }
    LT_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    LT_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, K, N, K));
    LT_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, K, M, K));
    LT_CHECK(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, N, M, N));
    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t w = ws_bytes;
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w, sizeof(w)));
    cublasLtMatmulHeuristicResult_t r{};
    int found = 0;
    LT_CHECK(cublasLtMatmulAlgoGetHeuristic(h, desc, a, b, c, c, pref, 1, &r, &found));
    if (!found) { std::fprintf(stderr, "no cuBLASLt algo\n"); std::exit(3); }
    algo = r.algo;
    cublasLtMatmulPreferenceDestroy(pref);
  }
  void run(const void* x, const void* wt, void* out, cudaStream_t s) {
    const float one = 1.0f, zero = 0.0f;
    LT_CHECK(cublasLtMatmul(h, desc, &one, wt, a, x, b, &zero, out, c, out, c, &algo, ws, ws_bytes, s));
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (!have_gpu()) return 0;
  const int64_t T = argc > 1 ? std::atoll(argv[1]) : 16384;
  const int64_t E = argc > 2 ? std::atoll(argv[2]) : 384;
  const int64_t k = argc > 3 ? std::atoll(argv[3]) : 8;
  const int64_t H = 7168, I = 512, tile = 64;
  const int64_t N_rows = T * k, P = N_rows + E * (tile - 1);
  std::printf("bench_moe_gemm: T=%lld k=%lld E=%lld H=%lld I=%lld tile=%lld P=%lld\n", (long long)T, (long long)k,
              (long long)E, (long long)H, (long long)I, (long long)tile, (long long)P);
  cudaStream_t s;
  BENCH_CHECK(cudaStreamCreate(&s));
  auto dalloc = [](size_t bytes) {
    void* p = nullptr;
    BENCH_CHECK(cudaMalloc(&p, bytes));
    return p;
  };
  // Routing.
  auto* ids = static_cast<int32_t*>(dalloc(N_rows * 4));
  auto* offsets = static_cast<int32_t*>(dalloc((E + 1) * 4));
  auto* p2t = static_cast<int32_t*>(dalloc(P * 4));
  auto* e2p = static_cast<int32_t*>(dalloc(N_rows * 4));
  BENCH_CHECK(launch_init_ints(ids, 1, N_rows, N_rows, 7, 0, static_cast<int32_t>(E), s));
  size_t ws_bytes = 0;
  BENCH_CHECK(moe_permute_workspace_bytes(N_rows, E, &ws_bytes));
  void* ws = dalloc(ws_bytes);
  const double permute_ms = time_ms(s, 1, 5, [&] {
    BENCH_CHECK(launch_moe_permute(ids, N_rows, k, E, tile, offsets, p2t, P, e2p, ws, ws_bytes, s));
  });
  std::vector<int32_t> offs(E + 1);
  BENCH_CHECK(cudaMemcpy(offs.data(), offsets, (E + 1) * 4, cudaMemcpyDeviceToHost));
  std::vector<int32_t> host_ids(N_rows);
  BENCH_CHECK(cudaMemcpy(host_ids.data(), ids, N_rows * 4, cudaMemcpyDeviceToHost));
  std::vector<int64_t> counts(E, 0);
  for (int32_t e : host_ids) ++counts[e];

  // FP4 operands.
  auto* a = static_cast<uint8_t*>(dalloc(T * H / 2));
  auto* a_s = static_cast<uint8_t*>(dalloc(T * H / 16));
  auto* w13 = static_cast<uint8_t*>(dalloc(E * 2 * I * H / 2));
  auto* w13_s = static_cast<uint8_t*>(dalloc(E * 2 * I * H / 16));
  auto* w2 = static_cast<uint8_t*>(dalloc(E * H * I / 2));
  auto* w2_s = static_cast<uint8_t*>(dalloc(E * H * I / 16));
  auto* gs = static_cast<float*>(dalloc(E * 4));
  auto* h = static_cast<uint8_t*>(dalloc(P * I / 2));
  auto* h_s = static_cast<uint8_t*>(dalloc(P * I / 16));
  auto* out = static_cast<uint16_t*>(dalloc(P * H * 2));
  BENCH_CHECK(launch_init_bytes(a, T, H / 2, H / 2, 1, s));
  BENCH_CHECK(launch_init_e4m3(a_s, T, H / 16, H / 16, 2, 0.05f, 1.0f, s));
  BENCH_CHECK(launch_init_bytes(w13, E * 2 * I, H / 2, H / 2, 3, s));
  BENCH_CHECK(launch_init_e4m3(w13_s, E * 2 * I, H / 16, H / 16, 4, 0.05f, 1.0f, s));
  BENCH_CHECK(launch_init_bytes(w2, E * H, I / 2, I / 2, 5, s));
  BENCH_CHECK(launch_init_e4m3(w2_s, E * H, I / 16, I / 16, 6, 0.05f, 1.0f, s));
  BENCH_CHECK(launch_init_uniform(gs, false, 1, E, E, 8, 0.01f, s));

  const double g1_ms = time_ms(s, 2, 7, [&] {
    BENCH_CHECK(launch_moe_gemm1_fp4(a, H / 2, a_s, H / 16, 0.05f, w13, H / 2, w13_s, H / 16, gs, offsets, p2t, P, E, H,
                                     I, 0.02f, h, I / 2, h_s, I / 16, s));
  });
  const double g2_ms = time_ms(s, 2, 7, [&] {
    BENCH_CHECK(launch_moe_gemm2_fp4(h, I / 2, h_s, I / 16, 0.02f, w2, I / 2, w2_s, I / 16, gs, offsets, p2t, P, E, I, H,
                                     out, H, s));
  });
  const double f1 = 2.0 * N_rows * (2 * I) * H, f2 = 2.0 * N_rows * H * I;

  // cuBLASLt bf16 baselines (weights pre-dequantized; values are random bf16: timing only).
  BENCH_CHECK(cudaFree(w13)); BENCH_CHECK(cudaFree(w2));
  auto* xa = static_cast<uint16_t*>(dalloc(P * H * 2));    // gathered bf16 activations [P, H]
  auto* wb13 = static_cast<uint16_t*>(dalloc(E * 2 * I * H * 2));
  auto* hb = static_cast<uint16_t*>(dalloc(P * I * 2));
  auto* wb2 = static_cast<uint16_t*>(dalloc(E * H * I * 2));
  auto* ob1 = static_cast<uint16_t*>(dalloc(P * 2 * I * 2));
  BENCH_CHECK(launch_init_uniform(xa, true, P, H, H, 11, 1.0f, s));
  BENCH_CHECK(launch_init_uniform(wb13, true, E * 2 * I, H, H, 12, 0.05f, s));
  BENCH_CHECK(launch_init_uniform(hb, true, P, I, I, 13, 1.0f, s));
  BENCH_CHECK(launch_init_uniform(wb2, true, E * H, I, I, 14, 0.05f, s));
  LtGemm lt{};
  LT_CHECK(cublasLtCreate(&lt.h));
  lt.ws = dalloc(lt.ws_bytes);

  auto grouped = [&](int64_t N, int64_t K, const uint16_t* x, const uint16_t* w, uint16_t* o) {
    std::vector<LtGemm> plans(E);
    for (int64_t e = 0; e < E; ++e) {
      plans[e].h = lt.h;
      plans[e].ws = lt.ws;
      if (counts[e] > 0) plans[e].plan(counts[e], N, K);
    }
    const double ms = time_ms(s, 2, 5, [&] {
      for (int64_t e = 0; e < E; ++e)
        if (counts[e] > 0) plans[e].run(x + offs[e] * K, w + e * N * K, o + offs[e] * N, s);
    });
    return ms;
  };
  const double c1g = grouped(2 * I, H, xa, wb13, ob1);
  const double c2g = grouped(H, I, hb, wb2, out);
  lt.plan(P, 2 * I, H);
  const double c1s = time_ms(s, 2, 7, [&] { lt.run(xa, wb13, ob1, s); });
  lt.plan(P, H, I);
  const double c2s = time_ms(s, 2, 7, [&] { lt.run(hb, wb2, out, s); });
  const double fs1 = 2.0 * P * (2 * I) * H, fs2 = 2.0 * P * H * I;  // single GEMM computes all P rows

  auto tf = [](double flops, double ms) { return flops / (ms * 1e-3) / 1e12; };
  std::printf("RESULT moe_permute ms=%.3f\n", permute_ms);
  std::printf("RESULT gemm1_fp4_fused ms=%.3f tflops=%.1f\n", g1_ms, tf(f1, g1_ms));
  std::printf("RESULT gemm2_fp4 ms=%.3f tflops=%.1f\n", g2_ms, tf(f2, g2_ms));
  std::printf("RESULT gemm1_cublas_bf16_grouped ms=%.3f tflops=%.1f\n", c1g, tf(f1, c1g));
  std::printf("RESULT gemm2_cublas_bf16_grouped ms=%.3f tflops=%.1f\n", c2g, tf(f2, c2g));
  std::printf("RESULT gemm1_cublas_bf16_single_upper_bound ms=%.3f tflops=%.1f\n", c1s, tf(fs1, c1s));
  std::printf("RESULT gemm2_cublas_bf16_single_upper_bound ms=%.3f tflops=%.1f\n", c2s, tf(fs2, c2s));
  cublasLtDestroy(lt.h);
  return 0;
}
