// The arena solver: exact optima on hand-made instances and tilings where greedy fails, random
// small instances against a brute force, alignment, capacity, components, and the independent
// checker (validate_plan) on every plan.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <random>

#include "planner/arena_engine.h"
#include "planner/arena_solver.h"
#include "tests/planner/arena_test_util.h"

using namespace moeprof;
using namespace moeprof::planner;
using moeprof::planner::testing::buf;

namespace {

// Solves and checks the plan with the independent checker; returns the solution.
ArenaSolution solve_checked(const std::vector<Buffer>& bs, ArenaSolveOptions opt = {}) {
  auto s = solve_arena(bs, opt);
  REQUIRE(s.is_ok());
  ArenaOptions check;
  check.alignment = opt.alignment;
  const Status st = validate_plan(bs, to_arena_plan(*s), check);
  INFO(st.message());
  REQUIRE(st.is_ok());
  REQUIRE(s->offsets.size() == bs.size());
  uint64_t top = 0;
  for (size_t i = 0; i < bs.size(); ++i)
    if (bs[i].size > 0 && bs[i].lower < bs[i].upper)
      top = std::max(top, s->offsets[i] + (bs[i].size + opt.alignment - 1) / std::max<uint64_t>(opt.alignment, 1) *
                                              std::max<uint64_t>(opt.alignment, 1));
  CHECK(top == s->arena_bytes);
  CHECK(s->lower_bound_bytes >= s->load_bytes);
  CHECK(s->arena_bytes >= s->lower_bound_bytes);
  CHECK(s->proven_optimal == (s->arena_bytes == s->lower_bound_bytes));
  return *s;
}

// The optimum by brute force: every order, each buffer at its lowest aligned offset that fits.
// (Sorting any plan by offset and placing in that order never raises an offset, so some order
// reaches the optimum.)
uint64_t brute_force(const std::vector<Buffer>& bs) {
  std::vector<size_t> perm(bs.size());
  std::iota(perm.begin(), perm.end(), size_t{0});
  uint64_t best = UINT64_MAX;
  do {
    std::vector<uint64_t> off(bs.size());
    std::vector<size_t> placed;
    uint64_t top = 0;
    for (size_t i : perm) {
      std::vector<std::pair<uint64_t, uint64_t>> busy;
      for (size_t j : placed)
        if (bs[i].lower < bs[j].upper && bs[j].lower < bs[i].upper) busy.emplace_back(off[j], off[j] + bs[j].size);
      std::sort(busy.begin(), busy.end());
      const uint64_t a = bs[i].alignment;
      uint64_t cur = 0;
      for (const auto& [o, e] : busy) {
        if (o >= (cur + a - 1) / a * a + bs[i].size) break;
        cur = std::max(cur, e);
      }
      off[i] = (cur + a - 1) / a * a;
      top = std::max(top, off[i] + bs[i].size);
      placed.push_back(i);
    }
    best = std::min(best, top);
  } while (std::next_permutation(perm.begin(), perm.end()));
  return best;
}

// A guillotine tiling of the rectangle [0, T) x [0, C): every instant is filled, so the optimum is
// C = LOAD; the pieces are cut at random, so greedy orders often miss it.
void tile(std::mt19937_64& rng, uint64_t t0, uint64_t t1, uint64_t o0, uint64_t o1, int depth, std::vector<Buffer>* out) {
  const bool can_time = t1 - t0 >= 2, can_space = o1 - o0 >= 2;
  if (depth == 0 || (!can_time && !can_space) || (depth < 3 && rng() % 4 == 0)) {
    out->push_back(buf(o1 - o0, t0, t1));
    return;
  }
  if (can_time && (!can_space || rng() % 2 == 0)) {
    const uint64_t cut = t0 + 1 + rng() % (t1 - t0 - 1);
    tile(rng, t0, cut, o0, o1, depth - 1, out);
    tile(rng, cut, t1, o0, o1, depth - 1, out);
  } else {
    const uint64_t cut = o0 + 1 + rng() % (o1 - o0 - 1);
    tile(rng, t0, t1, o0, cut, depth - 1, out);
    tile(rng, t0, t1, cut, o1, depth - 1, out);
  }
}

}  // namespace

TEST_CASE("solver: reaches the optimum where every greedy order is 43% above it", "[planner][arena][solver]") {
  // time   0 1 2 3 4
  // b0(3)  #######      [0,4)
  // b1(4)    ###        [1,3)
  // b2(4)          #    [4,5)
  // b3(3)        ###    [3,5)
  // Greedy: 10 in every order; optimum 7 = LOAD with b0 at 0, b1 at 3, b2 at 0, b3 at 4.
  const std::vector<Buffer> bs = {buf(3, 0, 4), buf(4, 1, 3), buf(4, 4, 5), buf(3, 3, 5)};
  CHECK(plan_arena_best(bs).arena_size == 10);
  ArenaSolveOptions greedy_only;
  greedy_only.time_limit_s = 0;
  const ArenaSolution g = solve_checked(bs, greedy_only);
  CHECK(g.arena_bytes == 10);
  CHECK(g.algorithm.rfind("greedy:", 0) == 0);
  CHECK_FALSE(g.proven_optimal);
  CHECK(g.first_answer_seconds <= g.seconds);
  ArenaSolveOptions opt;
  opt.time_limit_s = 30;
  const ArenaSolution s = solve_checked(bs, opt);
  CHECK(s.arena_bytes == 7);
  CHECK(s.load_bytes == 7);
  CHECK(s.lower_bound_bytes == 7);
  CHECK(s.proven_optimal);
  CHECK(s.algorithm == "search");
  CHECK(s.offsets == std::vector<uint64_t>{0, 3, 0, 4});
}

TEST_CASE("solver: an optimum above LOAD is proven by the search", "[planner][arena][solver]") {
  // Small instances whose optimum exceeds LOAD are rare (none among 200,000 random ones of 5-7
  // buffers); these two came out of a longer random search. Brute force confirms the optimum, the
  // solver must find it and prove it by exhausting every smaller arena.
  const std::vector<std::vector<Buffer>> cases = {
      {buf(3, 4, 8), buf(4, 0, 2), buf(3, 1, 5), buf(5, 0, 1), buf(1, 2, 5), buf(1, 3, 7), buf(5, 5, 9), buf(2, 1, 4)},
      {buf(4, 1, 5), buf(4, 0, 4), buf(1, 3, 6), buf(6, 0, 1), buf(6, 5, 6), buf(2, 1, 3), buf(5, 4, 5)},
  };
  for (const auto& bs : cases) {
    const uint64_t opt = brute_force(bs);
    CHECK(opt == arena_load(bs) + 1);
    ArenaSolveOptions o;
    o.time_limit_s = 30;
    const ArenaSolution s = solve_checked(bs, o);
    CHECK(s.arena_bytes == opt);
    CHECK(s.lower_bound_bytes == opt);
    CHECK(s.proven_optimal);
  }
}

TEST_CASE("solver: random small instances match brute force, with and without alignment", "[planner][arena][solver]") {
  std::mt19937_64 rng(2025);
  for (int iter = 0; iter < 600; ++iter) {
    const size_t n = 1 + rng() % 7;
    std::vector<Buffer> bs;
    const bool aligned = iter % 3 == 0;
    // Every other instance has narrow lifetimes: many buffers share one (the symmetry rule).
    const uint64_t span = iter % 2 ? 3 : 9, len = iter % 2 ? 2 : 6;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t lo = rng() % span, al = aligned ? uint64_t{1} << (rng() % 3) : 1;
      const uint64_t size = iter % 4 == 0 ? al * (1 + rng() % 4) : 1 + rng() % 13;
      bs.push_back(buf(size, lo, lo + 1 + rng() % len, al));
    }
    const uint64_t opt = brute_force(bs);
    ArenaSolveOptions o;
    o.time_limit_s = 30;
    o.seed = static_cast<uint64_t>(iter);
    const ArenaSolution s = solve_checked(bs, o);
    INFO("iter " << iter);
    CHECK(s.arena_bytes == opt);
    CHECK(s.proven_optimal);
    CHECK(s.load_bytes == arena_load(bs));
  }
}

namespace {
// Sanitizer builds (the asan preset) run the search several times slower: there, the tests that
// claim a proof within a time limit check only that the plan is valid (solve_checked) and no
// smaller than LOAD; the release build checks the proofs.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif
}  // namespace

TEST_CASE("solver: guillotine tilings where greedy fails are solved at LOAD", "[planner][arena][solver]") {
  std::mt19937_64 rng(99);
  int greedy_failed = 0;
  for (int iter = 0; iter < 60 && greedy_failed < 8; ++iter) {
    std::vector<Buffer> bs;
    const uint64_t C = 64 + rng() % 1000;
    tile(rng, 0, 40 + rng() % 100, 0, C, 6 + static_cast<int>(rng() % 3), &bs);
    std::shuffle(bs.begin(), bs.end(), rng);
    REQUIRE(arena_load(bs) == C);
    if (plan_arena_best(bs).arena_size == C) continue;
    ++greedy_failed;
    ArenaSolveOptions o;
    o.time_limit_s = kSanitized ? 2 : 30;
    const ArenaSolution s = solve_checked(bs, o);
    INFO("iter " << iter << ", " << bs.size() << " buffers");
    CHECK(s.arena_bytes >= C);
    if (kSanitized) continue;
    CHECK(s.arena_bytes == C);
    CHECK(s.proven_optimal);
  }
  CHECK(greedy_failed == 8);
}

TEST_CASE("solver: global alignment rounds sizes and offsets, odd sizes", "[planner][arena][solver]") {
  std::mt19937_64 rng(11);
  for (int iter = 0; iter < 40; ++iter) {
    std::vector<Buffer> bs;
    for (size_t i = 0; i < 30; ++i) {
      const uint64_t lo = rng() % 50;
      bs.push_back(buf(1 + 2 * (rng() % 5000), lo, lo + 1 + rng() % 20, rng() % 4 == 0 ? 48 : 1));
    }
    ArenaSolveOptions o;
    o.alignment = 256;
    o.time_limit_s = 0.05;
    const ArenaSolution s = solve_checked(bs, o);
    CHECK(s.load_bytes == arena_load(bs, 256));
    for (size_t i = 0; i < bs.size(); ++i) CHECK(s.offsets[i] % offset_alignment(bs[i], 256) == 0);
  }
}

TEST_CASE("solver: capacity", "[planner][arena][solver]") {
  const std::vector<Buffer> bs = {buf(3, 0, 4), buf(4, 1, 3), buf(4, 4, 5), buf(3, 3, 5)};
  ArenaSolveOptions o;
  o.time_limit_s = 30;
  o.capacity = 7;
  ArenaSolution s = solve_checked(bs, o);
  CHECK(s.fits_capacity);
  CHECK(s.arena_bytes == 7);
  o.capacity = 6;  // below LOAD: no plan, and the bound says so
  s = solve_checked(bs, o);
  CHECK_FALSE(s.fits_capacity);
  CHECK(s.lower_bound_bytes == 7);
  ArenaOptions check;
  check.capacity = 6;
  CHECK_FALSE(validate_plan(bs, to_arena_plan(s), check).is_ok());
  check.capacity = 7;
  CHECK(validate_plan(bs, to_arena_plan(s), check).is_ok());
}

TEST_CASE("solver: components, empty and degenerate input, errors", "[planner][arena][solver]") {
  // Two time-disjoint copies of the hard instance, the second one shifted and doubled: each is
  // planned on its own and the arena is the larger one.
  std::vector<Buffer> bs = {buf(3, 0, 4), buf(4, 1, 3), buf(4, 4, 5), buf(3, 3, 5)};
  for (int i = 0; i < 4; ++i) bs.push_back(buf(2 * bs[static_cast<size_t>(i)].size, bs[static_cast<size_t>(i)].lower + 5,
                                               bs[static_cast<size_t>(i)].upper + 5));
  bs.push_back(buf(0, 0, 9));  // occupies nothing
  bs.push_back(buf(5, 7, 7));  // empty lifetime
  ArenaSolveOptions o;
  o.time_limit_s = 30;
  const ArenaSolution s = solve_checked(bs, o);
  CHECK(s.components == 2);
  CHECK(s.buffers == 8);
  CHECK(s.arena_bytes == 14);
  CHECK(s.proven_optimal);
  CHECK(s.offsets[8] == 0);
  CHECK(s.offsets[9] == 0);

  const ArenaSolution none = solve_checked({}, o);
  CHECK(none.arena_bytes == 0);
  CHECK(none.proven_optimal);
  CHECK(none.gap_pct() == 0.0);

  auto fine = solve_arena({buf(1, 0, 1, uint64_t{1} << 40), buf(1, 0, 1, 3)}, o);
  REQUIRE(fine.is_ok());  // lcm(1, 2^40) and lcm(1, 3) fit
  CHECK(fine->arena_bytes == 4);  // one buffer at 0, the other at 3
  ArenaSolveOptions al = o;
  al.alignment = 3;
  auto bad = solve_arena({buf(1, 0, 1, uint64_t{1} << 63)}, al);
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().message().find("overflows") != std::string::npos);
  auto huge = solve_arena({buf(uint64_t{1} << 62, 0, 2), buf(uint64_t{1} << 62, 1, 3)}, o);
  REQUIRE_FALSE(huge.is_ok());
  CHECK(huge.status().message() == "the buffer sizes sum to more than 2^63-1 bytes");
  // Exactly 2^63-1 in all is the byte limit, not past it (it had been refused, naming an alignment
  // of 1 nobody gave).
  for (const std::vector<Buffer>& at_limit : {std::vector<Buffer>{buf((uint64_t{1} << 63) - 1, 0, 10)},
                                              std::vector<Buffer>{buf(uint64_t{1} << 62, 0, 2), buf((uint64_t{1} << 62) - 1, 1, 3)}}) {
    const ArenaSolution ok = solve_checked(at_limit, o);
    CHECK(ok.arena_bytes == (uint64_t{1} << 63) - 1);
    CHECK(ok.proven_optimal);
  }
  // Small sizes, one alignment that leaves no room below 2^63: the alignment is named, not the sizes.
  auto wide = solve_arena({buf(100, 0, 2, 1), buf(7, 1, 3, uint64_t{1} << 63), buf(5, 0, 1, 8)}, o);
  REQUIRE_FALSE(wide.is_ok());
  CHECK(wide.status().message() ==
        "buffer 1: its offset alignment 9223372036854775808 is too large: the sizes with their alignment padding sum to more than 2^63-1 bytes");
}

TEST_CASE("solver: a component with too many overlapping pairs for a pair list gets every greedy order", "[planner][arena][solver]") {
  // 4,500 buffers that all overlap at t = 4499 (10.1 M pairs, above the 8.4 M of an overlap
  // graph, which the search would need), then a second component of short random buffers. The
  // greedy orders need no pair list.
  std::mt19937_64 rng(8);
  std::vector<Buffer> bs;
  uint64_t sum = 0;
  for (uint64_t i = 0; i < 4500; ++i) {
    bs.push_back(buf(1 + rng() % 1000, i, i + 4500 + rng() % 100));
    sum += bs.back().size;
  }
  for (int i = 0; i < 300; ++i) {
    const uint64_t lo = 20000 + rng() % 500;
    bs.push_back(buf(1 + rng() % 1000, lo, lo + 1 + rng() % 30));
  }
  std::vector<uint32_t> first(4500);
  std::iota(first.begin(), first.end(), 0u);
  CHECK_FALSE(detail::make_problem(bs, first, 1, size_t{1} << 23).has_adjacency);
  ArenaSolveOptions o;
  o.time_limit_s = 1;
  const ArenaSolution s = solve_checked(bs, o);
  CHECK(s.components == 2);
  CHECK(s.load_bytes == sum);
  CHECK(s.arena_bytes == sum);
  CHECK(s.proven_optimal);
  CHECK(s.algorithm.rfind("greedy:", 0) == 0);
}

TEST_CASE("engine: the sweep equals best-fit in lower order, every greedy plan is valid", "[planner][arena][solver]") {
  std::mt19937_64 rng(3);
  for (int iter = 0; iter < 100; ++iter) {
    std::vector<Buffer> bs;
    const size_t n = 1 + rng() % 300;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t lo = rng() % 400;
      bs.push_back(buf(1 + rng() % 999, lo, lo + 1 + rng() % 60));
    }
    std::vector<uint32_t> all(n);
    std::iota(all.begin(), all.end(), 0u);
    const uint64_t al = iter % 2 ? 16 : 1;
    const detail::Problem p = detail::make_problem(bs, all, al, 1u << 20);
    REQUIRE(p.has_adjacency);
    CHECK(p.load == arena_load(bs, al));
    uint64_t a_sweep = 0, a_greedy = 0;
    const auto sweep = detail::sweep_best_fit(p, &a_sweep);
    const auto greedy = detail::greedy_best_fit(p, ArenaOrder::kLowerAsc, &a_greedy);
    CHECK(sweep == greedy);
    CHECK(a_sweep == a_greedy);
    for (int o = 0; o < kNumArenaOrders; ++o) {
      uint64_t arena = 0;
      const auto off = detail::greedy_best_fit(p, static_cast<ArenaOrder>(o), &arena);
      ArenaPlan plan;
      plan.offsets.assign(n, 0);
      for (size_t k = 0; k < n; ++k) plan.offsets[p.orig[k]] = off[k];
      plan.arena_size = arena;
      ArenaOptions check;
      check.alignment = al;
      CHECK(validate_plan(bs, plan, check).is_ok());
    }
  }
}
