// The absorbed MLA decode kernels (kernels/mla_decode.cu) at Kimi-K2.5's TP=4 rank shapes: 16 heads,
// kv_lora 512, rope 64, nope 128, v 128; a decode batch of B requests with L positions of context
// each, every request's positions in pool pages of P slots (default 1) placed at random. Prints, per L, the
// median time of mla_q_absorb, mla_paged_attention and mla_v_up, the attention's bandwidth (the
// latent + rope cache rows it must read once: B x L x 576 x 2 bytes) and that bandwidth as a share
// of the device's copy bandwidth measured here (a 1 GiB device-to-device cudaMemcpy, read + write),
// for the split form the executor runs (kernels/common/mla_split.h) and for one block per row.
// The target for the attention: >= 60% of that at 8K+ positions.
// Page size 1 (SGLang's default for MLA) with random pages is the worst case for the memory: each
// 1,152-byte cache row is a separate DRAM access. Larger pages (FlashMLA's 64) keep P rows
// contiguous; a fresh pool hands out contiguous slots (--page with L: one page per request).
// Usage: bench_mla_decode [--page P] [B] [L...]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/gpu/bench_util.h"
#include "kernels/init.cuh"
#include "kernels/common/fp_formats.h"
#include "kernels/common/mla_split.h"
#include "kernels/mla_decode.cuh"

using namespace moeprof::kern;

int main(int argc, char** argv) {
  if (!have_gpu()) return 0;
  int64_t page = 1;
  int a = 1;
  if (argc > 2 && std::string(argv[1]) == "--page") {
    page = std::atoll(argv[2]);
    a = 3;
    if (page < 1) {
      std::fprintf(stderr, "bench_mla_decode: --page needs a positive size\n");
      return 2;
    }
  }
  const int64_t B = argc > a ? std::atoll(argv[a]) : 64;
  std::vector<int64_t> lens;
  for (int i = a + 1; i < argc; ++i) lens.push_back(std::atoll(argv[i]));
  if (lens.empty()) lens = {2048, 8192, 16384};
  constexpr int64_t H = 16, kvl = 512, rope = 64, nope = 128, vd = 128, D = kvl + rope;
  cudaStream_t s;
  BENCH_CHECK(cudaStreamCreate(&s));
  // Copy bandwidth: read + write of 1 GiB.
  const size_t big = size_t{1} << 30;
  void *x = nullptr, *y = nullptr;
  BENCH_CHECK(cudaMalloc(&x, big));
  BENCH_CHECK(cudaMalloc(&y, big));
  const double copy_ms = time_ms(s, 2, 10, [&] { BENCH_CHECK(cudaMemcpyAsync(y, x, big, cudaMemcpyDeviceToDevice, s)); });
  const double hbm_gbps = 2.0 * double(big) / (copy_ms * 1e-3) / 1e9;
  BENCH_CHECK(cudaFree(x));
  BENCH_CHECK(cudaFree(y));
  std::printf("copy bandwidth: %.0f GB/s (1 GiB device to device, read + write)\n", hbm_gbps);
  uint16_t *q, *w, *q_abs, *lat, *out;
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&q), B * H * (nope + rope) * 2));
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&w), H * (nope + vd) * kvl * 2));
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&q_abs), B * H * D * 2));
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&lat), B * H * kvl * 2));
  BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&out), B * H * vd * 2));
  BENCH_CHECK(launch_init_uniform(q, true, B, H * (nope + rope), H * (nope + rope), 1, 1.0f, s));
  BENCH_CHECK(launch_init_uniform(w, true, H * (nope + vd), kvl, kvl, 2, 0.05f, s));
  std::printf("pages of %lld slots, placed at random\n", static_cast<long long>(page));
  for (int64_t L : lens) {
    // Request b owns pages b * pp .. b * pp + pp - 1 of a random permutation; slot 0 stays unused.
    const int64_t pp = (L + page - 1) / page, slots = B * pp * page + 1;
    uint16_t* cache;
    int32_t *r2t, *rows, *pos;
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&cache), slots * D * 2));
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&r2t), B * L * 4));
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&rows), B * 4));
    BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&pos), B * 4));
    BENCH_CHECK(launch_init_uniform(cache, true, slots, D, D, 3, 1.0f, s));
    std::vector<int32_t> pages(static_cast<size_t>(B * pp)), perm(static_cast<size_t>(B * L)), hr(static_cast<size_t>(B)),
        hp(static_cast<size_t>(B), static_cast<int32_t>(L - 1));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), std::mt19937_64(4));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < L; ++t)
        perm[static_cast<size_t>(b * L + t)] = static_cast<int32_t>(1 + pages[static_cast<size_t>(b * pp + t / page)] * page + t % page);
    std::iota(hr.begin(), hr.end(), 0);
    BENCH_CHECK(cudaMemcpy(r2t, perm.data(), perm.size() * 4, cudaMemcpyHostToDevice));
    BENCH_CHECK(cudaMemcpy(rows, hr.data(), hr.size() * 4, cudaMemcpyHostToDevice));
    BENCH_CHECK(cudaMemcpy(pos, hp.data(), hp.size() * 4, cudaMemcpyHostToDevice));
    const float scale = 0.0721f;
    const double t_abs = time_ms(s, 3, 20, [&] {
      BENCH_CHECK(launch_mla_q_absorb(q, H * (nope + rope), w, kvl, kvl, B, H, nope, rope, vd, q_abs, H * D, s));
    });
    // One block per row and head group, then the split form (flash-decoding) the executor runs;
    // their outputs compared (bf16 elements: the split merges partial sums in another order).
    const double t_one = time_ms(s, 3, 20, [&] {
      BENCH_CHECK(launch_mla_paged_attention(q_abs, H * D, cache, D, r2t, L, rows, pos, B, H, kvl, scale, lat, H * kvl, nullptr, s));
    });
    std::vector<uint16_t> one(static_cast<size_t>(B * H * kvl)), split(one.size());
    BENCH_CHECK(cudaMemcpy(one.data(), lat, one.size() * 2, cudaMemcpyDeviceToHost));
    const int64_t splits = mla_decode_splits(B, H, D, kvl), ws_floats = mla_decode_workspace_floats(B, H, D, kvl);
    float* ws = nullptr;
    if (ws_floats > 0) BENCH_CHECK(cudaMalloc(reinterpret_cast<void**>(&ws), ws_floats * 4));
    const double t_att = time_ms(s, 3, 20, [&] {
      BENCH_CHECK(launch_mla_paged_attention(q_abs, H * D, cache, D, r2t, L, rows, pos, B, H, kvl, scale, lat, H * kvl, ws, s));
    });
    BENCH_CHECK(cudaMemcpy(split.data(), lat, split.size() * 2, cudaMemcpyDeviceToHost));
    if (ws) BENCH_CHECK(cudaFree(ws));
    double max_diff = 0;
    for (size_t i = 0; i < one.size(); ++i)
      max_diff = std::max(max_diff, double(std::abs(bf16_to_f32(one[i]) - bf16_to_f32(split[i]))));
    const double t_up = time_ms(s, 3, 20, [&] { BENCH_CHECK(launch_mla_v_up(lat, H * kvl, w, kvl, kvl, B, H, nope, vd, out, H * vd, s)); });
    const double bytes = double(B) * double(L) * D * 2;
    const double gbps = bytes / (t_att * 1e-3) / 1e9, gbps_one = bytes / (t_one * 1e-3) / 1e9;
    std::printf("RESULT B=%lld L=%lld: q_absorb %.3f ms, paged attention %.3f ms in %lld splits (%.0f GB/s of cache rows, %.0f%% of "
                "the copy bandwidth; one block per row: %.3f ms, %.0f GB/s, %.0f%%; largest difference %.3g), v_up %.3f ms\n",
                static_cast<long long>(B), static_cast<long long>(L), t_abs, t_att, static_cast<long long>(splits), gbps,
                100.0 * gbps / hbm_gbps, t_one, gbps_one, 100.0 * gbps_one / hbm_gbps, max_diff, t_up);
    BENCH_CHECK(cudaFree(cache));
    BENCH_CHECK(cudaFree(r2t));
    BENCH_CHECK(cudaFree(rows));
    BENCH_CHECK(cudaFree(pos));
  }
  return 0;
}
