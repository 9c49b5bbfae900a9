// The trace report (`moeprof trace --out-json`), built in reports/: figures equal the planner's,
// one document with a version, written for the schema check (reports_schema_trace).
#include <catch2/catch.hpp>

#include <filesystem>

#include "planner/analysis.h"
#include "reports/trace_report.h"
#include "tests/reports/golden_traces.h"
#include "tests/reports/test_util.h"

using namespace moeprof;
using nlohmann::ordered_json;

TEST_CASE("trace report: four views, figures from the planner, versioned document", "[reports][trace_report]") {
  const Trace base = testing::golden_trace(false);
  Trace with_uses = testing::golden_trace(true);
  with_uses.meta.pid = 4242;
  std::vector<reports::TracedFile> files = {reports::analyze_traced_file("a.mtrace", base),
                                            reports::analyze_traced_file("b.mtrace", with_uses)};
  const ordered_json doc = reports::make_trace_report(files);
  CHECK(doc["schema_version"] == reports::kTraceReportVersion);
  CHECK(doc["kind"] == "trace_report");
  REQUIRE(doc["traces"].size() == 2);
  const ordered_json& a = doc["traces"][0];
  const planner::RunAnalysis full = planner::analyze(base);
  CHECK(a["all"]["peak_bytes"] == full.peak_total_bytes);
  CHECK(a["all"]["peak_bytes"] == 13796);           // the golden hand figure
  CHECK(a["all"]["peak_activation_bytes"] == 2296);
  CHECK(a["all"]["allocs"] == 10);
  CHECK(a["all"]["devices"][0]["peak_ts"] == 800);
  CHECK(a["all"]["devices"][0]["peak_time_ns"] == 700);  // relative to the first allocation (t=100)
  CHECK(a["program"]["peak_bytes"] == 13796);       // no graph memory in these traces
  CHECK(a["stream_ordered"]["allocs"] == 0);        // everything is host memory
  CHECK(a["all"]["uses"] == 9);
  const ordered_json& b = doc["traces"][1];
  CHECK(b["pid"] == 4242);
  CHECK(b["dropped_records"] == 3);
  CHECK(b["all"]["anomalies"]["unknown_frees"] == 1);
  // Text: units from the one formatter, the device line, an incomplete trace named first.
  const std::string text = reports::trace_report_text(files[0]);
  CHECK(text.find("device 0: peak 13.8 kB at 700 ns") != std::string::npos);
  Trace cut = base;
  cut.truncated = true;
  cut.truncation_note = "truncated at byte offset 99";
  const std::string t2 = reports::trace_report_text(reports::analyze_traced_file("c.mtrace", cut));
  CHECK(t2.rfind("  c.mtrace: WARNING: trace incomplete: truncated at byte offset 99\n", 0) == 0);
  // The document the schema test validates.
  const std::filesystem::path out = std::filesystem::path(MOEPROF_BINARY_DIR) / "tests" / "trace_report.sample.json";
  std::filesystem::create_directories(out.parent_path());
  testing::spit(out.string(), doc.dump(2) + "\n");
}
