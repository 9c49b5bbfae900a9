// compare()'s allocation groups against a brute-force multiset difference: random runs with
// repeated and unique sizes, names, scopes and call stacks (several stacks sharing an innermost
// user frame), built with different string tables, so that equal strings have different ids.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "planner/analysis.h"
#include "planner/stacks.h"
#include "tests/planner/trace_builder.h"

using namespace moeprof;
using namespace moeprof::planner;
using moeprof::planner::testing::TraceBuilder;

namespace {

using Key = std::tuple<std::string, std::string, std::string, uint64_t>;  // scope, name, frame, bytes

const std::vector<std::string> kScopes = {"", "layer.0", "layer.0/moe", "layer.1/attn", "layer.10", "layer.1"};
const std::vector<std::string> kNames = {"x", "h", "moe_output", "kv", "X", "tmp_buffer_name_longer_than_sso"};
const std::vector<std::string> kFunctions = {"forward", "attention", "mlp", "norm"};

struct Run {
  RunAnalysis analysis;
  std::map<Key, uint64_t> groups;  // brute force: every allocation counted under its key
};

// `salt` changes the string table's order (strings interned up front in a shuffled order) and
// which allocations a run makes.
Run random_run(uint32_t seed, uint32_t salt) {
  std::mt19937_64 rng(seed * 7919u + salt);
  TraceBuilder b("run" + std::to_string(salt));
  std::vector<std::string> pre = kScopes;
  pre.insert(pre.end(), kNames.begin(), kNames.end());
  pre.insert(pre.end(), kFunctions.begin(), kFunctions.end());
  std::shuffle(pre.begin(), pre.end(), rng);
  for (size_t i = 0; i < pre.size() / 2 + salt % 3; ++i) b.trace.strings.intern(pre[i]);
  // Stacks: a user frame inside a folded library frame, under one of two outer frames, so two
  // stacks share each innermost user frame.
  std::vector<StackId> stacks;
  std::vector<std::string> function_of;
  const uint32_t lib = b.trace.stacks.intern_frame(StackFrame{b.trace.strings.intern("empty"),
                                                              b.trace.strings.intern("/usr/lib/python3/site-packages/torch/_tensor.py"), 1,
                                                              FrameKind::kPython});
  for (const auto& fn : kFunctions) {
    const uint32_t f = b.trace.stacks.intern_frame(
        StackFrame{b.trace.strings.intern(fn), b.trace.strings.intern("model.py"), static_cast<uint32_t>(fn.size() + 3), FrameKind::kPython});
    for (const char* outer : {"main", "run_step"}) {
      const uint32_t o = b.trace.stacks.intern_frame(StackFrame{b.trace.strings.intern(outer), b.trace.strings.intern("app.py"), 7, FrameKind::kPython});
      stacks.push_back(b.trace.stacks.intern_stack({lib, f, o}));
      function_of.push_back(fn);
    }
  }
  const std::vector<uint64_t> repeated = {1, 7, 4096, 4099, 65537, 3u << 20};
  std::uniform_int_distribution<int> pct(0, 99);
  const size_t n = 300 + rng() % 400;
  uint64_t t = 1;
  std::vector<std::pair<uint64_t, uint16_t>> live;
  std::vector<std::tuple<std::string, std::string, StackId, uint64_t>> made;
  for (size_t i = 0; i < n; ++i) {
    const std::string& scope = kScopes[rng() % kScopes.size()];
    const bool named = pct(rng) < 60;
    const std::string name = named ? kNames[rng() % kNames.size()] : "";
    const uint64_t bytes = pct(rng) < 50 ? repeated[rng() % repeated.size()] : 1 + rng() % 100000;
    const uint16_t device = static_cast<uint16_t>(rng() % 2);
    const uint64_t addr = 0x1000 * (i + 1);
    TraceRecord& r = b.alloc(t++, addr, bytes, Category::kActivation, scope, name, device);
    StackId sid = StackId::kNone;
    if (pct(rng) < 70) r.stack_id = sid = stacks[rng() % stacks.size()];  // a named one is known by its name
    made.emplace_back(scope, name, named ? StackId::kNone : sid, bytes);
    live.emplace_back(addr, device);
    if (live.size() > 8 || pct(rng) < 30) {  // free a random live one
      const size_t k = rng() % live.size();
      b.free(t++, live[k].first, live[k].second);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  Run run;
  run.analysis = analyze(b.trace);
  for (const auto& [scope, name, sid, bytes] : made) {
    std::string frame;
    if (sid != StackId::kNone) {
      const auto f = user_frames(run.analysis, sid, 1);
      REQUIRE(f.size() == 1);
      frame = f.front();
      REQUIRE(frame.rfind(function_of[static_cast<size_t>(std::find(stacks.begin(), stacks.end(), sid) - stacks.begin())], 0) == 0);
    }
    ++run.groups[Key{scope, name, frame, bytes}];
  }
  return run;
}

std::vector<AllocGroupDelta> brute_only(const std::map<Key, uint64_t>& a, const std::map<Key, uint64_t>& b) {
  std::vector<AllocGroupDelta> out;
  for (const auto& [k, n] : a) {
    auto it = b.find(k);
    const uint64_t m = it == b.end() ? 0 : it->second;
    if (n > m) out.push_back(AllocGroupDelta{std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k), n - m});
  }
  return out;
}

void check_same(const std::vector<AllocGroupDelta>& got, const std::vector<AllocGroupDelta>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("entry " << i);
    CHECK(got[i].scope == want[i].scope);
    CHECK(got[i].name == want[i].name);
    CHECK(got[i].frame == want[i].frame);
    CHECK(got[i].bytes == want[i].bytes);
    CHECK(got[i].count == want[i].count);
  }
}

uint64_t bytes_of(const std::vector<AllocGroupDelta>& v) {
  uint64_t s = 0;
  for (const auto& g : v) s += g.bytes * g.count;
  return s;
}

}  // namespace

TEST_CASE("compare: allocation groups match a brute-force multiset difference", "[planner][compare]") {
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    INFO("seed " << seed);
    Run a = random_run(seed, 1);
    // The second run: another string table, and half the time the same program (most groups
    // matched, the counts differing) rather than another random one.
    Run b = seed % 2 ? random_run(seed, 2) : random_run(seed + 1000, 5);
    REQUIRE(a.analysis.strings != b.analysis.strings);

    // Each run's groups: the brute-force multiset, in (scope, name, frame, bytes) order.
    for (const Run* r : {&a, &b}) {
      const auto got = r->analysis.alloc_groups.expand();
      REQUIRE(got.size() == r->groups.size());
      size_t i = 0;
      for (const auto& [k, n] : r->groups) {
        CHECK(Key{got[i].scope, got[i].name, got[i].frame, got[i].bytes} == k);
        CHECK(got[i].count == n);
        ++i;
      }
      // Stacks sharing an innermost user frame are one label.
      const auto& labels = r->analysis.alloc_groups.labels;
      for (size_t k = 1; k < labels.size(); ++k)
        CHECK(std::tie(labels[k - 1].scope, labels[k - 1].name, labels[k - 1].frame) < std::tie(labels[k].scope, labels[k].name, labels[k].frame));
    }

    const auto want_a = brute_only(a.groups, b.groups), want_b = brute_only(b.groups, a.groups);
    REQUIRE_FALSE(want_a.empty());
    REQUIRE_FALSE(want_b.empty());
    const Comparison c = compare(a.analysis, b.analysis);
    check_same(c.only_in_baseline, want_a);
    check_same(c.only_in_candidate, want_b);
    CHECK(c.only_in_baseline_groups == want_a.size());
    CHECK(c.only_in_candidate_groups == want_b.size());
    CHECK(c.only_in_baseline_bytes == bytes_of(want_a));
    CHECK(c.only_in_candidate_bytes == bytes_of(want_b));

    // A limit keeps the first entries of each list and the same totals.
    const size_t limit = 1 + seed % 5;
    const Comparison l = compare(a.analysis, b.analysis, limit);
    check_same(l.only_in_baseline, std::vector<AllocGroupDelta>(want_a.begin(), want_a.begin() + static_cast<std::ptrdiff_t>(std::min(limit, want_a.size()))));
    check_same(l.only_in_candidate, std::vector<AllocGroupDelta>(want_b.begin(), want_b.begin() + static_cast<std::ptrdiff_t>(std::min(limit, want_b.size()))));
    CHECK(l.only_in_baseline_groups == want_a.size());
    CHECK(l.only_in_baseline_bytes == c.only_in_baseline_bytes);
    CHECK(l.only_in_candidate_bytes == c.only_in_candidate_bytes);

    // Swapped: the same lists, the other way round. A run against itself: nothing.
    const Comparison s = compare(b.analysis, a.analysis);
    check_same(s.only_in_baseline, want_b);
    check_same(s.only_in_candidate, want_a);
    const Comparison same = compare(a.analysis, a.analysis);
    CHECK(same.only_in_baseline.empty());
    CHECK(same.only_in_candidate.empty());
    CHECK(same.only_in_baseline_bytes == 0);
  }
}
