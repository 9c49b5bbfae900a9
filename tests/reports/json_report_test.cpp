// The JSON report against the checked-in golden traces and expected report (tests/golden/), the
// report reader's validation, and the Markdown/HTML renderings.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "core/trace_io.h"
#include "planner/analysis.h"
#include "reports/json_report.h"
#include "reports/html_report.h"
#include "reports/markdown_report.h"
#include "reports/report_file.h"
#include "tests/reports/golden_traces.h"
#include "tests/reports/test_util.h"

using namespace moeprof;
using nlohmann::ordered_json;

namespace {

constexpr const char* kGoldenGenerator = "moeprof GOLDEN";

std::vector<planner::RunAnalysis> golden_runs() {
  std::vector<planner::RunAnalysis> runs;
  for (const char* f : {"baseline.mtrace", "reuse.mtrace"}) {
    auto t = read_trace(testing::golden_dir() + "/" + f);
    REQUIRE(t.is_ok());
    runs.push_back(planner::analyze(*t));
  }
  return runs;
}

ordered_json golden_report() {
  reports::ReportOptions opts;
  opts.generator = kGoldenGenerator;
  auto doc = reports::make_report(golden_runs(), opts);
  REQUIRE(doc.is_ok());
  return *doc;
}

}  // namespace

// Regenerates tests/golden/ (run by hand: reports_tests "[.regen]"), then review the diff.
TEST_CASE("regenerate golden files", "[.regen]") {
  REQUIRE(write_trace(testing::golden_dir() + "/baseline.mtrace", testing::golden_trace(false)).is_ok());
  REQUIRE(write_trace(testing::golden_dir() + "/reuse.mtrace", testing::golden_trace(true)).is_ok());
  testing::spit(testing::golden_dir() + "/report.expected.json", reports::report_text(golden_report()));
}

TEST_CASE("checked-in golden traces are what the generator writes", "[golden]") {
  auto dir = testing::temp_dir("golden_gen");
  for (bool reuse : {false, true}) {
    std::string name = reuse ? "reuse.mtrace" : "baseline.mtrace";
    REQUIRE(write_trace((dir / name).string(), testing::golden_trace(reuse)).is_ok());
    CHECK(testing::slurp((dir / name).string()) == testing::slurp(testing::golden_dir() + "/" + name));
  }
}

TEST_CASE("golden report matches the expected JSON", "[golden]") {
  ordered_json got = golden_report();
  std::string expected_text = testing::slurp(testing::golden_dir() + "/report.expected.json");
  REQUIRE(!expected_text.empty());
  ordered_json expected = ordered_json::parse(expected_text);
  expected["generator"] = kGoldenGenerator;  // normalise the version
  INFO("diff (expected -> got): " << nlohmann::json::diff(nlohmann::json(expected), nlohmann::json(got)).dump());
  CHECK(got == expected);
  // Same key order, byte for byte.
  CHECK(got.dump(2) + "\n" == expected.dump(2) + "\n");
}

TEST_CASE("golden report: hand-computed figures", "[golden]") {
  ordered_json r = golden_report();
  CHECK(r["schema_version"] == 1);
  CHECK(r["generator"] == kGoldenGenerator);
  REQUIRE(r["runs"].size() == 2);
  const auto& b = r["runs"][0];
  const auto& c = r["runs"][1];
  CHECK(b["name"] == "baseline");
  CHECK(b["model"] == "golden-tiny");
  CHECK(b["tokens"] == 7);
  CHECK(b["tp_size"] == 2);
  CHECK(b["tp_rank"] == 1);
  CHECK(b["extra"]["tp_emulated"] == "true");
  CHECK(b["extra"]["weights"] == "shared");
  // x0 672 + post_norm0 672 + latent0 280 + moe_out0 672.
  CHECK(b["peak_activation_bytes"] == 2296);
  CHECK(b["peak_total_bytes"] == 2296 + 10000 + 1500);
  CHECK(b["churn_bytes"] == 10000 + 1500 + 5 * 672 + 2 * 280 + 333);
  CHECK(b["allocations"] == 10);
  CHECK(b["live_at_peak"]["timestamp_ns"] == 800);
  CHECK(b["live_at_peak"]["by_category"]["activation"] == 1624);
  CHECK(b["live_at_peak"]["by_category"]["communication"] == 672);
  CHECK(b["live_at_peak"]["by_category"]["weights"] == 10000);
  CHECK(b["live_at_peak"]["by_category"]["workspace"] == 0);
  CHECK(b["peak_by_category"]["activation"] == 1624);
  CHECK(b["peak_by_category"]["workspace"] == 333);
  CHECK(b["peak_by_category"]["communication"] == 1344);  // moe_out0 + moe_out1 at t=1400
  CHECK(b["live_at_peak"]["entries"] == 4);
  CHECK(b["live_at_peak"]["top"][0]["bytes"] == 672);
  CHECK(b["live_at_peak"]["top"][3]["name"] == "qkv_a_latent");
  CHECK(b["live_at_peak"]["top"][3]["bytes"] == 280);
  CHECK(b["anomalies"]["unknown_frees"] == 0);
  CHECK(b["dropped_records"] == 0);
  CHECK(b["truncated"] == false);

  CHECK(c["name"] == "reuse");
  CHECK(c["peak_activation_bytes"] == 672 + 672 + 280 + 333);
  CHECK(c["peak_total_bytes"] == 1957 + 11500);
  CHECK(c["churn_bytes"] == 15081);
  CHECK(c["allocations"] == 9);
  CHECK(c["live_at_peak"]["timestamp_ns"] == 600);
  CHECK(c["anomalies"]["unknown_frees"] == 1);
  CHECK(c["dropped_records"] == 3);

  const auto& cmp = r["comparison"];
  REQUIRE(cmp.is_object());
  CHECK(cmp["baseline"] == "baseline");
  CHECK(cmp["candidate"] == "reuse");
  CHECK(cmp["peak_activation_delta_bytes"] == -339);
  CHECK(cmp["peak_total_delta_bytes"] == -339);
  CHECK(cmp["churn_delta_bytes"] == -672);
  CHECK(cmp["allocations_delta"] == -1);
  REQUIRE(cmp["only_in_baseline"].size() == 1);
  CHECK(cmp["only_in_baseline"][0]["scope"] == "layer.1/moe");
  CHECK(cmp["only_in_baseline"][0]["name"] == "moe_output");
  CHECK(cmp["only_in_baseline"][0]["bytes"] == 672);
  CHECK(cmp["only_in_baseline"][0]["count"] == 1);
  CHECK(cmp["only_in_candidate"].empty());
  // Live at each run's activation peak: communication 672 -> 0, workspace 0 -> 333, activation 1624 -> 1624.
  CHECK(cmp["live_at_peak_delta_by_category"]["communication"] == -672);
  CHECK(cmp["live_at_peak_delta_by_category"]["workspace"] == 333);
  CHECK(cmp["live_at_peak_delta_by_category"]["activation"] == 0);
}

TEST_CASE("report: comparison only with two runs or a named baseline", "[report]") {
  auto runs = golden_runs();
  auto one = reports::make_report({runs[0]});
  REQUIRE(one.is_ok());
  CHECK((*one)["comparison"].is_null());
  CHECK(reports::validate_report(*one).is_ok());

  auto three = runs;
  three.push_back(runs[1]);  // same name: becomes "reuse-2"
  reports::ReportOptions opts;
  opts.compare_baseline = "reuse";
  auto doc = reports::make_report(three, opts);
  REQUIRE(doc.is_ok());
  CHECK((*doc)["runs"][2]["name"] == "reuse-2");
  CHECK((*doc)["comparison"]["baseline"] == "reuse");
  CHECK((*doc)["comparison"]["candidate"] == "baseline");
  CHECK((*doc)["comparison"]["peak_activation_delta_bytes"] == 339);
  REQUIRE((*doc)["comparisons"].size() == 2);
  CHECK((*doc)["comparisons"][1]["peak_activation_delta_bytes"] == 0);

  opts.compare_baseline = "nope";
  auto bad = reports::make_report(runs, opts);
  CHECK(!bad.is_ok());
  CHECK(bad.status().code() == ErrorCode::kBadInput);
}

TEST_CASE("read_report validates version and required keys", "[report]") {
  ordered_json good = golden_report();
  CHECK(reports::parse_report(good.dump(), "g.json").is_ok());

  SECTION("other schema version") {
    good["schema_version"] = 2;
    auto r = reports::parse_report(good.dump(), "g.json");
    REQUIRE(!r.is_ok());
    CHECK(r.status().message().find("schema version 2") != std::string::npos);
  }
  SECTION("missing key") {
    good["runs"][1].erase("churn_bytes");
    auto r = reports::parse_report(good.dump(), "g.json");
    REQUIRE(!r.is_ok());
    CHECK(r.status().message() == "g.json: runs[1] (reuse): missing key churn_bytes");
  }
  SECTION("negative bytes") {
    good["runs"][0]["peak_total_bytes"] = -5;
    CHECK(!reports::parse_report(good.dump(), "g.json").is_ok());
  }
  SECTION("duplicate names") {
    good["runs"][1]["name"] = "baseline";
    CHECK(!reports::parse_report(good.dump(), "g.json").is_ok());
  }
  SECTION("invalid JSON names the byte offset") {
    std::string text = good.dump();
    text.resize(text.size() / 2);
    auto r = reports::parse_report(text, "g.json");
    REQUIRE(!r.is_ok());
    CHECK(r.status().code() == ErrorCode::kBadInput);
    CHECK(r.status().message().rfind("g.json: byte offset ", 0) == 0);
  }
  SECTION("missing file") {
    auto r = reports::read_report("/nonexistent/moeprof/report.json");
    REQUIRE(!r.is_ok());
    CHECK(r.status().code() == ErrorCode::kBadInput);
  }
}

TEST_CASE("markdown report lists runs and the comparison", "[report]") {
  std::string md = reports::report_markdown(golden_report());
  CHECK(md.find("| baseline | baseline | golden-tiny | 7 | 1/2 (emulated) | cpu | 2,296 (2.3 kB) | 13,796 (13.8 kB) | 15,753 (15.8 kB) | 10 | 0 |") !=
        std::string::npos);
  CHECK(md.find("| reuse | reuse | golden-tiny | 7 | 1/2 (emulated) | cpu | 1,957 (2.0 kB)") != std::string::npos);
  // The run notes name the emulated TP and the shared weights.
  CHECK(md.find("> **baseline**: TP emulated: one device ran rank 1's shapes of TP=2") != std::string::npos);
  CHECK(md.find("> **baseline**: weights: shared") != std::string::npos);
  const std::string html = reports::report_html(golden_report());
  CHECK(html.find("<td>1/2 (emulated)</td>") != std::string::npos);
  CHECK(html.find("<div class=\"note\"><b>baseline</b>: TP emulated") != std::string::npos);
  CHECK(md.find("| peak activation | 2,296 (2.3 kB) | 1,957 (2.0 kB) | -339 B (-339) |") != std::string::npos);
  CHECK(md.find("| layer.1/moe | moe_output | 672 (672 B) | 1 |") != std::string::npos);
  CHECK(md.find("3 dropped records") != std::string::npos);
}

TEST_CASE("html report is self-contained and embeds the data", "[report]") {
  ordered_json doc = golden_report();
  doc["runs"][0]["extra"]["note"] = "</script><script>alert(1)</script>";
  std::string html = reports::report_html(doc);
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("http://") == std::string::npos);
  CHECK(html.find("https://") == std::string::npos);
  CHECK(html.find("<link") == std::string::npos);
  CHECK(html.find("<script src") == std::string::npos);
  const std::string open = "<script type=\"application/json\" id=\"moeprof-data\">";
  auto a = html.find(open);
  REQUIRE(a != std::string::npos);
  auto b = html.find("</script>", a);
  REQUIRE(b != std::string::npos);
  ordered_json embedded = ordered_json::parse(html.substr(a + open.size(), b - a - open.size()));
  CHECK(embedded == doc);
  CHECK(html.find("<polyline class=\"s-act\"") != std::string::npos);
  CHECK(html.find("<polyline class=\"s-total\"") != std::string::npos);
  CHECK(html.find("id=\"delta-peak-activation\"><span class=\"better\" title=\"-339 bytes\">-339 B</span>") != std::string::npos);
}

TEST_CASE("the TP column says emulated, or all ranks for a merged multi-GPU trace", "[report]") {
  ordered_json run = {{"tp_rank", 0}, {"tp_size", 4}, {"extra", {{"tp_emulated", "true"}}}};
  CHECK(reports::run_tp_label(run) == "0/4 (emulated)");
  run["extra"] = {{"tp_emulated", "false"}, {"ranks", "2"}};
  run["tp_size"] = 2;
  CHECK(reports::run_tp_label(run) == "all 2 ranks of 2");
  run["extra"] = ordered_json::object();
  CHECK(reports::run_tp_label(run) == "0/2");
}
