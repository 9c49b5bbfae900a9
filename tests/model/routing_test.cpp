// model/routing.h: the drawn routings (determinism, distinct experts, a token's experts whatever
// its batch, the frequencies of each distribution) and the padded-row sizes (the worst routing
// against brute force over every count vector).
#include "model/routing.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "model/config.h"

namespace moeprof {
namespace {

RoutingSpec spec(const char* text) {
  auto s = parse_routing(text);
  REQUIRE(s.is_ok());
  return *s;
}

std::vector<uint64_t> random_keys(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> keys(n);
  for (auto& k : keys) k = routing_key(rng() % 4099, rng() % 1'000'003);
  return keys;
}

std::vector<int32_t> draw(const RoutingDraw& d, int64_t layer, const std::vector<uint64_t>& keys, int64_t k) {
  std::vector<int32_t> ids(keys.size() * static_cast<size_t>(k), -7);
  d.draw(layer, keys, ids.data());
  return ids;
}

// Fraction of rows that hold each expert.
std::vector<double> inclusion(const std::vector<int32_t>& ids, int64_t rows, int64_t experts) {
  std::vector<double> f(static_cast<size_t>(experts), 0);
  for (int32_t e : ids) f[static_cast<size_t>(e)] += 1.0 / static_cast<double>(rows);
  return f;
}

}  // namespace

TEST_CASE("routing specs parse, print back, and bad ones name the spec", "[routing]") {
  for (const char* ok : {"router", "uniform", "zipf:1.2", "zipf:0.5", "hot:8", "hot:1", "worst"}) {
    auto s = parse_routing(ok);
    REQUIRE(s.is_ok());
    CHECK(s->text() == ok);
  }
  CHECK(!spec("router").forced());
  CHECK(spec("zipf:1.2").zipf_s == 1.2);
  CHECK(spec("hot:8").hot == 8);
  for (const char* bad : {"", "zipf", "zipf:", "zipf:0", "zipf:-1", "zipf:abc", "zipf:1.2x", "zipf:65", "hot:0", "hot:-3", "hot:2.5",
                          "hot:", "Uniform", "best"}) {
    auto s = parse_routing(bad);
    REQUIRE(!s.is_ok());
    CHECK(s.status().code() == ErrorCode::kBadInput);
    CHECK(s.status().message().find(std::string("--routing ") + bad + ":") != std::string::npos);
  }
  CHECK(parse_moe_rows("bound").value() == MoeRows::kBound);
  CHECK(parse_moe_rows("routed").value() == MoeRows::kRouted);
  REQUIRE(!parse_moe_rows("padded").is_ok());
  CHECK(parse_moe_rows("padded").status().message() == "--moe-rows padded: must be bound or routed");
  // A drawn routing must fit the model.
  CHECK(!RoutingDraw::create(spec("hot:38"), 37, 5, 1).is_ok());
  CHECK(!RoutingDraw::create(spec("uniform"), 3, 5, 1).is_ok());
  CHECK(!RoutingDraw::create(spec("router"), 37, 5, 1).is_ok());
}

TEST_CASE("drawn routings are deterministic, give k distinct experts per row, and a token the same experts in any batch", "[routing]") {
  const int64_t E = 37, k = 5, rows = 211;
  const auto keys = random_keys(rows, 0xA11CE);
  for (const char* text : {"uniform", "zipf:1.2", "zipf:0.6", "hot:3", "hot:5", "hot:11", "worst"}) {
    INFO(text);
    auto d = RoutingDraw::create(spec(text), E, k, 0x5EED);
    REQUIRE(d.is_ok());
    const auto a = draw(*d, 7, keys, k);
    CHECK(a == draw(*d, 7, keys, k));
    auto again = RoutingDraw::create(spec(text), E, k, 0x5EED);
    CHECK(a == draw(*again, 7, keys, k));
    for (int64_t r = 0; r < rows; ++r) {
      std::set<int32_t> row(a.begin() + r * k, a.begin() + (r + 1) * k);
      CHECK(static_cast<int64_t>(row.size()) == k);
      CHECK(*row.begin() >= 0);
      CHECK(*row.rbegin() < E);
    }
    if (std::string(text) == "worst") {
      // It depends on the row count only: the counts of moe_worst_counts.
      const int64_t tile = moe_tile_rows(rows, k, E);
      CHECK(expert_counts(a.data(), rows * k, E) == moe_worst_counts(rows, k, E, tile));
      continue;
    }
    // Another seed, another layer: another routing.
    auto other = RoutingDraw::create(spec(text), E, k, 0x5EEE);
    CHECK(a != draw(*other, 7, keys, k));
    CHECK(a != draw(*d, 8, keys, k));
    // The same tokens in another batch (a subset, reversed, with other tokens between): the same experts.
    std::vector<uint64_t> batch;
    std::vector<int64_t> from;
    const auto extra = random_keys(rows, 0xB0B);
    for (int64_t r = rows - 1; r >= 0; r -= 3) {
      batch.push_back(keys[static_cast<size_t>(r)]);
      from.push_back(r);
      batch.push_back(extra[static_cast<size_t>(r)]);
      from.push_back(-1);
    }
    const auto b = draw(*d, 7, batch, k);
    for (size_t i = 0; i < batch.size(); ++i)
      if (from[i] >= 0)
        CHECK(std::vector<int32_t>(b.begin() + static_cast<int64_t>(i) * k, b.begin() + static_cast<int64_t>(i + 1) * k) ==
              std::vector<int32_t>(a.begin() + from[i] * k, a.begin() + (from[i] + 1) * k));
  }
}

TEST_CASE("uniform and hot routings match their frequencies over random keys", "[routing]") {
  // Tolerance: 0.006 on a fraction of rows, more than 5 standard deviations of a binomial
  // fraction at n = 60,000 rows (sd <= 0.5 / sqrt(n) = 0.002).
  const int64_t rows = 60'000;
  const double tol = 0.006;
  const auto keys = random_keys(rows, 0xF00D);
  {
    const int64_t E = 37, k = 5;
    auto d = RoutingDraw::create(spec("uniform"), E, k, 11);
    const auto f = inclusion(draw(*d, 3, keys, k), rows, E);
    for (double x : f) CHECK(std::abs(x - 5.0 / 37) < tol);
  }
  {
    // N < k: every hot expert in every row, the rest uniform among the cold experts.
    const int64_t E = 37, k = 5, N = 3;
    auto d = RoutingDraw::create(spec("hot:3"), E, k, 11);
    const auto f = inclusion(draw(*d, 3, keys, k), rows, E);
    const auto ids = draw(*d, 3, keys, k);
    const auto c = expert_counts(ids.data(), rows * k, E);
    int64_t always = 0;
    for (size_t e = 0; e < c.size(); ++e) {
      const double x = f[e];
      if (c[e] == rows) {
        ++always;
        continue;
      }
      CHECK(std::abs(x - static_cast<double>(k - N) / static_cast<double>(E - N)) < tol);
    }
    CHECK(always == N);
  }
  {
    // N > k: k of the N hot experts per row, uniformly; no cold expert ever.
    const int64_t E = 37, k = 5, N = 11;
    auto d = RoutingDraw::create(spec("hot:11"), E, k, 11);
    const auto f = inclusion(draw(*d, 3, keys, k), rows, E);
    int64_t hot = 0;
    for (double x : f) {
      if (x == 0) continue;
      ++hot;
      CHECK(std::abs(x - static_cast<double>(k) / static_cast<double>(N)) < tol);
    }
    CHECK(hot == N);
  }
}

TEST_CASE("zipf routings match the inclusion probabilities of draws without replacement", "[routing]") {
  // Exact inclusion probabilities of sequential draws without replacement with weights 1/r^S, by
  // enumerating every ordered k-tuple of distinct ranks, against the drawn fractions (sorted: the
  // ranks are shuffled over the experts per layer, and sorting moves no entry by more than the
  // largest difference). Tolerance as above: 0.006 at 60,000 rows.
  const int64_t rows = 60'000;
  const auto keys = random_keys(rows, 0xC0FFEE);
  // S = 12 at 7 experts (7^12 > 2^30) takes the exponential clocks instead of integer weights.
  for (double S : {1.2, 0.7, 2.5, 12.0}) {
    const int64_t E = 7, k = 3;
    INFO("S = " << S);
    std::vector<double> w(static_cast<size_t>(E)), p(static_cast<size_t>(E), 0);
    for (int64_t r = 0; r < E; ++r) w[static_cast<size_t>(r)] = std::pow(static_cast<double>(r + 1), -S);
    std::vector<int64_t> pick;
    std::function<void(double, double)> rec = [&](double prob, double left) {
      if (static_cast<int64_t>(pick.size()) == k) {
        for (int64_t r : pick) p[static_cast<size_t>(r)] += prob;
        return;
      }
      for (int64_t r = 0; r < E; ++r) {
        if (std::find(pick.begin(), pick.end(), r) != pick.end()) continue;
        pick.push_back(r);
        rec(prob * w[static_cast<size_t>(r)] / left, left - w[static_cast<size_t>(r)]);
        pick.pop_back();
      }
    };
    rec(1.0, std::accumulate(w.begin(), w.end(), 0.0));
    char text[32];
    std::snprintf(text, sizeof text, "zipf:%g", S);
    auto d = RoutingDraw::create(spec(text), E, k, 0x5EED);
    auto f = inclusion(draw(*d, 2, keys, k), rows, E);
    std::sort(f.begin(), f.end());
    std::sort(p.begin(), p.end());
    for (int64_t r = 0; r < E; ++r) CHECK(std::abs(f[static_cast<size_t>(r)] - p[static_cast<size_t>(r)]) < 0.006);
  }
  {
    // A model's size (Kimi-K2.5: 384 experts, top-8): the first pick of each row is expert of rank r
    // with probability w_r / sum w. Sorted, the 10 most frequent within 0.006.
    const int64_t E = 384, k = 8;
    auto d = RoutingDraw::create(spec("zipf:1.2"), E, k, 3);
    const auto ids = draw(*d, 5, keys, k);
    std::vector<double> f(static_cast<size_t>(E), 0), p(static_cast<size_t>(E));
    for (int64_t r = 0; r < rows; ++r) f[static_cast<size_t>(ids[static_cast<size_t>(r * k)])] += 1.0 / rows;
    double W = 0;
    for (int64_t r = 0; r < E; ++r) W += (p[static_cast<size_t>(r)] = std::pow(static_cast<double>(r + 1), -1.2));
    std::sort(f.rbegin(), f.rend());
    for (int64_t r = 0; r < 10; ++r) CHECK(std::abs(f[static_cast<size_t>(r)] - p[static_cast<size_t>(r)] / W) < 0.006);
  }
  {
    // A steep S at that size: the 8 first ranks nearly always (rank 8 is (8/9)^64 = 5e-4 as likely
    // as rank 7), every other expert almost never. Integer weights floored at 1 made every pick
    // after the first nearly uniform over the other 383.
    const int64_t E = 384, k = 8;
    {
      auto d = RoutingDraw::create(spec("zipf:64"), E, k, 9);
      auto f = inclusion(draw(*d, 1, keys, k), rows, E);
      std::sort(f.rbegin(), f.rend());
      for (int64_t r = 0; r < k; ++r) CHECK(f[static_cast<size_t>(r)] > 0.99);
      CHECK(f[static_cast<size_t>(k)] < 0.01);
    }
  }
}

TEST_CASE("the worst routing's rows match brute force over every count vector", "[routing]") {
  int64_t cases = 0;
  for (int64_t T : {1, 2, 3, 5, 7})
    for (int64_t E : {1, 3, 5})
      for (int64_t k = 1; k <= std::min<int64_t>(E, 3); ++k)
        for (int64_t tile : {1, 2, 3, 4, 8}) {
          INFO("T " << T << " E " << E << " k " << k << " tile " << tile);
          // Every count vector with each count in [0, T] and the sum T*k: any of them is a routing
          // of T tokens to k distinct experts each.
          int64_t best = -1;
          std::vector<int64_t> c(static_cast<size_t>(E), 0);
          std::function<void(int64_t, int64_t)> rec = [&](int64_t e, int64_t left) {
            if (e == E) {
              if (left == 0) best = std::max(best, moe_routed_rows(c, tile));
              return;
            }
            for (int64_t v = 0; v <= std::min(T, left); ++v) {
              c[static_cast<size_t>(e)] = v;
              rec(e + 1, left - v);
            }
            c[static_cast<size_t>(e)] = 0;
          };
          rec(0, T * k);
          CHECK(moe_worst_rows(T, k, E, tile) == best);
          CHECK(best <= moe_bound_rows(T, k, E, tile));
          const auto w = moe_worst_counts(T, k, E, tile);
          REQUIRE(static_cast<int64_t>(w.size()) == E);
          CHECK(std::accumulate(w.begin(), w.end(), int64_t{0}) == T * k);
          for (int64_t x : w) CHECK((x >= 0 && x <= T));
          CHECK(moe_routed_rows(w, tile) == best);
          ++cases;
        }
  CHECK(cases == 5 * (1 + 3 + 3) * 5);
  // No drawn routing pads more rows than the worst, which the worst routing reaches.
  for (int64_t rows : {1, 3, 37, 211})
    for (const char* text : {"uniform", "zipf:1.2", "zipf:4", "hot:1", "hot:3", "hot:9", "worst"}) {
      const int64_t E = 37, k = 5, tile = moe_tile_rows(rows, k, E);
      auto d = RoutingDraw::create(spec(text), E, k, 99);
      const auto ids = draw(*d, 1, random_keys(static_cast<size_t>(rows), 7), k);
      const int64_t got = moe_routed_rows(expert_counts(ids.data(), rows * k, E), tile);
      INFO(text << " rows " << rows);
      CHECK(got <= moe_worst_rows(rows, k, E, tile));
      if (std::string(text) == "worst") CHECK(got == moe_worst_rows(rows, k, E, tile));
    }
  // The padded rows of given counts, and the bound.
  CHECK(moe_routed_rows({0, 1, 8, 9, 17}, 8) == 0 + 8 + 8 + 16 + 24);
  CHECK(moe_bound_rows(101, 5, 37, 16) == 505 + 37 * 15);
}

}  // namespace moeprof
