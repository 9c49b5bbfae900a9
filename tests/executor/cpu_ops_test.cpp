// Every CpuBackend op against a straightforward float64 reference, on random data with odd sizes.
// Tolerances: bf16 outputs |got - ref| <= 1e-2 |ref| + 1e-5 * (sum of |terms|) (bf16 rounding is
// 2^-9 relative; the second term covers cancellation); fp32 outputs 1e-5 relative instead of 1e-2.
// Ops that only move data, and moe_combine / moe_permute, must match exactly. Outputs are
// written twice over different poison patterns and must agree, so every element is written.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "executor/backends.h"
#include "kernels/common/fp_formats.h"
#include "kernels/common/random.h"
#include "tests/executor/reference.h"

using namespace moeprof;
using namespace moeprof::testref;

namespace {

std::vector<double> to_double(const std::vector<uint16_t>& v) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = bf16_value(v[i]);
  return d;
}

bool close_bf16(double got, double ref, double mag) { return std::fabs(got - ref) <= 1e-2 * std::fabs(ref) + 1e-5 * mag + 1e-30; }
bool close_f32(double got, double ref, double mag) { return std::fabs(got - ref) <= 1e-5 * std::fabs(ref) + 1e-6 * mag + 1e-30; }

// Runs `op` on outputs freshly poisoned with 0xFF (as allocated), then again after filling them
// with 0x00: identical bytes mean the op wrote every output byte.
void check_writes_everything(Backend& b, const std::vector<Tensor*>& outs, const std::function<Status()>& op) {
  for (Tensor* t : outs) REQUIRE(fill_bytes(b, *t, 0xFF));
  REQUIRE(op().is_ok());
  std::vector<std::vector<uint8_t>> first;
  for (Tensor* t : outs) first.push_back(bytes_of(b, *t));
  for (Tensor* t : outs) REQUIRE(fill_bytes(b, *t, 0x00));
  REQUIRE(op().is_ok());
  for (size_t i = 0; i < outs.size(); ++i) CHECK(bytes_of(b, *outs[i]) == first[i]);
}

}  // namespace

// ---- memory ----------------------------------------------------------------------------------

TEST_CASE("cpu backend: identity, allocations, poison", "[cpu][memory]") {
  auto b = make_cpu_backend();
  CHECK(b->name() == "cpu");
  CHECK(b->device_name() == "CPU reference");
  CHECK(b->default_mem_kind(Category::kWeights) == MemKind::kHost);
  auto z1 = empty(*b, DType::kBF16, 0, 16), z2 = empty(*b, DType::kF32, 3, 0);
  REQUIRE(z1.defined());
  REQUIRE(z2.defined());
  CHECK(z1.raw() != nullptr);
  CHECK(z2.raw() != nullptr);
  CHECK(z1.raw() != z2.raw());
  auto t = empty(*b, DType::kBF16, 5, 7);
  CHECK(reinterpret_cast<uintptr_t>(t.raw()) % 64 == 0);
  for (uint16_t h : download<uint16_t>(*b, t)) CHECK(h == 0xFFFF);  // NaN poison
  CHECK(t.storage()->mem_kind() == MemKind::kHost);
}

// ---- init ops --------------------------------------------------------------------------------

TEST_CASE("init ops: deterministic, seed-dependent, in range, logical indexing", "[cpu][init]") {
  auto bp = make_cpu_backend();
  Backend& b = *bp;
  const int64_t R = 13, C = 29;
  auto u1 = empty(b, DType::kBF16, R, C), u2 = empty(b, DType::kBF16, R, C), u3 = empty(b, DType::kBF16, R, C);
  REQUIRE(b.init_uniform(u1, 42, 0.5f).is_ok());
  REQUIRE(b.init_uniform(u2, 42, 0.5f).is_ok());
  REQUIRE(b.init_uniform(u3, 43, 0.5f).is_ok());
  const auto h1 = download<uint16_t>(b, u1), h2 = download<uint16_t>(b, u2), h3 = download<uint16_t>(b, u3);
  CHECK(h1 == h2);
  CHECK(h1 != h3);
  for (size_t i = 0; i < h1.size(); ++i) {
    const double v = bf16_value(h1[i]);
    CHECK(std::fabs(v) <= 0.5);
    // The contract's formula, element i = row * cols + col.
    const double u = static_cast<double>(kern::hash64(42, i) >> 40) / 16777216.0;
    CHECK(v == round_bf16(static_cast<float>(0.5 * (2 * u - 1))));
  }
  auto f = empty(b, DType::kF32, R, C);
  REQUIRE(b.init_uniform(f, 42, 0.5f).is_ok());
  const auto fh = download<float>(b, f);
  for (size_t i = 0; i < fh.size(); ++i) CHECK(round_bf16(fh[i]) == bf16_value(h1[i]));

  // A column view is initialised with its own logical indices and leaves other columns alone.
  auto wide = empty(b, DType::kBF16, R, C + 10);
  Tensor view = wide.cols_view(3, C);
  REQUIRE(b.init_uniform(view, 42, 0.5f).is_ok());
  const auto wh = download<uint16_t>(b, wide);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C + 10; ++c) {
      const uint16_t got = wh[static_cast<size_t>(r * (C + 10) + c)];
      if (c >= 3 && c < 3 + C)
        CHECK(got == h1[static_cast<size_t>(r * C + c - 3)]);
      else
        CHECK(got == 0xFFFF);
    }

  auto e1 = empty(b, DType::kE4M3, R, C), e2 = empty(b, DType::kE4M3, R, C);
  REQUIRE(b.init_e4m3(e1, 5, 0.1f, 2.0f).is_ok());
  REQUIRE(b.init_e4m3(e2, 6, 0.1f, 2.0f).is_ok());
  const auto eh = download<uint8_t>(b, e1);
  CHECK(eh != download<uint8_t>(b, e2));
  for (uint8_t c : eh) {
    CHECK(e4m3_value(c) >= e4m3_value(kern::f32_to_e4m3(0.1f)));
    CHECK(e4m3_value(c) <= 2.0);
  }
  std::set<uint8_t> distinct(eh.begin(), eh.end());
  CHECK(distinct.size() > 10);

  auto by1 = empty(b, DType::kFP4x2, R, C), by2 = empty(b, DType::kU8, R, C);
  REQUIRE(b.init_bytes(by1, 9).is_ok());
  REQUIRE(b.init_bytes(by2, 9).is_ok());
  CHECK(download<uint8_t>(b, by1) == download<uint8_t>(b, by2));
  CHECK(download<uint8_t>(b, by1)[0] == (kern::hash64(9, 0) & 0xFF));

  auto i1 = empty(b, DType::kI32, R, C);
  REQUIRE(b.init_ints(i1, 1, -5, 17).is_ok());
  std::set<int32_t> seen;
  for (int32_t v : download<int32_t>(b, i1)) {
    CHECK(v >= -5);
    CHECK(v < 17);
    seen.insert(v);
  }
  CHECK(seen.size() == 22);
  REQUIRE(b.iota(i1, 7).is_ok());
  const auto io = download<int32_t>(b, i1);
  for (size_t i = 0; i < io.size(); ++i) CHECK(io[i] == 7 + static_cast<int32_t>(i));
}

// ---- dense ops -------------------------------------------------------------------------------

TEST_CASE("embedding: rows of the shard, zeros outside it", "[cpu][dense]") {
  auto bp = make_cpu_backend();
  Backend& b = *bp;
  std::mt19937_64 rng(1);
  const int64_t V = 11, H = 37, T = 9, vocab_start = 100;
  const auto table_h = random_bf16(rng, static_cast<size_t>(V * H), 1.0);
  Tensor table = upload(b, DType::kBF16, V, H, table_h);
  const std::vector<int32_t> ids_h = {100, 110, 99, 111, 105, 0, 104, -1, 100};
  Tensor ids = upload(b, DType::kI32, T, 1, ids_h);
  Tensor out = empty(b, DType::kBF16, T, H);
  check_writes_everything(b, {&out}, [&] { return b.embedding(ids, table, vocab_start, out); });
  const auto o = download<uint16_t>(b, out);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t local = ids_h[static_cast<size_t>(t)] - vocab_start;
    for (int64_t c = 0; c < H; ++c) {
      const uint16_t want = (local >= 0 && local < V) ? table_h[static_cast<size_t>(local * H + c)] : uint16_t{0};
      REQUIRE(o[static_cast<size_t>(t * H + c)] == want);
    }
  }
}

namespace {
std::vector<double> rmsnorm_ref(const std::vector<double>& x, const std::vector<double>& w, int64_t T, int64_t H, double eps) {
  std::vector<double> out(x.size());
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < H; ++i) ss += x[static_cast<size_t>(t * H + i)] * x[static_cast<size_t>(t * H + i)];
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(H) + eps);
    for (int64_t i = 0; i < H; ++i) out[static_cast<size_t>(t * H + i)] = x[static_cast<size_t>(t * H + i)] * r * w[static_cast<size_t>(i)];
  }
  return out;
}
}  // namespace

TEST_CASE("rmsnorm: float64 reference, in place, strided view", "[cpu][dense]") {
  auto bp = make_cpu_backend();
  Backend& b = *bp;
  std::mt19937_64 rng(2);
  const int64_t T = 37, H = 272;
  const float eps = 1e-6f;
  const auto xh = random_bf16(rng, static_cast<size_t>(T * H), 4.0), wh = random_bf16(rng, static_cast<size_t>(H), 1.5);
  Tensor x = upload(b, DType::kBF16, T, H, xh), w = upload(b, DType::kBF16, 1, H, wh), out = empty(b, DType::kBF16, T, H);
  check_writes_everything(b, {&out}, [&] { return b.rmsnorm(x, w, eps, out); });
  const auto ref = rmsnorm_ref(to_double(xh), to_double(wh), T, H, eps);
  const auto o = to_double(download<uint16_t>(b, out));
  for (size_t i = 0; i < o.size(); ++i) REQUIRE(close_bf16(o[i], ref[i], 0));
  // In place (out aliases x) gives the same bits.
  REQUIRE(b.rmsnorm(x, w, eps, x).is_ok());
  CHECK(download<uint16_t>(b, x) == download<uint16_t>(b, out));
  // A column view of a wider buffer: the same numbers, other columns untouched.
  Tensor wide = upload(b, DType::kBF16, T, H + 5, random_bf16(rng, static_cast<size_t>(T * (H + 5)), 1.0));
  const auto before = download<uint16_t>(b, wide);
  Tensor xv = wide.cols_view(5, H);
  REQUIRE(b.copy_from_host(xv, xh.data()).is_ok());
  REQUIRE(b.rmsnorm(xv, w, eps, xv).is_ok());
  CHECK(download<uint16_t>(b, xv) == download<uint16_t>(b, out));
  const auto after = download<uint16_t>(b, wide);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < 5; ++c) CHECK(after[static_cast<size_t>(t * (H + 5) + c)] == before[static_cast<size_t>(t * (H + 5) + c)]);
}

namespace {
// The residual is bf16(x + residual) exactly and the norm is the float64 RMSNorm of it (within
// bf16 rounding): what fused_add_rmsnorm and add_rmsnorm both promise.
void check_add_norm(const std::vector<uint16_t>& res_got, const std::vector<uint16_t>& norm_got,
                    const std::vector<uint16_t>& xh, const std::vector<uint16_t>& rh, const std::vector<uint16_t>& wh,
                    int64_t T, int64_t H, float eps) {
  std::vector<double> sum(res_got.size());
  for (size_t i = 0; i < sum.size(); ++i) {
    sum[i] = round_bf16(static_cast<float>(bf16_value(xh[i]) + bf16_value(rh[i])));
    REQUIRE(bf16_value(res_got[i]) == sum[i]);
  }
  const auto ref = rmsnorm_ref(sum, to_double(wh), T, H, eps);
  const auto o = to_double(norm_got);
  for (size_t i = 0; i < o.size(); ++i) REQUIRE(close_bf16(o[i], ref[i], 0));
}
}  // namespace

TEST_CASE("fused_add_rmsnorm: residual = bf16(x + residual), x = rmsnorm(residual)", "[cpu][dense]") {
  auto bp = make_cpu_backend();
  Backend& b = *bp;
  std::mt19937_64 rng(3);
  const int64_t T = 37, H = 144;
  const float eps = 1e-5f;
  const auto xh = random_bf16(rng, static_cast<size_t>(T * H), 2.0), rh = random_bf16(rng, static_cast<size_t>(T * H), 8.0);
  const auto wh = random_bf16(rng, static_cast<size_t>(H), 1.0);
  Tensor x = upload(b, DType::kBF16, T, H, xh), res = upload(b, DType::kBF16, T, H, rh), w = upload(b, DType::kBF16, H, 1, wh);
  REQUIRE(b.fused_add_rmsnorm(x, res, w, eps).is_ok());
  check_add_norm(download<uint16_t>(b, res), download<uint16_t>(b, x), xh, rh, wh, T, H, eps);
}

TEST_CASE("add_rmsnorm: residual = bf16(x + residual), out = rmsnorm(residual), x unchanged", "[cpu][dense]") {
  auto bp = make_cpu_backend();
  Backend& b = *bp;
  std::mt19937_64 rng(31);
  const int64_t T = 29, H = 152;
  const float eps = 1e-6f;
  const auto xh = random_bf16(rng, static_cast<size_t>(T * H), 3.0), rh = random_bf16(rng, static_cast<size_t>(T * H), 5.0);
  const auto wh = random_bf16(rng, static_cast<size_t>(H), 1.5);
  Tensor x = upload(b, DType::kBF16, T, H, xh), res = upload(b, DType::kBF16, T, H, rh), w = upload(b, DType::kBF16, H, 1, wh);
  Tensor out = upload(b, DType::kBF16, T, H, random_bf16(rng, static_cast<size_t>(T * H), 1.0));
  REQUIRE(b.add_rmsnorm(x, res, w, eps, out).is_ok());
  CHECK(download<uint16_t>(b, x) == xh);
  check_add_norm(download<uint16_t>(b, res), download<uint16_t>(b, out), xh, rh, wh, T, H, eps);
  // The same bits as add_inplace then rmsnorm (what the executor ran before the fusion).
  Tensor res2 = upload(b, DType::kBF16, T, H, rh), out2 = upload(b, DType::kBF16, T, H, xh);
  REQUIRE(b.add_inplace(res2, x).is_ok());
  REQUIRE(b.rmsnorm(res2, w, eps, out2).is_ok());
  CHECK(download<uint16_t>(b, res2) == download<uint16_t>(b, res));
  CHECK(download<uint16_t>(b, out2) == download<uint16_t>(b, out));
}

TEST_CASE("linear: bf16 and f32 outputs, strided views", "[cpu][dense]") {
  auto bp = make_cpu_backend();
  Backend& b = *bp;
  std::mt19937_64 rng(4);
  const int64_t T = 37, K = 272, N = 45;
  const auto xh = random_bf16(rng, static_cast<size_t>(T * K), 1.0), wh = random_bf16(rng, static_cast<size_t>(N * K), 0.2);
  Tensor x = upload(b, DType::kBF16, T, K, xh), w = upload(b, DType::kBF16, N, K, wh);
  std::vector<double> ref(static_cast<size_t>(T * N)), mag(static_cast<size_t>(T * N));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, m = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = bf16_value(xh[static_cast<size_t>(t * K + k)]) * bf16_value(wh[static_cast<size_t>(n * K + k)]);
        s += p;
        m += std::fabs(p);
      }
      ref[static_cast<size_t>(t * N + n)] = s;
      mag[static_cast<size_t>(t * N + n)] = m;
    }
  Tensor ob = empty(b, DType::kBF16, T, N), of = empty(b, DType::kF32, T, N);
  check_writes_everything(b, {&ob}, [&] { return b.linear(x, w, ob, Tensor()); });
  check_writes_everything(b, {&of}, [&] { return b.linear(x, w, of, Tensor()); });
  const auto gb = to_double(download<uint16_t>(b, ob));
  const auto gf = download<float>(b, of);
  for (size_t i = 0; i < ref.size(); ++i) {
    REQUIRE(close_bf16(gb[i], ref[i], mag[i]));
    REQUIRE(close_f32(gf[i], ref[i], mag[i]));
    REQUIRE(gb[i] == round_bf16(gf[i]));  // bf16 output = the f32 result rounded once
  }
  // x as a column view of a wider buffer, out as a column view: same bits, neighbours untouched.
  Tensor xwide = empty(b, DType::kBF16, T, K + 16);
  Tensor xv = xwide.cols_view(16, K);
  REQUIRE(b.copy_from_host(xv, xh.data()).is_ok());
  Tensor owide = empty(b, DType::kBF16, T, N + 3);
  Tensor ov = owide.cols_view(2, N);
  REQUIRE(b.linear(xv, w, ov, Tensor()).is_ok());
  CHECK(download<uint16_t>(b, ov) == download<uint16_t>(b, ob));
  const auto ow = download<uint16_t>(b, owide);
  for (int64_t t = 0; t < T; ++t) {
    CHECK(ow[static_cast<size_t>(t * (N + 3))] == 0xFFFF);
    CHECK(ow[static_cast<size_t>(t * (N + 3) + 1)] == 0xFFFF);
    CHECK(ow[static_cast<size_t>(t * (N + 3) + N + 2)] == 0xFFFF);
  }
  // Shape mismatch is an error, not a crash.
  Tensor bad = empty(b, DType::kBF16, T, N + 1);
  CHECK_FALSE(b.linear(x, w, bad, Tensor()).is_ok());
}

TEST_CASE("rope: interleaved pairs inside strided heads", "[cpu][dense]") {
  auto bp = make_cpu_backend();
  Backend& b = *bp;
  std::mt19937_64 rng(5);
  const int64_t T = 37, heads = 3, stride = 24, off = 16, rot = 8, max_pos = 64;
  const auto xh = random_bf16(rng, static_cast<size_t>(T * heads * stride), 2.0);
  // cos/sin table for theta = 10000: cos of the rot/2 frequencies, then sin.
  std::vector<float> cs(static_cast<size_t>(max_pos * rot));
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < rot / 2; ++i) {
      const double ang = static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(rot));
      cs[static_cast<size_t>(p * rot + i)] = static_cast<float>(std::cos(ang));
      cs[static_cast<size_t>(p * rot + rot / 2 + i)] = static_cast<float>(std::sin(ang));
    }
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>((t * 7 + 3) % max_pos);
  Tensor x = upload(b, DType::kBF16, T, heads * stride, xh), p = upload(b, DType::kI32, 1, T, pos);
  Tensor table = upload(b, DType::kF32, max_pos, rot, cs);
  REQUIRE(b.rope(x, heads, stride, off, rot, p, table).is_ok());
  const auto o = to_double(download<uint16_t>(b, x));
  const auto in = to_double(xh);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t c = 0; c < stride; ++c) {
        const size_t idx = static_cast<size_t>(t * heads * stride + h * stride + c);
        if (c < off || c >= off + rot) {
          REQUIRE(o[idx] == in[idx]);  // outside the rotary columns: untouched
          continue;
        }
        const int64_t pr = (c - off) / 2;
        const double cv = cs[static_cast<size_t>(pos[static_cast<size_t>(t)] * rot + pr)];
        const double sv = cs[static_cast<size_t>(pos[static_cast<size_t>(t)] * rot + rot / 2 + pr)];
        const size_t i0 = static_cast<size_t>(t * heads * stride + h * stride + off + 2 * pr);
        const double ref = ((c - off) % 2 == 0) ? in[i0] * cv - in[i0 + 1] * sv : in[i0] * sv + in[i0 + 1] * cv;
        REQUIRE(close_bf16(o[idx], ref, std::fabs(in[i0]) + std::fabs(in[i0 + 1])));
      }
  std::vector<int32_t> bad_pos(static_cast<size_t>(T), static_cast<int32_t>(max_pos));
  Tensor bp2 = upload(b, DType::kI32, 1, T, bad_pos);
  CHECK_FALSE(b.rope(x, heads, stride, off, rot, bp2, table).is_ok());
}

TEST_CASE("mla_build_k and kv_cache_write copy exactly", "[cpu][dense]") {
  auto bp = make_cpu_backend();
  Backend& b = *bp;
  std::mt19937_64 rng(6);
  const int64_t T = 37, heads = 3, nope = 16, vdim = 16, kvs = nope + vdim, rope = 8;
  const auto kvh = random_bf16(rng, static_cast<size_t>(T * heads * kvs), 1.0);
  const auto peh = random_bf16(rng, static_cast<size_t>(T * rope), 1.0);
  Tensor kv = upload(b, DType::kBF16, T, heads * kvs, kvh);
  // k_pe as a column view of a wider "latent" buffer (as the model slices it).
  const int64_t L = 40;
  const auto lat = random_bf16(rng, static_cast<size_t>(T * (L + rope)), 1.0);
  Tensor latent = upload(b, DType::kBF16, T, L + rope, lat);
  Tensor k_pe = latent.cols_view(L, rope), lat_v = latent.cols_view(0, L);
  Tensor k = empty(b, DType::kBF16, T, heads * (nope + rope));
  check_writes_everything(b, {&k}, [&] { return b.mla_build_k(kv, heads, kvs, nope, k_pe, k); });
  const auto kh = download<uint16_t>(b, k);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t c = 0; c < nope; ++c)
        REQUIRE(kh[static_cast<size_t>(t * heads * (nope + rope) + h * (nope + rope) + c)] ==
                kvh[static_cast<size_t>(t * heads * kvs + h * kvs + c)]);
      for (int64_t c = 0; c < rope; ++c)
        REQUIRE(kh[static_cast<size_t>(t * heads * (nope + rope) + h * (nope + rope) + nope + c)] ==
                lat[static_cast<size_t>(t * (L + rope) + L + c)]);
    }
  const int64_t slots = 50, slot0 = 9;
  Tensor cache = empty(b, DType::kBF16, slots, L + rope);
  REQUIRE(b.kv_cache_write(lat_v, k_pe, cache, slot0).is_ok());
  const auto ch = download<uint16_t>(b, cache);
  for (int64_t s = 0; s < slots; ++s)
    for (int64_t c = 0; c < L + rope; ++c) {
      const uint16_t got = ch[static_cast<size_t>(s * (L + rope) + c)];
      if (s >= slot0 && s < slot0 + T)
        REQUIRE(got == lat[static_cast<size_t>((s - slot0) * (L + rope) + c)]);
      else
        REQUIRE(got == 0xFFFF);  // other slots untouched
    }
  CHECK_FALSE(b.kv_cache_write(lat_v, k_pe, cache, slots - T + 1).is_ok());
}

TEST_CASE("causal_attention: float64 reference and causality", "[cpu][dense]") {
  auto bp = make_cpu_backend();
  Backend& b = *bp;
  std::mt19937_64 rng(7);
  const int64_t T = 37, heads = 3, qk = 24, vdim = 16, voff = 16, vstride = 32;
  const float scale = 1.0f / std::sqrt(24.0f);
  auto qh = random_bf16(rng, static_cast<size_t>(T * heads * qk), 2.0);
  auto kh = random_bf16(rng, static_cast<size_t>(T * heads * qk), 2.0);
  auto vh = random_bf16(rng, static_cast<size_t>(T * heads * vstride), 1.0);
  Tensor q = upload(b, DType::kBF16, T, heads * qk, qh), k = upload(b, DType::kBF16, T, heads * qk, kh);
  Tensor v = upload(b, DType::kBF16, T, heads * vstride, vh), out = empty(b, DType::kBF16, T, heads * vdim);
  check_writes_everything(b, {&out}, [&] { return b.causal_attention(q, k, v, heads, qk, vdim, voff, vstride, scale, out); });
  const auto o = to_double(download<uint16_t>(b, out));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<double> s(static_cast<size_t>(t + 1));
      double m = -INFINITY;
      for (int64_t j = 0; j <= t; ++j) {
        double d = 0;
        for (int64_t c = 0; c < qk; ++c)
          d += bf16_value(qh[static_cast<size_t>(t * heads * qk + h * qk + c)]) * bf16_value(kh[static_cast<size_t>(j * heads * qk + h * qk + c)]);
        s[static_cast<size_t>(j)] = static_cast<double>(scale) * d;
        m = std::max(m, s[static_cast<size_t>(j)]);
      }
      double z = 0;
      for (auto& e : s) z += (e = std::exp(e - m));
      for (int64_t c = 0; c < vdim; ++c) {
        double acc = 0, mag = 0;
        for (int64_t j = 0; j <= t; ++j) {
          const double vv = bf16_value(vh[static_cast<size_t>(j * heads * vstride + voff + h * vstride + c)]);
          acc += s[static_cast<size_t>(j)] / z * vv;
          mag += s[static_cast<size_t>(j)] / z * std::fabs(vv);
        }
        REQUIRE(close_bf16(o[static_cast<size_t>(t * heads * vdim + h * vdim + c)], acc, mag));
      }
    }
  // Causality: changing token 20's q, k and v leaves outputs of tokens 0..19 bit-identical.
  const int64_t m = 20;
  for (int64_t c = 0; c < heads * qk; ++c) {
    qh[static_cast<size_t>(m * heads * qk + c)] ^= 0x0040;
    kh[static_cast<size_t>(m * heads * qk + c)] ^= 0x0040;
  }
  for (int64_t c = 0; c < heads * vstride; ++c) vh[static_cast<size_t>(m * heads * vstride + c)] ^= 0x0040;
  Tensor q2 = upload(b, DType::kBF16, T, heads * qk, qh), k2 = upload(b, DType::kBF16, T, heads * qk, kh);
  Tensor v2 = upload(b, DType::kBF16, T, heads * vstride, vh), out2 = empty(b, DType::kBF16, T, heads * vdim);
  REQUIRE(b.causal_attention(q2, k2, v2, heads, qk, vdim, voff, vstride, scale, out2).is_ok());
  const auto o1 = download<uint16_t>(b, out), o2 = download<uint16_t>(b, out2);
  int changed_after = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < heads * vdim; ++c) {
      const size_t i = static_cast<size_t>(t * heads * vdim + c);
      if (t < m)
        REQUIRE(o1[i] == o2[i]);
      else
        changed_after += o1[i] != o2[i];
    }
  CHECK(changed_after > 0);
}

TEST_CASE("silu_and_mul and add_inplace", "[cpu][dense]") {
  auto bp = make_cpu_backend();
  Backend& b = *bp;
  std::mt19937_64 rng(8);
  const int64_t T = 37, I = 45;
  const auto xh = random_bf16(rng, static_cast<size_t>(T * 2 * I), 6.0);
  Tensor x = upload(b, DType::kBF16, T, 2 * I, xh), out = empty(b, DType::kBF16, T, I);
  check_writes_everything(b, {&out}, [&] { return b.silu_and_mul(x, out); });
  const auto o = to_double(download<uint16_t>(b, out));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < I; ++i) {
      const double g = bf16_value(xh[static_cast<size_t>(t * 2 * I + i)]), u = bf16_value(xh[static_cast<size_t>(t * 2 * I + I + i)]);
      REQUIRE(close_bf16(o[static_cast<size_t>(t * I + i)], silu(g) * u, 0));
    }
  const auto ah = random_bf16(rng, static_cast<size_t>(T * I), 3.0), bh = random_bf16(rng, static_cast<size_t>(T * I), 3.0);
  Tensor a = upload(b, DType::kBF16, T, I, ah), c = upload(b, DType::kBF16, T, I, bh);
  REQUIRE(b.add_inplace(a, c).is_ok());
  const auto s = download<uint16_t>(b, a);
  for (size_t i = 0; i < s.size(); ++i)
    REQUIRE(bf16_value(s[i]) == round_bf16(static_cast<float>(bf16_value(ah[i]) + bf16_value(bh[i]))));
  Tensor wrong = empty(b, DType::kBF16, T, I + 1);
  CHECK_FALSE(b.add_inplace(a, wrong).is_ok());
  CHECK(b.all_reduce(a).is_ok());
}

// ---- router ----------------------------------------------------------------------------------

namespace {

// Independent router: float64 scores, selection by sorting (criterion desc, index asc).
struct RouterRef {
  std::vector<int> ids;
  std::vector<double> weights;
};
RouterRef router_ref(const float* logits, const float* bias, int64_t E, const RouterParams& p) {
  std::vector<double> score(static_cast<size_t>(E)), crit(static_cast<size_t>(E));
  if (p.scoring == ScoringFunc::kSoftmax) {
    double m = -INFINITY, z = 0;
    for (int64_t e = 0; e < E; ++e) m = std::max(m, static_cast<double>(logits[e]));
    for (int64_t e = 0; e < E; ++e) z += std::exp(logits[e] - m);
    for (int64_t e = 0; e < E; ++e) score[static_cast<size_t>(e)] = std::exp(logits[e] - m) / z;
  } else {
    for (int64_t e = 0; e < E; ++e) score[static_cast<size_t>(e)] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
  }
  for (int64_t e = 0; e < E; ++e)
    crit[static_cast<size_t>(e)] = score[static_cast<size_t>(e)] + (p.method == TopkMethod::kNoauxTc ? bias[e] : 0.0);
  auto order = [&](std::vector<int> idx, const std::vector<double>& c) {
    std::sort(idx.begin(), idx.end(), [&](int a, int b) { return c[static_cast<size_t>(a)] > c[static_cast<size_t>(b)] || (c[static_cast<size_t>(a)] == c[static_cast<size_t>(b)] && a < b); });
    return idx;
  };
  std::vector<int> candidates;
  if (p.method == TopkMethod::kGreedy) {
    for (int e = 0; e < E; ++e) candidates.push_back(e);
  } else {
    const int64_t gsz = E / p.n_group;
    std::vector<double> gs(static_cast<size_t>(p.n_group));
    std::vector<int> groups(static_cast<size_t>(p.n_group));
    std::iota(groups.begin(), groups.end(), 0);
    for (int g = 0; g < p.n_group; ++g) {
      std::vector<int> mem(static_cast<size_t>(gsz));
      std::iota(mem.begin(), mem.end(), static_cast<int>(g * gsz));
      const auto sorted = order(mem, crit);
      gs[static_cast<size_t>(g)] = p.method == TopkMethod::kGroupLimitedGreedy
                                       ? crit[static_cast<size_t>(sorted[0])]
                                       : crit[static_cast<size_t>(sorted[0])] + crit[static_cast<size_t>(sorted[1])];
    }
    const auto gsorted = order(groups, gs);
    for (int i = 0; i < p.topk_group; ++i)
      for (int64_t e = 0; e < gsz; ++e) candidates.push_back(static_cast<int>(gsorted[static_cast<size_t>(i)] * gsz + e));
  }
  const auto sorted = order(candidates, crit);
  RouterRef r;
  double sum = 0;
  for (int j = 0; j < p.top_k; ++j) {
    r.ids.push_back(sorted[static_cast<size_t>(j)]);
    r.weights.push_back(score[static_cast<size_t>(sorted[static_cast<size_t>(j)])]);
    sum += r.weights.back();
  }
  for (auto& w : r.weights) w = (p.norm_topk_prob ? w / sum : w) * p.routed_scaling_factor;
  return r;
}

}  // namespace

TEST_CASE("router_topk: all methods and scorings vs an independent implementation", "[cpu][moe][router]") {
  auto bp = make_cpu_backend();
  Backend& b = *bp;
  std::mt19937_64 rng(9);
  const int64_t T = 37, E = 24;
  const auto lh = random_f32(rng, static_cast<size_t>(T * E), -3.0, 3.0);
  const auto bh = random_f32(rng, static_cast<size_t>(E), -0.3, 0.3);
  Tensor logits = upload(b, DType::kF32, T, E, lh), bias = upload(b, DType::kF32, 1, E, bh);
  for (auto method : {TopkMethod::kGreedy, TopkMethod::kGroupLimitedGreedy, TopkMethod::kNoauxTc})
    for (auto scoring : {ScoringFunc::kSoftmax, ScoringFunc::kSigmoid})
      for (bool norm : {false, true}) {
        RouterParams p;
        p.top_k = 5;
        p.method = method;
        p.scoring = scoring;
        p.norm_topk_prob = norm;
        p.routed_scaling_factor = 2.5f;
        p.n_group = method == TopkMethod::kGreedy ? 1 : 4;
        p.topk_group = method == TopkMethod::kGreedy ? 1 : 2;
        Tensor ids = empty(b, DType::kI32, T, p.top_k), w = empty(b, DType::kF32, T, p.top_k);
        check_writes_everything(b, {&ids, &w}, [&] {
          return b.router_topk(logits, method == TopkMethod::kNoauxTc ? bias : Tensor(), p, ids, w);
        });
        const auto ih = download<int32_t>(b, ids);
        const auto wh = download<float>(b, w);
        for (int64_t t = 0; t < T; ++t) {
          const auto ref = router_ref(&lh[static_cast<size_t>(t * E)], bh.data(), E, p);
          double wsum = 0;
          for (int j = 0; j < p.top_k; ++j) {
            INFO("method " << int(method) << " scoring " << int(scoring) << " norm " << norm << " token " << t << " slot " << j);
            REQUIRE(ih[static_cast<size_t>(t * p.top_k + j)] == ref.ids[static_cast<size_t>(j)]);
            REQUIRE(close_f32(wh[static_cast<size_t>(t * p.top_k + j)], ref.weights[static_cast<size_t>(j)], 0));
            wsum += wh[static_cast<size_t>(t * p.top_k + j)];
          }
          if (norm) CHECK(std::fabs(wsum - 2.5) <= 1e-5);
          if (method != TopkMethod::kGreedy) {  // all picks lie in at most topk_group groups
            std::set<int> groups;
            for (int j = 0; j < p.top_k; ++j) groups.insert(ih[static_cast<size_t>(t * p.top_k + j)] / static_cast<int>(E / p.n_group));
            CHECK(groups.size() <= static_cast<size_t>(p.topk_group));
          }
        }
      }
}

TEST_CASE("router_topk: ties go to the lower expert index", "[cpu][moe][router]") {
  auto bp = make_cpu_backend();
  Backend& b = *bp;
  const int64_t E = 16;
  Tensor logits = upload(b, DType::kF32, 1, E, std::vector<float>(E, 0.25f));
  Tensor bias = upload(b, DType::kF32, 1, E, std::vector<float>(E, 0.0f));
  for (auto method : {TopkMethod::kGreedy, TopkMethod::kGroupLimitedGreedy, TopkMethod::kNoauxTc}) {
    RouterParams p;
    p.top_k = 4;
    p.method = method;
    p.scoring = ScoringFunc::kSigmoid;
    p.n_group = method == TopkMethod::kGreedy ? 1 : 4;
    p.topk_group = method == TopkMethod::kGreedy ? 1 : 2;
    Tensor ids = empty(b, DType::kI32, 1, 4), w = empty(b, DType::kF32, 1, 4);
    REQUIRE(b.router_topk(logits, method == TopkMethod::kNoauxTc ? bias : Tensor(), p, ids, w).is_ok());
    CHECK(download<int32_t>(b, ids) == std::vector<int32_t>{0, 1, 2, 3});
  }
  RouterParams bad;
  bad.top_k = 4;
  bad.method = TopkMethod::kGroupLimitedGreedy;
  bad.n_group = 5;  // 16 experts do not split into 5 groups
  Tensor ids = empty(b, DType::kI32, 1, 4), w = empty(b, DType::kF32, 1, 4);
  CHECK_FALSE(b.router_topk(logits, Tensor(), bad, ids, w).is_ok());
}

// ---- permutation and combine ---------------------------------------------------------------

TEST_CASE("moe_permute: padded expert-contiguous rows, stable, every (t, j) once", "[cpu][moe]") {
  auto bp = make_cpu_backend();
  Backend& b = *bp;
  std::mt19937_64 rng(10);
  const int64_t T = 37, k = 3, E = 7, tile = 8, P = T * k + E * (tile - 1) + 5;  // 5 spare rows
  std::vector<int32_t> ids(static_cast<size_t>(T * k));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> pool = {0, 1, 3, 4, 6};  // experts 2 and 5 get nothing
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int64_t j = 0; j < k; ++j) ids[static_cast<size_t>(t * k + j)] = pool[static_cast<size_t>(j)];
  }
  Tensor idt = upload(b, DType::kI32, T, k, ids);
  Tensor off = empty(b, DType::kI32, 1, E + 1), p2t = empty(b, DType::kI32, P, 1), e2p = empty(b, DType::kI32, T, k);
  check_writes_everything(b, {&off, &p2t, &e2p}, [&] { return b.moe_permute(idt, E, tile, off, p2t, e2p, Tensor()); });
  const auto o = download<int32_t>(b, off), pt = download<int32_t>(b, p2t), ep = download<int32_t>(b, e2p);
  std::vector<int64_t> count(static_cast<size_t>(E), 0);
  for (int32_t e : ids) ++count[static_cast<size_t>(e)];
  CHECK(o[0] == 0);
  for (int64_t e = 0; e < E; ++e) {
    CHECK((o[static_cast<size_t>(e)] % tile) == 0);
    CHECK(o[static_cast<size_t>(e + 1)] - o[static_cast<size_t>(e)] == (count[static_cast<size_t>(e)] + tile - 1) / tile * tile);
  }
  CHECK(o[2] == o[3]);
  CHECK(o[static_cast<size_t>(E)] <= T * k + E * (tile - 1));
  std::vector<int> hits(static_cast<size_t>(P), 0);
  for (int64_t i = 0; i < T * k; ++i) {
    const int64_t r = ep[static_cast<size_t>(i)];
    const int64_t e = ids[static_cast<size_t>(i)];
    REQUIRE(r >= o[static_cast<size_t>(e)]);
    REQUIRE(r < o[static_cast<size_t>(e)] + count[static_cast<size_t>(e)]);  // valid rows first, then padding
    REQUIRE(pt[static_cast<size_t>(r)] == i / k);
    ++hits[static_cast<size_t>(r)];
  }
  for (int64_t r = 0; r < P; ++r) {
    if (hits[static_cast<size_t>(r)] == 0)
      REQUIRE(pt[static_cast<size_t>(r)] == -1);  // padding and rows past offsets[E]
    else
      REQUIRE(hits[static_cast<size_t>(r)] == 1);
  }
  // Stable: within an expert, rows follow the flat index t*k + j.
  for (int64_t i = 0; i < T * k; ++i)
    for (int64_t i2 = i + 1; i2 < T * k; ++i2)
      if (ids[static_cast<size_t>(i)] == ids[static_cast<size_t>(i2)]) REQUIRE(ep[static_cast<size_t>(i)] < ep[static_cast<size_t>(i2)]);
  // Too few rows for the padded layout, or an out-of-range id, is an error.
  Tensor small = empty(b, DType::kI32, 1, 8);
  CHECK_FALSE(b.moe_permute(idt, E, tile, off, small, e2p, Tensor()).is_ok());
  Tensor badids = upload(b, DType::kI32, 1, 3, std::vector<int32_t>{0, 7, 1});
  Tensor e2p1 = empty(b, DType::kI32, 1, 3);
  CHECK_FALSE(b.moe_permute(badids, E, tile, off, p2t, e2p1, Tensor()).is_ok());
}

TEST_CASE("moe_combine: exact fp32 order without FMA, optional shared output", "[cpu][moe]") {
  auto bp = make_cpu_backend();
  Backend& b = *bp;
  std::mt19937_64 rng(12);
  const int64_t T = 37, k = 3, H = 45, P = 150;
  const auto g2h = random_bf16(rng, static_cast<size_t>(P * H), 4.0), sh = random_bf16(rng, static_cast<size_t>(T * H), 4.0);
  const auto wh = random_f32(rng, static_cast<size_t>(T * k), 0.01, 1.7);
  std::vector<int32_t> perm(static_cast<size_t>(P));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const std::vector<int32_t> e2p_h(perm.begin(), perm.begin() + T * k);
  Tensor g2 = upload(b, DType::kBF16, P, H, g2h), shared = upload(b, DType::kBF16, T, H, sh);
  Tensor w = upload(b, DType::kF32, T, k, wh), e2p = upload(b, DType::kI32, 1, T * k, e2p_h);
  Tensor out = empty(b, DType::kBF16, T, H), out_ns = empty(b, DType::kBF16, T, H);
  check_writes_everything(b, {&out}, [&] { return b.moe_combine(g2, e2p, w, shared, out); });
  check_writes_everything(b, {&out_ns}, [&] { return b.moe_combine(g2, e2p, w, Tensor(), out_ns); });
  const auto o = download<uint16_t>(b, out), ons = download<uint16_t>(b, out_ns);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < H; ++n) {
      volatile float acc = 0.0f;  // volatile: the test's own sum is never contracted either
      double acc_d = 0, mag = 0;
      for (int64_t j = 0; j < k; ++j) {
        const float wv = wh[static_cast<size_t>(t * k + j)];
        const float gv = static_cast<float>(bf16_value(g2h[static_cast<size_t>(e2p_h[static_cast<size_t>(t * k + j)] * H + n)]));
        volatile float prod = wv * gv;
        acc = acc + prod;
        acc_d += static_cast<double>(wv) * gv;
        mag += std::fabs(static_cast<double>(wv) * gv);
      }
      const float s = static_cast<float>(bf16_value(sh[static_cast<size_t>(t * H + n)]));
      const size_t i = static_cast<size_t>(t * H + n);
      REQUIRE(o[i] == kern::f32_to_bf16(acc + s));
      REQUIRE(ons[i] == kern::f32_to_bf16(acc + 0.0f));
      REQUIRE(close_bf16(bf16_value(o[i]), acc_d + s, mag + std::fabs(s)));
    }
}

TEST_CASE("moe_combine: products are rounded before the add (no FMA)", "[cpu][moe]") {
  // Find (w, g) with acc = 1 + round(w * g) landing exactly on a bf16 midpoint (ties to even),
  // while a fused 1 + w * g would round up: these rows expose an FMA in the accumulation.
  std::vector<float> ws;
  std::vector<float> gs;
  for (int j = 0; j < 128 && ws.size() < 8; ++j) {
    const double g = std::ldexp(1.0 + j / 128.0, -6);  // bf16 value
    for (int i = 0; i < 64 && ws.size() < 8; ++i) {
      const double mid = std::ldexp(2.0 * i + 1.0, -8);  // 1 + mid is a bf16 midpoint
      const float w = static_cast<float>((mid + std::ldexp(1.0, -24) + std::ldexp(1.0, -40)) / g);
      const double p = static_cast<double>(w) * g;  // exact
      const float no_fma = static_cast<float>(1.0 + static_cast<double>(static_cast<float>(p)));
      const float fma = static_cast<float>(1.0 + p);
      if (kern::f32_to_bf16(no_fma) != kern::f32_to_bf16(fma)) {
        ws.push_back(w);
        gs.push_back(static_cast<float>(g));
      }
    }
  }
  REQUIRE(ws.size() >= 4);
  auto bp = make_cpu_backend();
  Backend& b = *bp;
  const int64_t T = static_cast<int64_t>(ws.size()), k = 2, H = 1;
  std::vector<float> wh;
  std::vector<uint16_t> g2h;
  std::vector<int32_t> e2p_h;
  for (int64_t t = 0; t < T; ++t) {
    wh.push_back(1.0f);
    wh.push_back(ws[static_cast<size_t>(t)]);
    g2h.push_back(kern::f32_to_bf16(1.0f));
    g2h.push_back(kern::f32_to_bf16(gs[static_cast<size_t>(t)]));
    e2p_h.push_back(static_cast<int32_t>(2 * t));
    e2p_h.push_back(static_cast<int32_t>(2 * t + 1));
  }
  Tensor g2 = upload(b, DType::kBF16, 2 * T, H, g2h), w = upload(b, DType::kF32, T, k, wh);
  Tensor e2p = upload(b, DType::kI32, T, k, e2p_h), out = empty(b, DType::kBF16, T, H);
  REQUIRE(b.moe_combine(g2, e2p, w, Tensor(), out).is_ok());
  const auto o = download<uint16_t>(b, out);
  for (int64_t t = 0; t < T; ++t) {
    const double p = static_cast<double>(ws[static_cast<size_t>(t)]) * gs[static_cast<size_t>(t)];
    const float no_fma = static_cast<float>(1.0 + static_cast<double>(static_cast<float>(p)));
    INFO("w " << ws[static_cast<size_t>(t)] << " g " << gs[static_cast<size_t>(t)]);
    CHECK(o[static_cast<size_t>(t)] == kern::f32_to_bf16(no_fma));
  }
}
