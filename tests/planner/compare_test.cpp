// compare(): signed deltas, category and scope deltas, allocations present in only one run.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "planner/analysis.h"
#include "tests/planner/trace_builder.h"

using namespace moeprof;
using namespace moeprof::planner;
using moeprof::planner::testing::TraceBuilder;

namespace {
// The seed's change in miniature: the candidate hands x to the MoE output instead of allocating.
Trace baseline_trace() {
  TraceBuilder b("baseline");
  b.alloc(1, 0x1, 100, Category::kActivation, "layer.0", "x");
  b.alloc(2, 0x2, 50, Category::kActivation, "layer.0/attn", "h");
  b.alloc(3, 0x3, 100, Category::kActivation, "layer.0/moe", "out");  // activation peak 250
  b.free(4, 0x1);
  b.free(5, 0x2);
  b.free(6, 0x3);
  b.alloc(7, 0x10, 1000, Category::kWeights, "", "w");
  b.alloc(8, 0x4, 100, Category::kActivation, "layer.0", "x");  // total peak 1100
  b.free(9, 0x4);
  return b.trace;
}
Trace candidate_trace() {
  TraceBuilder b("reuse");
  b.alloc(1, 0x1, 100, Category::kActivation, "layer.0", "x");
  b.alloc(2, 0x2, 50, Category::kActivation, "layer.0/attn", "h");  // activation peak 150
  b.free(3, 0x2);
  b.free(4, 0x1);
  b.alloc(5, 0x10, 1000, Category::kWeights, "", "w");
  b.alloc(6, 0x3, 8, Category::kActivation, "layer.0/moe", "tmp");  // total peak 1008
  b.free(7, 0x3);
  return b.trace;
}
}  // namespace

TEST_CASE("compare: deltas are candidate minus baseline", "[planner][compare]") {
  RunAnalysis base = analyze(baseline_trace());
  RunAnalysis cand = analyze(candidate_trace());
  REQUIRE(base.peak_activation_bytes == 250);
  REQUIRE(cand.peak_activation_bytes == 150);
  Comparison c = compare(base, cand);
  CHECK(c.baseline_name == "baseline");
  CHECK(c.candidate_name == "reuse");
  CHECK(c.baseline_peak_activation_bytes == 250);
  CHECK(c.candidate_peak_activation_bytes == 150);
  CHECK(c.peak_activation_delta == -100);
  CHECK(c.baseline_peak_total_bytes == 1100);
  CHECK(c.candidate_peak_total_bytes == 1008);
  CHECK(c.peak_total_delta == -92);
  CHECK(c.churn_delta == 1158 - 1350);
  CHECK(c.allocations_delta == -1);
  CHECK(c.category_deltas[static_cast<size_t>(Category::kActivation)] == -100);
  CHECK(c.category_deltas[static_cast<size_t>(Category::kWeights)] == 0);

  REQUIRE(c.scope_deltas.size() == 4);
  CHECK(c.scope_deltas[0].scope == "layer.0");
  CHECK(c.scope_deltas[0].baseline_high_water_bytes == 250);
  CHECK(c.scope_deltas[0].candidate_high_water_bytes == 150);
  CHECK(c.scope_deltas[0].delta == -100);
  CHECK(c.scope_deltas[1].scope == "layer.0/moe");
  CHECK(c.scope_deltas[1].delta == -92);
  CHECK(c.scope_deltas[2].scope.empty());
  CHECK(c.scope_deltas[2].delta == 0);
  CHECK(c.scope_deltas[3].scope == "layer.0/attn");
  CHECK(c.scope_deltas[3].delta == 0);

  REQUIRE(c.only_in_baseline.size() == 2);
  CHECK(c.only_in_baseline[0].scope == "layer.0");  // one of the two x's is unmatched
  CHECK(c.only_in_baseline[0].name == "x");
  CHECK(c.only_in_baseline[0].bytes == 100);
  CHECK(c.only_in_baseline[0].count == 1);
  CHECK(c.only_in_baseline[1].scope == "layer.0/moe");
  CHECK(c.only_in_baseline[1].name == "out");
  CHECK(c.only_in_baseline[1].count == 1);
  REQUIRE(c.only_in_candidate.size() == 1);
  CHECK(c.only_in_candidate[0].name == "tmp");
  CHECK(c.only_in_candidate[0].bytes == 8);
  CHECK(c.only_in_candidate[0].count == 1);
}

TEST_CASE("compare: swapping the runs negates every delta", "[planner][compare]") {
  RunAnalysis base = analyze(baseline_trace());
  RunAnalysis cand = analyze(candidate_trace());
  Comparison a = compare(base, cand);
  Comparison b = compare(cand, base);
  CHECK(b.peak_activation_delta == -a.peak_activation_delta);
  CHECK(b.peak_total_delta == -a.peak_total_delta);
  CHECK(b.churn_delta == -a.churn_delta);
  CHECK(b.only_in_baseline.size() == a.only_in_candidate.size());
  CHECK(b.only_in_candidate.size() == a.only_in_baseline.size());
  Comparison same = compare(base, base);
  CHECK(same.peak_activation_delta == 0);
  CHECK(same.only_in_baseline.empty());
  CHECK(same.only_in_candidate.empty());
  for (const auto& s : same.scope_deltas) CHECK(s.delta == 0);
}

TEST_CASE("compare: the live-at-peak diff, tensor by tensor, sums to the change of the peak", "[planner][compare]") {
  RunAnalysis base = analyze(baseline_trace());
  RunAnalysis cand = analyze(candidate_trace());
  const LiveDiff d = compare(base, cand).live_at_peak_diff;
  CHECK(d.baseline_bytes == 250);
  CHECK(d.candidate_bytes == 150);
  CHECK(d.unchanged_tensors == 2);  // x and h
  CHECK(d.unchanged_bytes == 150);
  REQUIRE(d.rows.size() == 1);
  CHECK(d.rows[0].change == LiveChange::kNotAllocated);  // the candidate never allocates layer.0/moe out
  CHECK(d.rows[0].name == "out");
  CHECK(d.rows[0].baseline_scope == "layer.0/moe");
  CHECK(d.rows[0].delta == -100);
  CHECK(d.delta == -100);

  // Another layer's instance of a tensor is "moved"; another size "resized"; a tensor the other run
  // allocates but does not hold at its peak "freed" / "added"; one it never allocates "new".
  TraceBuilder a("a");
  a.alloc(1, 0x1, 100, Category::kActivation, "layer.3/attn", "q");
  a.alloc(2, 0x2, 40, Category::kActivation, "layer.3/moe", "router");
  a.alloc(3, 0x3, 64, Category::kActivation, "layer.3/moe", "buf");
  a.alloc(4, 0x4, 8, Category::kWorkspace, "layer.3/moe", "ws");  // peak 212
  a.free(5, 0x4);
  a.free(6, 0x1);
  a.alloc(7, 0x5, 30, Category::kActivation, "layer.3", "late");
  TraceBuilder b("b");
  b.alloc(1, 0x1, 8, Category::kWorkspace, "layer.4/moe", "ws");
  b.free(2, 0x1);
  b.alloc(3, 0x2, 100, Category::kActivation, "layer.4/attn", "q");
  b.alloc(4, 0x3, 50, Category::kActivation, "layer.4/moe", "router");
  b.alloc(5, 0x4, 30, Category::kActivation, "layer.4", "late");
  b.alloc(6, 0x5, 7, Category::kActivation, "layer.4", "extra");  // peak 187
  RunAnalysis ra = analyze(a.trace), rb = analyze(b.trace);
  REQUIRE(ra.peak_activation_bytes == 212);
  REQUIRE(rb.peak_activation_bytes == 187);
  const LiveDiff e = compare(ra, rb).live_at_peak_diff;
  CHECK(e.unchanged_tensors == 0);
  std::map<std::string, std::pair<LiveChange, int64_t>> by_name;
  int64_t sum = 0;
  for (const auto& r : e.rows) {
    by_name[r.name] = {r.change, r.delta};
    sum += r.delta;
  }
  CHECK(by_name["q"] == std::make_pair(LiveChange::kMoved, int64_t{0}));
  CHECK(by_name["router"] == std::make_pair(LiveChange::kResized, int64_t{10}));
  CHECK(by_name["buf"] == std::make_pair(LiveChange::kNotAllocated, int64_t{-64}));
  CHECK(by_name["ws"] == std::make_pair(LiveChange::kFreed, int64_t{-8}));
  CHECK(by_name["late"] == std::make_pair(LiveChange::kAdded, int64_t{30}));
  CHECK(by_name["extra"] == std::make_pair(LiveChange::kNew, int64_t{7}));
  CHECK(sum == -25);
  CHECK(sum == static_cast<int64_t>(rb.peak_activation_bytes) - static_cast<int64_t>(ra.peak_activation_bytes));
  // Largest change first.
  CHECK(e.rows.front().name == "buf");
}

// A program traced without names: its tensors are known by their innermost user frame, so two
// unnamed tensors from different call sites are never paired (a 400-byte `forward` buffer is not
// "resized" into a 300-byte `attention` one), and "freed" versus "not allocated" asks whether the
// other run allocates at that call site at all.
TEST_CASE("compare: unnamed tensors are matched by their innermost user frame", "[planner][compare]") {
  auto traced = [](const std::vector<std::pair<const char*, uint64_t>>& live, const std::vector<std::pair<const char*, uint64_t>>& transient) {
    TraceBuilder b("traced");
    std::map<std::string, StackId> stacks;
    auto stack_of = [&](const std::string& fn) {
      auto it = stacks.find(fn);
      if (it != stacks.end()) return it->second;
      const uint32_t f = b.trace.stacks.intern_frame(
          StackFrame{b.trace.strings.intern(fn), b.trace.strings.intern("model.py"), static_cast<uint32_t>(fn.size()), FrameKind::kPython});
      // A library frame inside (folded), so the innermost *user* frame is what names the tensor.
      const uint32_t lib = b.trace.stacks.intern_frame(StackFrame{b.trace.strings.intern("empty"),
                                                                  b.trace.strings.intern("/usr/lib/python3/site-packages/torch/_tensor.py"), 1, FrameKind::kPython});
      return stacks[fn] = b.trace.stacks.intern_stack({lib, f});
    };
    uint64_t t = 1, addr = 0x1000;
    for (const auto& [fn, bytes] : transient) {  // allocated and freed before the peak
      b.alloc(t++, addr, bytes).stack_id = stack_of(fn);
      b.free(t++, addr);
      addr += 0x1000;
    }
    for (const auto& [fn, bytes] : live) b.alloc(t++, addr += 0x1000, bytes).stack_id = stack_of(fn);
    b.alloc(t++, addr += 0x1000, 5);  // unnamed, no stack: alike in both runs
    return analyze(b.trace);
  };
  const RunAnalysis a = traced({{"forward", 400}, {"attention", 300}, {"mlp", 200}}, {});
  const RunAnalysis b = traced({{"attention", 300}, {"norm", 50}}, {{"mlp", 200}});
  const Comparison c = compare(a, b);
  const LiveDiff& d = c.live_at_peak_diff;
  CHECK(d.unchanged_tensors == 2);  // attention, the unnamed 5 bytes
  CHECK(d.unchanged_bytes == 305);
  std::map<std::string, std::pair<LiveChange, int64_t>> by_frame;
  int64_t sum = 0;
  for (const auto& r : d.rows) {
    CHECK(r.name.empty());
    REQUIRE_FALSE(r.stack.empty());
    by_frame[r.stack.front().substr(0, r.stack.front().find(' '))] = {r.change, r.delta};
    sum += r.delta;
  }
  REQUIRE(by_frame.size() == 3);
  CHECK(by_frame["forward"] == std::make_pair(LiveChange::kNotAllocated, int64_t{-400}));  // B never allocates there
  CHECK(by_frame["mlp"] == std::make_pair(LiveChange::kFreed, int64_t{-200}));             // B does, not at its peak
  CHECK(by_frame["norm"] == std::make_pair(LiveChange::kNew, int64_t{50}));
  CHECK(sum == static_cast<int64_t>(b.peak_activation_bytes) - static_cast<int64_t>(a.peak_activation_bytes));
  CHECK(sum == d.delta);
  // Allocations only one run makes are grouped by the same frame.
  std::map<std::string, uint64_t> only_a, only_b;
  for (const auto& g : c.only_in_baseline) only_a[g.frame.substr(0, g.frame.find(' '))] += g.bytes * g.count;
  for (const auto& g : c.only_in_candidate) only_b[g.frame.substr(0, g.frame.find(' '))] += g.bytes * g.count;
  CHECK(only_a == std::map<std::string, uint64_t>{{"forward", 400}});
  CHECK(only_b == std::map<std::string, uint64_t>{{"norm", 50}});
  for (const auto& g : a.alloc_groups.expand()) CHECK(g.frame.find("_tensor.py") == std::string::npos);  // library frames folded
}
