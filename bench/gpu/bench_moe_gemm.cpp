// FP4 grouped MoE GEMMs at Kimi-K2.5 TP=4 rank shapes: T=16384 tokens, top-8 of E=384 experts,
// gemm1 (gate+up) N=2*512, K=7168; gemm2 (down) N=7168, K=512; expert rows padded to tile=64.
// Beside it, cuBLASLt bf16 on the same shapes with pre-dequantized (bf16) weights, two ways:
//   "grouped": one cublasLtMatmul per expert over its real rows (E calls, the realistic baseline);
//   "single":  one GEMM over all P padded rows against one expert's weights (an upper bound:
//              no grouping, best-case weight reuse).
// TFLOP/s count useful FLOPs only: 2 * (T*k) * N * K (padding rows excluded).
// The FP4 kernels are timed per path (Fp4GemmPath: the default/auto choice, every tiled variant
// kTiled / kTiledSkip / kTiledStaged / kWgmma / kWgmmaWs / kWgmmaWs2 / kWgmmaPersist / kWgmmaPersistRA / kWgmmaWsRs, and kLegacy) and every path is cross-checked against the legacy
// kernel, here and on small odd shapes (empty experts, moe tiles 8/16/64, I not a multiple of the
// tile): "CHECK ..." lines, exit 1 on mismatch. kAuto = kDefaultGemm1Path / kDefaultGemm2Path (moe_gemm_fp4.cuh).
// Usage: bench_moe_gemm [T] [E] [k]
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
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


template <typename T>
std::vector<T> fetch(const T* d, size_t n) {
  std::vector<T> h(n);
  BENCH_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}
float bf16f(uint16_t b) { uint32_t u = uint32_t(b) << 16; float f; std::memcpy(&f, &u, 4); return f; }
float e2m1f(uint8_t c) {
  static const float v[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return (c & 8) ? -v[c & 7] : v[c & 7];
}
float e4m3f(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  const float v = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return s ? -v : v;
}
int g_failures = 0;
// dead rows: padding (p2t < 0) and rows >= offsets[E]; they must be exactly zero.
std::vector<char> dead_rows(const int32_t* offsets_d, const int32_t* p2t_d, int64_t P, int64_t E) {
  auto offs = fetch(offsets_d, E + 1);
  auto p2t = fetch(p2t_d, P);
  std::vector<char> dead(P);
  for (int64_t r = 0; r < P; ++r) dead[r] = r >= offs[E] || p2t[r] < 0;
  return dead;
}
void check_gemm1(const std::string& what, const std::vector<uint8_t>& rq, const std::vector<uint8_t>& rs,
                 const std::vector<uint8_t>& gq, const std::vector<uint8_t>& gs, const std::vector<char>& dead, int64_t P,
                 int64_t I) {
  size_t diff = 0, zero_bad = 0;
  double num = 0, den = 0, maxd = 0, maxr = 0;
  for (int64_t r = 0; r < P; ++r)
    for (int64_t j = 0; j < I / 2; ++j) {
      const uint8_t a = rq[r * (I / 2) + j], b = gq[r * (I / 2) + j];
      const uint8_t sa = rs[r * (I / 16) + j / 8], sb = gs[r * (I / 16) + j / 8];
      if (dead[r]) { zero_bad += (b != 0) + (j % 8 == 0 && sb != 0); continue; }
      diff += ((a & 15) != (b & 15)) + ((a >> 4) != (b >> 4));
      for (int h = 0; h < 2; ++h) {
        const double x = double(e2m1f(h ? a >> 4 : a & 15)) * e4m3f(sa), y = double(e2m1f(h ? b >> 4 : b & 15)) * e4m3f(sb);
        if (!std::isfinite(y)) { zero_bad++; continue; }
        num += (x - y) * (x - y); den += x * x; maxd = std::max(maxd, std::fabs(x - y)); maxr = std::max(maxr, std::fabs(x));
      }
    }
  const double frac = double(diff) / double(std::max<int64_t>(1, P * I)), rel = den > 0 ? std::sqrt(num / den) : 0.0;
  const bool ok = frac <= 0.02 && zero_bad == 0 && rel <= 3e-2 && maxd <= 0.35 * maxr;
  std::printf("CHECK %s: codes differ %.4f%%, dequantized rel %.3e, max %.3e of %.3e, dead-row errors %zu: %s\n",
              what.c_str(), frac * 100, rel, maxd, maxr, zero_bad, ok ? "ok" : "MISMATCH");
  g_failures += ok ? 0 : 1;
}
void check_gemm2(const std::string& what, const std::vector<uint16_t>& ref, const std::vector<uint16_t>& got,
                 const std::vector<char>& dead, int64_t P, int64_t H) {
  size_t zero_bad = 0, nonfinite = 0;
  double num = 0, den = 0, maxd = 0, maxr = 0;
  for (int64_t r = 0; r < P; ++r)
    for (int64_t n = 0; n < H; ++n) {
      const uint16_t b = got[r * H + n];
      if (dead[r]) { zero_bad += b != 0; continue; }
      const double x = bf16f(ref[r * H + n]), y = bf16f(b);
      if (!std::isfinite(y)) { ++nonfinite; continue; }
      num += (x - y) * (x - y); den += x * x; maxd = std::max(maxd, std::fabs(x - y)); maxr = std::max(maxr, std::fabs(x));
    }
  const double rel = den > 0 ? std::sqrt(num / den) : 0.0;
  const bool ok = zero_bad == 0 && nonfinite == 0 && rel <= 1e-2 && maxd <= 4e-2 * maxr;
  std::printf("CHECK %s: rel %.3e, max %.3e of %.3e, dead-row errors %zu, non-finite %zu: %s\n", what.c_str(), rel, maxd,
              maxr, zero_bad, nonfinite, ok ? "ok" : "MISMATCH");
  g_failures += ok ? 0 : 1;
}

// Runs gemm1 then gemm2 with `path` and with the legacy kernel on the same inputs and compares.
// The FP4 buffers are the caller's; outputs start as 0xAB garbage so unwritten bytes show.
struct Fp4Case {
  const uint8_t *a, *a_s, *w13, *w13_s, *w2, *w2_s;
  const float* gs;
  const int32_t *offsets, *p2t;
  int64_t P, E, H, I;
};
const std::pair<const char*, Fp4GemmPath> kTiledPaths[] = {
    {"[tiled]", Fp4GemmPath::kTiled}, {"[tiled_skip]", Fp4GemmPath::kTiledSkip}, {"[tiled_staged]", Fp4GemmPath::kTiledStaged},
    {"[wgmma]", Fp4GemmPath::kWgmma}, {"[wgmma_ws]", Fp4GemmPath::kWgmmaWs},
    {"[wgmma_ws2]", Fp4GemmPath::kWgmmaWs2}, {"[wgmma_persist]", Fp4GemmPath::kWgmmaPersist},
    {"[wgmma_persist_ra]", Fp4GemmPath::kWgmmaPersistRA}, {"[wgmma_ws_rs]", Fp4GemmPath::kWgmmaWsRs}};
constexpr int kNumTiled = static_cast<int>(sizeof(kTiledPaths) / sizeof(kTiledPaths[0]));

// tiled: the checked path's GEMMs read tiled copies of the weights (packed here) where the path
// reads that layout and the device supports it: gemm1 kGemm1Tiled w13 (kAuto, kWgmmaWsRs,
// kWgmmaPersist), gemm2 kGemm2Tiled w2 (kAuto, kWgmmaPersist, kWgmmaPersistRA).
void cross_check(const std::string& name, const Fp4Case& c, Fp4GemmPath path, cudaStream_t s, bool tiled = false) {
  const int64_t P = c.P, H = c.H, I = c.I;
  const bool t1 = tiled &&
                  (path == Fp4GemmPath::kAuto || path == Fp4GemmPath::kWgmmaWsRs || path == Fp4GemmPath::kWgmmaPersist) &&
                  gemm1_tiled_supported(H, I);
  const bool t2 = tiled &&
                  (path == Fp4GemmPath::kAuto || path == Fp4GemmPath::kWgmmaPersist || path == Fp4GemmPath::kWgmmaPersistRA) &&
                  gemm2_tiled_supported(I, H);
  uint8_t *wt = nullptr, *wt_s = nullptr, *w2t = nullptr, *w2t_s = nullptr;
  if (t1) {
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&wt), c.E * 2 * I * H / 2));
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&wt_s), c.E * 2 * I * H / 16));
    BENCH_CHECK(launch_pack_gemm1_weights_tiled(c.w13, H / 2, c.w13_s, H / 16, c.E, H, I, wt, wt_s, s));
  }
  if (t2) {
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&w2t), c.E * H * I / 2));
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&w2t_s), c.E * H * I / 16));
    BENCH_CHECK(launch_pack_gemm2_weights_tiled(c.w2, I / 2, c.w2_s, I / 16, c.E, I, H, w2t, w2t_s, s));
  }
  uint8_t *hq[2], *hs[2];
  uint16_t* o[2];
  for (int v = 0; v < 2; ++v) {
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&hq[v]), P * I / 2));
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&hs[v]), P * I / 16));
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&o[v]), P * H * 2));
    BENCH_CHECK(cudaMemsetAsync(hq[v], 0xAB, P * I / 2, s));
    BENCH_CHECK(cudaMemsetAsync(hs[v], 0xAB, P * I / 16, s));
    BENCH_CHECK(cudaMemsetAsync(o[v], 0xAB, P * H * 2, s));
  }
  const Fp4GemmPath paths[2] = {Fp4GemmPath::kLegacy, path};
  for (int v = 0; v < 2; ++v) {
    const bool t = t1 && v == 1;
    BENCH_CHECK(launch_moe_gemm1_fp4(c.a, H / 2, c.a_s, H / 16, 0.05f, t ? wt : c.w13, H / 2, t ? wt_s : c.w13_s, H / 16,
                                     c.gs, c.offsets, c.p2t, P, c.E, H, I, 0.02f, hq[v], I / 2, hs[v], I / 16, s,
                                     paths[v], t ? Fp4WeightLayout::kGemm1Tiled : Fp4WeightLayout::kRowMajor));
  }
  // gemm2 of both paths on the legacy gemm1 output
  for (int v = 0; v < 2; ++v) {
    const bool t = t2 && v == 1;
    BENCH_CHECK(launch_moe_gemm2_fp4(hq[0], I / 2, hs[0], I / 16, 0.02f, t ? w2t : c.w2, I / 2, t ? w2t_s : c.w2_s, I / 16,
                                     c.gs, c.offsets, c.p2t, P, c.E, I, H, o[v], H, s, paths[v],
                                     t ? Fp4WeightLayout::kGemm2Tiled : Fp4WeightLayout::kRowMajor));
  }
  BENCH_CHECK(cudaStreamSynchronize(s));
  const auto dead = dead_rows(c.offsets, c.p2t, P, c.E);
  check_gemm1(name + " gemm1", fetch(hq[0], P * I / 2), fetch(hs[0], P * I / 16), fetch(hq[1], P * I / 2),
              fetch(hs[1], P * I / 16), dead, P, I);
  check_gemm2(name + " gemm2", fetch(o[0], P * H), fetch(o[1], P * H), dead, P, H);
  for (int v = 0; v < 2; ++v) {
    BENCH_CHECK(cudaFree(hq[v])); BENCH_CHECK(cudaFree(hs[v])); BENCH_CHECK(cudaFree(o[v]));
  }
  for (uint8_t* b : {wt, wt_s, w2t, w2t_s})
    if (b) BENCH_CHECK(cudaFree(b));
}

// A small routed case with its own data: T tokens, top-k of E experts (random ids, some experts
// empty when E is large), moe tile `tile`.
void odd_case(int64_t T, int64_t k, int64_t E, int64_t H, int64_t I, int64_t tile, uint64_t seed, cudaStream_t s) {
  const int64_t N_rows = T * k, P = N_rows + E * (tile - 1);
  std::vector<void*> bufs;
  auto dalloc = [&](size_t bytes) { void* p = nullptr; BENCH_CHECK(cudaMalloc(&p, bytes)); bufs.push_back(p); return p; };
  auto* ids = static_cast<int32_t*>(dalloc(N_rows * 4));
  auto* offsets = static_cast<int32_t*>(dalloc((E + 1) * 4));
  auto* p2t = static_cast<int32_t*>(dalloc(P * 4));
  auto* e2p = static_cast<int32_t*>(dalloc(N_rows * 4));
  BENCH_CHECK(launch_init_ints(ids, 1, N_rows, N_rows, seed, 0, static_cast<int32_t>(E - 1), s));  // expert E-1 empty
  size_t ws_bytes = 0;
  BENCH_CHECK(moe_permute_workspace_bytes(N_rows, E, &ws_bytes));
  void* ws = dalloc(ws_bytes);
  BENCH_CHECK(launch_moe_permute(ids, N_rows, k, E, tile, offsets, p2t, P, e2p, ws, ws_bytes, s));
  Fp4Case c{};
  auto* a = static_cast<uint8_t*>(dalloc(T * H / 2));
  auto* a_s = static_cast<uint8_t*>(dalloc(T * H / 16));
  auto* w13 = static_cast<uint8_t*>(dalloc(E * 2 * I * H / 2));
  auto* w13_s = static_cast<uint8_t*>(dalloc(E * 2 * I * H / 16));
  auto* w2 = static_cast<uint8_t*>(dalloc(E * H * I / 2));
  auto* w2_s = static_cast<uint8_t*>(dalloc(E * H * I / 16));
  auto* gs = static_cast<float*>(dalloc(E * 4));
  BENCH_CHECK(launch_init_bytes(a, T, H / 2, H / 2, seed + 1, s));
  BENCH_CHECK(launch_init_e4m3(a_s, T, H / 16, H / 16, seed + 2, 0.05f, 1.0f, s));
  BENCH_CHECK(launch_init_bytes(w13, E * 2 * I, H / 2, H / 2, seed + 3, s));
  BENCH_CHECK(launch_init_e4m3(w13_s, E * 2 * I, H / 16, H / 16, seed + 4, 0.05f, 1.0f, s));
  BENCH_CHECK(launch_init_bytes(w2, E * H, I / 2, I / 2, seed + 5, s));
  BENCH_CHECK(launch_init_e4m3(w2_s, E * H, I / 16, I / 16, seed + 6, 0.05f, 1.0f, s));
  BENCH_CHECK(launch_init_uniform(gs, false, 1, E, E, seed + 7, 0.01f, s));
  c.a = a; c.a_s = a_s; c.w13 = w13; c.w13_s = w13_s; c.w2 = w2; c.w2_s = w2_s; c.gs = gs;
  c.offsets = offsets; c.p2t = p2t; c.P = P; c.E = E; c.H = H; c.I = I;
  char name[160];
  std::snprintf(name, sizeof name, "tiled vs legacy T=%lld k=%lld E=%lld H=%lld I=%lld tile=%lld", (long long)T,
                (long long)k, (long long)E, (long long)H, (long long)I, (long long)tile);
  for (const auto& [tag, path] : kTiledPaths) cross_check(std::string(tag) + " " + name, c, path, s);
  if (gemm1_tiled_supported(H, I) || gemm2_tiled_supported(I, H)) {
    cross_check(std::string("[auto tiled-w]") + " " + name, c, Fp4GemmPath::kAuto, s, true);
    cross_check(std::string("[wgmma_persist tiled-w]") + " " + name, c, Fp4GemmPath::kWgmmaPersist, s, true);
  }
  for (void* p : bufs) BENCH_CHECK(cudaFree(p));
}
}  // namespace

int main(int argc, char** argv) {
  if (!have_gpu()) return 0;
  const int64_t T = argc > 1 ? std::atoll(argv[1]) : 16384;
  const int64_t E = argc > 2 ? std::atoll(argv[2]) : 384;
  const int64_t k = argc > 3 ? std::atoll(argv[3]) : 8;
  if (T <= 0 || E <= 0 || k <= 0) {
    std::fprintf(stderr, "bench_moe_gemm: T, E and k must be positive\n");
    return 2;
  }
  // MOEPROF_BENCH_H: another hidden size (a multiple of 256; e.g. to split a kernel's time into a
  // per-K-step part and a fixed part per tile by timing two K).
  const int64_t H = [] {
    const char* h = std::getenv("MOEPROF_BENCH_H");
    const long long v = h && *h ? std::atoll(h) : 7168;
    if (v <= 0 || v % 256 != 0) {
      std::fprintf(stderr, "bench_moe_gemm: MOEPROF_BENCH_H must be a positive multiple of 256 (got %s)\n", h);
      std::exit(2);
    }
    return static_cast<int64_t>(v);
  }();
  const int64_t I = 512, tile = 64;
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
  // MOEPROF_BENCH_ZIPF=<s> (s > 0): routed rows drawn with P(expert of rank r) ~ 1 / (r + 1)^s over a
  // fixed random order of the experts, instead of uniformly: skewed expert loads like a real
  // router's, for the GEMMs' cost of partly filled row tiles (docs/performance.md).
  const double zipf = [] {
    const char* z = std::getenv("MOEPROF_BENCH_ZIPF");
    const double v = z && *z ? std::atof(z) : 0.0;
    if (!(v >= 0.0 && v <= 8.0)) {
      std::fprintf(stderr, "bench_moe_gemm: MOEPROF_BENCH_ZIPF must be in [0, 8] (got %s)\n", z);
      std::exit(2);
    }
    return v;
  }();
  if (zipf > 0.0) {
    std::vector<int32_t> order(E);
    for (int64_t e = 0; e < E; ++e) order[e] = static_cast<int32_t>(e);
    std::mt19937_64 rng(7);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<double> cdf(E);
    double acc = 0.0;
    for (int64_t r = 0; r < E; ++r) cdf[r] = acc += 1.0 / std::pow(static_cast<double>(r + 1), zipf);
    std::uniform_real_distribution<double> u(0.0, acc);
    std::vector<int32_t> zids(N_rows);
    for (auto& id : zids) {
      const int64_t r = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
      id = order[std::min<int64_t>(r, E - 1)];
    }
    BENCH_CHECK(cudaMemcpy(ids, zids.data(), N_rows * 4, cudaMemcpyHostToDevice));
  } else {
    BENCH_CHECK(launch_init_ints(ids, 1, N_rows, N_rows, 7, 0, static_cast<int32_t>(E), s));
  }
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
  {
    // The routing's cost to the grouped GEMMs: each expert's rows padded to the tile (64), then cut
    // into the kernels' 128-row tiles, every tile costing a full pass over K.
    std::vector<int64_t> sorted = counts;
    std::sort(sorted.begin(), sorted.end());
    int64_t tiles = 0, used = 0;
    for (int64_t c : counts) {
      tiles += ((c + tile - 1) / tile * tile + 127) / 128;
      used += c > 0;
    }
    char how[32] = " (uniform)";
    if (zipf > 0.0) std::snprintf(how, sizeof how, " (zipf %.2f)", zipf);
    std::printf("routing%s: rows per expert min %lld median %lld max %lld, %lld experts used, %lld row tiles of 128 "
                "(%.1f%% above the %lld of a perfect packing)\n",
                how,
                static_cast<long long>(sorted.front()), static_cast<long long>(sorted[E / 2]),
                static_cast<long long>(sorted.back()), static_cast<long long>(used), static_cast<long long>(tiles),
                100.0 * (static_cast<double>(tiles) / static_cast<double>((N_rows + 127) / 128) - 1.0),
                static_cast<long long>((N_rows + 127) / 128));
  }

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
  // The executor's layout for gemm1's weights where the device supports it (CudaBackend stores w13
  // tiled then): a packed copy, timed as the headline kAuto figure; the row-major kAuto as _rowmajor.
  const bool tiled_w = gemm1_tiled_supported(H, I);
  uint8_t *w13t = nullptr, *w13t_s = nullptr;
  if (tiled_w) {
    w13t = static_cast<uint8_t*>(dalloc(E * 2 * I * H / 2));
    w13t_s = static_cast<uint8_t*>(dalloc(E * 2 * I * H / 16));
    BENCH_CHECK(launch_pack_gemm1_weights_tiled(w13, H / 2, w13_s, H / 16, E, H, I, w13t, w13t_s, s));
  }
  const bool tiled_w2 = gemm2_tiled_supported(I, H);  // the same for gemm2's w2
  uint8_t *w2t = nullptr, *w2t_s = nullptr;
  if (tiled_w2) {
    w2t = static_cast<uint8_t*>(dalloc(E * H * I / 2));
    w2t_s = static_cast<uint8_t*>(dalloc(E * H * I / 16));
    BENCH_CHECK(launch_pack_gemm2_weights_tiled(w2, I / 2, w2_s, I / 16, E, I, H, w2t, w2t_s, s));
  }

  // MOEPROF_BENCH_PROFILE=1: one launch of each default-path GEMM and nothing else (for ncu:
  // `ncu -k regex:"(^|:)(tiled|persist|persist_rs)_kernel" -c 2 bench_moe_gemm`, scripts/device_all.sh step ncu).
  if (const char* prof = std::getenv("MOEPROF_BENCH_PROFILE"); prof && *prof && *prof != '0') {
    // MOEPROF_BENCH_PROFILE=<path number> profiles that Fp4GemmPath instead of kAuto (1 = kAuto too).
    const int pv = std::atoi(prof);
    // (kAuto profiles gemm1 on the tiled weights where the device supports them.)
    const Fp4GemmPath path = pv > 1 ? static_cast<Fp4GemmPath>(pv) : Fp4GemmPath::kAuto;
    const bool t = tiled_w && path == Fp4GemmPath::kAuto, t2 = tiled_w2 && path == Fp4GemmPath::kAuto;
    BENCH_CHECK(launch_moe_gemm1_fp4(a, H / 2, a_s, H / 16, 0.05f, t ? w13t : w13, H / 2, t ? w13t_s : w13_s, H / 16, gs,
                                     offsets, p2t, P, E, H, I, 0.02f, h, I / 2, h_s, I / 16, s, path,
                                     t ? Fp4WeightLayout::kGemm1Tiled : Fp4WeightLayout::kRowMajor));
    BENCH_CHECK(launch_moe_gemm2_fp4(h, I / 2, h_s, I / 16, 0.02f, t2 ? w2t : w2, I / 2, t2 ? w2t_s : w2_s, I / 16, gs,
                                     offsets, p2t, P, E, I, H, out, H, s, path,
                                     t2 ? Fp4WeightLayout::kGemm2Tiled : Fp4WeightLayout::kRowMajor));
    BENCH_CHECK(cudaStreamSynchronize(s));
    std::printf("profile launches done\n");
    return 0;
  }
  // MOEPROF_BENCH_QUICK=1: no cross-checks, only the default and the wgmma paths timed (for trying
  // kernel variants; the numbers in docs/performance.md come from full runs).
  const bool quick = [] { const char* q = std::getenv("MOEPROF_BENCH_QUICK"); return q && *q && *q != '0'; }();
  // Correctness first: every path against the legacy kernel, at odd shapes and at the bench shape.
  if (!quick) {
    odd_case(257, 6, 8, 7168, 256, 64, 900, s);
    odd_case(37, 2, 5, 2048, 512, 16, 910, s);
    odd_case(129, 4, 16, 1024, 192, 8, 920, s);
    odd_case(300, 8, 64, 512, 1088, 64, 930, s);
    odd_case(300, 8, 64, 832, 192, 8, 940, s);  // gemm2 N = 832: a partial 256-column tile
    odd_case(211, 8, 40, 832, 256, 16, 950, s);  // the same with K = 256 (4 k steps)
    Fp4Case main_case{a, a_s, w13, w13_s, w2, w2_s, gs, offsets, p2t, P, E, H, I};
    for (const auto& [tag, path] : kTiledPaths) cross_check(std::string(tag) + " tiled vs legacy (bench shape)", main_case, path, s);
    cross_check("auto vs legacy (bench shape)", main_case, Fp4GemmPath::kAuto, s);
    if (tiled_w || tiled_w2) {
      cross_check("auto tiled-w vs legacy (bench shape)", main_case, Fp4GemmPath::kAuto, s, true);
      cross_check("wgmma_persist tiled-w vs legacy (bench shape)", main_case, Fp4GemmPath::kWgmmaPersist, s, true);
    }
  }

  auto g1 = [&](Fp4GemmPath path, bool t = false) {
    return time_ms(s, 2, 7, [&] {
      BENCH_CHECK(launch_moe_gemm1_fp4(a, H / 2, a_s, H / 16, 0.05f, t ? w13t : w13, H / 2, t ? w13t_s : w13_s, H / 16,
                                       gs, offsets, p2t, P, E, H, I, 0.02f, h, I / 2, h_s, I / 16, s, path,
                                       t ? Fp4WeightLayout::kGemm1Tiled : Fp4WeightLayout::kRowMajor));
    });
  };
  auto g2 = [&](Fp4GemmPath path, bool t = false) {
    return time_ms(s, 2, 7, [&] {
      BENCH_CHECK(launch_moe_gemm2_fp4(h, I / 2, h_s, I / 16, 0.02f, t ? w2t : w2, I / 2, t ? w2t_s : w2_s, I / 16, gs,
                                       offsets, p2t, P, E, I, H, out, H, s, path,
                                       t ? Fp4WeightLayout::kGemm2Tiled : Fp4WeightLayout::kRowMajor));
    });
  };
  // MOEPROF_BENCH_AB=1: the two gemm1 kernels on tiled w13 (kWgmmaWsRs, kWgmmaPersist), 6 rounds in
  // ABBA order (the GPU's clock drifts over a run: back-to-back figures of one kernel differ by
  // several percent), each round's times and the medians.
  if (const char* ab = std::getenv("MOEPROF_BENCH_AB"); ab && *ab && *ab != '0' && tiled_w) {
    std::vector<double> ta, tb;
    for (int round = 0; round < 6; ++round) {
      const bool a_first = round % 4 == 0 || round % 4 == 3;
      double x = 0.0, y = 0.0;
      if (a_first) {
        x = g1(Fp4GemmPath::kWgmmaWsRs, true);
        y = g1(Fp4GemmPath::kWgmmaPersist, true);
      } else {
        y = g1(Fp4GemmPath::kWgmmaPersist, true);
        x = g1(Fp4GemmPath::kWgmmaWsRs, true);
      }
      ta.push_back(x);
      tb.push_back(y);
      std::printf("AB round %d: kWgmmaWsRs %.3f ms  kWgmmaPersist %.3f ms\n", round, x, y);
    }
    std::sort(ta.begin(), ta.end());
    std::sort(tb.begin(), tb.end());
    std::printf("AB H=%lld median: kWgmmaWsRs %.3f ms  kWgmmaPersist %.3f ms\n", static_cast<long long>(H),
                (ta[2] + ta[3]) / 2, (tb[2] + tb[3]) / 2);
    return 0;
  }
  if (quick) {
    const double f1q = 2.0 * N_rows * (2 * I) * H, f2q = 2.0 * N_rows * H * I;
    if (tiled_w) {
      const double a1 = g1(Fp4GemmPath::kAuto, true), p1 = g1(Fp4GemmPath::kWgmmaPersist, true),
                   r1 = g1(Fp4GemmPath::kWgmmaWsRs, true);
      std::printf("QUICK %-16s gemm1 %.3f ms %.1f TFLOP/s  (kWgmmaPersist tiled-w %.3f ms, kWgmmaWsRs tiled-w %.3f ms)\n",
                  "[tiled-w auto]", a1, f1q / (a1 * 1e-3) / 1e12, p1, r1);
    }
    if (tiled_w2) {
      const double a2 = g2(Fp4GemmPath::kAuto, true), p2 = g2(Fp4GemmPath::kWgmmaPersist, true);
      std::printf("QUICK %-16s gemm2 %.3f ms %.1f TFLOP/s  (kWgmmaPersist tiled-w %.3f ms)\n", "[tiled-w auto]", a2,
                  f2q / (a2 * 1e-3) / 1e12, p2);
    }
    for (int v = 0; v < kNumTiled; ++v) {
      if (static_cast<int>(kTiledPaths[v].second) < static_cast<int>(Fp4GemmPath::kWgmmaWs)) continue;
      const double a1 = g1(kTiledPaths[v].second), a2 = g2(kTiledPaths[v].second);
      std::printf("QUICK %-16s gemm1 %.3f ms %.1f TFLOP/s  gemm2 %.3f ms %.1f TFLOP/s\n", kTiledPaths[v].first, a1,
                  f1q / (a1 * 1e-3) / 1e12, a2, f2q / (a2 * 1e-3) / 1e12);
    }
    return 0;
  }
  const double g1_legacy = g1(Fp4GemmPath::kLegacy), g1_ms = g1(Fp4GemmPath::kAuto, tiled_w);
  const double g1_rowmajor = tiled_w ? g1(Fp4GemmPath::kAuto) : g1_ms;
  // The two gemm1 kernels that read tiled w13 (kAuto runs one of them).
  const double g1_t_rs = tiled_w ? g1(Fp4GemmPath::kWgmmaWsRs, true) : 0.0;
  const double g1_t_persist = tiled_w ? g1(Fp4GemmPath::kWgmmaPersist, true) : 0.0;
  const double g2_legacy = g2(Fp4GemmPath::kLegacy), g2_ms = g2(Fp4GemmPath::kAuto, tiled_w2);
  const double g2_rowmajor = tiled_w2 ? g2(Fp4GemmPath::kAuto) : g2_ms;
  const char* const kVarNames[kNumTiled] = {"tiled", "tiled_skip", "tiled_staged", "wgmma", "wgmma_ws", "wgmma_ws2", "wgmma_persist",
                                            "wgmma_persist_ra", "wgmma_ws_rs"};
  double g1_var[kNumTiled], g2_var[kNumTiled];
  for (int v = 0; v < kNumTiled; ++v) {
    g1_var[v] = g1(kTiledPaths[v].second);
    g2_var[v] = g2(kTiledPaths[v].second);
  }
  const double f1 = 2.0 * N_rows * (2 * I) * H, f2 = 2.0 * N_rows * H * I;

  // cuBLASLt bf16 baselines (weights pre-dequantized; values are random bf16: timing only).
  BENCH_CHECK(cudaFree(w13)); BENCH_CHECK(cudaFree(w2));
  for (uint8_t* b : {w13t, w13t_s, w2t, w2t_s})
    if (b) BENCH_CHECK(cudaFree(b));
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
  std::printf("INFO gemm1 weight layout (kAuto, as CudaBackend stores w13) = %s\n", tiled_w ? "kGemm1Tiled" : "kRowMajor");
  std::printf("RESULT gemm1_fp4_fused_rowmajor ms=%.3f tflops=%.1f\n", g1_rowmajor, tf(f1, g1_rowmajor));
  if (tiled_w) {
    std::printf("RESULT gemm1_fp4_fused_tiled_w_wgmma_ws_rs ms=%.3f tflops=%.1f\n", g1_t_rs, tf(f1, g1_t_rs));
    std::printf("RESULT gemm1_fp4_fused_tiled_w_wgmma_persist ms=%.3f tflops=%.1f\n", g1_t_persist, tf(f1, g1_t_persist));
  }
  std::printf("RESULT gemm2_fp4 ms=%.3f tflops=%.1f\n", g2_ms, tf(f2, g2_ms));
  std::printf("INFO gemm2 weight layout (kAuto, as CudaBackend stores w2) = %s\n", tiled_w2 ? "kGemm2Tiled" : "kRowMajor");
  std::printf("RESULT gemm2_fp4_rowmajor ms=%.3f tflops=%.1f\n", g2_rowmajor, tf(f2, g2_rowmajor));
  std::printf("INFO default tiled paths (kAuto) = Fp4GemmPath %d (gemm1), %d (gemm2)\n", static_cast<int>(kDefaultGemm1Path),
              static_cast<int>(kDefaultGemm2Path));
  for (int v = 0; v < kNumTiled; ++v)
    std::printf("RESULT gemm1_fp4_fused_%s ms=%.3f tflops=%.1f\n", kVarNames[v], g1_var[v], tf(f1, g1_var[v]));
  std::printf("RESULT gemm1_fp4_fused_legacy ms=%.3f tflops=%.1f\n", g1_legacy, tf(f1, g1_legacy));
  for (int v = 0; v < kNumTiled; ++v)
    std::printf("RESULT gemm2_fp4_%s ms=%.3f tflops=%.1f\n", kVarNames[v], g2_var[v], tf(f2, g2_var[v]));
  std::printf("RESULT gemm2_fp4_legacy ms=%.3f tflops=%.1f\n", g2_legacy, tf(f2, g2_legacy));
  std::printf("RESULT gemm1_cublas_bf16_grouped ms=%.3f tflops=%.1f\n", c1g, tf(f1, c1g));
  std::printf("RESULT gemm2_cublas_bf16_grouped ms=%.3f tflops=%.1f\n", c2g, tf(f2, c2g));
  std::printf("RESULT gemm1_cublas_bf16_single_upper_bound ms=%.3f tflops=%.1f\n", c1s, tf(fs1, c1s));
  std::printf("RESULT gemm2_cublas_bf16_single_upper_bound ms=%.3f tflops=%.1f\n", c2s, tf(fs2, c2s));
  cublasLtDestroy(lt.h);
  if (g_failures) {
    std::printf("CHECK summary: %d mismatches\n", g_failures);
    return 1;
  }
  std::printf("CHECK summary: all ok\n");
  return 0;
}
