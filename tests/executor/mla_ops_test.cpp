// The paged MLA ops of serving on the CPU reference: each against a float64 reference, the
// absorbed form against the non-absorbed (MHA) form computed with the prefill's ops, and the index
// values the CPU checks where it reads them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "executor/backends.h"
#include "kernels/common/mla_split.h"
#include "tests/executor/mla_reference.h"

using namespace moeprof;
using namespace moeprof::testref;

namespace {

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// The non-absorbed form of case c's rows (one request per row, or every row of one request): each
// request's cached latents expanded by kv_b into per-head keys and values (linear, mla_build_k)
// and the prefill's causal attention, whose row p is the query at position p.
std::vector<double> non_absorbed(Backend& b, const MlaCase& c) {
  const int64_t qk = c.nope + c.rope, D = c.D();
  std::vector<double> out(static_cast<size_t>(c.N * c.h * c.vd), NAN);
  for (int64_t r = 0; r < c.R; ++r) {
    int64_t L = 0;
    for (int64_t n = 0; n < c.N; ++n)
      if (c.row_req[static_cast<size_t>(n)] == r) L = std::max<int64_t>(L, c.row_pos[static_cast<size_t>(n)] + 1);
    if (L == 0) continue;
    std::vector<uint16_t> lat(static_cast<size_t>(L * c.kvl)), pe(static_cast<size_t>(L * c.rope)),
        qf(static_cast<size_t>(L * c.h * qk), 0x3F80);  // rows without a query: 1.0
    for (int64_t j = 0; j < L; ++j) {
      const int64_t slot = c.r2t[static_cast<size_t>(r * c.C + j)];
      std::copy_n(c.cache.begin() + slot * D, c.kvl, lat.begin() + j * c.kvl);
      std::copy_n(c.cache.begin() + slot * D + c.kvl, c.rope, pe.begin() + j * c.rope);
    }
    for (int64_t n = 0; n < c.N; ++n)
      if (c.row_req[static_cast<size_t>(n)] == r)
        std::copy_n(c.q.begin() + n * c.h * qk, c.h * qk, qf.begin() + c.row_pos[static_cast<size_t>(n)] * c.h * qk);
    Tensor tl = upload(b, DType::kBF16, L, c.kvl, lat), tp = upload(b, DType::kBF16, L, c.rope, pe),
           tq = upload(b, DType::kBF16, L, c.h * qk, qf), kv_b = upload(b, DType::kBF16, c.h * (c.nope + c.vd), c.kvl, c.kv_b);
    Tensor kv = empty(b, DType::kBF16, L, c.h * (c.nope + c.vd)), k = empty(b, DType::kBF16, L, c.h * qk),
           o = empty(b, DType::kBF16, L, c.h * c.vd);
    REQUIRE(b.linear(tl, kv_b, kv, Tensor()).is_ok());
    REQUIRE(b.mla_build_k(kv, c.h, c.nope + c.vd, c.nope, tp, k).is_ok());
    REQUIRE(b.causal_attention(tq, k, kv, c.h, qk, c.vd, c.nope, c.nope + c.vd, c.scale, o).is_ok());
    const auto host = download<uint16_t>(b, o);
    for (int64_t n = 0; n < c.N; ++n)
      if (c.row_req[static_cast<size_t>(n)] == r)
        for (int64_t i = 0; i < c.h * c.vd; ++i)
          out[static_cast<size_t>(n * c.h * c.vd + i)] =
              bf16_value(host[static_cast<size_t>(c.row_pos[static_cast<size_t>(n)] * c.h * c.vd + i)]);
  }
  return out;
}

}  // namespace

TEST_CASE("mla ops: kv_cache_store writes each row to its slot and nothing else", "[cpu][mla]") {
  auto b = make_cpu_backend();
  std::mt19937_64 rng(7);
  const int64_t N = 5, L = 12, R = 4, S = 11;
  const auto lat = random_bf16(rng, N * L, 1.0), pe = random_bf16(rng, N * R, 1.0);
  Tensor tl = upload(*b, DType::kBF16, N, L, lat), tp = upload(*b, DType::kBF16, N, R, pe);
  Tensor cache = empty(*b, DType::kBF16, S, L + R);
  REQUIRE(fill_bytes(*b, cache, 0xAB));
  const std::vector<int32_t> slots = {7, 0, 10, 3, 6};
  REQUIRE(b->kv_cache_store(tl, tp, cache, upload(*b, DType::kI32, 1, N, slots)).is_ok());
  const auto host = download<uint16_t>(*b, cache);
  for (int64_t s = 0; s < S; ++s) {
    const auto it = std::find(slots.begin(), slots.end(), static_cast<int32_t>(s));
    for (int64_t c = 0; c < L + R; ++c) {
      uint16_t want = 0xABAB;
      if (it != slots.end()) {
        const int64_t n = it - slots.begin();
        want = c < L ? lat[static_cast<size_t>(n * L + c)] : pe[static_cast<size_t>(n * R + c - L)];
      }
      REQUIRE(host[static_cast<size_t>(s * (L + R) + c)] == want);
    }
  }
}

TEST_CASE("mla ops: q absorb, paged attention and v up against float64", "[cpu][mla]") {
  auto b = make_cpu_backend();
  // Odd sizes; rows of 3 requests at random positions (a prefill chunk's rows and decode rows alike).
  const MlaCase c = make_mla_case(11, 7, 3, 12, 6, 10, 40, 3, 17);
  const AbsorbedOut r = run_absorbed(*b, c);
  REQUIRE(r.ok);
  // Each output is one fp32 accumulation rounded once to bf16: within 2^-8 relative of the
  // float64 value, plus the fp32 accumulation's error (bounded by 1e-5 of the largest value).
  auto check = [](const std::vector<uint16_t>& got, const std::vector<double>& ref) {
    REQUIRE(got.size() == ref.size());
    const double big = max_abs(ref);
    for (size_t i = 0; i < ref.size(); ++i) {
      INFO("element " << i << ": " << bf16_value(got[i]) << " vs " << ref[i]);
      CHECK(std::fabs(bf16_value(got[i]) - ref[i]) <= std::ldexp(std::fabs(ref[i]), -8) + 1e-5 * big);
    }
  };
  check(r.q_abs, q_absorb_ref(c));
  check(r.lat, paged_attention_ref(c, r.q_abs));
  check(r.out, v_up_ref(c, r.lat));
}

TEST_CASE("mla ops: the absorbed form matches the non-absorbed one within 1% of the largest output", "[cpu][mla]") {
  auto b = make_cpu_backend();
  // Decode: one row per request at its last position. Chunked prefill: every position of one
  // request (the chunk's rows attend causally to the prefix and to each other).
  for (const MlaCase& c : {make_mla_case(21, 5, 4, 16, 8, 16, 64, 5, 29, true), make_mla_case(22, 23, 2, 16, 8, 16, 48, 1, 23)}) {
    MlaCase cc = c;
    if (cc.R == 1)
      for (int64_t n = 0; n < cc.N; ++n) cc.row_pos[static_cast<size_t>(n)] = static_cast<int32_t>(n);
    const AbsorbedOut r = run_absorbed(*b, cc);
    REQUIRE(r.ok);
    const std::vector<double> mha = non_absorbed(*b, cc);
    // Both round to bf16 at different points (absorbed: the absorbed query and the attention's
    // latent; non-absorbed: the expanded keys and values), each 2^-9 relative: measured at most
    // 0.4% of the largest output here; the bound is 1%.
    double worst = 0;
    for (size_t i = 0; i < mha.size(); ++i) {
      REQUIRE(std::isfinite(mha[i]));
      worst = std::max(worst, std::fabs(bf16_value(r.out[i]) - mha[i]));
    }
    INFO("worst " << worst << " of " << max_abs(mha));
    CHECK(worst <= 0.01 * max_abs(mha));
    CHECK(worst > 0);  // two different roundings: the comparison is not of one computation with itself
  }
}

TEST_CASE("mla ops: the split attention (partial sums of position ranges, merged) matches one pass", "[cpu][mla]") {
  auto b = make_cpu_backend();
  // Few rows split into many ranges (kernels/common/mla_split.h): decode rows over long contexts
  // (most ranges hold positions), short ones (most ranges empty), more heads than one block holds,
  // chunked-prefill rows.
  size_t differ_all = 0;
  for (const MlaCase& c : {make_mla_case(41, 3, 5, 16, 16, 16, 64, 3, 700, true), make_mla_case(42, 7, 17, 16, 16, 16, 48, 7, 40, true),
                           make_mla_case(43, 2, 40, 16, 16, 16, 64, 2, 301, true), make_mla_case(44, 11, 4, 16, 16, 16, 64, 2, 90)}) {
    const int64_t splits = kern::mla_decode_splits(c.N, c.h, c.D(), c.kvl);
    INFO("N " << c.N << " heads " << c.h << " splits " << splits);
    REQUIRE(splits > 1);
    CHECK(b->mla_paged_attention_workspace_bytes(c.N, c.h, c.D(), c.kvl) ==
          static_cast<size_t>(splits * c.N * c.h * (c.kvl + 2) * 4));
    const AbsorbedOut one = run_absorbed(*b, c), split = run_absorbed(*b, c, true);
    REQUIRE(one.ok);
    REQUIRE(split.ok);
    CHECK(split.q_abs == one.q_abs);
    // The same sums in another grouping: each value within 2^-7 of one pass's, plus 1e-4 of the largest.
    double big = 0;
    for (uint16_t v : one.lat) big = std::max(big, std::fabs(bf16_value(v)));
    size_t bad = 0, differ = 0;
    for (size_t i = 0; i < one.lat.size(); ++i) {
      REQUIRE(std::isfinite(bf16_value(split.lat[i])));
      differ += split.lat[i] != one.lat[i];
      if (std::fabs(bf16_value(split.lat[i]) - bf16_value(one.lat[i])) > std::ldexp(std::fabs(bf16_value(one.lat[i])), -7) + 1e-4 * big)
        ++bad;
    }
    CHECK(bad == 0);
    differ_all += differ;
  }
  CHECK(differ_all > 0);  // another grouping of the sums: some roundings differ (not one computation twice)
  // Many rows do not split: no workspace.
  CHECK(b->mla_paged_attention_workspace_bytes(133, 16, 576, 512) == 0);
  CHECK(b->mla_paged_attention_workspace_bytes(64, 16, 576, 512) == 4u * 64 * 16 * 514 * 4);
  CHECK(b->mla_paged_attention_workspace_bytes(1, 16, 576, 512) == 32u * 16 * 514 * 4);
  CHECK(b->mla_paged_attention_workspace_bytes(1, 16, 580, 512) == 0);  // not a shape of the tensor-core kernel
  // A workspace too small or of another dtype: one line, nothing written.
  const MlaCase c = make_mla_case(45, 2, 4, 16, 16, 16, 64, 2, 50, true);
  std::mt19937_64 rng(9);
  Tensor q_abs = upload(*b, DType::kBF16, c.N, c.h * c.D(), random_bf16(rng, static_cast<size_t>(c.N * c.h * c.D()), 1.0));
  Tensor cache = upload(*b, DType::kBF16, c.slots, c.D(), c.cache), r2t = upload(*b, DType::kI32, c.R, c.C, c.r2t);
  Tensor rows = upload(*b, DType::kI32, 1, c.N, c.row_req), pos = upload(*b, DType::kI32, 1, c.N, c.row_pos);
  Tensor out = empty(*b, DType::kBF16, c.N, c.h * c.kvl);
  REQUIRE(fill_bytes(*b, out, 0xFF));
  const size_t need = b->mla_paged_attention_workspace_bytes(c.N, c.h, c.D(), c.kvl);
  Status st = b->mla_paged_attention(q_abs, cache, r2t, rows, pos, c.h, c.scale, out, empty(*b, DType::kF32, 1, static_cast<int64_t>(need / 4) - 1));
  CHECK(st.message() == "mla_paged_attention: workspace must hold at least mla_paged_attention_workspace_bytes(N, n_heads, cols(cache), kvl) = " +
                            std::to_string(need) + " bytes, or be undefined (got " + std::to_string(need - 4) + ")");
  st = b->mla_paged_attention(q_abs, cache, r2t, rows, pos, c.h, c.scale, out, empty(*b, DType::kU8, 1, static_cast<int64_t>(need)));
  CHECK(st.code() == ErrorCode::kBadInput);
  CHECK(st.message().rfind("mla_paged_attention: workspace must ", 0) == 0);
  CHECK(bytes_of(*b, out) == std::vector<uint8_t>(out.bytes(), 0xFF));
}

TEST_CASE("mla ops: index values read on the host are checked before any write", "[cpu][mla][contract]") {
  auto b = make_cpu_backend();
  const MlaCase c = make_mla_case(31, 4, 2, 8, 4, 6, 16, 2, 5);
  std::mt19937_64 rng(3);
  Tensor q_abs = upload(*b, DType::kBF16, c.N, c.h * c.D(), random_bf16(rng, static_cast<size_t>(c.N * c.h * c.D()), 1.0));
  Tensor cache = upload(*b, DType::kBF16, c.slots, c.D(), c.cache), r2t = upload(*b, DType::kI32, c.R, c.C, c.r2t);
  Tensor out = empty(*b, DType::kBF16, c.N, c.h * c.kvl);
  REQUIRE(fill_bytes(*b, out, 0xFF));
  auto attend = [&](std::vector<int32_t> req, std::vector<int32_t> pos, const Tensor& table) {
    return b->mla_paged_attention(q_abs, cache, table, upload(*b, DType::kI32, 1, c.N, req), upload(*b, DType::kI32, 1, c.N, pos),
                                  c.h, c.scale, out);
  };
  Status st = attend({0, 1, 2, 0}, {0, 1, 1, 0}, r2t);
  CHECK(st.message() == "mla_paged_attention: row_req[2] must be in [0, 2) (the rows of req_to_token) (got 2)");
  st = attend({0, 1, 1, 0}, {0, 1, 5, 0}, r2t);
  CHECK(st.message() == "mla_paged_attention: row_pos[2] must be in [0, 5) (the columns of req_to_token) (got 5)");
  std::vector<int32_t> bad = c.r2t;
  bad[static_cast<size_t>(1 * c.C + 3)] = static_cast<int32_t>(c.slots);
  st = attend({0, 1, 1, 0}, {0, 1, 4, 0}, upload(*b, DType::kI32, c.R, c.C, bad));
  CHECK(st.message() == "mla_paged_attention: req_to_token[1, 3] must be in [0, " + std::to_string(c.slots) +
                            ") (the rows of cache) (got " + std::to_string(c.slots) + ")");
  CHECK(st.code() == ErrorCode::kBadInput);
  CHECK(bytes_of(*b, out) == std::vector<uint8_t>(out.bytes(), 0xFF));

  Tensor lat = upload(*b, DType::kBF16, 2, 6, std::vector<uint16_t>(12, 0x3F80)), pe = upload(*b, DType::kBF16, 2, 4, std::vector<uint16_t>(8, 0x3F80));
  Tensor small = empty(*b, DType::kBF16, 5, 10);
  REQUIRE(fill_bytes(*b, small, 0xFF));
  st = b->kv_cache_store(lat, pe, small, upload(*b, DType::kI32, 1, 2, std::vector<int32_t>{4, -1}));
  CHECK(st.message() == "kv_cache_store: slots[1] must be in [0, 5) (the rows of cache) (got -1)");
  CHECK(bytes_of(*b, small) == std::vector<uint8_t>(small.bytes(), 0xFF));
}
