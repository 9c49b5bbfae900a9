// Every CUDA op against the CPU reference backend on random (never all-zero) inputs with odd
// sizes, outputs poisoned before the op. Tolerances (documented in docs/kernels.md):
//   bit-exact: init_*, embedding, kv_cache_write, mla_build_k, add_inplace, fp4_quantize,
//              moe_permute, moe_combine, router ids (weights to 1e-6 relative), residual of
//              fused_add_rmsnorm;
//   <= 2 bf16 ulps (|d| <= 2^-7 |ref| + 1e-6): rmsnorm, rope, silu_and_mul;
//   normwise ||d|| / ||ref|| <= 1e-2 (and max |d| <= 4e-2 max |ref|): linear, attention, gemm2;
//   gemm1 (re-quantized FP4): <= 2% of codes differ, dequantized normwise error <= 3e-2.
// Without a usable GPU every case returns early with a warning (they carry the `gpu` label).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "executor/backends.h"
#include "kernels/common/fp4_tiled.h"
#include "kernels/common/fp_formats.h"
#include "kernels/common/random.h"
#include "kernels/mla_attention.cuh"
#include "kernels/moe_gemm_fp4.cuh"
#include "tests/executor/op_contract_cases.h"
#include "tests/gpu_skip.h"

using namespace moeprof;

namespace {

struct Env {
  std::unique_ptr<Backend> cpu, gpu;
  std::string why;
};

Env& env() {
  static Env e = [] {
    Env x;
    x.cpu = make_cpu_backend();
    auto g = make_cuda_backend(0);
    if (g.is_ok()) x.gpu = std::move(g).value();
    else x.why = g.status().message();
    return x;
  }();
  return e;
}

#define REQUIRE_GPU()                                                               \
  do {                                                                              \
    if (!env().gpu) MOEPROF_SKIP("the CUDA backend does not start: " + env().why); \
  } while (0)

// A tensor on both backends with the same contents.
struct Both {
  Tensor c, g;
};

Tensor alloc(Backend& b, DType d, int64_t r, int64_t c, const std::string& name) {
  auto t = b.empty(d, r, c, AllocTag{name, "test", Category::kActivation});
  REQUIRE(t.is_ok());
  return std::move(t).value();
}

template <typename T>
Both both(DType d, int64_t r, int64_t c, const std::vector<T>& host, const std::string& name) {
  REQUIRE(host.size() * sizeof(T) == static_cast<size_t>(r * c) * dtype_size(d));
  Both x{alloc(*env().cpu, d, r, c, name), alloc(*env().gpu, d, r, c, name)};
  REQUIRE(env().cpu->copy_from_host(x.c, host.data()).is_ok());
  REQUIRE(env().gpu->copy_from_host(x.g, host.data()).is_ok());
  return x;
}

// Output pair: the GPU side is poisoned with 0xFF bytes (NaN for bf16/f32/e4m3, -1 for i32).
Both out(DType d, int64_t r, int64_t c, const std::string& name, uint8_t poison = 0xFF) {
  Both x{alloc(*env().cpu, d, r, c, name), alloc(*env().gpu, d, r, c, name)};
  std::vector<uint8_t> p(static_cast<size_t>(r * c) * dtype_size(d), poison);
  REQUIRE(env().gpu->copy_from_host(x.g, p.data()).is_ok());
  std::vector<uint8_t> z(p.size(), 0x5A);
  REQUIRE(env().cpu->copy_from_host(x.c, z.data()).is_ok());
  return x;
}

template <typename T>
std::vector<T> fetch(Backend& b, const Tensor& t) {
  std::vector<T> v(static_cast<size_t>(t.numel()) * dtype_size(t.dtype()) / sizeof(T));
  REQUIRE(b.synchronize().is_ok());
  REQUIRE(b.copy_to_host(t, v.data()).is_ok());
  return v;
}
template <typename T>
std::pair<std::vector<T>, std::vector<T>> fetch2(const Both& x) {
  return {fetch<T>(*env().cpu, x.c), fetch<T>(*env().gpu, x.g)};
}

std::vector<uint16_t> rand_bf16(size_t n, uint64_t seed, float scale) {
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = kern::f32_to_bf16(scale * (2.0f * kern::hash_unit(seed, i) - 1.0f));
  return v;
}
std::vector<float> rand_f32(size_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * kern::hash_unit(seed, i);
  return v;
}
std::vector<uint8_t> rand_bytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(kern::hash64(seed, i));
  return v;
}
std::vector<uint8_t> rand_e4m3(size_t n, uint64_t seed, float lo, float hi) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = kern::f32_to_e4m3(lo + (hi - lo) * kern::hash_unit(seed, i));
  return v;
}
std::vector<int32_t> rand_ints(size_t n, uint64_t seed, int32_t lo, int32_t hi) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lo + static_cast<int32_t>(kern::hash64(seed, i) % static_cast<uint64_t>(hi - lo));
  return v;
}

template <typename T>
void require_equal(const std::vector<T>& c, const std::vector<T>& g, const std::string& what) {
  REQUIRE(c.size() == g.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < c.size(); ++i)
    if (std::memcmp(&c[i], &g[i], sizeof(T)) != 0 && bad++ == 0) first = i;
  INFO(what << ": " << bad << " of " << c.size() << " differ, first at " << first);
  REQUIRE(bad == 0);
}

std::vector<double> as_f64_bf16(const std::vector<uint16_t>& v) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = kern::bf16_to_f32(v[i]);
  return d;
}

// Elementwise: |g - c| <= rel * |c| + abs, and g finite wherever c is.
void require_close_elem(const std::vector<double>& c, const std::vector<double>& g, double rel, double abs,
                        const std::string& what) {
  REQUIRE(c.size() == g.size());
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const double d = std::fabs(g[i] - c[i]);
    const bool ok = std::isfinite(g[i]) == std::isfinite(c[i]) && (d <= rel * std::fabs(c[i]) + abs);
    if (!ok && bad++ == 0) first = i;
    if (std::isfinite(d)) worst = std::max(worst, d);
  }
  INFO(what << ": " << bad << " of " << c.size() << " out of tolerance, first at " << first << " (cpu " << c[first]
            << ", gpu " << g[first] << "), max abs diff " << worst);
  REQUIRE(bad == 0);
}

// Normwise: ||g - c|| <= rel ||c||, max |g - c| <= max_rel * max |c|, all finite.
void require_close_norm(const std::vector<double>& c, const std::vector<double>& g, double rel, double max_rel,
                        const std::string& what) {
  REQUIRE(c.size() == g.size());
  double num = 0, den = 0, maxd = 0, maxc = 0;
  size_t nonfinite = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (!std::isfinite(g[i])) { ++nonfinite; continue; }
    const double d = g[i] - c[i];
    num += d * d;
    den += c[i] * c[i];
    maxd = std::max(maxd, std::fabs(d));
    maxc = std::max(maxc, std::fabs(c[i]));
  }
  const double err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  INFO(what << ": normwise rel err " << err << " (bound " << rel << "), max abs diff " << maxd << " of max |ref| "
            << maxc << ", non-finite " << nonfinite);
  REQUIRE(nonfinite == 0);
  REQUIRE(den > 0);  // reference not all zeros
  REQUIRE(err <= rel);
  REQUIRE(maxd <= max_rel * maxc);
}

}  // namespace

// ---- init -----------------------------------------------------------------------------------------
TEST_CASE("cuda init ops match the CPU bit for bit", "[gpu]") {
  REQUIRE_GPU();
  auto& c = *env().cpu;
  auto& g = *env().gpu;
  const int64_t R = 37, C = 272;
  {
    Both t = out(DType::kBF16, R, C, "u_bf16");
    REQUIRE(c.init_uniform(t.c, 11, 0.02f).is_ok());
    REQUIRE(g.init_uniform(t.g, 11, 0.02f).is_ok());
    auto [x, y] = fetch2<uint16_t>(t);
    require_equal(x, y, "init_uniform bf16");
  }
  {
    Both t = out(DType::kF32, R, C, "u_f32");
    REQUIRE(c.init_uniform(t.c, 12, 3.0f).is_ok());
    REQUIRE(g.init_uniform(t.g, 12, 3.0f).is_ok());
    auto [x, y] = fetch2<float>(t);
    require_equal(x, y, "init_uniform f32");
  }
  {
    Both t = out(DType::kE4M3, R, C, "e4m3");
    REQUIRE(c.init_e4m3(t.c, 13, 0.01f, 2.5f).is_ok());
    REQUIRE(g.init_e4m3(t.g, 13, 0.01f, 2.5f).is_ok());
    auto [x, y] = fetch2<uint8_t>(t);
    require_equal(x, y, "init_e4m3");
  }
  {
    Both t = out(DType::kFP4x2, R, C, "bytes");
    REQUIRE(c.init_bytes(t.c, 14).is_ok());
    REQUIRE(g.init_bytes(t.g, 14).is_ok());
    auto [x, y] = fetch2<uint8_t>(t);
    require_equal(x, y, "init_bytes");
  }
  {
    Both t = out(DType::kI32, R, C, "ints");
    REQUIRE(c.init_ints(t.c, 15, -7, 1000).is_ok());
    REQUIRE(g.init_ints(t.g, 15, -7, 1000).is_ok());
    auto [x, y] = fetch2<int32_t>(t);
    require_equal(x, y, "init_ints");
  }
  {
    Both t = out(DType::kI32, 1, 1001, "iota");
    REQUIRE(c.iota(t.c, 5).is_ok());
    REQUIRE(g.iota(t.g, 5).is_ok());
    auto [x, y] = fetch2<int32_t>(t);
    require_equal(x, y, "iota");
  }
}

// ---- dense ------------------------------------------------------------------------------------------
TEST_CASE("cuda embedding, kv_cache_write, mla_build_k, add_inplace are exact", "[gpu]") {
  REQUIRE_GPU();
  auto& c = *env().cpu;
  auto& g = *env().gpu;
  const int64_t T = 37, V = 100, H = 272;
  {
    Both ids = both(DType::kI32, T, 1, rand_ints(T, 1, 0, 130), "ids");
    Both table = both(DType::kBF16, V, H, rand_bf16(V * H, 2, 1.0f), "table");
    Both o = out(DType::kBF16, T, H, "emb");
    REQUIRE(c.embedding(ids.c, table.c, 10, o.c).is_ok());
    REQUIRE(g.embedding(ids.g, table.g, 10, o.g).is_ok());
    auto [x, y] = fetch2<uint16_t>(o);
    require_equal(x, y, "embedding");
  }
  for (int64_t col0 : {1536, 1540}) {  // a 16-byte aligned view (vector copy), an unaligned one
    const int64_t L = 512, R = 64, S = 300, slot0 = 17;
    Both latent_wide = both(DType::kBF16, T, 2112, rand_bf16(T * 2112, 3 + col0, 1.0f), "latent");
    Both kpe = both(DType::kBF16, T, R, rand_bf16(T * R, 4, 1.0f), "kpe");
    Both lat{latent_wide.c.cols_view(col0, L), latent_wide.g.cols_view(col0, L)};
    Both cache = both(DType::kBF16, S, L + R, rand_bf16(S * (L + R), 5, 1.0f), "cache");
    REQUIRE(c.kv_cache_write(lat.c, kpe.c, cache.c, slot0).is_ok());
    REQUIRE(g.kv_cache_write(lat.g, kpe.g, cache.g, slot0).is_ok());
    auto [x, y] = fetch2<uint16_t>(cache);
    require_equal(x, y, "kv_cache_write");
  }
  // 16-byte path (multiples of 8) and the element path (nope 100).
  for (auto [nope, stride] : {std::pair<int64_t, int64_t>{128, 256}, {100, 228}}) {
    const int64_t nh = 3, R = 64;
    Both kv = both(DType::kBF16, T, nh * stride, rand_bf16(T * nh * stride, 6 + nope, 1.0f), "kv");
    Both kpe = both(DType::kBF16, T, R, rand_bf16(T * R, 7, 1.0f), "kpe");
    Both k = out(DType::kBF16, T, nh * (nope + R), "k");
    REQUIRE(c.mla_build_k(kv.c, nh, stride, nope, kpe.c, k.c).is_ok());
    REQUIRE(g.mla_build_k(kv.g, nh, stride, nope, kpe.g, k.g).is_ok());
    auto [x, y] = fetch2<uint16_t>(k);
    require_equal(x, y, "mla_build_k nope=" + std::to_string(nope));
  }
  {
    Both d = both(DType::kBF16, T, H, rand_bf16(T * H, 8, 2.0f), "dst");
    Both s = both(DType::kBF16, T, H, rand_bf16(T * H, 9, 2.0f), "src");
    REQUIRE(c.add_inplace(d.c, s.c).is_ok());
    REQUIRE(g.add_inplace(d.g, s.g).is_ok());
    auto [x, y] = fetch2<uint16_t>(d);
    require_equal(x, y, "add_inplace");
  }
}

TEST_CASE("cuda rmsnorm and fused_add_rmsnorm", "[gpu]") {
  REQUIRE_GPU();
  auto& c = *env().cpu;
  auto& g = *env().gpu;
  for (auto [T, H] : {std::pair<int64_t, int64_t>{37, 7168}, {129, 272}}) {
    Both x = both(DType::kBF16, T, H, rand_bf16(T * H, 20 + H, 3.0f), "x");
    Both w = both(DType::kBF16, 1, H, rand_bf16(H, 21, 1.5f), "w");
    Both o = out(DType::kBF16, T, H, "o");
    REQUIRE(c.rmsnorm(x.c, w.c, 1e-6f, o.c).is_ok());
    REQUIRE(g.rmsnorm(x.g, w.g, 1e-6f, o.g).is_ok());
    auto [a, b] = fetch2<uint16_t>(o);
    require_close_elem(as_f64_bf16(a), as_f64_bf16(b), 1.0 / 128, 1e-6, "rmsnorm H=" + std::to_string(H));

    Both r = both(DType::kBF16, T, H, rand_bf16(T * H, 22 + H, 3.0f), "res");
    REQUIRE(c.fused_add_rmsnorm(x.c, r.c, w.c, 1e-5f).is_ok());
    REQUIRE(g.fused_add_rmsnorm(x.g, r.g, w.g, 1e-5f).is_ok());
    auto [rc, rg] = fetch2<uint16_t>(r);
    require_equal(rc, rg, "fused_add_rmsnorm residual");
    auto [xc, xg] = fetch2<uint16_t>(x);
    require_close_elem(as_f64_bf16(xc), as_f64_bf16(xg), 1.0 / 128, 1e-6, "fused_add_rmsnorm x");

    // add_rmsnorm: the CPU's residual exactly, its norm within rounding, and on the GPU the bits of
    // add_inplace then rmsnorm (the executor's input norm before the fusion; same hashes). Fresh
    // inputs: x above now holds each side's own norm, which differ within rounding.
    Both x2 = both(DType::kBF16, T, H, rand_bf16(T * H, 23 + H, 3.0f), "x2");
    Both r2 = both(DType::kBF16, T, H, rand_bf16(T * H, 24 + H, 3.0f), "res2");
    Both r3 = both(DType::kBF16, T, H, rand_bf16(T * H, 24 + H, 3.0f), "res3");
    Both o2 = out(DType::kBF16, T, H, "o2");
    Both o3 = out(DType::kBF16, T, H, "o3");
    REQUIRE(c.add_rmsnorm(x2.c, r2.c, w.c, 1e-6f, o2.c).is_ok());
    REQUIRE(g.add_rmsnorm(x2.g, r2.g, w.g, 1e-6f, o2.g).is_ok());
    auto [r2c, r2g] = fetch2<uint16_t>(r2);
    require_equal(r2c, r2g, "add_rmsnorm residual");
    auto [o2c, o2g] = fetch2<uint16_t>(o2);
    require_close_elem(as_f64_bf16(o2c), as_f64_bf16(o2g), 1.0 / 128, 1e-6, "add_rmsnorm out");
    REQUIRE(g.add_inplace(r3.g, x2.g).is_ok());
    REQUIRE(g.rmsnorm(r3.g, w.g, 1e-6f, o3.g).is_ok());
    REQUIRE(g.synchronize().is_ok());
    require_equal(r2g, fetch2<uint16_t>(r3).second, "add_rmsnorm residual = add_inplace");
    require_equal(o2g, fetch2<uint16_t>(o3).second, "add_rmsnorm out = rmsnorm after add_inplace (GPU bits)");
  }
}

// The memory-bound ops have a 16-byte vector path (width a multiple of 8, 16-byte aligned rows;
// rmsnorm also H <= 8192, with 32, 64 or 128 threads per row) and an element fallback. Both must
// give the CPU's results: odd widths, widths on each side of the limits, and column views whose
// offset keeps (8 columns) or breaks (4 columns) the alignment.
TEST_CASE("cuda rmsnorm, add_inplace, moe_combine: vector and fallback paths", "[gpu]") {
  REQUIRE_GPU();
  auto& c = *env().cpu;
  auto& g = *env().gpu;
  struct Shape { int64_t T, H, off; };  // off: columns of a wider tensor before the view
  for (const Shape q : {Shape{5, 100, 0}, Shape{33, 1536, 0}, Shape{17, 520, 0}, Shape{7, 4096, 0}, Shape{9, 9000, 0},
                        Shape{11, 512, 8}, Shape{11, 512, 4}, Shape{3, 8, 0}}) {
    INFO("T=" << q.T << " H=" << q.H << " offset=" << q.off);
    const int64_t W = q.H + 2 * q.off + 8;  // the wide tensor's columns
    Both xw = both(DType::kBF16, q.T, W, rand_bf16(q.T * W, 300 + q.H + q.off, 3.0f), "x");
    Both rw = both(DType::kBF16, q.T, W, rand_bf16(q.T * W, 400 + q.H + q.off, 3.0f), "res");
    Both x{xw.c.cols_view(q.off, q.H), xw.g.cols_view(q.off, q.H)};
    Both r{rw.c.cols_view(q.off, q.H), rw.g.cols_view(q.off, q.H)};
    Both w = both(DType::kBF16, 1, q.H, rand_bf16(q.H, 500 + q.H, 1.5f), "w");
    Both o = out(DType::kBF16, q.T, q.H, "o");
    REQUIRE(c.rmsnorm(x.c, w.c, 1e-6f, o.c).is_ok());
    REQUIRE(g.rmsnorm(x.g, w.g, 1e-6f, o.g).is_ok());
    auto [a, b] = fetch2<uint16_t>(o);
    require_close_elem(as_f64_bf16(a), as_f64_bf16(b), 1.0 / 128, 1e-6, "rmsnorm");
    // In place (out aliases x) on a copy.
    Both xi = both(DType::kBF16, q.T, q.H, rand_bf16(q.T * q.H, 600 + q.H, 3.0f), "xi");
    REQUIRE(c.rmsnorm(xi.c, w.c, 1e-6f, xi.c).is_ok());
    REQUIRE(g.rmsnorm(xi.g, w.g, 1e-6f, xi.g).is_ok());
    auto [ia, ib] = fetch2<uint16_t>(xi);
    require_close_elem(as_f64_bf16(ia), as_f64_bf16(ib), 1.0 / 128, 1e-6, "rmsnorm in place");

    REQUIRE(c.fused_add_rmsnorm(x.c, r.c, w.c, 1e-5f).is_ok());
    REQUIRE(g.fused_add_rmsnorm(x.g, r.g, w.g, 1e-5f).is_ok());
    auto [rc, rg] = fetch2<uint16_t>(rw);
    require_equal(rc, rg, "fused_add_rmsnorm residual (columns outside the view untouched)");
    auto [xc, xg] = fetch2<uint16_t>(xw);
    require_close_elem(as_f64_bf16(xc), as_f64_bf16(xg), 1.0 / 128, 1e-6, "fused_add_rmsnorm x");

    // add_rmsnorm on the views (x only read; out a separate tensor). Its x is the view r, equal on
    // both sides (x above holds each side's own norm now).
    Both aw = both(DType::kBF16, q.T, W, rand_bf16(q.T * W, 450 + q.H + q.off, 3.0f), "res_an");
    Both av{aw.c.cols_view(q.off, q.H), aw.g.cols_view(q.off, q.H)};
    Both ao = out(DType::kBF16, q.T, q.H, "o_an");
    REQUIRE(c.add_rmsnorm(r.c, av.c, w.c, 1e-6f, ao.c).is_ok());
    REQUIRE(g.add_rmsnorm(r.g, av.g, w.g, 1e-6f, ao.g).is_ok());
    auto [ac, ag] = fetch2<uint16_t>(aw);
    require_equal(ac, ag, "add_rmsnorm residual (columns outside the view untouched)");
    auto [aoc, aog] = fetch2<uint16_t>(ao);
    require_close_elem(as_f64_bf16(aoc), as_f64_bf16(aog), 1.0 / 128, 1e-6, "add_rmsnorm out");

    Both d = both(DType::kBF16, q.T, W, rand_bf16(q.T * W, 700 + q.H, 2.0f), "dst");
    Both dv{d.c.cols_view(q.off, q.H), d.g.cols_view(q.off, q.H)};
    REQUIRE(c.add_inplace(dv.c, r.c).is_ok());  // r: equal on both sides (x is not, after the norm)
    REQUIRE(g.add_inplace(dv.g, r.g).is_ok());
    auto [da, db] = fetch2<uint16_t>(d);
    require_equal(da, db, "add_inplace");

    // combine: k = 3 gathered rows of a [P, H] view per token, with and without a shared input.
    const int64_t k = 3, P = q.T * k + 5;
    Both g2w = both(DType::kBF16, P, W, rand_bf16(P * W, 800 + q.H, 1.0f), "g2");
    Both g2{g2w.c.cols_view(q.off, q.H), g2w.g.cols_view(q.off, q.H)};
    Both e2p = both(DType::kI32, 1, q.T * k, rand_ints(q.T * k, 900 + q.H, 0, static_cast<int32_t>(P)), "e2p");
    Both tw = both(DType::kF32, q.T, k, rand_f32(q.T * k, 901 + q.H, 0.01f, 1.0f), "tw");
    for (bool with_shared : {true, false}) {
      Both mo = out(DType::kBF16, q.T, q.H, "moe_out");
      REQUIRE(c.moe_combine(g2.c, e2p.c, tw.c, with_shared ? r.c : Tensor(), mo.c).is_ok());
      REQUIRE(g.moe_combine(g2.g, e2p.g, tw.g, with_shared ? r.g : Tensor(), mo.g).is_ok());
      auto [ma, mb] = fetch2<uint16_t>(mo);
      require_equal(ma, mb, with_shared ? "combine (shared)" : "combine");
    }
  }
}

TEST_CASE("cuda linear (cuBLASLt) bf16 and f32 outputs", "[gpu]") {
  REQUIRE_GPU();
  auto& c = *env().cpu;
  auto& g = *env().gpu;
  struct Case { int64_t T, N, K; DType od; };
  for (const Case& k : {Case{129, 272, 7168, DType::kBF16}, Case{37, 384, 2048, DType::kF32}, Case{1, 64, 272, DType::kBF16}}) {
    Both x = both(DType::kBF16, k.T, k.K, rand_bf16(k.T * k.K, 30, 1.0f), "x");
    Both w = both(DType::kBF16, k.N, k.K, rand_bf16(k.N * k.K, 31, 0.05f), "w");
    Both o = out(k.od, k.T, k.N, "o");
    Tensor ws_c, ws_g;
    if (size_t b = c.linear_workspace_bytes(k.T, k.N, k.K)) ws_c = alloc(c, DType::kU8, 1, static_cast<int64_t>(b), "ws");
    if (size_t b = g.linear_workspace_bytes(k.T, k.N, k.K)) ws_g = alloc(g, DType::kU8, 1, static_cast<int64_t>(b), "ws");
    REQUIRE(c.linear(x.c, w.c, o.c, ws_c).is_ok());
    auto st = g.linear(x.g, w.g, o.g, ws_g);
    INFO(st.message());
    REQUIRE(st.is_ok());
    std::vector<double> a, b;
    if (k.od == DType::kBF16) {
      auto [p, q] = fetch2<uint16_t>(o);
      a = as_f64_bf16(p);
      b = as_f64_bf16(q);
    } else {
      auto [p, q] = fetch2<float>(o);
      a.assign(p.begin(), p.end());
      b.assign(q.begin(), q.end());
    }
    require_close_norm(a, b, 1e-2, 4e-2, "linear K=" + std::to_string(k.K));
    // Timed algorithm choice (prepare_linear): scratch operands straight from the pool (no
    // Backend allocation), once per shape; the linear then runs the chosen algorithm, same
    // tolerance.
    const size_t ws_bytes = ws_g.defined() ? ws_g.bytes() : 0;
    const uint64_t before = g.allocation_count();
    REQUIRE(g.prepare_linear(k.T, k.N, k.K, k.od, ws_bytes).is_ok());
    REQUIRE(g.prepare_linear(k.T, k.N, k.K, k.od, ws_bytes).is_ok());  // already chosen: a no-op
    CHECK(g.allocation_count() == before);
    REQUIRE(g.linear(x.g, w.g, o.g, ws_g).is_ok());
    if (k.od == DType::kBF16) {
      b = as_f64_bf16(fetch<uint16_t>(g, o.g));
    } else {
      auto q = fetch<float>(g, o.g);
      b.assign(q.begin(), q.end());
    }
    require_close_norm(a, b, 1e-2, 4e-2, "linear after prepare_linear K=" + std::to_string(k.K));
  }
}

TEST_CASE("cuda rope and silu_and_mul", "[gpu]") {
  REQUIRE_GPU();
  auto& c = *env().cpu;
  auto& g = *env().gpu;
  const int64_t T = 129, maxpos = 4096;
  // The 16-byte path (MLA's q: stride 192, rotary 64 at offset 128) and the pair path (offset 126);
  // one head (as k_pe) makes the 16-byte path take 16 tokens per block, the last block partial.
  for (int64_t nh : {5, 1})
  for (auto [stride, off, rd] : {std::tuple<int64_t, int64_t, int64_t>{192, 128, 64}, {192, 126, 64}, {40, 4, 36}}) {
    INFO("rope heads " << nh);
    Both x = both(DType::kBF16, T, nh * stride, rand_bf16(T * nh * stride, 40 + off, 2.0f), "q");
    Both pos = both(DType::kI32, T, 1, rand_ints(T, 41, 0, maxpos), "pos");
    std::vector<float> cs(maxpos * rd);
    for (int64_t p = 0; p < maxpos; ++p)
      for (int64_t i = 0; i < rd / 2; ++i) {
        const double ang = p * std::pow(10000.0, -2.0 * i / rd);
        cs[p * rd + i] = static_cast<float>(std::cos(ang));
        cs[p * rd + rd / 2 + i] = static_cast<float>(std::sin(ang));
      }
    Both cos_sin = both(DType::kF32, maxpos, rd, cs, "cos_sin");
    REQUIRE(c.rope(x.c, nh, stride, off, rd, pos.c, cos_sin.c).is_ok());
    REQUIRE(g.rope(x.g, nh, stride, off, rd, pos.g, cos_sin.g).is_ok());
    auto [a, b] = fetch2<uint16_t>(x);
    require_close_elem(as_f64_bf16(a), as_f64_bf16(b), 1.0 / 128, 1e-6, "rope offset " + std::to_string(off));
  }

  for (int64_t I : {272, 100}) {  // 16-byte path, element path
    Both h = both(DType::kBF16, T, 2 * I, rand_bf16(T * 2 * I, 42 + I, 4.0f), "gu");
    Both o = out(DType::kBF16, T, I, "act");
    REQUIRE(c.silu_and_mul(h.c, o.c).is_ok());
    REQUIRE(g.silu_and_mul(h.g, o.g).is_ok());
    auto [p, q] = fetch2<uint16_t>(o);
    require_close_elem(as_f64_bf16(p), as_f64_bf16(q), 1.0 / 128, 1e-6, "silu_and_mul I=" + std::to_string(I));
  }
}

TEST_CASE("cuda causal attention (flash-style) vs CPU", "[gpu]") {
  REQUIRE_GPU();
  auto& c = *env().cpu;
  auto& g = *env().gpu;
  // v_offset / v_stride < 0: the kv_b layout [k_nope | v] per head with k_nope as wide as qk (v at offset qk).
  struct Case { int64_t T, nh, qk, v, v_offset = -1, v_stride = -1; };
  // MLA dims (FA2 kernel: 128-query blocks, 64-key tiles; T around the tile edges), the benchmark's kv_b
  // layout (v at 128 of 256), a v_offset not a multiple of 8 (generic tensor-core kernel), small dims
  // (zero-padded, generic kernel), large dims (scalar fallback).
  for (const Case& k : {Case{37, 3, 192, 128}, Case{129, 2, 192, 128}, Case{1000, 2, 192, 128}, Case{1, 2, 192, 128},
                        Case{64, 1, 192, 128}, Case{128, 2, 192, 128}, Case{255, 2, 192, 128}, Case{320, 3, 192, 128},
                        Case{300, 2, 192, 128, 128, 256}, Case{100, 2, 192, 128, 4, 260}, Case{77, 2, 48, 40},
                        Case{70, 2, 200, 136}}) {
    const int64_t vstride = k.v_stride >= 0 ? k.v_stride : k.qk + k.v;
    const int64_t voff = k.v_offset >= 0 ? k.v_offset : k.qk;
    Both q = both(DType::kBF16, k.T, k.nh * k.qk, rand_bf16(k.T * k.nh * k.qk, 50 + k.T, 1.0f), "q");
    Both kk = both(DType::kBF16, k.T, k.nh * k.qk, rand_bf16(k.T * k.nh * k.qk, 51 + k.T, 1.0f), "k");
    Both v = both(DType::kBF16, k.T, k.nh * vstride, rand_bf16(k.T * k.nh * vstride, 52 + k.T, 1.0f), "kv");
    Both o = out(DType::kBF16, k.T, k.nh * k.v, "attn");
    const float scale = 1.0f / std::sqrt(static_cast<float>(k.qk)) * 2.0f;  // sharper than uniform
    REQUIRE(c.causal_attention(q.c, kk.c, v.c, k.nh, k.qk, k.v, voff, vstride, scale, o.c).is_ok());
    auto st = g.causal_attention(q.g, kk.g, v.g, k.nh, k.qk, k.v, voff, vstride, scale, o.g);
    INFO(st.message());
    REQUIRE(st.is_ok());
    auto [a, b] = fetch2<uint16_t>(o);
    require_close_norm(as_f64_bf16(a), as_f64_bf16(b), 1e-2, 4e-2,
                       "attention T=" + std::to_string(k.T) + " qk=" + std::to_string(k.qk) +
                           " v_offset=" + std::to_string(voff));
  }
}

// Every MLA-shape kernel variant (AttentionArgs::path: FA2 2..5, wgmma 6..10) launched directly on
// the backend's tensors, against the CPU reference; T around the 32/48/64/128/256 tile edges.
TEST_CASE("cuda causal attention: every MLA kernel variant vs CPU", "[gpu]") {
  REQUIRE_GPU();
  auto& c = *env().cpu;
  auto& g = *env().gpu;
  const int64_t qk = 192, vd = 128, vstride = 256, voff = 128;
  for (int64_t T : {1, 37, 64, 127, 128, 129, 255, 300, 1000}) {
    const int64_t nh = 2;
    Both q = both(DType::kBF16, T, nh * qk, rand_bf16(T * nh * qk, 60 + T, 1.0f), "q");
    Both kk = both(DType::kBF16, T, nh * qk, rand_bf16(T * nh * qk, 61 + T, 1.0f), "k");
    Both v = both(DType::kBF16, T, nh * vstride, rand_bf16(T * nh * vstride, 62 + T, 1.0f), "kv");
    const float scale = 2.0f / std::sqrt(static_cast<float>(qk));
    Both ref = out(DType::kBF16, T, nh * vd, "attn_ref");
    REQUIRE(c.causal_attention(q.c, kk.c, v.c, nh, qk, vd, voff, vstride, scale, ref.c).is_ok());
    const auto want = as_f64_bf16(fetch<uint16_t>(c, ref.c));
    for (int path : {2, 3, 4, 5, 10, 6}) {
      Both o = out(DType::kBF16, T, nh * vd, "attn");
      kern::AttentionArgs a{};
      a.q = static_cast<const uint16_t*>(q.g.raw()); a.ld_q = q.g.ld();
      a.k = static_cast<const uint16_t*>(kk.g.raw()); a.ld_k = kk.g.ld();
      a.v = static_cast<const uint16_t*>(v.g.raw()); a.ld_v = v.g.ld();
      a.out = static_cast<uint16_t*>(o.g.raw()); a.ld_out = o.g.ld();
      a.T = T; a.n_heads = nh; a.qk_dim = qk; a.v_dim = vd; a.qk_head_stride = qk; a.v_offset = voff;
      a.v_head_stride = vstride; a.scale = scale; a.path = path;
      REQUIRE(g.synchronize().is_ok());
      if (path == 6) {  // paths 6 to 9 were removed: refused, nothing launched
        CHECK(kern::launch_causal_attention(a, nullptr) == cudaErrorInvalidValue);
        continue;
      }
      REQUIRE(kern::launch_causal_attention(a, nullptr) == cudaSuccess);
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      require_close_norm(want, as_f64_bf16(fetch<uint16_t>(g, o.g)), 1e-2, 4e-2,
                         "attention path=" + std::to_string(path) + " T=" + std::to_string(T));
    }
  }
}

// ---- MoE --------------------------------------------------------------------------------------------
TEST_CASE("cuda router_topk matches the CPU (ids exact, weights 1e-6)", "[gpu]") {
  REQUIRE_GPU();
  auto& c = *env().cpu;
  auto& g = *env().gpu;
  struct Case { int64_t T, E; RouterParams p; };
  std::vector<Case> cases;
  {
    RouterParams p;  // Kimi-K2.5
    p.top_k = 8; p.method = TopkMethod::kNoauxTc; p.scoring = ScoringFunc::kSigmoid; p.norm_topk_prob = true;
    p.routed_scaling_factor = 2.827f;
    cases.push_back({1000, 384, p});
    p.n_group = 8; p.topk_group = 4; p.routed_scaling_factor = 2.5f;  // DeepSeek-V3
    cases.push_back({129, 256, p});
  }
  {
    RouterParams p;  // DeepSeek-V2
    p.top_k = 6; p.method = TopkMethod::kGroupLimitedGreedy; p.scoring = ScoringFunc::kSoftmax; p.n_group = 8;
    p.topk_group = 3; p.routed_scaling_factor = 16.0f;
    cases.push_back({129, 160, p});
    p.method = TopkMethod::kGreedy; p.n_group = 1; p.topk_group = 1; p.routed_scaling_factor = 1.0f;  // V2-Lite
    cases.push_back({37, 64, p});
  }
  for (const Case& k : cases) {
    Both logits = both(DType::kF32, k.T, k.E, rand_f32(k.T * k.E, 60 + k.E, -4.0f, 4.0f), "logits");
    Both bias = both(DType::kF32, 1, k.E, rand_f32(k.E, 61, -0.5f, 0.5f), "bias");
    Both ids = out(DType::kI32, k.T, k.p.top_k, "ids");
    Both w = out(DType::kF32, k.T, k.p.top_k, "w");
    Tensor bc = k.p.method == TopkMethod::kNoauxTc ? bias.c : Tensor();
    Tensor bg = k.p.method == TopkMethod::kNoauxTc ? bias.g : Tensor();
    REQUIRE(c.router_topk(logits.c, bc, k.p, ids.c, w.c).is_ok());
    REQUIRE(g.router_topk(logits.g, bg, k.p, ids.g, w.g).is_ok());
    auto [ic, ig] = fetch2<int32_t>(ids);
    auto [wc, wg] = fetch2<float>(w);
    auto lg = fetch<float>(c, logits.c);
    auto bs = fetch<float>(c, bias.c);
    int64_t exact_rows = 0, tie_rows = 0;
    for (int64_t t = 0; t < k.T; ++t) {
      std::vector<std::pair<int32_t, float>> a, b;
      for (int j = 0; j < k.p.top_k; ++j) {
        a.push_back({ic[t * k.p.top_k + j], wc[t * k.p.top_k + j]});
        b.push_back({ig[t * k.p.top_k + j], wg[t * k.p.top_k + j]});
      }
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      bool same_ids = true;
      for (int j = 0; j < k.p.top_k; ++j) same_ids &= a[j].first == b[j].first;
      if (!same_ids) {
        // Allowed only at a near-tie of the selection score (the two backends' exp may differ by an ulp).
        auto sel = [&](int32_t e) {
          const double x = lg[t * k.E + e];
          double s = k.p.scoring == ScoringFunc::kSigmoid ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x);
          if (k.p.method == TopkMethod::kNoauxTc) s += bs[e];
          return s;
        };
        double smallest_gap = 1e30;
        for (auto& [ea, wa] : a)
          for (auto& [eb, wb] : b) smallest_gap = std::min(smallest_gap, std::fabs(sel(ea) - sel(eb)) / std::fabs(sel(ea)));
        INFO("token " << t << " ids differ beyond a near-tie (gap " << smallest_gap << ")");
        REQUIRE(smallest_gap < 1e-5);
        ++tie_rows;
        continue;
      }
      ++exact_rows;
      for (int j = 0; j < k.p.top_k; ++j) {
        INFO("token " << t << " expert " << a[j].first << " cpu w " << a[j].second << " gpu w " << b[j].second);
        REQUIRE(std::fabs(a[j].second - b[j].second) <= 1e-6 * std::fabs(a[j].second) + 1e-12);
      }
    }
    INFO("rows with identical ids " << exact_rows << ", near-tie rows " << tie_rows);
    REQUIRE(tie_rows <= std::max<int64_t>(1, k.T / 100));
  }
}

TEST_CASE("cuda fp4_quantize is bit-exact", "[gpu]") {
  REQUIRE_GPU();
  auto& c = *env().cpu;
  auto& g = *env().gpu;
  // off: columns of a wider input before the view; 4 columns (8 bytes) takes the element path,
  // the others the 16-byte one.
  struct Case { int64_t T, K, off; };
  for (const Case k : {Case{129, 7168, 0}, Case{37, 272, 0}, Case{37, 272, 4}, Case{5, 48, 8}}) {
    const int64_t T = k.T, K = k.K, W = K + 2 * k.off;
    auto xs = rand_bf16(T * W, 70 + K + k.off, 3.0f);
    for (int64_t i = 0; i < 16; ++i) xs[k.off + i] = 0;  // one all-zero block: scale 0, codes 0
    Both xw = both(DType::kBF16, T, W, xs, "x");
    Both x{xw.c.cols_view(k.off, K), xw.g.cols_view(k.off, K)};
    Both q = out(DType::kFP4x2, T, K / 2, "q");
    Both s = out(DType::kE4M3, T, K / 16, "s");
    const float gs = 3.0f / (6.0f * 448.0f) * 4.0f;
    REQUIRE(c.fp4_quantize(x.c, gs, q.c, s.c).is_ok());
    REQUIRE(g.fp4_quantize(x.g, gs, q.g, s.g).is_ok());
    auto [qc, qg] = fetch2<uint8_t>(q);
    auto [sc, sg] = fetch2<uint8_t>(s);
    require_equal(qc, qg, "fp4 codes");
    require_equal(sc, sg, "fp4 scales");
  }
}

namespace {
struct PermuteOut {
  Both offsets, p2t, e2p;
  int64_t P;
};
PermuteOut run_permute(const Both& ids, int64_t T, int64_t k, int64_t E, int64_t tile) {
  auto& c = *env().cpu;
  auto& g = *env().gpu;
  const int64_t P = T * k + E * (tile - 1);
  PermuteOut r{out(DType::kI32, 1, E + 1, "offsets"), out(DType::kI32, 1, P, "p2t"), out(DType::kI32, 1, T * k, "e2p"), P};
  Tensor wc, wg;
  if (size_t b = c.moe_permute_workspace_bytes(T, k, E)) wc = alloc(c, DType::kU8, 1, static_cast<int64_t>(b), "ws");
  if (size_t b = g.moe_permute_workspace_bytes(T, k, E)) wg = alloc(g, DType::kU8, 1, static_cast<int64_t>(b), "ws");
  REQUIRE(c.moe_permute(ids.c, E, tile, r.offsets.c, r.p2t.c, r.e2p.c, wc).is_ok());
  auto st = g.moe_permute(ids.g, E, tile, r.offsets.g, r.p2t.g, r.e2p.g, wg);
  INFO(st.message());
  REQUIRE(st.is_ok());
  REQUIRE(g.synchronize().is_ok());
  return r;
}
// Distinct experts per token drawn from [0, E_used) so experts >= E_used receive zero tokens.
std::vector<int32_t> topk_ids_host(int64_t T, int64_t k, int64_t E_used, uint64_t seed) {
  std::vector<int32_t> v(T * k);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t start = static_cast<int64_t>(kern::hash64(seed, t) % E_used);
    const int64_t step = 1 + static_cast<int64_t>(kern::hash64(seed + 1, t) % 3);
    for (int64_t j = 0; j < k; ++j) v[t * k + j] = static_cast<int32_t>((start + j * step) % E_used);
  }
  return v;
}
}  // namespace

TEST_CASE("cuda moe_permute is exact (stable, padded, zero-token experts)", "[gpu]") {
  REQUIRE_GPU();
  struct Case { int64_t T, k, E, E_used, tile; };
  for (const Case& q : {Case{1000, 8, 384, 300, 64}, Case{37, 6, 64, 50, 8}, Case{129, 4, 16, 13, 16},
                        Case{257, 3, 1000, 700, 1}}) {
    Both ids = both(DType::kI32, q.T, q.k, topk_ids_host(q.T, q.k, q.E_used, 80 + q.T), "ids");
    PermuteOut r = run_permute(ids, q.T, q.k, q.E, q.tile);
    auto [oc, og] = fetch2<int32_t>(r.offsets);
    auto [pc, pg] = fetch2<int32_t>(r.p2t);
    auto [ec, eg] = fetch2<int32_t>(r.e2p);
    require_equal(oc, og, "offsets");
    require_equal(pc, pg, "permuted_to_token");
    require_equal(ec, eg, "expanded_to_permuted");
  }
}

namespace {
std::vector<double> dequant_rows(const std::vector<uint8_t>& codes, const std::vector<uint8_t>& scales, int64_t rows,
                                 int64_t K, float gs) {
  std::vector<double> v(rows * K);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < K; ++i) {
      const uint8_t byte = codes[r * (K / 2) + i / 2];
      const uint8_t code = (i & 1) ? (byte >> 4) : (byte & 0xF);
      v[r * K + i] = static_cast<double>(kern::e2m1_to_f32(code)) * kern::e4m3_to_f32(scales[r * (K / 16) + i / 16]) * gs;
    }
  return v;
}
}  // namespace

TEST_CASE("cuda FP4 grouped GEMMs (gemm1 fused SiLU + requant, gemm2) and combine", "[gpu]") {
  REQUIRE_GPU();
  auto& c = *env().cpu;
  auto& g = *env().gpu;
  struct Case { int64_t T, k, E, E_used, H, I, tile; };
  for (const Case& q : {Case{129, 4, 16, 13, 272, 80, 8}, Case{257, 6, 8, 7, 7168, 256, 64}, Case{37, 2, 5, 4, 2048, 512, 16},
                        Case{300, 8, 64, 60, 832, 192, 8}, Case{211, 8, 40, 37, 512, 320, 16},
                        Case{173, 8, 24, 23, 832, 256, 8},
                        // decode batches: P <= 32 E, so kAuto (the backend's calls) runs kSmallM
                        Case{64, 8, 96, 96, 1024, 256, 8}, Case{7, 8, 40, 40, 512, 384, 8}}) {
    INFO("T=" << q.T << " E=" << q.E << " H=" << q.H << " I=" << q.I << " tile=" << q.tile);
    Both ids = both(DType::kI32, q.T, q.k, topk_ids_host(q.T, q.k, q.E_used, 90 + q.T), "ids");
    PermuteOut r = run_permute(ids, q.T, q.k, q.E, q.tile);
    // Use the CPU's permutation on both sides so the GEMMs are compared alone.
    auto offs = fetch<int32_t>(c, r.offsets.c);
    auto p2t = fetch<int32_t>(c, r.p2t.c);
    auto e2p = fetch<int32_t>(c, r.e2p.c);
    Both offsets = both(DType::kI32, 1, q.E + 1, offs, "offsets");
    Both perm = both(DType::kI32, 1, r.P, p2t, "p2t");
    Both e2pb = both(DType::kI32, 1, q.T * q.k, e2p, "e2p");

    const float a_gs = 0.05f, out_gs = 0.02f, h_gs = out_gs;
    Both a = both(DType::kFP4x2, q.T, q.H / 2, rand_bytes(q.T * q.H / 2, 100), "a");
    Both as = both(DType::kE4M3, q.T, q.H / 16, rand_e4m3(q.T * q.H / 16, 101, 0.05f, 1.0f), "a_s");
    Both w13 = both(DType::kFP4x2, q.E * 2 * q.I, q.H / 2, rand_bytes(q.E * 2 * q.I * q.H / 2, 102), "w13");
    Both w13s = both(DType::kE4M3, q.E * 2 * q.I, q.H / 16, rand_e4m3(q.E * 2 * q.I * q.H / 16, 103, 0.05f, 1.0f), "w13_s");
    const float gsc = 1.0f / (std::sqrt(static_cast<float>(q.H)) * a_gs);  // keeps gate/up around O(1)
    Both w13gs = both(DType::kF32, 1, q.E, rand_f32(q.E, 104, 0.5f * gsc, 1.5f * gsc), "w13_gs");
    Both h = out(DType::kFP4x2, r.P, q.I / 2, "h");
    Both hs = out(DType::kE4M3, r.P, q.I / 16, "h_s");
    REQUIRE(c.moe_gemm1_fp4(a.c, as.c, a_gs, w13.c, w13s.c, w13gs.c, offsets.c, perm.c, out_gs, h.c, hs.c).is_ok());
    auto st = g.moe_gemm1_fp4(a.g, as.g, a_gs, w13.g, w13s.g, w13gs.g, offsets.g, perm.g, out_gs, h.g, hs.g);
    INFO(st.message());
    REQUIRE(st.is_ok());
    const std::vector<uint8_t> hc = fetch<uint8_t>(c, h.c), hsc = fetch<uint8_t>(c, hs.c);
    auto check_gemm1 = [&](const std::vector<uint8_t>& hg, const std::vector<uint8_t>& hsg) {
      size_t diff_codes = 0;
      for (size_t i = 0; i < hc.size(); ++i) diff_codes += (hc[i] & 0xF) != (hg[i] & 0xF);
      for (size_t i = 0; i < hc.size(); ++i) diff_codes += (hc[i] >> 4) != (hg[i] >> 4);
      const double frac = static_cast<double>(diff_codes) / (2.0 * hc.size());
      INFO("gemm1 differing FP4 codes: " << diff_codes << " (" << frac * 100 << "%)");
      REQUIRE(frac <= 0.02);
      for (int64_t row = 0; row < r.P; ++row)
        if (p2t[row] < 0) {
          for (int64_t j = 0; j < q.I / 2; ++j) REQUIRE(hg[row * (q.I / 2) + j] == 0);
          for (int64_t j = 0; j < q.I / 16; ++j) REQUIRE(hsg[row * (q.I / 16) + j] == 0);
        }
      require_close_norm(dequant_rows(hc, hsc, r.P, q.I, out_gs), dequant_rows(hg, hsg, r.P, q.I, out_gs), 3e-2, 0.35,
                         "gemm1 dequantized");
    };
    check_gemm1(fetch<uint8_t>(g, h.g), fetch<uint8_t>(g, hs.g));

    // gemm2 on the CPU's gemm1 output.
    Both h2 = both(DType::kFP4x2, r.P, q.I / 2, hc, "h2");
    Both h2s = both(DType::kE4M3, r.P, q.I / 16, hsc, "h2_s");
    Both w2 = both(DType::kFP4x2, q.E * q.H, q.I / 2, rand_bytes(q.E * q.H * q.I / 2, 105), "w2");
    Both w2s = both(DType::kE4M3, q.E * q.H, q.I / 16, rand_e4m3(q.E * q.H * q.I / 16, 106, 0.05f, 1.0f), "w2_s");
    Both w2gs = both(DType::kF32, 1, q.E, rand_f32(q.E, 107, 0.01f, 0.03f), "w2_gs");
    Both o2 = out(DType::kBF16, r.P, q.H, "gemm2_out");
    REQUIRE(c.moe_gemm2_fp4(h2.c, h2s.c, h_gs, w2.c, w2s.c, w2gs.c, offsets.c, perm.c, o2.c).is_ok());
    st = g.moe_gemm2_fp4(h2.g, h2s.g, h_gs, w2.g, w2s.g, w2gs.g, offsets.g, perm.g, o2.g);
    INFO(st.message());
    REQUIRE(st.is_ok());
    const std::vector<uint16_t> oc = fetch<uint16_t>(c, o2.c);
    auto check_gemm2 = [&](const std::vector<uint16_t>& og) {
      for (int64_t row = 0; row < r.P; ++row)
        if (p2t[row] < 0)
          for (int64_t j = 0; j < q.H; ++j) REQUIRE(og[row * q.H + j] == 0);
      require_close_norm(as_f64_bf16(oc), as_f64_bf16(og), 1e-2, 4e-2, "gemm2");
    };
    check_gemm2(fetch<uint16_t>(g, o2.g));

    // Every forced kernel path (kernels/moe_gemm_fp4.cuh) against the same CPU results, launched
    // directly on the default stream. The tiled paths need K % 64 == 0 and refuse otherwise
    // (cudaErrorInvalidValue); kWgmma also needs an sm_90a build on a compute capability 9.0 GPU.
    {
      using kern::Fp4GemmPath;
      auto cp = [](const Tensor& t) { return static_cast<const uint8_t*>(t.raw()); };
      int major = 0, minor = 0;
      REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess);
      REQUIRE(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) == cudaSuccess);
      for (Fp4GemmPath path : {Fp4GemmPath::kLegacy, Fp4GemmPath::kTiled, Fp4GemmPath::kTiledSkip,
                               Fp4GemmPath::kTiledStaged, Fp4GemmPath::kWgmma, Fp4GemmPath::kWgmmaWs,
                               Fp4GemmPath::kWgmmaWs2, Fp4GemmPath::kWgmmaPersist, Fp4GemmPath::kWgmmaPersistRA,
                               Fp4GemmPath::kWgmmaWsRs, Fp4GemmPath::kSmallM}) {
        INFO("forced Fp4GemmPath " << static_cast<int>(path));
        const bool small = path == Fp4GemmPath::kSmallM;
        const bool tiled = path != Fp4GemmPath::kLegacy && !small;
        if (!small && static_cast<int>(path) >= static_cast<int>(Fp4GemmPath::kWgmma) && !(major == 9 && minor == 0))
          continue;
        Both hp = out(DType::kFP4x2, r.P, q.I / 2, "h_path");
        Both hsp = out(DType::kE4M3, r.P, q.I / 16, "h_s_path");
        Both op = out(DType::kBF16, r.P, q.H, "gemm2_out_path");
        REQUIRE(g.synchronize().is_ok());
        const cudaError_t e1 = kern::launch_moe_gemm1_fp4(
            cp(a.g), a.g.ld(), cp(as.g), as.g.ld(), a_gs, cp(w13.g), w13.g.ld(), cp(w13s.g), w13s.g.ld(),
            static_cast<const float*>(w13gs.g.raw()), static_cast<const int32_t*>(offsets.g.raw()),
            static_cast<const int32_t*>(perm.g.raw()), r.P, q.E, q.H, q.I, out_gs, static_cast<uint8_t*>(hp.g.raw()),
            hp.g.ld(), static_cast<uint8_t*>(hsp.g.raw()), hsp.g.ld(), nullptr, path);
        const cudaError_t e2 = kern::launch_moe_gemm2_fp4(
            cp(h2.g), h2.g.ld(), cp(h2s.g), h2s.g.ld(), h_gs, cp(w2.g), w2.g.ld(), cp(w2s.g), w2s.g.ld(),
            static_cast<const float*>(w2gs.g.raw()), static_cast<const int32_t*>(offsets.g.raw()),
            static_cast<const int32_t*>(perm.g.raw()), r.P, q.E, q.I, q.H, static_cast<uint16_t*>(op.g.raw()), op.g.ld(),
            nullptr, path);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        if (small) {  // kSmallM: K % 64 and whole 128- (gemm1) / 256-column (gemm2) tiles
          REQUIRE(e1 == (q.H % 64 == 0 && q.I % 128 == 0 ? cudaSuccess : cudaErrorInvalidValue));
          REQUIRE(e2 == (q.I % 64 == 0 && q.H % 256 == 0 ? cudaSuccess : cudaErrorInvalidValue));
        } else {
          REQUIRE(e1 == (tiled && q.H % 64 != 0 ? cudaErrorInvalidValue : cudaSuccess));
          REQUIRE(e2 == (tiled && q.I % 64 != 0 ? cudaErrorInvalidValue : cudaSuccess));
        }
        if (e1 == cudaSuccess) check_gemm1(fetch<uint8_t>(g, hp.g), fetch<uint8_t>(g, hsp.g));
        if (e2 == cudaSuccess) check_gemm2(fetch<uint16_t>(g, op.g));
      }
      // gemm1 on a kGemm1Tiled copy of w13 (kAuto, kWgmmaWsRs, kWgmmaPersist, kSmallM): where the sizes
      // allow it, against the CPU too; elsewhere, and for any other path, the launch refuses
      // (cudaErrorInvalidValue) rather than misread the layout.
      if (major == 9 && minor == 0) {
        Both wt = out(DType::kFP4x2, q.E * 2 * q.I, q.H / 2, "w13_tiled");
        Both wts = out(DType::kE4M3, q.E * 2 * q.I, q.H / 16, "w13_s_tiled");
        const bool ok = kern::gemm1_tiled_ok(q.H, q.I);
        REQUIRE(g.synchronize().is_ok());
        REQUIRE(kern::launch_pack_gemm1_weights_tiled(cp(w13.g), w13.g.ld(), cp(w13s.g), w13s.g.ld(), q.E, q.H, q.I,
                                                      static_cast<uint8_t*>(wt.g.raw()), static_cast<uint8_t*>(wts.g.raw()),
                                                      nullptr) == (ok ? cudaSuccess : cudaErrorInvalidValue));
        for (Fp4GemmPath path : {Fp4GemmPath::kAuto, Fp4GemmPath::kWgmmaWsRs, Fp4GemmPath::kWgmmaPersist,
                                 Fp4GemmPath::kWgmmaWs2, Fp4GemmPath::kSmallM}) {
          INFO("gemm1 on tiled w13, Fp4GemmPath " << static_cast<int>(path));
          Both hp = out(DType::kFP4x2, r.P, q.I / 2, "h_tiled");  // poisoned for each path
          Both hsp = out(DType::kE4M3, r.P, q.I / 16, "h_s_tiled");
          REQUIRE(g.synchronize().is_ok());
          const cudaError_t e1 = kern::launch_moe_gemm1_fp4(
              cp(a.g), a.g.ld(), cp(as.g), as.g.ld(), a_gs, cp(wt.g), wt.g.ld(), cp(wts.g), wts.g.ld(),
              static_cast<const float*>(w13gs.g.raw()), static_cast<const int32_t*>(offsets.g.raw()),
              static_cast<const int32_t*>(perm.g.raw()), r.P, q.E, q.H, q.I, out_gs, static_cast<uint8_t*>(hp.g.raw()),
              hp.g.ld(), static_cast<uint8_t*>(hsp.g.raw()), hsp.g.ld(), nullptr, path,
              kern::Fp4WeightLayout::kGemm1Tiled);
          REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
          const bool runs = ok && path != Fp4GemmPath::kWgmmaWs2;
          REQUIRE(e1 == (runs ? cudaSuccess : cudaErrorInvalidValue));
          if (runs) check_gemm1(fetch<uint8_t>(g, hp.g), fetch<uint8_t>(g, hsp.g));
        }
        // gemm2's layout handed to gemm1: refused before any launch.
        CHECK(kern::launch_moe_gemm1_fp4(cp(a.g), a.g.ld(), cp(as.g), as.g.ld(), a_gs, cp(wt.g), wt.g.ld(), cp(wts.g),
                                         wts.g.ld(), static_cast<const float*>(w13gs.g.raw()),
                                         static_cast<const int32_t*>(offsets.g.raw()),
                                         static_cast<const int32_t*>(perm.g.raw()), r.P, q.E, q.H, q.I, out_gs, nullptr,
                                         q.I / 2, nullptr, q.I / 16, nullptr, Fp4GemmPath::kAuto,
                                         kern::Fp4WeightLayout::kGemm2Tiled) == cudaErrorInvalidValue);
      }
      // gemm2 on a kGemm2Tiled copy of w2 (kAuto, kWgmmaPersist, kSmallM; kWgmmaWs2 and gemm1's layout
      // are refused), likewise.
      if (major == 9 && minor == 0) {
        Both wt = out(DType::kFP4x2, q.E * q.H, q.I / 2, "w2_tiled");
        Both wts = out(DType::kE4M3, q.E * q.H, q.I / 16, "w2_s_tiled");
        const bool ok = kern::gemm2_tiled_ok(q.I, q.H);
        REQUIRE(g.synchronize().is_ok());
        REQUIRE(kern::launch_pack_gemm2_weights_tiled(cp(w2.g), w2.g.ld(), cp(w2s.g), w2s.g.ld(), q.E, q.I, q.H,
                                                      static_cast<uint8_t*>(wt.g.raw()), static_cast<uint8_t*>(wts.g.raw()),
                                                      nullptr) == (ok ? cudaSuccess : cudaErrorInvalidValue));
        for (auto [path, layout] : {std::pair{Fp4GemmPath::kAuto, kern::Fp4WeightLayout::kGemm2Tiled},
                                    std::pair{Fp4GemmPath::kWgmmaPersist, kern::Fp4WeightLayout::kGemm2Tiled},
                                    std::pair{Fp4GemmPath::kSmallM, kern::Fp4WeightLayout::kGemm2Tiled},
                                    std::pair{Fp4GemmPath::kSmallM, kern::Fp4WeightLayout::kGemm1Tiled},
                                    std::pair{Fp4GemmPath::kWgmmaWs2, kern::Fp4WeightLayout::kGemm2Tiled},
                                    std::pair{Fp4GemmPath::kAuto, kern::Fp4WeightLayout::kGemm1Tiled}}) {
          INFO("gemm2 on tiled w2, Fp4GemmPath " << static_cast<int>(path) << ", layout " << static_cast<int>(layout));
          Both op = out(DType::kBF16, r.P, q.H, "gemm2_out_tiled");
          REQUIRE(g.synchronize().is_ok());
          const cudaError_t e2 = kern::launch_moe_gemm2_fp4(
              cp(h2.g), h2.g.ld(), cp(h2s.g), h2s.g.ld(), h_gs, cp(wt.g), wt.g.ld(), cp(wts.g), wts.g.ld(),
              static_cast<const float*>(w2gs.g.raw()), static_cast<const int32_t*>(offsets.g.raw()),
              static_cast<const int32_t*>(perm.g.raw()), r.P, q.E, q.I, q.H, static_cast<uint16_t*>(op.g.raw()),
              op.g.ld(), nullptr, path, layout);
          REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
          const bool runs = ok && path != Fp4GemmPath::kWgmmaWs2 && layout == kern::Fp4WeightLayout::kGemm2Tiled;
          REQUIRE(e2 == (runs ? cudaSuccess : cudaErrorInvalidValue));
          if (runs) check_gemm2(fetch<uint16_t>(g, op.g));
        }
      }
    }

    // combine on the CPU's gemm2 output: exact, with and without a shared-expert input.
    Both g2 = both(DType::kBF16, r.P, q.H, oc, "g2");
    Both tw = both(DType::kF32, q.T, q.k, rand_f32(q.T * q.k, 108, 0.01f, 1.0f), "tw");
    Both shared = both(DType::kBF16, q.T, q.H, rand_bf16(q.T * q.H, 109, 1.0f), "shared");
    for (bool with_shared : {true, false}) {
      Both o = out(DType::kBF16, q.T, q.H, "moe_out");
      REQUIRE(c.moe_combine(g2.c, e2pb.c, tw.c, with_shared ? shared.c : Tensor(), o.c).is_ok());
      REQUIRE(g.moe_combine(g2.g, e2pb.g, tw.g, with_shared ? shared.g : Tensor(), o.g).is_ok());
      auto [x, y] = fetch2<uint16_t>(o);
      require_equal(x, y, with_shared ? "combine (shared)" : "combine");
    }
  }
}

// The bytes of R weight rows of K elements that the GPU (gc codes, gcs scales) does not hold where
// the CPU's row-major copy (rc, rcs) says: at the tiled layout's offsets (code_at / scale_at: row,
// byte in the row -> offset) when tiled, else at the same row-major offsets.
template <class CodeAt, class ScaleAt>
size_t misplaced_weight_bytes(const std::vector<uint8_t>& rc, const std::vector<uint8_t>& rcs,
                              const std::vector<uint8_t>& gc, const std::vector<uint8_t>& gcs, int64_t R, int64_t K,
                              bool tiled, CodeAt code_at, ScaleAt scale_at) {
  size_t misplaced = 0;
  for (int64_t row = 0; row < R; ++row) {
    for (int64_t b = 0; b < K / 2; ++b) {
      const int64_t at = tiled ? code_at(row, b) : row * (K / 2) + b;
      misplaced += gc[static_cast<size_t>(at)] != rc[static_cast<size_t>(row * (K / 2) + b)];
    }
    for (int64_t b = 0; b < K / 16; ++b) {
      const int64_t at = tiled ? scale_at(row, b) : row * (K / 16) + b;
      misplaced += gcs[static_cast<size_t>(at)] != rcs[static_cast<size_t>(row * (K / 16) + b)];
    }
  }
  return misplaced;
}

// The warp-specialized producers convert e4m3 scales with the hardware cvt (e4m3x2 -> f16x2) and
// build the fp16 codes with byte permutes; kWgmma converts with the bit-trick routine and feeds the
// same wgmma. So every scale byte must give kWgmma's bits in every warp-specialized path: all 254
// finite bytes (negative, zero, subnormal, 448) swept over the A and weight scales, plus NaN scales
// in one A row and one weight row of each GEMM (their outputs: NaN in both, payload not compared).
TEST_CASE("cuda FP4 GEMM warp-specialized paths give kWgmma's bits for every e4m3 scale byte", "[gpu]") {
  REQUIRE_GPU();
  int major = 0, minor = 0;
  REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) == cudaSuccess);
  if (!(major == 9 && minor == 0)) MOEPROF_SKIP("the wgmma paths need a compute capability 9.0 GPU");
  using kern::Fp4GemmPath;
  auto sweep = [](size_t n, uint32_t mul, uint32_t add) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) {
      uint32_t b = (static_cast<uint32_t>(i) * mul + add) & 0xFFu;
      if ((b & 0x7Fu) == 0x7Fu) b ^= 1u;  // NaN bytes go in separately
      v[i] = static_cast<uint8_t>(b);
    }
    return v;
  };
  // Three shapes: K = 320 / 192 (5 and 3 k steps), 512 / 256, and 1024 / 512 over 9001 tokens: about
  // 290 row tiles, so every CTA of the persistent kernels (one per SM) takes two or more work items
  // and kWgmmaPersistRA's resident A tiles are refilled (its A-free barriers complete and are
  // waited on) with gemm2's full K of 8 steps.
  struct Shape { int64_t H, I, T; };
  for (const Shape& sh : {Shape{320, 192, 150}, Shape{512, 256, 150}, Shape{1024, 512, 9001}}) {
    const int64_t H = sh.H, I = sh.I, T = sh.T;
    INFO("H=" << H << " I=" << I << " T=" << T);
    const int64_t k = 4, E = 6, E_used = 5, tile = 16;
    Both ids = both(DType::kI32, T, k, topk_ids_host(T, k, E_used, 77), "ids");
    PermuteOut r = run_permute(ids, T, k, E, tile);
    auto& c = *env().cpu;
    auto& g = *env().gpu;
    Both offsets = both(DType::kI32, 1, E + 1, fetch<int32_t>(c, r.offsets.c), "offsets");
    Both perm = both(DType::kI32, 1, r.P, fetch<int32_t>(c, r.p2t.c), "p2t");
    std::vector<uint8_t> as = sweep(T * H / 16, 7, 3), w13s = sweep(E * 2 * I * H / 16, 13, 5);
    std::vector<uint8_t> hs = sweep(r.P * I / 16, 11, 1), w2s = sweep(E * H * I / 16, 5, 9);
    as[2 * (H / 16) + 1] = 0x7F;     // token 2, K block 1
    w13s[5 * (H / 16) + 0] = 0xFF;   // expert 0, gate row 5
    hs[3 * (I / 16) + 2] = 0xFF;     // padded row 3
    w2s[7 * (I / 16) + 1] = 0x7F;    // expert 0, output column 7
    Both a = both(DType::kFP4x2, T, H / 2, rand_bytes(T * H / 2, 200), "a");
    Both a_s = both(DType::kE4M3, T, H / 16, as, "a_s");
    Both w13 = both(DType::kFP4x2, E * 2 * I, H / 2, rand_bytes(E * 2 * I * H / 2, 201), "w13");
    Both w13_s = both(DType::kE4M3, E * 2 * I, H / 16, w13s, "w13_s");
    Both w13gs = both(DType::kF32, 1, E, rand_f32(E, 202, 1e-4f, 3e-4f), "w13_gs");
    Both h = both(DType::kFP4x2, r.P, I / 2, rand_bytes(r.P * I / 2, 203), "h");
    Both h_s = both(DType::kE4M3, r.P, I / 16, hs, "h_s");
    Both w2 = both(DType::kFP4x2, E * H, I / 2, rand_bytes(E * H * I / 2, 204), "w2");
    Both w2_s = both(DType::kE4M3, E * H, I / 16, w2s, "w2_s");
    Both w2gs = both(DType::kF32, 1, E, rand_f32(E, 205, 1e-4f, 3e-4f), "w2_gs");
    auto cp = [](const Tensor& t) { return static_cast<const uint8_t*>(t.raw()); };
    struct Outs {
      std::vector<uint8_t> q, qs;
      std::vector<uint16_t> o;
    };
    auto run = [&](Fp4GemmPath path) {
      Both hq = out(DType::kFP4x2, r.P, I / 2, "h_out");
      Both hqs = out(DType::kE4M3, r.P, I / 16, "h_s_out");
      Both o = out(DType::kBF16, r.P, H, "gemm2_out");
      REQUIRE(g.synchronize().is_ok());
      REQUIRE(kern::launch_moe_gemm1_fp4(cp(a.g), a.g.ld(), cp(a_s.g), a_s.g.ld(), 1.0f, cp(w13.g), w13.g.ld(),
                                         cp(w13_s.g), w13_s.g.ld(), static_cast<const float*>(w13gs.g.raw()),
                                         static_cast<const int32_t*>(offsets.g.raw()),
                                         static_cast<const int32_t*>(perm.g.raw()), r.P, E, H, I, 0.05f,
                                         static_cast<uint8_t*>(hq.g.raw()), hq.g.ld(), static_cast<uint8_t*>(hqs.g.raw()),
                                         hqs.g.ld(), nullptr, path) == cudaSuccess);
      REQUIRE(kern::launch_moe_gemm2_fp4(cp(h.g), h.g.ld(), cp(h_s.g), h_s.g.ld(), 1.0f, cp(w2.g), w2.g.ld(),
                                         cp(w2_s.g), w2_s.g.ld(), static_cast<const float*>(w2gs.g.raw()),
                                         static_cast<const int32_t*>(offsets.g.raw()),
                                         static_cast<const int32_t*>(perm.g.raw()), r.P, E, I, H,
                                         static_cast<uint16_t*>(o.g.raw()), o.g.ld(), nullptr, path) == cudaSuccess);
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      return Outs{fetch<uint8_t>(g, hq.g), fetch<uint8_t>(g, hqs.g), fetch<uint16_t>(g, o.g)};
    };
    const Outs ref = run(Fp4GemmPath::kWgmma);
    // The sweep must reach the outputs: mostly finite, nonzero and varied, with the NaN scales'
    // column and rows NaN.
    size_t nan = 0, nonzero = 0;
    for (uint16_t v : ref.o) {
      nan += (v & 0x7F80u) == 0x7F80u && (v & 0x7Fu) != 0;
      nonzero += (v & 0x7FFFu) != 0;
    }
    INFO("gemm2 reference: " << nan << " NaN, " << nonzero << " nonzero of " << ref.o.size());
    REQUIRE(nan > 0);
    REQUIRE(nan < ref.o.size() / 8);
    REQUIRE(nonzero > ref.o.size() / 2);
    // MOEPROF_SWEEP_PATHS (e.g. "8,9"): compare only these Fp4GemmPath numbers, for the slow
    // compute-sanitizer runs (scripts/device_all.sh step gemm-sanitizer).
    const char* only_env = std::getenv("MOEPROF_SWEEP_PATHS");
    const std::string only = only_env ? "," + std::string(only_env) + "," : std::string();
    int compared = 0;
    for (Fp4GemmPath path : {Fp4GemmPath::kWgmmaWs, Fp4GemmPath::kWgmmaWs2, Fp4GemmPath::kWgmmaPersist,
                             Fp4GemmPath::kWgmmaPersistRA, Fp4GemmPath::kWgmmaWsRs}) {
      if (only.size() > 2 && only.find("," + std::to_string(static_cast<int>(path)) + ",") == std::string::npos) continue;
      INFO("Fp4GemmPath " << static_cast<int>(path));
      ++compared;
      const Outs got = run(path);
      require_equal(ref.q, got.q, "gemm1 codes");
      require_equal(ref.qs, got.qs, "gemm1 scales");
      REQUIRE(got.o.size() == ref.o.size());
      size_t bad = 0, nan_bits = 0;
      for (size_t i = 0; i < ref.o.size(); ++i) {
        const bool na = (ref.o[i] & 0x7F80u) == 0x7F80u && (ref.o[i] & 0x7Fu) != 0;
        const bool nb = (got.o[i] & 0x7F80u) == 0x7F80u && (got.o[i] & 0x7Fu) != 0;
        bad += na ? !nb : got.o[i] != ref.o[i];
        nan_bits += na && got.o[i] != ref.o[i];
      }
      INFO("gemm2 outputs differing from kWgmma: " << bad << "; NaNs with other bits: " << nan_bits);
      REQUIRE(bad == 0);
      CHECK(nan_bits == 0);
    }
    // kWgmmaWsRs on a kGemm1Tiled copy of w13 (counted as path 10) and its persistent form
    // (kWgmmaPersist on tiled w13, counted as 13; at the third shape every CTA takes several work
    // items): the packed bytes are exactly the row-major ones at their fp4_tiled.h offsets, and
    // gemm1 gives kWgmma's bits.
    const bool want10 = only.size() <= 2 || only.find(",10,") != std::string::npos;
    const bool want13 = only.size() <= 2 || only.find(",13,") != std::string::npos;
    if (kern::gemm1_tiled_ok(H, I) && (want10 || want13)) {
      INFO("gemm1 on tiled w13");
      Both wt = out(DType::kFP4x2, E * 2 * I, H / 2, "w13_tiled");
      Both wts = out(DType::kE4M3, E * 2 * I, H / 16, "w13_s_tiled");
      REQUIRE(g.synchronize().is_ok());
      REQUIRE(kern::launch_pack_gemm1_weights_tiled(cp(w13.g), w13.g.ld(), cp(w13_s.g), w13_s.g.ld(), E, H, I,
                                                    static_cast<uint8_t*>(wt.g.raw()), static_cast<uint8_t*>(wts.g.raw()),
                                                    nullptr) == cudaSuccess);
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      const std::vector<uint8_t> codes = fetch<uint8_t>(c, w13.c), packed = fetch<uint8_t>(g, wt.g);
      const std::vector<uint8_t> packed_s = fetch<uint8_t>(g, wts.g);
      REQUIRE(misplaced_weight_bytes(codes, w13s, packed, packed_s, E * 2 * I, H, true,
                                     [&](int64_t row, int64_t b) { return kern::gemm1_tiled_code_offset(row, b, H, I); },
                                     [&](int64_t row, int64_t b) { return kern::gemm1_tiled_scale_offset(row, b, H, I); }) == 0);
      for (Fp4GemmPath path : {Fp4GemmPath::kWgmmaWsRs, Fp4GemmPath::kWgmmaPersist}) {
        if (!(path == Fp4GemmPath::kWgmmaWsRs ? want10 : want13)) continue;
        INFO("tiled w13, Fp4GemmPath " << static_cast<int>(path));
        ++compared;
        Both hq = out(DType::kFP4x2, r.P, I / 2, "h_out_tiled");
        Both hqs = out(DType::kE4M3, r.P, I / 16, "h_s_out_tiled");
        REQUIRE(g.synchronize().is_ok());
        REQUIRE(kern::launch_moe_gemm1_fp4(cp(a.g), a.g.ld(), cp(a_s.g), a_s.g.ld(), 1.0f, cp(wt.g), wt.g.ld(),
                                           cp(wts.g), wts.g.ld(), static_cast<const float*>(w13gs.g.raw()),
                                           static_cast<const int32_t*>(offsets.g.raw()),
                                           static_cast<const int32_t*>(perm.g.raw()), r.P, E, H, I, 0.05f,
                                           static_cast<uint8_t*>(hq.g.raw()), hq.g.ld(),
                                           static_cast<uint8_t*>(hqs.g.raw()), hqs.g.ld(), nullptr, path,
                                           kern::Fp4WeightLayout::kGemm1Tiled) == cudaSuccess);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        require_equal(ref.q, fetch<uint8_t>(g, hq.g), "gemm1 codes (tiled w13)");
        require_equal(ref.qs, fetch<uint8_t>(g, hqs.g), "gemm1 scales (tiled w13)");
      }
    }
    // gemm2 on a kGemm2Tiled copy of w2: kAuto (the resident-A kernel here, counted as path 11)
    // and kWgmmaPersist (path 12) give kWgmma's bits; the packed bytes sit at their offsets.
    const bool want11 = only.size() <= 2 || only.find(",11,") != std::string::npos;
    const bool want12 = only.size() <= 2 || only.find(",12,") != std::string::npos;
    if (kern::gemm2_tiled_ok(I, H) && (want11 || want12)) {
      INFO("gemm2 on tiled w2");
      Both wt = out(DType::kFP4x2, E * H, I / 2, "w2_tiled");
      Both wts = out(DType::kE4M3, E * H, I / 16, "w2_s_tiled");
      REQUIRE(g.synchronize().is_ok());
      REQUIRE(kern::launch_pack_gemm2_weights_tiled(cp(w2.g), w2.g.ld(), cp(w2_s.g), w2_s.g.ld(), E, I, H,
                                                    static_cast<uint8_t*>(wt.g.raw()), static_cast<uint8_t*>(wts.g.raw()),
                                                    nullptr) == cudaSuccess);
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      const std::vector<uint8_t> codes = fetch<uint8_t>(c, w2.c), packed = fetch<uint8_t>(g, wt.g);
      const std::vector<uint8_t> packed_s = fetch<uint8_t>(g, wts.g);
      REQUIRE(misplaced_weight_bytes(codes, w2s, packed, packed_s, E * H, I, true,
                                     [&](int64_t row, int64_t b) { return kern::gemm2_tiled_code_offset(row, b, I, H); },
                                     [&](int64_t row, int64_t b) { return kern::gemm2_tiled_scale_offset(row, b, I, H); }) == 0);
      for (Fp4GemmPath path : {Fp4GemmPath::kAuto, Fp4GemmPath::kWgmmaPersist}) {
        if (!(path == Fp4GemmPath::kAuto ? want11 : want12)) continue;
        INFO("tiled w2, Fp4GemmPath " << static_cast<int>(path));
        ++compared;
        Both o = out(DType::kBF16, r.P, H, "gemm2_out_tiled");
        REQUIRE(g.synchronize().is_ok());
        REQUIRE(kern::launch_moe_gemm2_fp4(cp(h.g), h.g.ld(), cp(h_s.g), h_s.g.ld(), 1.0f, cp(wt.g), wt.g.ld(),
                                           cp(wts.g), wts.g.ld(), static_cast<const float*>(w2gs.g.raw()),
                                           static_cast<const int32_t*>(offsets.g.raw()),
                                           static_cast<const int32_t*>(perm.g.raw()), r.P, E, I, H,
                                           static_cast<uint16_t*>(o.g.raw()), o.g.ld(), nullptr, path,
                                           kern::Fp4WeightLayout::kGemm2Tiled) == cudaSuccess);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        const std::vector<uint16_t> got = fetch<uint16_t>(g, o.g);
        size_t bad = 0;
        for (size_t i = 0; i < ref.o.size(); ++i) {
          const bool na = (ref.o[i] & 0x7F80u) == 0x7F80u && (ref.o[i] & 0x7Fu) != 0;
          const bool nb = (got[i] & 0x7F80u) == 0x7F80u && (got[i] & 0x7Fu) != 0;
          bad += na ? !nb : got[i] != ref.o[i];
        }
        INFO("gemm2 outputs differing from kWgmma: " << bad);
        REQUIRE(bad == 0);
      }
    }
    REQUIRE(compared > 0);  // a MOEPROF_SWEEP_PATHS that names none of them compares nothing
  }
}

// CudaBackend stores gemm1's weights tiled where its kernel reads them (init_moe_w13): the same
// values as the CPU's row-major init at their fp4_tiled.h offsets; gemm1 through the backend on
// them gives the bits of the row-major weights; a size the kernel cannot tile stays row-major;
// the tiled codes with other scales are refused with one line.
TEST_CASE("cuda init_moe_w13: tiled where gemm1 reads it, same values, same gemm1 bits", "[gpu]") {
  REQUIRE_GPU();
  auto& c = *env().cpu;
  auto& g = *env().gpu;
  struct Case { int64_t E, H, I; bool tiled; };
  const bool sm90 = kern::gemm1_tiled_supported(192, 384);
  for (const Case& q : {Case{3, 192, 384, sm90}, Case{5, 80, 48, false}}) {
    INFO("E=" << q.E << " H=" << q.H << " I=" << q.I);
    const int64_t R = q.E * 2 * q.I;
    Both w = out(DType::kFP4x2, R, q.H / 2, "w13"), ws = out(DType::kE4M3, R, q.H / 16, "w13_s");
    REQUIRE(c.init_moe_w13(w.c, ws.c, q.E, 4242, 4343, 16.0f, 64.0f).is_ok());
    REQUIRE(g.init_moe_w13(w.g, ws.g, q.E, 4242, 4343, 16.0f, 64.0f).is_ok());
    const auto rc = fetch<uint8_t>(c, w.c), rcs = fetch<uint8_t>(c, ws.c);
    const auto gc = fetch<uint8_t>(g, w.g), gcs = fetch<uint8_t>(g, ws.g);
    REQUIRE(misplaced_weight_bytes(rc, rcs, gc, gcs, R, q.H, q.tiled,
                                   [&](int64_t row, int64_t b) { return kern::gemm1_tiled_code_offset(row, b, q.H, q.I); },
                                   [&](int64_t row, int64_t b) { return kern::gemm1_tiled_scale_offset(row, b, q.H, q.I); }) == 0);
    if (q.tiled) CHECK(gc != rc);  // really another order
    // gemm1 through the backend: tiled weights vs row-major copies (init_bytes / init_e4m3) on the GPU.
    const int64_t T = 97, k = 4;
    Both ids = both(DType::kI32, T, k, topk_ids_host(T, k, q.E, 31), "ids");
    PermuteOut r = run_permute(ids, T, k, q.E, 16);
    Both offsets = both(DType::kI32, 1, q.E + 1, fetch<int32_t>(c, r.offsets.c), "offsets");
    Both perm = both(DType::kI32, 1, r.P, fetch<int32_t>(c, r.p2t.c), "p2t");
    Both a = both(DType::kFP4x2, T, q.H / 2, rand_bytes(T * q.H / 2, 300), "a");
    Both as = both(DType::kE4M3, T, q.H / 16, rand_e4m3(T * q.H / 16, 301, 0.05f, 1.0f), "a_s");
    Both gs = both(DType::kF32, 1, q.E, rand_f32(q.E, 302, 1e-4f, 3e-4f), "w13_gs");
    Both wr = out(DType::kFP4x2, R, q.H / 2, "w13_rm"), wrs = out(DType::kE4M3, R, q.H / 16, "w13_s_rm");
    REQUIRE(g.init_bytes(wr.g, 4242).is_ok());
    REQUIRE(g.init_e4m3(wrs.g, 4343, 16.0f, 64.0f).is_ok());
    Both h1 = out(DType::kFP4x2, r.P, q.I / 2, "h1"), h1s = out(DType::kE4M3, r.P, q.I / 16, "h1_s");
    Both h2 = out(DType::kFP4x2, r.P, q.I / 2, "h2"), h2s = out(DType::kE4M3, r.P, q.I / 16, "h2_s");
    REQUIRE(g.moe_gemm1_fp4(a.g, as.g, 1.0f, w.g, ws.g, gs.g, offsets.g, perm.g, 0.05f, h1.g, h1s.g).is_ok());
    REQUIRE(g.moe_gemm1_fp4(a.g, as.g, 1.0f, wr.g, wrs.g, gs.g, offsets.g, perm.g, 0.05f, h2.g, h2s.g).is_ok());
    REQUIRE(g.synchronize().is_ok());
    const auto q1 = fetch<uint8_t>(g, h1.g), q2 = fetch<uint8_t>(g, h2.g);
    require_equal(q1, q2, "gemm1 codes, tiled vs row-major w13");
    require_equal(fetch<uint8_t>(g, h1s.g), fetch<uint8_t>(g, h2s.g), "gemm1 scales, tiled vs row-major w13");
    size_t nonzero = 0;
    for (uint8_t v : q1) nonzero += v != 0;
    CHECK(nonzero > q1.size() / 2);
    if (q.tiled) {
      const Status st = g.moe_gemm1_fp4(a.g, as.g, 1.0f, w.g, wrs.g, gs.g, offsets.g, perm.g, 0.05f, h1.g, h1s.g);
      CHECK(st.code() == ErrorCode::kBadInput);
      CHECK(st.message() == "moe_gemm1_fp4: w13 holds the tiled layout of init_moe_w13 and must come with its own "
                            "w13_scales and all its " + std::to_string(R) + " rows");
    }
  }
}

// The same for gemm2's weights (init_moe_w2): tiled where the persistent kernels read them, the CPU's
// values at their offsets, gemm2 through the backend with the row-major copies' bits, and the
// refusals: other scales, and one GEMM's tiled weights passed to the other.
TEST_CASE("cuda init_moe_w2: tiled where gemm2 reads it, same values, same gemm2 bits", "[gpu]") {
  REQUIRE_GPU();
  auto& c = *env().cpu;
  auto& g = *env().gpu;
  struct Case { int64_t E, I, H; bool tiled; };
  const bool sm90 = kern::gemm2_tiled_supported(192, 768);
  // I = 192: the resident-A kernel; I = 576: kWgmmaPersist's layout (K > 512); H = 80: row-major.
  for (const Case& q : {Case{3, 192, 768, sm90}, Case{2, 576, 512, sm90}, Case{5, 48, 80, false}}) {
    INFO("E=" << q.E << " I=" << q.I << " H=" << q.H);
    const int64_t R = q.E * q.H;
    Both w = out(DType::kFP4x2, R, q.I / 2, "w2"), ws = out(DType::kE4M3, R, q.I / 16, "w2_s");
    REQUIRE(c.init_moe_w2(w.c, ws.c, q.E, 5252, 5353, 16.0f, 64.0f).is_ok());
    REQUIRE(g.init_moe_w2(w.g, ws.g, q.E, 5252, 5353, 16.0f, 64.0f).is_ok());
    const auto rc = fetch<uint8_t>(c, w.c), rcs = fetch<uint8_t>(c, ws.c);
    const auto gc = fetch<uint8_t>(g, w.g), gcs = fetch<uint8_t>(g, ws.g);
    REQUIRE(misplaced_weight_bytes(rc, rcs, gc, gcs, R, q.I, q.tiled,
                                   [&](int64_t row, int64_t b) { return kern::gemm2_tiled_code_offset(row, b, q.I, q.H); },
                                   [&](int64_t row, int64_t b) { return kern::gemm2_tiled_scale_offset(row, b, q.I, q.H); }) == 0);
    if (q.tiled) CHECK(gc != rc);  // really another order
    const int64_t T = 113, k = 4;
    Both ids = both(DType::kI32, T, k, topk_ids_host(T, k, q.E, 41), "ids");
    PermuteOut r = run_permute(ids, T, k, q.E, 16);
    Both offsets = both(DType::kI32, 1, q.E + 1, fetch<int32_t>(c, r.offsets.c), "offsets");
    Both perm = both(DType::kI32, 1, r.P, fetch<int32_t>(c, r.p2t.c), "p2t");
    Both h = both(DType::kFP4x2, r.P, q.I / 2, rand_bytes(r.P * q.I / 2, 310), "h");
    Both hs = both(DType::kE4M3, r.P, q.I / 16, rand_e4m3(r.P * q.I / 16, 311, 0.05f, 1.0f), "h_s");
    Both gs = both(DType::kF32, 1, q.E, rand_f32(q.E, 312, 1e-4f, 3e-4f), "w2_gs");
    Both wr = out(DType::kFP4x2, R, q.I / 2, "w2_rm"), wrs = out(DType::kE4M3, R, q.I / 16, "w2_s_rm");
    REQUIRE(g.init_bytes(wr.g, 5252).is_ok());
    REQUIRE(g.init_e4m3(wrs.g, 5353, 16.0f, 64.0f).is_ok());
    Both o1 = out(DType::kBF16, r.P, q.H, "o1"), o2 = out(DType::kBF16, r.P, q.H, "o2");
    REQUIRE(g.moe_gemm2_fp4(h.g, hs.g, 1.0f, w.g, ws.g, gs.g, offsets.g, perm.g, o1.g).is_ok());
    REQUIRE(g.moe_gemm2_fp4(h.g, hs.g, 1.0f, wr.g, wrs.g, gs.g, offsets.g, perm.g, o2.g).is_ok());
    REQUIRE(g.synchronize().is_ok());
    const auto v1 = fetch<uint16_t>(g, o1.g);
    require_equal(v1, fetch<uint16_t>(g, o2.g), "gemm2 output, tiled vs row-major w2");
    size_t nonzero = 0;
    for (uint16_t v : v1) nonzero += (v & 0x7FFFu) != 0;
    CHECK(nonzero > v1.size() / 2);
    if (q.tiled) {
      const Status st = g.moe_gemm2_fp4(h.g, hs.g, 1.0f, w.g, wrs.g, gs.g, offsets.g, perm.g, o1.g);
      CHECK(st.code() == ErrorCode::kBadInput);
      CHECK(st.message() == "moe_gemm2_fp4: w2 holds the tiled layout of init_moe_w2 and must come with its own "
                            "w2_scales and all its " + std::to_string(R) + " rows");
    }
  }
  // gemm1's tiled weights handed to gemm2 (as w2 of a shape that fits): refused, not misread.
  if (kern::gemm1_tiled_supported(256, 128)) {
    const int64_t E = 2, H = 256, I = 128;  // w13 [E*2I, H/2] = [512, 128] is also a w2 [E*H, I'/2] with I' = 256
    Both w13 = out(DType::kFP4x2, E * 2 * I, H / 2, "w13"), w13s = out(DType::kE4M3, E * 2 * I, H / 16, "w13_s");
    REQUIRE(g.init_moe_w13(w13.g, w13s.g, E, 1, 2, 16.0f, 64.0f).is_ok());
    const int64_t T = 40, k = 2, I2 = 256;
    Both ids = both(DType::kI32, T, k, topk_ids_host(T, k, E, 43), "ids");
    PermuteOut r = run_permute(ids, T, k, E, 16);
    Both offsets = both(DType::kI32, 1, E + 1, fetch<int32_t>(c, r.offsets.c), "offsets");
    Both perm = both(DType::kI32, 1, r.P, fetch<int32_t>(c, r.p2t.c), "p2t");
    Both h = both(DType::kFP4x2, r.P, I2 / 2, rand_bytes(r.P * I2 / 2, 320), "h");
    Both hs = both(DType::kE4M3, r.P, I2 / 16, rand_e4m3(r.P * I2 / 16, 321, 0.05f, 1.0f), "h_s");
    Both gs = both(DType::kF32, 1, E, rand_f32(E, 322, 1e-4f, 3e-4f), "gs");
    Both o = out(DType::kBF16, r.P, H, "o");
    const Status st = g.moe_gemm2_fp4(h.g, hs.g, 1.0f, w13.g, w13s.g, gs.g, offsets.g, perm.g, o.g);
    CHECK(st.code() == ErrorCode::kBadInput);
    CHECK(st.message() == "moe_gemm2_fp4: w2 holds the tiled layout of init_moe_w13 (the other GEMM's weights)");
    REQUIRE(g.synchronize().is_ok());
  }
}

TEST_CASE("cuda backend reports bad shapes as bad_input and allocates with tags", "[gpu]") {
  REQUIRE_GPU();
  auto& g = *env().gpu;
  CHECK(g.name() == "cuda");
  CHECK(!g.device_name().empty());
  CHECK(g.default_mem_kind(Category::kWeights) == MemKind::kDevice);
  CHECK(g.default_mem_kind(Category::kActivation) == MemKind::kStreamOrdered);
  Tensor x = alloc(g, DType::kBF16, 4, 32, "x");
  Tensor w = alloc(g, DType::kBF16, 1, 16, "w");
  Tensor o = alloc(g, DType::kBF16, 4, 32, "o");
  auto st = g.rmsnorm(x, w, 1e-6f, o);
  CHECK(st.code() == ErrorCode::kBadInput);
  CHECK(st.message() == "rmsnorm: w must have 32 elements (got bf16 1x16)");
  auto big = g.empty(DType::kU8, int64_t{1} << 40, 1024, AllocTag{"huge", "test", Category::kActivation});
  REQUIRE(!big.is_ok());
  CHECK(big.status().code() == ErrorCode::kRunFailure);
  CHECK(big.status().message().find("out of GPU memory") != std::string::npos);
  REQUIRE(g.synchronize().is_ok());
}

// The op contract (src/executor/backend_checks.cpp) is the same for every backend: each bad call of
// tests/executor/op_contract_cases.h gets the CPU backend's exact message from the CUDA backend
// too, and writes nothing; the valid calls run.
TEST_CASE("cuda backend returns the contract's messages for the same bad calls", "[gpu]") {
  REQUIRE_GPU();
  auto& c = *env().cpu;
  auto& g = *env().gpu;
  using Bytes = std::vector<std::vector<uint8_t>>;
  for (const testref::ContractOp& op : testref::contract_ops()) {
    for (size_t i = 0; i < op.bad.size(); ++i) {
      INFO(op.op << " with a bad " << op.bad[i].what);
      Bytes cb, ca, gb, ga;
      const Status sc = op.run(c, static_cast<int>(i), &cb, &ca);
      const Status sg = op.run(g, static_cast<int>(i), &gb, &ga);
      CHECK(sg.code() == ErrorCode::kBadInput);
      CHECK(sg.message() == sc.message());
      CHECK(sg.message() == op.bad[i].message);
      CHECK(ga == gb);
    }
    INFO(op.op << " (valid call)");
    Bytes before, after;
    const Status st = op.run(g, -1, &before, &after);
    INFO(st.message());
    REQUIRE(st.is_ok());
    // No communicator attached: the one-rank collectives are no-ops (as in op_contract_test).
    if (op.op != "all_reduce" && op.op != "all_gather_rows") CHECK(after != before);
  }

  // CUDA-only rules: the permutation workspace (the CPU backend needs none).
  const testref::Mk m{g};
  const int64_t T = 4, k = 2, E = 4, tile = 4;
  const size_t need = g.moe_permute_workspace_bytes(T, k, E);
  REQUIRE(need > 0);
  Tensor ids = m.ints(T, k, {0, 3, 1, 3, 3, 2, 0, 1});
  Tensor off = m.t(DType::kI32, 1, E + 1), p2t = m.t(DType::kI32, 1, T * k + E * (tile - 1)), e2p = m.t(DType::kI32, 1, T * k);
  Status st = g.moe_permute(ids, E, tile, off, p2t, e2p, Tensor());
  CHECK(st.code() == ErrorCode::kBadInput);
  CHECK(st.message() == "moe_permute: workspace must hold at least moe_permute_workspace_bytes(T, k, E) = " +
                            std::to_string(need) + " bytes (got 0)");
  Tensor ws = m.view(DType::kU8, 1, static_cast<int64_t>(need) + 256, 16, static_cast<int64_t>(need));
  st = g.moe_permute(ids, E, tile, off, p2t, e2p, ws);
  CHECK(st.code() == ErrorCode::kBadInput);
  CHECK(st.message() == "moe_permute: workspace must be 256-byte aligned on the CUDA backend (CUB temporary storage)");
  REQUIRE(g.synchronize().is_ok());
}
