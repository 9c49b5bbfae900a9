// The planner on hostile traces (issue 14): figures at the byte limit are exact, sums beyond it
// are refused (not wrapped to 0), out-of-order timestamps land in the timeline, the arena's
// rounding and sums never wrap, a CSV size beyond the limit is bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>

#include "core/checked.h"
#include "planner/analysis.h"
#include "planner/arena.h"
#include "planner/arena_csv.h"
#include "planner/arena_solver.h"
#include "planner/timeline.h"
#include "tests/planner/trace_builder.h"

using namespace moeprof;
using namespace moeprof::planner;
using moeprof::planner::testing::TraceBuilder;

TEST_CASE("analysis: an allocation of 2^63-1 bytes is an exact figure", "[planner][bounds]") {
  TraceBuilder b;
  b.alloc(10, 0x1000, kMaxBytes, Category::kActivation, "s", "huge");
  b.free(20, 0x1000);
  const RunAnalysis run = analyze(b.trace);
  CHECK(run.limit_error.empty());
  CHECK(run.peak_activation_bytes == kMaxBytes);
  CHECK(run.churn_bytes == kMaxBytes);
  const auto& scopes = run.devices.at(0).scopes;
  auto it = std::find_if(scopes.begin(), scopes.end(), [](const ScopeStat& x) { return x.scope == "s"; });
  REQUIRE(it != scopes.end());
  CHECK(it->high_water_bytes == kMaxBytes);
  // Compared with an empty run, the delta is exact in int64 (it used to print "+9223.4 PB").
  TraceBuilder e;
  e.alloc(10, 0x1000, 1);
  const Comparison c = compare(analyze(e.trace), run);
  CHECK(c.peak_activation_delta == std::numeric_limits<int64_t>::max() - 1);
  CHECK(c.churn_delta == std::numeric_limits<int64_t>::max() - 1);
  const Comparison back = compare(run, analyze(e.trace));
  CHECK(back.peak_activation_delta == -(std::numeric_limits<int64_t>::max() - 1));
}

TEST_CASE("analysis: byte sums beyond 2^63-1 are refused, not wrapped", "[planner][bounds]") {
  // Two allocations of 2^62 + 1 and 2^62 bytes: the churn 2^63 + 1 used to wrap (and two of 2^63
  // gave a churn of 0). The analysis says why it refuses the trace.
  TraceBuilder b;
  b.alloc(10, 0x1000, (uint64_t{1} << 62) + 1);
  b.alloc(20, 0x2000, uint64_t{1} << 62);
  const RunAnalysis run = analyze(b.trace);
  CHECK(run.limit_error == "the allocations add up to more than 2^63-1 bytes (at replay position 1): not a recording of real memory");
  // Spread over devices, the sum counts all of them (groups and never-freed bytes add devices up).
  TraceBuilder d;
  d.alloc(10, 0x1000, uint64_t{1} << 62, Category::kActivation, "", "", 0);
  d.alloc(20, 0x1000, uint64_t{1} << 62, Category::kActivation, "", "", 1);
  CHECK_FALSE(analyze(d.trace).limit_error.empty());
  // Pools: their reserved bytes add up too.
  TraceBuilder p;
  p.trace.add(EventKind::kPoolReserve, 1, 0x10, kMaxBytes);
  p.trace.add(EventKind::kPoolReserve, 2, 0x20, 1);
  CHECK(analyze(p.trace).limit_error == "the memory pools of device 0 reserve more than 2^63-1 bytes: not a recording of real memory");
  // Exactly at the limit is fine.
  TraceBuilder ok;
  ok.alloc(10, 0x1000, kMaxBytes - 5);
  ok.alloc(20, 0x2000, 5);
  const RunAnalysis at = analyze(ok.trace);
  CHECK(at.limit_error.empty());
  CHECK(at.peak_total_bytes == kMaxBytes);
}

TEST_CASE("timeline: samples outside the time range land in the end buckets", "[planner][bounds]") {
  // Out-of-order timestamps reach the timeline with t < t0 or t > t1 (the range of the in-order
  // prefix): clamped in floating point before any conversion.
  Timeline tl;
  tl.init(8, 1000, 2000);
  tl.sample(0, 5);                  // before t0
  tl.sample(UINT64_MAX, 7);         // far after t1: used to convert a double above 2^64 to size_t
  tl.sample(1500, 9);
  const auto pts = tl.points();
  REQUIRE(pts.size() == 3);
  CHECK(pts[0] == std::pair<uint64_t, uint64_t>{0, 5});
  CHECK(pts[1] == std::pair<uint64_t, uint64_t>{UINT64_MAX, 7});
  CHECK(pts[2] == std::pair<uint64_t, uint64_t>{1500, 9});

  TraceBuilder b;
  b.alloc(UINT64_MAX, 0x10, 8);
  b.alloc(5, 0x20, 16);
  b.free(0, 0x10);
  const RunAnalysis run = analyze(b.trace);
  CHECK(run.reordered);
  CHECK(run.peak_total_bytes == 24);  // replayed in time order: free(0) (unknown), alloc(5), alloc(MAX)
  CHECK(run.anomalies.unknown_frees == 1);
}

TEST_CASE("timeline: the adaptive buckets keep each one's first minimum and maximum, over any range", "[planner][bounds]") {
  // Reference: the buckets of the final width 2^k recomputed from every sample by division. The
  // adaptive timeline reaches the same points by merging as it widens (by shifts).
  uint64_t rng = 12345;
  auto next = [&] {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
  };
  for (int round = 0; round < 40; ++round) {
    const size_t points = 3 + next() % 61;  // odd sizes too
    Timeline tl;
    tl.init_adaptive(points);
    std::vector<std::pair<uint64_t, uint64_t>> samples;
    uint64_t ts = next() % 1000;
    const int n = 1 + static_cast<int>(next() % 3000);
    for (int i = 0; i < n; ++i) {
      ts += next() % (round < 20 ? 50 : 1000000);  // a few buckets' widths, or many doublings
      samples.push_back({ts, next() % 1000});
      tl.sample(samples.back().first, samples.back().second);
    }
    const size_t buckets = points / 2;
    const uint64_t t0 = samples.front().first;
    unsigned k = 0;
    while ((samples.back().first - t0) / (uint64_t{1} << k) >= buckets) ++k;
    std::vector<std::pair<uint64_t, uint64_t>> want;
    for (size_t i = 0; i < samples.size();) {
      const uint64_t b = (samples[i].first - t0) / (uint64_t{1} << k);
      auto lo = samples[i], hi = samples[i];
      size_t j = i + 1;
      for (; j < samples.size() && (samples[j].first - t0) / (uint64_t{1} << k) == b; ++j) {
        if (samples[j].second < lo.second) lo = samples[j];
        if (samples[j].second > hi.second) hi = samples[j];
      }
      if (lo == hi) {
        want.push_back(lo);
      } else if (lo.first <= hi.first) {
        want.push_back(lo), want.push_back(hi);
      } else {
        want.push_back(hi), want.push_back(lo);
      }
      i = j;
    }
    INFO("round " << round << ", " << n << " samples, " << points << " points, width 2^" << k);
    CHECK(tl.points() == want);
  }
  // The whole 64-bit range in two samples, into one bucket (points 2): the width reaches 2^64.
  Timeline one;
  one.init_adaptive(2);
  one.sample(0, 3);
  one.sample(UINT64_MAX, 9);
  one.sample(UINT64_MAX, 5);  // at that width (UBSan: no shift by 64); neither a new low nor high
  CHECK(one.points() == std::vector<std::pair<uint64_t, uint64_t>>{{0, 3}, {UINT64_MAX, 9}});
}

TEST_CASE("arena: rounding and sums never wrap", "[planner][arena][bounds]") {
  // A size near 2^64 rounded up to the alignment used to wrap to a tiny size; the solver now sees
  // a saturated size and refuses the instance.
  std::vector<Buffer> bs(2);
  bs[0] = Buffer{0, UINT64_MAX - 10, 0, 2, 1};
  bs[1] = Buffer{1, 100, 1, 3, 1};
  ArenaSolveOptions opt;
  opt.alignment = 256;
  opt.time_limit_s = 0;
  auto s = solve_arena(bs, opt);
  REQUIRE_FALSE(s.is_ok());
  CHECK(s.status().message() == "the buffer sizes sum to more than 2^63-1 bytes");
  CHECK(arena_load(bs, 256) == UINT64_MAX);  // saturated, not wrapped to 356
  // Two sizes of 2^62 with an alignment of 2^62 + 1 each round to more than 2^63 together.
  bs[0] = Buffer{0, uint64_t{1} << 62, 0, 2, 1};
  bs[1] = Buffer{1, uint64_t{1} << 62, 1, 3, 1};
  opt.alignment = (uint64_t{1} << 62) + 1;
  CHECK_FALSE(solve_arena(bs, opt).is_ok());
}

TEST_CASE("csv: a size beyond 2^63-1 bytes is bad input naming the line", "[planner][arena][csv][bounds]") {
  auto r = parse_arena_csv("id,lower,upper,size\na,0,1,9223372036854775807\nb,0,1,9223372036854775808\n", "big.csv");
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == ErrorCode::kBadInput);
  CHECK(r.status().message() == "big.csv line 3: size 9223372036854775808 exceeds the limit of 2^63-1 bytes");
  auto wide = parse_arena_csv("0,0,1,18446744073709551616\n", "wide.csv");
  REQUIRE_FALSE(wide.is_ok());
  CHECK(wide.status().message() == "wide.csv line 1: size '18446744073709551616' is not an unsigned 64-bit integer");
}
