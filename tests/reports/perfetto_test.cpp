// The Chrome JSON / Perfetto export of the golden traces.
#include <catch2/catch.hpp>

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
  size_t counters = 0, begins = 0, ends = 0, process_names = 0, complete = 0, instants = 0;
  std::map<std::string, size_t> begins_by_cat;
  std::vector<uint64_t> slice_bytes;
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
    } else if (ph == "b") {
      ++c.begins;
      ++c.begins_by_cat[e["cat"]];
      auto key = std::make_tuple(e["pid"].get<int64_t>(), e["cat"].get<std::string>(), e["id"].get<std::string>());
      CHECK(open.count(key) == 0);
      open[key] = e["ts"].get<double>();
      if (e["cat"] != "marker") c.slice_bytes.push_back(e["args"]["bytes"].get<uint64_t>());
    } else if (ph == "e") {
      ++c.ends;
      auto key = std::make_tuple(e["pid"].get<int64_t>(), e["cat"].get<std::string>(), e["id"].get<std::string>());
      REQUIRE(open.count(key) == 1);
      CHECK(e["ts"].get<double>() >= open[key]);
      open.erase(key);
    } else if (ph == "M") {
      if (e["name"] == "process_name") ++c.process_names;
    } else if (ph == "X") {
      ++c.complete;
    } else if (ph == "i") {
      ++c.instants;
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
  CHECK(c.begins - c.begins_by_cat["marker"] == 10 + 9);  // one slice per allocation
  CHECK(c.complete == 4);                                   // 2 kernels per run
  CHECK(c.counters == a.devices[0].timeline_total.size() + a.devices[0].timeline_activation.size() +
                          b.devices[0].timeline_total.size() + b.devices[0].timeline_activation.size());
  CHECK(c.counters > 0);
  // The counter samples contain the activation peak of each run.
  std::set<uint64_t> act_values;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "C" && e["name"] == "live activation bytes") act_values.insert(e["args"]["bytes"].get<uint64_t>());
  }
  CHECK(act_values.count(2296) == 1);
  CHECK(act_values.count(1957) == 1);
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
  CHECK(c.instants == 1);
  CHECK(c.begins == 1);
  CHECK(c.ends == 1);
}
