// Replay tests on hand-computed traces (exact peaks, instants and live sets) and a randomized
// cross-check against a brute-force replay.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <random>

#include "planner/address_map.h"
#include "planner/analysis.h"
#include "planner/arena.h"
#include "tests/planner/trace_builder.h"

using namespace moeprof;
using namespace moeprof::planner;
using moeprof::planner::testing::TraceBuilder;

namespace {
std::vector<std::string> names(const std::vector<LiveEntry>& v) {
  std::vector<std::string> out;
  for (const auto& e : v) out.push_back(e.name);
  return out;
}
const ScopeStat* find_scope(const DeviceAnalysis& d, const std::string& s) {
  for (const auto& st : d.scopes) {
    if (st.scope == s) return &st;
  }
  return nullptr;
}
}  // namespace

TEST_CASE("peak ties report the first instant the maximum is reached", "[planner][analysis]") {
  TraceBuilder b;
  b.alloc(1, 0x1000, 100, Category::kActivation, "", "a");
  b.alloc(2, 0x2000, 50, Category::kActivation, "", "b");
  b.free(3, 0x2000);
  b.alloc(4, 0x3000, 50, Category::kActivation, "", "c");  // 150 again: a tie, not reported
  b.free(5, 0x1000);
  b.free(6, 0x3000);
  RunAnalysis r = analyze(b.trace);
  REQUIRE(r.devices.size() == 1);
  const DeviceAnalysis& d = r.devices[0];
  CHECK(d.peak_activation_bytes == 150);
  CHECK(d.peak_activation_ts == 2);
  CHECK(d.peak_activation_index == 1);
  CHECK(d.peak_total_bytes == 150);
  CHECK(d.peak_total_ts == 2);
  CHECK(names(d.live_set_at_activation_peak) == std::vector<std::string>{"a", "b"});
  CHECK(d.live_set_at_activation_peak[0].bytes == 100);
  CHECK(d.churn_bytes == 200);
  CHECK(d.allocations == 3);
  CHECK(d.frees == 3);
  CHECK(r.anomalies.total() == 0);
  CHECK(r.anomalies.never_freed == 0);
  CHECK_FALSE(r.reordered);
  CHECK(std::find(d.timeline_activation.begin(), d.timeline_activation.end(), std::make_pair(uint64_t{2}, uint64_t{150})) !=
        d.timeline_activation.end());
  REQUIRE(r.lifetimes.size() == 3);
  CHECK(r.lifetimes[1].t_free == 3);
  CHECK(r.lifetimes[1].free_index == 2);
}

TEST_CASE("unordered input is replayed by timestamp, then seq, then file order", "[planner][analysis]") {
  SECTION("a free written before its alloc") {
    TraceBuilder b;
    b.free(5, 0x10);
    b.alloc(3, 0x20, 7, Category::kActivation, "", "y");
    b.alloc(1, 0x10, 10, Category::kActivation, "", "x");
    b.free(4, 0x20);
    RunAnalysis r = analyze(b.trace);
    CHECK(r.reordered);
    CHECK(r.anomalies.unknown_frees == 0);
    CHECK(r.anomalies.never_freed == 0);
    CHECK(r.peak_activation_bytes == 17);
    CHECK(r.devices[0].peak_activation_ts == 3);
    REQUIRE(r.lifetimes.size() == 2);
    CHECK(r.str(r.lifetimes[0].name_id) == "x");  // lifetimes are in replay order
    CHECK(r.lifetimes[0].t_free == 5);
  }
  SECTION("equal timestamps: lower seq first") {
    TraceBuilder b;
    b.alloc(1, 0x1, 20, Category::kActivation, "", "w").seq = 1;
    b.alloc(10, 0x2, 30, Category::kActivation, "", "z").seq = 5;
    b.free(10, 0x1).seq = 4;  // replayed before z's alloc
    RunAnalysis r = analyze(b.trace);
    CHECK(r.reordered);
    CHECK(r.peak_activation_bytes == 30);
    CHECK(r.devices[0].peak_activation_ts == 10);
  }
  SECTION("equal timestamps and seq: file order") {
    TraceBuilder b;
    b.alloc(1, 0x1, 20, Category::kActivation, "", "w").seq = 0;
    b.alloc(10, 0x2, 30, Category::kActivation, "", "z").seq = 0;
    b.free(10, 0x1).seq = 0;
    RunAnalysis r = analyze(b.trace);
    CHECK_FALSE(r.reordered);
    CHECK(r.peak_activation_bytes == 50);
  }
}

TEST_CASE("zero-size allocations are counted and hold nothing", "[planner][analysis]") {
  TraceBuilder b;
  b.alloc(1, 0x40, 0, Category::kActivation, "", "empty");
  b.alloc(2, 0x0, 0, Category::kActivation, "", "null");
  b.alloc(3, 0x50, 8, Category::kActivation, "", "eight");
  b.free(4, 0x40);
  b.free(5, 0x50);
  b.free(6, 0x0);
  RunAnalysis r = analyze(b.trace);
  CHECK(r.anomalies.zero_size_allocs == 2);
  CHECK(r.anomalies.null_frees == 1);
  CHECK(r.anomalies.unknown_frees == 0);
  CHECK(r.anomalies.double_frees == 0);
  CHECK(r.anomalies.never_freed == 0);
  CHECK(r.lifetimes.size() == 3);
  const DeviceAnalysis& d = r.devices[0];
  CHECK(d.peak_activation_bytes == 8);
  CHECK(d.peak_activation_ts == 3);
  CHECK(d.allocations == 3);
  CHECK(names(d.live_set_at_activation_peak) == std::vector<std::string>{"eight"});
}

TEST_CASE("double frees and unknown frees are counted, not fatal", "[planner][analysis]") {
  TraceBuilder b;
  b.alloc(1, 0xA0, 64, Category::kActivation, "", "a");
  b.free(2, 0xA0);
  b.free(3, 0xA0);                        // double free
  b.free(4, 0xB0);                        // unknown
  b.alloc(5, 0xC0, 32, Category::kWorkspace, "", "c");  // never freed
  b.free(6, 0xA0, /*device=*/1);          // unknown: that address was never allocated on device 1
  RunAnalysis r = analyze(b.trace);
  CHECK(r.anomalies.double_frees == 1);
  CHECK(r.anomalies.unknown_frees == 2);
  CHECK(r.anomalies.never_freed == 1);
  CHECK(r.anomalies.never_freed_bytes == 32);
  CHECK(r.anomalies.total() == 3);
  const DeviceAnalysis* d0 = r.device(0);
  REQUIRE(d0 != nullptr);
  CHECK(d0->peak_activation_bytes == 64);
  CHECK(d0->peak_activation_ts == 1);
  CHECK(d0->frees == 1);
  CHECK(r.lifetimes[1].t_free == kNever);
  CHECK_FALSE(r.lifetimes[1].freed());
}

TEST_CASE("an alloc at a live address ends the old allocation", "[planner][analysis]") {
  TraceBuilder b;
  b.alloc(1, 0x10, 100);
  b.alloc(2, 0x10, 40);
  b.free(3, 0x10);
  RunAnalysis r = analyze(b.trace);
  CHECK(r.anomalies.alloc_over_live == 1);
  CHECK(r.anomalies.never_freed == 0);
  CHECK(r.peak_activation_bytes == 100);
  REQUIRE(r.lifetimes.size() == 2);
  CHECK(r.lifetimes[0].t_free == 2);
  CHECK(r.lifetimes[0].free_index == 1);
  CHECK(r.lifetimes[1].t_free == 3);
  CHECK(r.devices[0].timeline_total.back() == std::make_pair(uint64_t{3}, uint64_t{0}));
}

TEST_CASE("free records with a size take the alloc's size and count mismatches", "[planner][analysis]") {
  TraceBuilder b;
  b.alloc(1, 0x10, 100);
  b.alloc(2, 0x20, 30);
  b.free(3, 0x10, 0, 99);  // wrong size: the alloc's 100 is released
  b.alloc(4, 0x30, 100);   // live 130 (a tie, not a new peak) only if 100 was released
  b.free(5, 0x20, 0, 30);
  RunAnalysis r = analyze(b.trace);
  CHECK(r.anomalies.free_size_mismatches == 1);
  CHECK(r.peak_activation_bytes == 130);
  CHECK(r.devices[0].peak_activation_ts == 2);
}

TEST_CASE("several devices: allocations keyed by (device, address), run level is the max", "[planner][analysis]") {
  TraceBuilder b;
  b.alloc(1, 0x100, 1000, Category::kActivation, "", "a0", 0);
  b.alloc(2, 0x100, 600, Category::kActivation, "", "a1", 1);
  b.alloc(3, 0x200, 600, Category::kActivation, "", "b1", 1);
  b.free(4, 0x100, 0);
  b.free(5, 0x100, 1);
  b.free(6, 0x200, 1);
  b.alloc(7, 0x300, 300, Category::kWeights, "", "w0", 0);
  RunAnalysis r = analyze(b.trace);
  CHECK(r.anomalies.alloc_over_live == 0);
  CHECK(r.anomalies.unknown_frees == 0);
  REQUIRE(r.devices.size() == 2);
  CHECK(r.devices[0].device == 0);
  CHECK(r.devices[1].device == 1);
  CHECK(r.devices[0].peak_activation_bytes == 1000);
  CHECK(r.devices[0].peak_activation_ts == 1);
  CHECK(r.devices[0].peak_total_bytes == 1000);
  CHECK(r.devices[0].churn_bytes == 1300);
  CHECK(r.devices[1].peak_activation_bytes == 1200);
  CHECK(r.devices[1].peak_activation_ts == 3);
  CHECK(names(r.devices[1].live_set_at_activation_peak) == std::vector<std::string>{"a1", "b1"});
  CHECK(r.peak_activation_bytes == 1200);
  CHECK(r.peak_device == 1);
  CHECK(r.churn_bytes == 1300);
  CHECK(r.allocations == 2);
  CHECK(r.anomalies.never_freed == 1);
  CHECK(r.anomalies.never_freed_bytes == 300);
}

TEST_CASE("category split: activation peak, total peak and per-category high-water marks", "[planner][analysis]") {
  TraceBuilder b;
  b.alloc(1, 0x1, 1000, Category::kWeights, "", "W");
  b.alloc(2, 0x2, 500, Category::kKvCache, "", "K");
  b.alloc(3, 0x3, 100, Category::kActivation, "", "A1");
  b.alloc(4, 0x4, 30, Category::kWorkspace, "", "S");
  b.alloc(5, 0x5, 20, Category::kCommunication, "", "C");
  b.alloc(6, 0x6, 7, Category::kUnknown, "", "U");
  b.free(7, 0x3);
  b.alloc(8, 0x7, 300, Category::kActivation, "", "A2");  // activation peak: 357
  b.free(9, 0x7);
  b.alloc(10, 0x8, 1000, Category::kKvCache, "", "K2");
  b.alloc(11, 0x9, 50, Category::kGraph, "", "G");       // total peak: 2607
  RunAnalysis r = analyze(b.trace);
  const DeviceAnalysis& d = r.devices[0];
  CHECK(d.peak_activation_bytes == 357);
  CHECK(d.peak_activation_ts == 8);
  CHECK(d.peak_total_bytes == 2607);
  CHECK(d.peak_total_ts == 11);
  const CategoryBytes& a = d.live_at_activation_peak;
  CHECK(a[Category::kWeights] == 1000);
  CHECK(a[Category::kKvCache] == 500);
  CHECK(a[Category::kActivation] == 300);
  CHECK(a[Category::kWorkspace] == 30);
  CHECK(a[Category::kCommunication] == 20);
  CHECK(a[Category::kUnknown] == 7);
  CHECK(a[Category::kGraph] == 0);
  CHECK(a.activation() == 357);
  CHECK(a.total() == 1857);
  const CategoryBytes& t = d.live_at_total_peak;
  CHECK(t[Category::kKvCache] == 1500);
  CHECK(t[Category::kActivation] == 0);
  CHECK(t[Category::kGraph] == 50);
  CHECK(t.total() == 2607);
  CHECK(t.activation() == 57);
  CHECK(d.peak_by_category[Category::kActivation] == 300);
  CHECK(d.peak_by_category[Category::kKvCache] == 1500);
  CHECK(d.peak_by_category[Category::kWeights] == 1000);
  CHECK(d.churn_by_category[Category::kActivation] == 400);
  CHECK(d.churn_bytes == 3007);
  CHECK(names(d.live_set_at_activation_peak) == std::vector<std::string>{"A2", "S", "C", "U"});
}

TEST_CASE("scope high-water marks count the exact scope and each prefix", "[planner][analysis]") {
  TraceBuilder b;
  b.alloc(0, 0x100, 100, Category::kWeights, "layer.1/moe/experts", "w");  // never freed
  b.alloc(1, 0x1, 10, Category::kActivation, "layer.0/attn", "q");
  b.alloc(2, 0x2, 20, Category::kActivation, "layer.0/attn", "kv");
  b.free(3, 0x1);
  b.alloc(4, 0x3, 40, Category::kActivation, "layer.0/moe/experts", "e");
  b.alloc(5, 0x4, 5, Category::kActivation, "layer.0/moe", "out");  // activation peak: 65
  b.free(6, 0x2);
  b.free(7, 0x3);
  b.alloc(8, 0x5, 40, Category::kActivation, "layer.1/moe/experts", "e1");
  b.alloc(9, 0x6, 3, Category::kActivation, "", "x");
  b.free(10, 0x4);
  b.free(11, 0x5);
  b.free(12, 0x6);
  RunAnalysis r = analyze(b.trace);
  const DeviceAnalysis& d = r.devices[0];
  CHECK(d.peak_activation_bytes == 65);
  CHECK(d.peak_activation_ts == 5);
  CHECK(d.scopes.size() == 8);
  struct Want {
    const char* scope;
    uint32_t depth;
    uint64_t hw, act_hw, at_peak, allocated, allocations;
  };
  const Want want[] = {
      {"", 0, 3, 3, 0, 3, 1},
      {"layer.0", 1, 65, 65, 65, 75, 4},
      {"layer.0/attn", 2, 30, 30, 20, 30, 2},
      {"layer.0/moe", 2, 45, 45, 45, 45, 2},
      {"layer.0/moe/experts", 3, 40, 40, 40, 40, 1},
      {"layer.1", 1, 140, 40, 0, 140, 2},
      {"layer.1/moe", 2, 140, 40, 0, 140, 2},
      {"layer.1/moe/experts", 3, 140, 40, 0, 140, 2},
  };
  for (const Want& w : want) {
    INFO("scope " << w.scope);
    const ScopeStat* s = find_scope(d, w.scope);
    REQUIRE(s != nullptr);
    CHECK(s->depth == w.depth);
    CHECK(s->high_water_bytes == w.hw);
    CHECK(s->activation_high_water_bytes == w.act_hw);
    CHECK(s->live_at_activation_peak_bytes == w.at_peak);
    CHECK(s->allocated_bytes == w.allocated);
    CHECK(s->allocations == w.allocations);
  }
  CHECK(d.scopes.front().scope.empty());  // sorted by name
}

TEST_CASE("use events: held-after-last-use bytes and hand-off opportunities", "[planner][analysis]") {
  TraceBuilder b;
  b.alloc(1, 0x1, 100, Category::kActivation, "layer.1", "x");
  b.use(2, 0x1);
  b.alloc(3, 0x2, 100, Category::kActivation, "layer.1/attn", "h");
  b.use(4, 0x2);
  b.alloc(5, 0x3, 30, Category::kActivation, "layer.1/attn", "latent");
  b.use(6, 0x3);
  b.alloc(7, 0x4, 100, Category::kActivation, "layer.1/moe", "o");  // peak 330; x, h dead
  b.use(8, 0x4);
  b.free(9, 0x1);
  b.free(10, 0x2);
  b.free(11, 0x3);
  b.alloc(12, 0x5, 100, Category::kActivation, "layer.2/moe", "o2");  // o is dead: a hand-off
  b.free(13, 0x4);
  b.free(14, 0x5);
  b.use(15, 0x99);
  RunAnalysis r = analyze(b.trace);
  const DeviceAnalysis& d = r.devices[0];
  CHECK(d.has_uses);
  CHECK(d.peak_activation_bytes == 330);
  CHECK(d.peak_activation_index == 6);
  CHECK(d.held_after_last_use_bytes == 230);
  CHECK(d.never_used_at_peak_bytes == 0);
  CHECK(r.anomalies.unknown_uses == 1);
  REQUIRE(d.live_set_at_activation_peak.size() == 4);
  for (const LiveEntry& e : d.live_set_at_activation_peak) {
    INFO(e.name);
    CHECK(e.held_after_last_use == (e.name != "o"));
  }
  // h is allocated while x (same size) is dead: h <- x; o <- h; o2 <- o. Each dead buffer once.
  CHECK(d.handoff_count == 3);
  CHECK(d.handoff_bytes == 300);
  CHECK(d.handoff_bytes_at_activation_peak == 200);
  REQUIRE(d.handoffs.size() == 3);
  CHECK(d.handoffs[0].alloc_name == "h");
  CHECK(d.handoffs[0].dead_name == "x");
  CHECK(d.handoffs[0].at_activation_peak);
  CHECK(d.handoffs[1].alloc_name == "o");
  CHECK(d.handoffs[1].dead_name == "h");
  CHECK(d.handoffs[1].at_activation_peak);
  CHECK(d.handoffs[2].alloc_name == "o2");
  CHECK(d.handoffs[2].dead_name == "o");
  CHECK(d.handoffs[2].dead_scope == "layer.1/moe");
  CHECK_FALSE(d.handoffs[2].at_activation_peak);
  const Lifetime& x = r.lifetimes[0];
  CHECK(x.uses == 1);
  CHECK(x.last_use == 2);
  CHECK(r.lifetimes[d.handoffs[2].dead_lifetime].address == 0x4);
}

TEST_CASE("options: live-set limit, no lifetimes, no timeline", "[planner][analysis]") {
  TraceBuilder b;
  for (uint64_t i = 0; i < 9; ++i) b.alloc(i + 1, 0x10 * (i + 1), 3 + 2 * i, Category::kActivation, "", "t" + std::to_string(i));
  AnalyzeOptions opt;
  opt.live_set_limit = 3;
  opt.keep_lifetimes = false;
  opt.timeline_points = 0;
  RunAnalysis r = analyze(b.trace, opt);
  const DeviceAnalysis& d = r.devices[0];
  CHECK(names(d.live_set_at_activation_peak) == std::vector<std::string>{"t8", "t7", "t6"});
  CHECK(r.lifetimes.empty());
  CHECK(d.timeline_total.empty());
  CHECK(d.peak_activation_bytes == 9 * 3 + 2 * 36);
  CHECK(r.anomalies.never_freed == 9);
}

// The live set at each device's peak, ordered by (bytes desc, t_alloc, alloc index) with many ties
// in size and time, is what a brute force over every lifetime finds; a limit keeps its first
// entries; and the replay that keeps only what is open (copies of what was freed after the peak)
// gives the same entries as the one that keeps every lifetime.
TEST_CASE("live set at the peak: brute-force order with ties, a limit keeps its prefix, both replays agree",
          "[planner][analysis]") {
  std::mt19937_64 rng(2718);
  for (int iter = 0; iter < 12; ++iter) {
    TraceBuilder b;
    const uint64_t sizes[] = {96, 160, 416, 160};
    std::vector<std::vector<uint64_t>> open(2);
    uint64_t ts = 1, next_addr = 0x1000;
    const int n = 150 + static_cast<int>(rng() % 250);
    for (int i = 0; i < n; ++i) {
      ts += rng() % 2;  // many allocations share a timestamp
      const auto dev = static_cast<uint16_t>(rng() % 2);
      auto& o = open[dev];
      if (!o.empty() && rng() % 5 < 2) {
        const size_t k = rng() % o.size();
        b.free(ts, o[k], dev);
        o[k] = o.back();
        o.pop_back();
        continue;
      }
      const Category c = rng() % 6 == 0 ? Category::kWeights : Category::kActivation;
      b.alloc(ts, next_addr, sizes[rng() % 4], c, "s", "a" + std::to_string(i), dev);
      if (rng() % 7 == 0) b.use(ts, next_addr, dev);
      o.push_back(next_addr);
      next_addr += 0x1000;
    }
    AnalyzeOptions all;
    all.findings = false;
    const RunAnalysis full = analyze(b.trace, all);  // keeps every lifetime
    AnalyzeOptions slab = all;
    slab.keep_lifetimes = false;
    const RunAnalysis open_only = analyze(b.trace, slab);
    REQUIRE(full.devices.size() == open_only.devices.size());
    for (size_t dv = 0; dv < full.devices.size(); ++dv) {
      INFO("iteration " << iter << ", device " << dv);
      const DeviceAnalysis& d = full.devices[dv];
      std::vector<const Lifetime*> want;
      for (const Lifetime& l : full.lifetimes)
        if (l.device == d.device && d.peak_activation_bytes > 0 && l.alloc_index <= d.peak_activation_index &&
            d.peak_activation_index < l.free_index && counts_as_activation(l.category))
          want.push_back(&l);
      std::sort(want.begin(), want.end(), [](const Lifetime* x, const Lifetime* y) {
        if (x->bytes != y->bytes) return x->bytes > y->bytes;
        if (x->t_alloc != y->t_alloc) return x->t_alloc < y->t_alloc;
        return x->alloc_index < y->alloc_index;
      });
      const auto& got = d.live_set_at_activation_peak;
      REQUIRE(got.size() == want.size());
      uint64_t bytes = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        CHECK(got[i].alloc_index == want[i]->alloc_index);
        CHECK(got[i].bytes == want[i]->bytes);
        bytes += got[i].bytes;
      }
      CHECK(bytes == d.peak_activation_bytes);
      CHECK(d.live_set_entries == want.size());
      CHECK(d.live_at_activation_peak.activation() == bytes);
      const auto& other = open_only.devices[dv].live_set_at_activation_peak;
      REQUIRE(other.size() == got.size());
      for (size_t i = 0; i < got.size(); ++i) {
        CHECK(other[i].alloc_index == got[i].alloc_index);
        CHECK(other[i].name == got[i].name);
        CHECK(other[i].held_after_last_use == got[i].held_after_last_use);
      }
      CHECK(open_only.devices[dv].held_after_last_use_bytes == d.held_after_last_use_bytes);
      CHECK(open_only.devices[dv].never_used_at_peak_bytes == d.never_used_at_peak_bytes);
    }
    for (size_t limit : {size_t{1}, size_t{5}, size_t{1000}}) {
      AnalyzeOptions lim = slab;
      lim.live_set_limit = limit;
      const RunAnalysis cut = analyze(b.trace, lim);
      for (size_t dv = 0; dv < full.devices.size(); ++dv) {
        const auto& whole = full.devices[dv].live_set_at_activation_peak;
        const auto& first = cut.devices[dv].live_set_at_activation_peak;
        REQUIRE(first.size() == std::min(limit, whole.size()));
        for (size_t i = 0; i < first.size(); ++i) CHECK(first[i].alloc_index == whole[i].alloc_index);
        // The counts are of the whole live set, whatever the limit lists.
        CHECK(cut.devices[dv].live_set_entries == whole.size());
        CHECK(cut.devices[dv].held_after_last_use_bytes == full.devices[dv].held_after_last_use_bytes);
      }
    }
  }
}

// Per-scope figures over many scopes whose string ids collide in the replay's cache of recent
// scopes (ids apart by multiples of its size), allocations alternating between them on two
// devices: every scope node's churn, count and high water equal a brute force over the records.
TEST_CASE("scopes: hundreds of scopes alternating on two devices match a brute force", "[planner][analysis]") {
  std::mt19937_64 rng(4242);
  TraceBuilder b;
  std::vector<std::string> scopes;
  for (int i = 0; i < 700; ++i) scopes.push_back("L" + std::to_string(i % 37) + "/s" + std::to_string(i));
  // Interned up front, in order: consecutive ids, so scopes 256 apart collide in a cache of 256.
  for (size_t i = 0; i < scopes.size(); ++i) b.trace.strings.intern(scopes[i]);
  struct Open {
    uint64_t addr, bytes;
    size_t scope;
  };
  std::vector<std::vector<Open>> open(2);
  // Brute force: per (device, node) live bytes, high water, churn and count.
  std::map<std::pair<uint16_t, std::string>, std::array<uint64_t, 4>> want;
  auto nodes_of = [](const std::string& s) {
    return std::vector<std::string>{s.substr(0, s.find('/')), s};
  };
  uint64_t ts = 1, addr = 0x10000;
  for (int i = 0; i < 6000; ++i) {
    ++ts;
    const auto dev = static_cast<uint16_t>(rng() % 2);
    auto& o = open[dev];
    if (!o.empty() && rng() % 2 == 0) {
      const size_t k = rng() % o.size();
      b.free(ts, o[k].addr, dev);
      for (const auto& n : nodes_of(scopes[o[k].scope])) want[{dev, n}][0] -= o[k].bytes;
      o[k] = o.back();
      o.pop_back();
      continue;
    }
    // Scope ids 256 apart in turn: a cache indexed by id modulo 256 sees a collision each time.
    const size_t sc = (rng() % 2 ? 256 * (rng() % 2) : 512) + rng() % 3;
    const uint64_t bytes = 64 + 32 * (rng() % 100);
    b.alloc(ts, addr, bytes, Category::kActivation, scopes[sc], "", dev);
    o.push_back(Open{addr, bytes, sc});
    addr += 0x10000;
    for (const auto& n : nodes_of(scopes[sc])) {
      auto& w = want[{dev, n}];
      w[0] += bytes;
      w[1] = std::max(w[1], w[0]);
      w[2] += bytes;
      w[3] += 1;
    }
  }
  AnalyzeOptions opt;
  opt.findings = false;
  opt.keep_lifetimes = false;
  const RunAnalysis r = analyze(b.trace, opt);
  size_t seen = 0;
  for (const DeviceAnalysis& d : r.devices)
    for (const ScopeStat& st : d.scopes) {
      if (st.scope.empty()) continue;
      INFO("device " << d.device << ", scope " << st.scope);
      auto it = want.find({d.device, st.scope});
      REQUIRE(it != want.end());
      CHECK(st.high_water_bytes == it->second[1]);
      CHECK(st.allocated_bytes == it->second[2]);
      CHECK(st.allocations == it->second[3]);
      ++seen;
    }
  CHECK(seen == want.size());
}

namespace {
struct Ev {
  uint64_t ts;
  bool alloc;
  uint64_t addr, bytes;
  uint16_t dev;
  Category cat;
};
}  // namespace

TEST_CASE("random traces: replay matches a brute-force replay, LOAD of the lifetimes equals the peak",
          "[planner][analysis]") {
  std::mt19937_64 rng(12345);
  for (int iter = 0; iter < 30; ++iter) {
    // Each device has a pool of addresses; an address is reused only after its free.
    std::vector<Ev> evs;
    uint64_t ts = 1;
    std::map<std::pair<uint16_t, uint64_t>, Ev> live;
    const int n = 200 + static_cast<int>(rng() % 300);
    for (int i = 0; i < n; ++i) {
      ts += 1 + rng() % 5;  // distinct timestamps: no tie rule involved
      const uint16_t dev = static_cast<uint16_t>(rng() % 3);
      const uint64_t addr = 0x1000 * (1 + rng() % 40);
      auto key = std::make_pair(dev, addr);
      auto it = live.find(key);
      if (it != live.end()) {
        evs.push_back(Ev{ts, false, addr, 0, dev, Category::kUnknown});
        live.erase(it);
      } else {
        Ev e{ts, true, addr, 1 + 2 * (rng() % 5000), dev, static_cast<Category>(rng() % kNumCategories)};
        evs.push_back(e);
        live.emplace(key, e);
      }
    }
    // Brute force: per device, live sums after each event in time order.
    std::map<uint16_t, std::array<uint64_t, 4>> want;  // peak act, ts, peak total, ts
    std::map<std::pair<uint16_t, uint64_t>, Ev> cur;
    std::map<uint16_t, std::pair<uint64_t, uint64_t>> sums;
    for (const Ev& e : evs) {
      auto& s = sums[e.dev];
      auto& w = want[e.dev];
      if (e.alloc) {
        cur.emplace(std::make_pair(e.dev, e.addr), e);
        s.second += e.bytes;
        if (counts_as_activation(e.cat)) s.first += e.bytes;
      } else {
        auto it = cur.find({e.dev, e.addr});
        s.second -= it->second.bytes;
        if (counts_as_activation(it->second.cat)) s.first -= it->second.bytes;
        cur.erase(it);
      }
      if (s.first > w[0]) w[0] = s.first, w[1] = e.ts;
      if (s.second > w[2]) w[2] = s.second, w[3] = e.ts;
    }
    // Write the trace shuffled.
    std::vector<size_t> perm(evs.size());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    TraceBuilder b;
    for (size_t i : perm) {
      const Ev& e = evs[i];
      if (e.alloc) {
        b.alloc(e.ts, e.addr, e.bytes, e.cat, "s", "", e.dev);
      } else {
        b.free(e.ts, e.addr, e.dev);
      }
    }
    AnalyzeOptions opt;
    opt.timeline_points = 16;
    RunAnalysis r = analyze(b.trace, opt);
    REQUIRE(r.anomalies.total() == 0);
    REQUIRE(r.anomalies.unknown_frees == 0);
    REQUIRE(r.devices.size() == want.size());
    for (const DeviceAnalysis& d : r.devices) {
      const auto& w = want.at(d.device);
      REQUIRE(w[2] > 0);
      CHECK(d.peak_activation_bytes == w[0]);
      if (w[0] > 0) CHECK(d.peak_activation_ts == w[1]);
      CHECK(d.peak_total_bytes == w[2]);
      CHECK(d.peak_total_ts == w[3]);
      CHECK(d.live_at_total_peak.total() == d.peak_total_bytes);
      CHECK(d.live_at_activation_peak.activation() == d.peak_activation_bytes);
      CHECK(arena_load(buffers_from_lifetimes(r, d.device, false)) == d.peak_total_bytes);
      CHECK(arena_load(buffers_from_lifetimes(r, d.device, true)) == d.peak_activation_bytes);
      // Timeline: bounded, contains the peak, never above it.
      CHECK(d.timeline_total.size() <= 16);
      CHECK(std::find(d.timeline_total.begin(), d.timeline_total.end(), std::make_pair(w[3], w[2])) !=
            d.timeline_total.end());
      for (const auto& p : d.timeline_total) CHECK(p.second <= d.peak_total_bytes);
      CHECK(std::is_sorted(d.timeline_total.begin(), d.timeline_total.end()));
    }
  }
}

// ---- Filters: AnalyzeOptions::category_mask / mem_kind_mask ----

TEST_CASE("category_mask: allocations of other categories and their frees are left out", "[planner][analysis][filter]") {
  TraceBuilder b;
  b.alloc(1, 0x10, 100, Category::kActivation, "", "a");
  b.alloc(2, 0x20, 1000, Category::kGraph, "", "g");
  b.alloc(3, 0x30, 50, Category::kWeights, "", "w");
  b.free(4, 0x20);
  b.alloc(5, 0x40, 30, Category::kActivation, "", "b");
  b.free(6, 0x10);
  b.free(7, 0x40);

  // Unfiltered: live 100, 1100, 1150, 150, 180, 80, 50.
  RunAnalysis all = analyze(b.trace);
  CHECK(all.replayed_events == 7);
  CHECK(all.devices[0].peak_total_bytes == 1150);
  CHECK(all.devices[0].peak_total_ts == 3);
  CHECK(all.devices[0].peak_by_category[Category::kGraph] == 1000);

  AnalyzeOptions opt;
  opt.category_mask = all_categories_except(Category::kGraph);
  RunAnalysis r = analyze(b.trace, opt);
  // Replayed: t1 (100), t3 (150), t5 (180), t6 (80), t7 (50); the graph alloc and its free are absent.
  CHECK(r.replayed_events == 5);
  REQUIRE(r.devices.size() == 1);
  const DeviceAnalysis& d = r.devices[0];
  CHECK(d.peak_total_bytes == 180);
  CHECK(d.peak_total_ts == 5);
  CHECK(d.peak_total_index == 2);
  CHECK(d.peak_activation_bytes == 130);
  CHECK(d.peak_activation_ts == 5);
  CHECK(d.peak_activation_index == 2);
  CHECK(d.peak_by_category[Category::kGraph] == 0);
  CHECK(d.churn_by_category[Category::kGraph] == 0);
  CHECK(d.churn_bytes == 180);
  CHECK(d.allocations == 3);
  CHECK(d.frees == 2);
  CHECK(r.anomalies.total() == 0);
  CHECK(r.anomalies.unknown_frees == 0);
  CHECK(r.anomalies.never_freed == 1);  // "w"
  CHECK(r.anomalies.never_freed_bytes == 50);
  REQUIRE(r.lifetimes.size() == 3);
  CHECK(r.str(r.lifetimes[0].name_id) == "a");
  CHECK(r.str(r.lifetimes[1].name_id) == "w");
  CHECK(r.str(r.lifetimes[2].name_id) == "b");
  CHECK(r.lifetimes[2].alloc_index == 2);
  CHECK(r.lifetimes[2].free_index == 4);
  for (const auto& g : r.alloc_groups.expand()) CHECK(g.name != "g");
  CHECK(names(d.live_set_at_activation_peak) == std::vector<std::string>{"a", "b"});

  AnalyzeOptions only_graph;
  only_graph.category_mask = category_bit(Category::kGraph);
  RunAnalysis g = analyze(b.trace, only_graph);
  CHECK(g.replayed_events == 2);
  REQUIRE(g.devices.size() == 1);
  CHECK(g.devices[0].peak_total_bytes == 1000);
  CHECK(g.devices[0].peak_total_ts == 2);
  CHECK(g.devices[0].peak_activation_bytes == 0);  // graph memory is not activation memory
  CHECK(g.devices[0].allocations == 1);
  CHECK(g.devices[0].frees == 1);
  CHECK(g.anomalies.total() == 0);
  CHECK(g.anomalies.never_freed == 0);
}

TEST_CASE("mem_kind_mask: frees and uses of left-out allocations are matched by (device, address)",
          "[planner][analysis][filter]") {
  TraceBuilder b;
  const auto so = MemKind::kStreamOrdered, dev = MemKind::kDevice;
  b.alloc(1, 0x100, 400).mem_kind = so;
  b.alloc(2, 0x200, 300).mem_kind = dev;
  b.use(3, 0x200);
  b.free(4, 0x200);
  b.alloc(5, 0x200, 200).mem_kind = so;  // same address, now stream-ordered
  b.free(6, 0x200);
  b.free(7, 0x100);
  b.alloc(8, 0x100, 700, Category::kActivation, "", "", 1).mem_kind = dev;
  b.free(9, 0x100, 1);
  b.free(10, 0x999);  // a genuinely unknown free: counted in every view

  // Unfiltered: dev0 live 400, 700, -, 400, 600, 400, 0; dev1 700, 0.
  RunAnalysis all = analyze(b.trace);
  CHECK(all.replayed_events == 10);
  CHECK(all.device(0)->peak_total_bytes == 700);
  CHECK(all.device(0)->peak_total_ts == 2);
  CHECK(all.device(1)->peak_total_bytes == 700);
  CHECK(all.anomalies.unknown_frees == 1);
  CHECK(all.anomalies.unknown_uses == 0);

  AnalyzeOptions so_opt;
  so_opt.mem_kind_mask = mem_kind_bit(MemKind::kStreamOrdered);
  RunAnalysis s = analyze(b.trace, so_opt);
  // Replayed: t1 (400), t5 (600), t6 (400), t7 (0), t10 (unknown free). Device 1 has nothing left.
  CHECK(s.replayed_events == 5);
  REQUIRE(s.devices.size() == 1);
  CHECK(s.devices[0].device == 0);
  CHECK(s.devices[0].peak_total_bytes == 600);
  CHECK(s.devices[0].peak_total_ts == 5);
  CHECK(s.devices[0].peak_total_index == 1);
  CHECK(s.devices[0].allocations == 2);
  CHECK(s.devices[0].frees == 2);
  CHECK(s.devices[0].churn_bytes == 600);
  CHECK_FALSE(s.devices[0].has_uses);  // the only use hit a left-out allocation
  CHECK(s.anomalies.unknown_frees == 1);
  CHECK(s.anomalies.unknown_uses == 0);
  CHECK(s.anomalies.double_frees == 0);
  CHECK(s.anomalies.alloc_over_live == 0);
  CHECK(s.anomalies.never_freed == 0);
  CHECK(s.peak_total_bytes == 600);

  AnalyzeOptions dev_opt;
  dev_opt.mem_kind_mask = mem_kind_bit(MemKind::kDevice);
  RunAnalysis d = analyze(b.trace, dev_opt);
  // Replayed: t2 (300), t3 (use), t4 (0), t8 (dev1 700), t9 (dev1 0), t10.
  CHECK(d.replayed_events == 6);
  REQUIRE(d.devices.size() == 2);
  CHECK(d.device(0)->peak_total_bytes == 300);
  CHECK(d.device(0)->peak_total_ts == 2);
  CHECK(d.device(0)->allocations == 1);
  CHECK(d.device(0)->frees == 1);
  CHECK(d.device(0)->has_uses);
  CHECK(d.device(1)->peak_total_bytes == 700);
  CHECK(d.device(1)->frees == 1);
  CHECK(d.peak_total_bytes == 700);
  CHECK(d.anomalies.unknown_frees == 1);
  CHECK(d.anomalies.unknown_uses == 0);
  CHECK(d.anomalies.never_freed == 0);
  REQUIRE(d.lifetimes.size() == 2);
  CHECK(d.lifetimes[0].uses == 1);
  CHECK(d.lifetimes[0].t_free == 4);

  AnalyzeOptions both;  // both masks apply: stream-ordered and weights -> nothing
  both.mem_kind_mask = mem_kind_bit(MemKind::kStreamOrdered);
  both.category_mask = category_bit(Category::kWeights);
  RunAnalysis none = analyze(b.trace, both);
  CHECK(none.replayed_events == 1);  // the unknown free
  CHECK(none.anomalies.unknown_frees == 1);
  CHECK(none.peak_total_bytes == 0);
  CHECK(none.lifetimes.empty());
}

TEST_CASE("graph memory at address 0: its free ends it, filtered out it leaves no anomaly", "[planner][analysis][filter]") {
  TraceBuilder b;
  b.alloc(1, 0x0, 32u << 20, Category::kGraph, "", "graph");
  b.alloc(2, 0x10, 100, Category::kActivation, "", "x");
  b.free(3, 0x0);   // ends the graph allocation
  b.free(4, 0x10);
  b.free(5, 0x0);   // nothing live at address 0 any more: free(nullptr)

  RunAnalysis all = analyze(b.trace);
  const DeviceAnalysis& d = all.devices[0];
  CHECK(d.peak_total_bytes == (32u << 20) + 100);
  CHECK(d.peak_total_ts == 2);
  CHECK(d.peak_activation_bytes == 100);
  CHECK(d.peak_by_category[Category::kGraph] == (32u << 20));
  CHECK(d.frees == 2);
  CHECK(all.anomalies.null_frees == 1);
  CHECK(all.anomalies.never_freed == 0);
  CHECK(all.anomalies.total() == 0);
  REQUIRE(all.lifetimes.size() == 2);
  CHECK(all.lifetimes[0].t_free == 3);

  AnalyzeOptions opt;
  opt.category_mask = all_categories_except(Category::kGraph);
  RunAnalysis r = analyze(b.trace, opt);
  CHECK(r.replayed_events == 3);  // t2, t4, t5
  CHECK(r.devices[0].peak_total_bytes == 100);
  CHECK(r.devices[0].peak_total_ts == 2);
  CHECK(r.devices[0].allocations == 1);
  CHECK(r.devices[0].frees == 1);
  CHECK(r.anomalies.null_frees == 1);
  CHECK(r.anomalies.never_freed == 0);
  CHECK(r.anomalies.total() == 0);
}

TEST_CASE("random traces: a filtered replay equals the replay of the trace without the left-out records",
          "[planner][analysis][filter]") {
  std::mt19937_64 rng(777);
  for (int iter = 0; iter < 20; ++iter) {
    const uint32_t cat_mask = static_cast<uint32_t>(rng() % (1u << kNumCategories));
    const uint32_t kind_mask = static_cast<uint32_t>(rng() % (1u << (kMaxMemKind + 1)));
    auto keep = [&](Category c, MemKind k) { return (cat_mask & category_bit(c)) && (kind_mask & mem_kind_bit(k)); };
    TraceBuilder full, kept;
    std::map<std::pair<uint16_t, uint64_t>, bool> live;  // -> kept
    uint64_t ts = 1;
    for (int i = 0; i < 400; ++i) {
      ts += rng() % 3;  // ties on purpose: seq breaks them
      const uint16_t dev = static_cast<uint16_t>(rng() % 2);
      const uint64_t addr = 0x1000 * (rng() % 20);  // address 0 included
      auto key = std::make_pair(dev, addr);
      auto it = live.find(key);
      if (rng() % 10 == 0) {  // a use, wherever
        full.use(ts, addr, dev);
        if (it == live.end() || it->second) kept.use(ts, addr, dev);
      } else if (it != live.end()) {
        full.free(ts, addr, dev);
        if (it->second) kept.free(ts, addr, dev);
        live.erase(it);
      } else {
        const auto c = static_cast<Category>(rng() % kNumCategories);
        const auto k = static_cast<MemKind>(rng() % (kMaxMemKind + 1));
        const uint64_t bytes = 1 + rng() % 1000;
        full.alloc(ts, addr, bytes, c, "s", "", dev).mem_kind = k;
        const bool in = keep(c, k);
        if (in) kept.alloc(ts, addr, bytes, c, "s", "", dev).mem_kind = k;
        live.emplace(key, in);
      }
    }
    // Shuffle the full trace's records (the sorted path); seq keeps the order of ties.
    std::shuffle(full.trace.records.begin(), full.trace.records.end(), rng);
    AnalyzeOptions opt;
    opt.category_mask = cat_mask;
    opt.mem_kind_mask = kind_mask;
    opt.timeline_points = 0;
    RunAnalysis a = analyze(full.trace, opt);
    AnalyzeOptions plain;
    plain.timeline_points = 0;
    RunAnalysis e = analyze(kept.trace, plain);
    INFO("iteration " << iter << " category mask " << cat_mask << " mem kind mask " << kind_mask);
    CHECK(a.replayed_events == e.replayed_events);
    CHECK(a.anomalies.unknown_frees == e.anomalies.unknown_frees);
    CHECK(a.anomalies.unknown_uses == e.anomalies.unknown_uses);
    CHECK(a.anomalies.null_frees == e.anomalies.null_frees);
    CHECK(a.anomalies.total() == e.anomalies.total());
    CHECK(a.anomalies.never_freed == e.anomalies.never_freed);
    CHECK(a.anomalies.never_freed_bytes == e.anomalies.never_freed_bytes);
    REQUIRE(a.devices.size() == e.devices.size());
    for (size_t i = 0; i < a.devices.size(); ++i) {
      const DeviceAnalysis& x = a.devices[i];
      const DeviceAnalysis& y = e.devices[i];
      CHECK(x.device == y.device);
      CHECK(x.peak_total_bytes == y.peak_total_bytes);
      CHECK(x.peak_total_ts == y.peak_total_ts);
      CHECK(x.peak_total_index == y.peak_total_index);
      CHECK(x.peak_activation_bytes == y.peak_activation_bytes);
      CHECK(x.peak_activation_index == y.peak_activation_index);
      CHECK(x.churn_bytes == y.churn_bytes);
      CHECK(x.allocations == y.allocations);
      CHECK(x.frees == y.frees);
      CHECK(x.handoff_count == y.handoff_count);
      CHECK(x.held_after_last_use_bytes == y.held_after_last_use_bytes);
    }
  }
}

// The hand-off search erases (device, bytes) keys as sizes stop being live: after any mix of
// inserts and erases on colliding keys the map holds exactly what a std::map holds. Both widths:
// PairMap (two 64-bit words, 24-B entries) and DeviceMap (a device and a 64-bit word, 16-B
// entries), with keys that differ only in the high bits of either word (a map that kept fewer bits
// would merge them).
TEMPLATE_TEST_CASE("PairMap: erase keeps every other key findable", "[planner]", PairMap, DeviceMap) {
  using Key = typename TestType::Key;
  using First = typename Key::first_type;
  constexpr First kHighFirst = First{1} << (8 * sizeof(First) - 1);
  TestType m;
  std::map<Key, uint32_t> ref;
  std::mt19937_64 rng(35);
  for (int i = 0; i < 60000; ++i) {
    auto first = static_cast<First>(rng() % 7);
    uint64_t second = rng() % 3001;
    switch (rng() % 4) {  // the same low bits with a high bit set, or the ends of the range
      case 0: first = static_cast<First>(first | kHighFirst); break;
      case 1: first = static_cast<First>(first | 0x100); break;
      case 2: first = static_cast<First>(std::numeric_limits<First>::max() - first); break;
      default: break;
    }
    if (rng() % 4 == 0) second |= uint64_t{1} << 63;
    const Key k{first, second};
    if (rng() % 3 == 0) {
      CHECK(m.erase(k) == (ref.erase(k) == 1));
    } else {
      const auto v = static_cast<uint32_t>(rng() % 1000 + 1);
      m[k] = v;
      ref[k] = v;
    }
    const Key absent{static_cast<First>(first ^ 0x40), second ^ (uint64_t{1} << 40)};  // never inserted
    CHECK(m.find(absent) == nullptr);
  }
  CHECK(m.size() == ref.size());
  for (const auto& [k, v] : ref) {
    const uint32_t* got = m.find(k);
    REQUIRE(got != nullptr);
    CHECK(*got == v);
  }
  size_t seen = 0;
  m.for_each([&](Key k, uint32_t v) {
    ++seen;
    CHECK(ref.at(k) == v);
  });
  CHECK(seen == ref.size());
}

// A probe run that wraps from the last entry to the first, then erases along it: the keys after a
// hole shift back across the wrap, or stay where their home says they must, and stay findable.
// Keys by home in the first table (256 entries), inserted in this order: one at 255 (it takes
// 255), one at 0 (it takes 0: erasing the first must leave it there), two more at 255 (they take 1
// and 2) and one at 1 (it takes 3).
TEMPLATE_TEST_CASE("PairMap: a probe run across the table's end survives erases", "[planner]", PairMap, DeviceMap) {
  using Key = typename TestType::Key;
  using First = typename Key::first_type;
  auto keys_at = [](size_t home, size_t n) {
    std::vector<Key> out;
    for (uint64_t w = 1; out.size() < n && w < 1000000; ++w) {
      const Key k{static_cast<First>(w % 3), w};
      if (TestType::home_entry(k, 256) == home) out.push_back(k);
    }
    return out;
  };
  const std::vector<Key> last = keys_at(255, 3), zero = keys_at(0, 1), one = keys_at(1, 1);
  REQUIRE(last.size() == 3);
  REQUIRE(zero.size() == 1);
  REQUIRE(one.size() == 1);
  const std::vector<Key> keys{last[0], zero[0], last[1], last[2], one[0]};
  for (size_t first_erased = 0; first_erased < keys.size(); ++first_erased) {
    TestType m;
    std::map<Key, uint32_t> ref;
    for (size_t i = 0; i < keys.size(); ++i) m[keys[i]] = ref[keys[i]] = static_cast<uint32_t>(i + 1);
    for (size_t j = 0; j < 3; ++j) {  // three erases, starting anywhere along the run
      const Key gone = keys[(first_erased + 2 * j) % keys.size()];
      CHECK(m.erase(gone) == (ref.erase(gone) == 1));
      CHECK(m.find(gone) == nullptr);
      for (const auto& [k, v] : ref) {
        const uint32_t* got = m.find(k);
        REQUIRE(got != nullptr);
        CHECK(*got == v);
      }
      CHECK(m.size() == ref.size());
    }
  }
}
