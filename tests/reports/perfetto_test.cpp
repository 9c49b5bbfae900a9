// The Chrome JSON / Perfetto export of the golden traces.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/trace_io.h"
#include "planner/analysis.h"
#include "reports/perfetto.h"
#include "tests/reports/golden_traces.h"
#include "tests/reports/test_util.h"

using namespace moeprof;
using nlohmann::json;

namespace {

struct Checked {
  size_t counters = 0, begins = 0, ends = 0, process_names = 0, thread_names = 0, kernels = 0, instants = 0, peaks = 0;
  std::map<std::string, size_t> begins_by_cat;
  std::vector<uint64_t> slice_bytes;  // allocation slices (complete events of a category)
  std::map<std::string, std::vector<uint64_t>> counter_values;  // by counter name
};

// Asserts the structural rules (one numeric counter arg, b/e pairing, pid on every event).
Checked check_events(const json& doc) {
  Checked c;
  REQUIRE(doc.contains("traceEvents"));
  std::map<std::tuple<int64_t, std::string, std::string>, double> open;
  for (const auto& e : doc["traceEvents"]) {
    REQUIRE(e.contains("ph"));
    REQUIRE(e.contains("pid"));
    std::string ph = e["ph"];
    if (ph == "C") {
      ++c.counters;
      REQUIRE(e["args"].is_object());
      CHECK(e["args"].size() == 1);
      CHECK(e["args"].begin().value().is_number());
      CHECK(e["ts"].is_number());
      c.counter_values[e["name"]].push_back(e["args"]["bytes"].get<uint64_t>());
    } else if (ph == "b") {
      ++c.begins;
      ++c.begins_by_cat[e["cat"]];
      auto key = std::make_tuple(e["pid"].get<int64_t>(), e["cat"].get<std::string>(), e["id"].get<std::string>());
      CHECK(open.count(key) == 0);
      open[key] = e["ts"].get<double>();
    } else if (ph == "e") {
      ++c.ends;
      auto key = std::make_tuple(e["pid"].get<int64_t>(), e["cat"].get<std::string>(), e["id"].get<std::string>());
      REQUIRE(open.count(key) == 1);
      CHECK(e["ts"].get<double>() >= open[key]);
      open.erase(key);
    } else if (ph == "M") {
      if (e["name"] == "process_name") ++c.process_names;
      if (e["name"] == "thread_name") ++c.thread_names;
    } else if (ph == "X") {
      CHECK(e["dur"].get<double>() >= 0);
      if (e["cat"] == "kernel") ++c.kernels;
      else c.slice_bytes.push_back(e["args"]["bytes"].get<uint64_t>());
    } else if (ph == "i") {
      ++c.instants;
      if (e["cat"] == "peak") ++c.peaks;
    }
  }
  CHECK(open.empty());
  return c;
}

}  // namespace

TEST_CASE("perfetto export of the golden traces", "[perfetto]") {
  Trace base = testing::golden_trace(false), reuse = testing::golden_trace(true);
  auto a = planner::analyze(base), b = planner::analyze(reuse);
  std::string text = reports::perfetto_json({{"baseline", &base, &a}, {"reuse", &reuse, &b}});
  json doc = json::parse(text);
  Checked c = check_events(doc);
  CHECK(c.process_names == 2);
  CHECK(c.begins == c.ends);
  CHECK(c.begins_by_cat["marker"] == 4);  // layer.0 and layer.1 in both runs
  CHECK(c.slice_bytes.size() == 10 + 9);  // one slice per allocation
  CHECK(c.kernels == 4);                  // 2 kernels per run
  CHECK(c.peaks == 2 * 2);                // peak activation memory and peak total, per run
  CHECK(c.thread_names > 0);
  // Tracks: "total", "activation memory" and one per category, in bytes; the activation memory
  // track holds each run's activation peak, the total track each run's total peak.
  for (const char* name : {"total", "activation memory", "category weights", "category kv_cache", "category activation",
                           "category workspace", "category communication"})
    CHECK(c.counter_values.count(name) == 1);
  CHECK(c.counter_values.count("live total bytes") == 0);
  const auto& act = c.counter_values["activation memory"];
  CHECK(std::count(act.begin(), act.end(), 2296) >= 1);
  CHECK(std::count(act.begin(), act.end(), 1957) >= 1);
  CHECK(*std::max_element(act.begin(), act.end()) == 2296);
  const auto& tot = c.counter_values["total"];
  CHECK(*std::max_element(tot.begin(), tot.end()) == 13796);
  // The peak instants carry exact bytes; allocations are grouped by scope (thread names).
  std::set<uint64_t> peaks;
  std::set<std::string> threads;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "i" && e["cat"] == "peak") peaks.insert(e["args"]["bytes"].get<uint64_t>());
    if (e["ph"] == "M" && e["name"] == "thread_name") threads.insert(e["args"]["name"].get<std::string>());
  }
  CHECK(peaks == std::set<uint64_t>{2296, 13796, 1957, 13457});
  CHECK(threads.count("layer.1/moe") == 1);
}

TEST_CASE("perfetto export keeps the largest slices", "[perfetto]") {
  Trace base = testing::golden_trace(false);
  auto a = planner::analyze(base);
  reports::PerfettoOptions opts;
  opts.max_slices = 3;
  json doc = json::parse(reports::perfetto_json({{"baseline", &base, &a}}, opts));
  Checked c = check_events(doc);
  std::multiset<uint64_t> kept(c.slice_bytes.begin(), c.slice_bytes.end());
  CHECK(kept == std::multiset<uint64_t>{10000, 1500, 672});
}

TEST_CASE("perfetto export: unbalanced markers become instants, unfreed allocations end", "[perfetto]") {
  Trace t;
  t.meta.name = "odd";
  auto& m = t.add(EventKind::kMarkerBegin, 1234, 0, 0);
  m.name_id = t.strings.intern("forward");
  auto& al = t.add(EventKind::kAlloc, 2345, 0x777, 4099);
  al.category = Category::kActivation;
  t.add(EventKind::kMarkerEnd, 3456, 0, 0).name_id = t.strings.intern("other");
  auto an = planner::analyze(t);
  json doc = json::parse(reports::perfetto_json({{"odd", &t, &an}}));
  Checked c = check_events(doc);
  CHECK(c.instants == 1 + 2);  // the unmatched marker, the two peaks
  CHECK(c.begins == 0);
  CHECK(c.slice_bytes == std::vector<uint64_t>{4099});
}
