// compare(): signed deltas, category and scope deltas, allocations present in only one run.
#include <catch2/catch.hpp>

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
