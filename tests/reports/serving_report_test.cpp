// The `serving` object of the JSON report (reports/serving_json.h): the summary from the trace's
// metadata, the occupancy one point per step (its highest value), downsampled by the highest value
// of each range of steps; a run without a summary has none.
#include <catch2/catch.hpp>

#include "planner/analysis.h"
#include "reports/json_report.h"
#include "reports/serving_json.h"

using namespace moeprof;

namespace {

planner::RunAnalysis serving_run(const std::vector<std::pair<uint64_t, uint64_t>>& samples) {
  planner::RunAnalysis run;
  run.meta.name = "reuse";
  run.meta.extra["serving"] = R"({"kv_pool_tokens": 96, "kv_pool_bytes": 1000, "graph_pool_bytes": 2097152, "steps": {"prefill": 2, "decode": 3}})";
  run.meta.extra["other"] = "kept";
  run.devices.emplace_back();
  planner::CounterSeries c;
  c.name = "kv_pool.tokens_used";
  for (auto [step, v] : samples) c.points.push_back(planner::CounterPoint{0, step, v});
  run.counters.push_back(c);
  planner::CounterSeries other;
  other.name = "scheduler.waiting";
  other.points.push_back(planner::CounterPoint{0, 0, 999});
  run.counters.push_back(other);
  return run;
}

}  // namespace

TEST_CASE("serving report: the summary, and the occupancy one point per step", "[cpu][serving]") {
  // Two samples per step (before and after its requests finish): the step's highest counts.
  auto j = reports::serving_json(serving_run({{0, 0}, {3, 10}, {3, 4}, {4, 17}, {4, 17}, {5, 20}, {5, 0}}));
  REQUIRE(j);
  CHECK((*j)["kv_pool_tokens"] == 96);
  CHECK((*j)["steps"]["decode"] == 3);
  const auto& occ = (*j)["kv_pool_occupancy"];
  CHECK(occ["steps"] == 4);
  CHECK(occ["peak_tokens"] == 20);
  CHECK(occ["points"] == nlohmann::ordered_json::parse("[[0,0],[3,10],[4,17],[5,20]]"));

  // Downsampled: 2 points of 2 steps each, the highest value of each range.
  auto d = reports::serving_json(serving_run({{0, 5}, {1, 9}, {2, 3}, {3, 1}}), 2);
  REQUIRE(d);
  CHECK((*d)["kv_pool_occupancy"]["steps_per_point"] == 2);
  CHECK((*d)["kv_pool_occupancy"]["points"] == nlohmann::ordered_json::parse("[[0,9],[2,3]]"));

  // In the run object: `serving`, and the summary is not repeated in `extra`.
  auto run = reports::make_run_json(serving_run({{0, 1}}), "reuse");
  CHECK(run.contains("serving"));
  CHECK(!run["extra"].contains("serving"));
  CHECK(run["extra"]["other"] == "kept");
}

TEST_CASE("serving report: a run without a serving summary has no serving object", "[cpu][serving]") {
  planner::RunAnalysis run;
  run.meta.name = "baseline";
  CHECK(!reports::serving_json(run));
  run.meta.extra["serving"] = "not json {";
  CHECK(!reports::serving_json(run));
  CHECK(!reports::make_run_json(run, "baseline").contains("serving"));
}
