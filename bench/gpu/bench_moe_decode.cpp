// The grouped FP4 expert GEMMs at decode batch sizes, Kimi-K2.5 TP=4 rank shapes (H = 7168, I = 512,
// E = 384 routed experts, top-8): what a decode step spends in its MoE layers.
// For each batch T (default 1 8 32 64 128 256 512): uniform routing (k distinct experts per token,
// fixed seed), expert rows padded to the executor's tile (moe_tile_rows: 8 up to 8 rows per expert
// on average, then 16, 32, 64), the weights in the executor's tiled layouts where the device reads
// them. Timed (median of 9): gemm1 and gemm2 by kSmallM (the decode form), by the 128-row-tile
// paths kAuto ran before it (gemm1 kWgmmaPersist, gemm2 kWgmmaPersistRA, on the tiled weights) and
// by kAuto now. The floor is the bytes of the experts the batch hits (codes + scales of w13 / w2)
// read once at the device's copy bandwidth (a 1 GiB device-to-device copy, read + write).
// Checks (exit 1 on failure): kSmallM on tiled weights gives the same bits as on row-major weights
// (same arithmetic), and agrees with kLegacy (gemm1: at most 2% of the FP4 codes differ; gemm2:
// relative L2 error at most 1e-2 on the live rows).
// usage: bench_moe_decode [T ...]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "bench/gpu/bench_util.h"
#include "kernels/common/fp_formats.h"
#include "kernels/init.cuh"
#include "kernels/moe_gemm_fp4.cuh"
#include "kernels/moe_permute.cuh"

using namespace moeprof::kern;

namespace {

// The executor's padding tile (src/model/config.cpp, moe_tile_rows): the power of two >= the
// average rows per expert, from 8 to 64.
int64_t tile_rows(int64_t T, int64_t k, int64_t E) {
  const int64_t per = T * k / E;
  int64_t p2 = 8;
  while (p2 < per && p2 < 64) p2 <<= 1;
  return p2;
}

template <class T>
std::vector<T> fetch(const void* d, size_t n) {
  std::vector<T> v(n);
  BENCH_CHECK(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (!have_gpu()) return 0;
  const int64_t H = 7168, I = 512, E = 384, k = 8;
  std::vector<int64_t> batches = {1, 8, 32, 64, 128, 256, 512};
  if (argc > 1) {
    batches.clear();
    for (int i = 1; i < argc; ++i) batches.push_back(std::atoll(argv[i]));
  }
  const int64_t Tmax = *std::max_element(batches.begin(), batches.end());
  cudaStream_t s;
  BENCH_CHECK(cudaStreamCreate(&s));
  std::vector<void*> bufs;
  auto dalloc = [&](size_t bytes) { void* p = nullptr; BENCH_CHECK(cudaMalloc(&p, bytes)); bufs.push_back(p); return p; };

  double hbm_gbps = 0.0;
  {
    const size_t big = size_t{1} << 30;
    void* x = dalloc(big);
    void* y = dalloc(big);
    BENCH_CHECK(cudaMemset(x, 1, big));
    const double copy_ms = time_ms(s, 2, 10, [&] { BENCH_CHECK(cudaMemcpyAsync(y, x, big, cudaMemcpyDeviceToDevice, s)); });
    hbm_gbps = 2.0 * double(big) / (copy_ms * 1e-3) / 1e9;
    std::printf("copy bandwidth: %.0f GB/s (1 GiB device to device, read + write)\n", hbm_gbps);
  }

  auto* w13 = static_cast<uint8_t*>(dalloc(E * 2 * I * H / 2));
  auto* w13_s = static_cast<uint8_t*>(dalloc(E * 2 * I * H / 16));
  auto* w2 = static_cast<uint8_t*>(dalloc(E * H * I / 2));
  auto* w2_s = static_cast<uint8_t*>(dalloc(E * H * I / 16));
  auto* gs1 = static_cast<float*>(dalloc(E * 4));
  auto* gs2 = static_cast<float*>(dalloc(E * 4));
  BENCH_CHECK(launch_init_bytes(w13, E * 2 * I, H / 2, H / 2, 3, s));
  BENCH_CHECK(launch_init_e4m3(w13_s, E * 2 * I, H / 16, H / 16, 4, 0.05f, 1.0f, s));
  BENCH_CHECK(launch_init_bytes(w2, E * H, I / 2, I / 2, 5, s));
  BENCH_CHECK(launch_init_e4m3(w2_s, E * H, I / 16, I / 16, 6, 0.05f, 1.0f, s));
  // gate/up around O(1) (a_gs 0.05, sums of 7168 products), the outputs O(1).
  BENCH_CHECK(launch_init_uniform(gs1, false, 1, E, E, 8, 0.5f / (84.7f * 0.05f), s));
  BENCH_CHECK(launch_init_uniform(gs2, false, 1, E, E, 9, 0.02f, s));
  const bool t1 = gemm1_tiled_supported(H, I), t2 = gemm2_tiled_supported(I, H);
  uint8_t *w13t = w13, *w13t_s = w13_s, *w2t = w2, *w2t_s = w2_s;
  if (t1) {
    w13t = static_cast<uint8_t*>(dalloc(E * 2 * I * H / 2));
    w13t_s = static_cast<uint8_t*>(dalloc(E * 2 * I * H / 16));
    BENCH_CHECK(launch_pack_gemm1_weights_tiled(w13, H / 2, w13_s, H / 16, E, H, I, w13t, w13t_s, s));
  }
  if (t2) {
    w2t = static_cast<uint8_t*>(dalloc(E * H * I / 2));
    w2t_s = static_cast<uint8_t*>(dalloc(E * H * I / 16));
    BENCH_CHECK(launch_pack_gemm2_weights_tiled(w2, I / 2, w2_s, I / 16, E, I, H, w2t, w2t_s, s));
  }
  const auto L1 = t1 ? Fp4WeightLayout::kGemm1Tiled : Fp4WeightLayout::kRowMajor;
  const auto L2 = t2 ? Fp4WeightLayout::kGemm2Tiled : Fp4WeightLayout::kRowMajor;
  std::printf("weights: %s gemm1, %s gemm2\n", t1 ? "tiled" : "row-major", t2 ? "tiled" : "row-major");

  const int64_t Pmax = Tmax * k + E * 63;
  auto* a = static_cast<uint8_t*>(dalloc(Tmax * H / 2));
  auto* a_s = static_cast<uint8_t*>(dalloc(Tmax * H / 16));
  BENCH_CHECK(launch_init_bytes(a, Tmax, H / 2, H / 2, 1, s));
  BENCH_CHECK(launch_init_e4m3(a_s, Tmax, H / 16, H / 16, 2, 0.05f, 1.0f, s));
  auto* ids = static_cast<int32_t*>(dalloc(Tmax * k * 4));
  auto* offsets = static_cast<int32_t*>(dalloc((E + 1) * 4));
  auto* p2t = static_cast<int32_t*>(dalloc(Pmax * 4));
  auto* e2p = static_cast<int32_t*>(dalloc(Tmax * k * 4));
  auto* h = static_cast<uint8_t*>(dalloc(Pmax * I / 2));
  auto* h_s = static_cast<uint8_t*>(dalloc(Pmax * I / 16));
  auto* h2 = static_cast<uint8_t*>(dalloc(Pmax * I / 2));
  auto* h2_s = static_cast<uint8_t*>(dalloc(Pmax * I / 16));
  auto* out = static_cast<uint16_t*>(dalloc(Pmax * H * 2));
  auto* out2 = static_cast<uint16_t*>(dalloc(Pmax * H * 2));
  size_t ws_bytes = 0;
  BENCH_CHECK(moe_permute_workspace_bytes(Tmax * k, E, &ws_bytes));
  void* ws = dalloc(ws_bytes);

  const double w1_bytes = double(2 * I) * (H / 2 + H / 16), w2_bytes = double(H) * (I / 2 + I / 16);  // per expert
  bool ok = true;
  std::printf("%5s %5s %6s %5s | %9s %9s %9s %6s | %9s %9s %9s %6s | %s\n", "T", "tile", "P", "hit", "g1 small", "g1 128",
              "g1 floor", "small%", "g2 small", "g2 128", "g2 floor", "small%", "auto g1+g2");
  for (const int64_t T : batches) {
    const int64_t tile = tile_rows(T, k, E), N = T * k, P = N + E * (tile - 1);
    std::mt19937 rng(static_cast<unsigned>(1000 + T));
    std::vector<int32_t> hid(N);
    std::vector<int32_t> perm(E);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t e = 0; e < E; ++e) perm[e] = static_cast<int32_t>(e);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int64_t j = 0; j < k; ++j) hid[t * k + j] = perm[j];
    }
    std::vector<bool> hit(E, false);
    for (int32_t e : hid) hit[e] = true;
    const int64_t nhit = std::count(hit.begin(), hit.end(), true);
    BENCH_CHECK(cudaMemcpy(ids, hid.data(), N * 4, cudaMemcpyHostToDevice));
    BENCH_CHECK(launch_moe_permute(ids, N, k, E, tile, offsets, p2t, P, e2p, ws, ws_bytes, s));

    auto g1 = [&](Fp4GemmPath path, bool tiled, uint8_t* o, uint8_t* os) {
      return launch_moe_gemm1_fp4(a, H / 2, a_s, H / 16, 0.05f, tiled ? w13t : w13, H / 2, tiled ? w13t_s : w13_s, H / 16,
                                  gs1, offsets, p2t, P, E, H, I, 0.02f, o, I / 2, os, I / 16, s, path,
                                  tiled ? L1 : Fp4WeightLayout::kRowMajor);
    };
    auto g2 = [&](Fp4GemmPath path, bool tiled, uint16_t* o) {
      return launch_moe_gemm2_fp4(h, I / 2, h_s, I / 16, 0.02f, tiled ? w2t : w2, I / 2, tiled ? w2t_s : w2_s, I / 16, gs2,
                                  offsets, p2t, P, E, I, H, o, H, s, path, tiled ? L2 : Fp4WeightLayout::kRowMajor);
    };
    // Checks: kLegacy's h feeds both gemm2s; kSmallM tiled == row-major bit for bit; vs kLegacy.
    BENCH_CHECK(g1(Fp4GemmPath::kLegacy, false, h, h_s));
    BENCH_CHECK(g1(Fp4GemmPath::kSmallM, true, h2, h2_s));
    BENCH_CHECK(cudaStreamSynchronize(s));
    const auto hl = fetch<uint8_t>(h, P * I / 2), hsm = fetch<uint8_t>(h2, P * I / 2);
    const auto hls = fetch<uint8_t>(h_s, P * I / 16), hsms = fetch<uint8_t>(h2_s, P * I / 16);
    BENCH_CHECK(g1(Fp4GemmPath::kSmallM, false, h2, h2_s));
    BENCH_CHECK(cudaStreamSynchronize(s));
    const bool same1 = fetch<uint8_t>(h2, P * I / 2) == hsm && fetch<uint8_t>(h2_s, P * I / 16) == hsms;
    size_t diff = 0;
    for (size_t i = 0; i < hl.size(); ++i) diff += ((hl[i] ^ hsm[i]) & 0xF) != 0, diff += ((hl[i] ^ hsm[i]) >> 4) != 0;
    const double frac1 = double(diff) / double(2 * hl.size());
    BENCH_CHECK(g2(Fp4GemmPath::kLegacy, false, out));
    BENCH_CHECK(g2(Fp4GemmPath::kSmallM, true, out2));
    BENCH_CHECK(cudaStreamSynchronize(s));
    const auto ol = fetch<uint16_t>(out, P * H), osm = fetch<uint16_t>(out2, P * H);
    BENCH_CHECK(g2(Fp4GemmPath::kSmallM, false, out2));
    BENCH_CHECK(cudaStreamSynchronize(s));
    const bool same2 = fetch<uint16_t>(out2, P * H) == osm;
    double num = 0, den = 0;
    for (size_t i = 0; i < ol.size(); ++i) {
      const double x = bf16_to_f32(ol[i]), y = bf16_to_f32(osm[i]);
      num += (x - y) * (x - y);
      den += x * x;
    }
    const double rel2 = std::sqrt(num / std::max(den, 1e-300));
    const bool case_ok = same1 && same2 && frac1 <= 0.02 && rel2 <= 1e-2 && std::isfinite(rel2) && den > 0;
    if (!case_ok) {
      std::printf("CHECK FAIL T=%lld: tiled == row-major gemm1 %d gemm2 %d, gemm1 codes differ %.3f%%, gemm2 rel L2 %.3g\n",
                  (long long)T, same1, same2, frac1 * 100, rel2);
      ok = false;
    }

    const double s1 = time_ms(s, 2, 9, [&] { BENCH_CHECK(g1(Fp4GemmPath::kSmallM, t1, h2, h2_s)); });
    const double b1 = t1 ? time_ms(s, 2, 9, [&] { BENCH_CHECK(g1(Fp4GemmPath::kWgmmaPersist, true, h2, h2_s)); })
                         : time_ms(s, 2, 9, [&] { BENCH_CHECK(g1(Fp4GemmPath::kAuto, false, h2, h2_s)); });
    const double s2 = time_ms(s, 2, 9, [&] { BENCH_CHECK(g2(Fp4GemmPath::kSmallM, t2, out2)); });
    const double b2 = t2 ? time_ms(s, 2, 9, [&] { BENCH_CHECK(g2(Fp4GemmPath::kWgmmaPersistRA, true, out2)); })
                         : time_ms(s, 2, 9, [&] { BENCH_CHECK(g2(Fp4GemmPath::kAuto, false, out2)); });
    const double au = time_ms(s, 2, 9, [&] {
      BENCH_CHECK(g1(Fp4GemmPath::kAuto, t1, h2, h2_s));
      BENCH_CHECK(g2(Fp4GemmPath::kAuto, t2, out2));
    });
    const double f1 = double(nhit) * w1_bytes / (hbm_gbps * 1e9) * 1e3, f2 = double(nhit) * w2_bytes / (hbm_gbps * 1e9) * 1e3;
    std::printf("%5lld %5lld %6lld %5lld | %9.3f %9.3f %9.3f %5.0f%% | %9.3f %9.3f %9.3f %5.0f%% | %.3f%s\n", (long long)T,
                (long long)tile, (long long)P, (long long)nhit, s1, b1, f1, 100.0 * f1 / s1, s2, b2, f2, 100.0 * f2 / s2, au,
                case_ok ? "" : "  CHECK FAIL");
  }
  std::printf("(ms per launch; small%%: the floor over kSmallM's time, i.e. its share of the copy bandwidth; "
              "128: the 128-row-tile paths; auto: kAuto's gemm1 + gemm2)\n");
  for (void* p : bufs) BENCH_CHECK(cudaFree(p));
  std::printf("%s\n", ok ? "checks: all passed" : "checks: FAILED");
  return ok ? 0 : 1;
}
