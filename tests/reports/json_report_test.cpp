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
#include "reports/text_report.h"
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
  CHECK(md.find("| baseline | baseline | golden-tiny | 7 | 1/2 (emulated) | cpu | 2.3 kB (2,296 B) | 13.8 kB (13,796 B) | "
                "15.8 kB (15,753 B) | 10 | 0 |") != std::string::npos);
  CHECK(md.find("| reuse | reuse | golden-tiny | 7 | 1/2 (emulated) | cpu | 2.0 kB (1,957 B)") != std::string::npos);
  // The run notes name the emulated TP and the shared weights.
  CHECK(md.find("> **baseline**: TP emulated: one device ran rank 1's shapes of TP=2") != std::string::npos);
  CHECK(md.find("> **baseline**: weights: shared") != std::string::npos);
  const std::string html = reports::report_html(golden_report());
  CHECK(html.find("<td>1/2 (emulated)</td>") != std::string::npos);
  CHECK(html.find("<div class=\"note\"><b>baseline</b>: TP emulated") != std::string::npos);
  // The comparison: A and B, both runs' figures in every row, the change.
  CHECK(md.find("## Comparison: B = reuse against A = baseline") != std::string::npos);
  CHECK(md.find("| peak activation | 2.3 kB (2,296 B) | 2.0 kB (1,957 B) | -339 B | -14.8% |") != std::string::npos);
  CHECK(md.find("| churn | 15.8 kB (15,753 B) | 15.1 kB (15,081 B) | -672 B | -4.3% |") != std::string::npos);
  CHECK(md.find("| allocations | 10 | 9 | -1 | -10.0% |") != std::string::npos);
  CHECK(md.find("| layer.1/moe | moe_output | 672 B | 1 |") != std::string::npos);
  CHECK(md.find("3 dropped records") != std::string::npos);
  // The live-at-peak diff, tensor by tensor, with its sum.
  CHECK(md.find("| freed | moe_output | layer.0/moe | - | 7x48 | 672 B | - | -672 B |") != std::string::npos);
  CHECK(md.find("| added | attn_workspace | - | layer.0/attn | 333 | - | 333 B | +333 B |") != std::string::npos);
  CHECK(md.find("| **sum** | | | | | 672 B | 333 B | **-339 B** |") != std::string::npos);
}

// Names and scopes come from the traced program: a newline or a tab in one had broken its row
// of `plan`'s text table.
TEST_CASE("text report: control characters in names and scopes are escaped, one row per entry", "[report]") {
  Trace t;
  testing::GoldenBuilder b(&t);
  b.alloc(100, 0x1000, 7001, "tab\there", "s\rc", "3x7", Category::kActivation);
  b.alloc(200, 0x3000, 3003, "x\ny", "layer.0", "", Category::kActivation);
  b.alloc(300, 0x5000, 1009, "bell\x07", "", "", Category::kActivation);
  const std::string text = reports::run_text(reports::make_run_json(planner::analyze(t), "odd"));
  CHECK(text.find("tab\\x09here") != std::string::npos);
  CHECK(text.find("x\\x0ay") != std::string::npos);
  CHECK(text.find("bell\\x07") != std::string::npos);
  CHECK(text.find("s\\x0dc") != std::string::npos);
  CHECK(text.find('\t') == std::string::npos);
  CHECK(text.find('\r') == std::string::npos);
  const size_t at = text.find("largest live allocations at the peak:\n");
  REQUIRE(at != std::string::npos);
  const size_t end = text.find("\n\n", at);
  const std::string rows = text.substr(at, end - at);
  CHECK(std::count(rows.begin(), rows.end(), '\n') == 3);  // the heading's line break and one per entry
}

TEST_CASE("comparison: the live-at-peak diff sums to the change of the peak", "[report]") {
  const ordered_json c = golden_report()["comparison"];
  CHECK(c["baseline_churn_bytes"] == 15753);
  CHECK(c["candidate_churn_bytes"] == 15081);
  CHECK(c["baseline_allocations"] == 10);
  CHECK(c["candidate_allocations"] == 9);
  CHECK(c["baseline_live_at_peak_by_category"]["communication"] == 672);
  CHECK(c["candidate_live_at_peak_by_category"]["workspace"] == 333);
  const auto& d = c["live_at_peak_diff"];
  CHECK(d["baseline_bytes"] == 2296);
  CHECK(d["candidate_bytes"] == 1957);
  CHECK(d["unchanged_tensors"] == 3);  // x0, post_norm0, latent0
  CHECK(d["unchanged_bytes"] == 672 + 672 + 280);
  REQUIRE(d["rows"].size() == 2);
  CHECK(d["rows"][0]["change"] == "freed");  // allocated in the candidate too, not live at its peak
  CHECK(d["rows"][0]["name"] == "moe_output");
  CHECK(d["rows"][0]["baseline_scope"] == "layer.0/moe");
  CHECK(d["rows"][0]["delta_bytes"] == -672);
  CHECK(d["rows"][1]["change"] == "added");
  CHECK(d["rows"][1]["name"] == "attn_workspace");
  CHECK(d["rows"][1]["delta_bytes"] == 333);
  int64_t sum = 0;
  for (const auto& r : d["rows"]) sum += r["delta_bytes"].get<int64_t>();
  CHECK(sum == c["peak_activation_delta_bytes"].get<int64_t>());
  CHECK(d["delta_bytes"] == c["peak_activation_delta_bytes"]);
}

TEST_CASE("html report is self-contained and embeds the data", "[report]") {
  ordered_json doc = golden_report();
  doc["runs"][0]["extra"]["note"] = "</script><script>alert(1)</script>";
  std::string html = reports::report_html(doc);
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  // Nothing that would load a resource: no link, no script or image source, no CSS url or import.
  for (const char* s : {"<link", "<script src", "src=\"", "<img", "url(", "@import", "<iframe"}) {
    INFO(s);
    CHECK(html.find(s) == std::string::npos);
  }
  const std::string open = "<script type=\"application/json\" id=\"moeprof-data\">";
  auto a = html.find(open);
  REQUIRE(a != std::string::npos);
  auto b = html.find("</script>", a);
  REQUIRE(b != std::string::npos);
  std::string data = html.substr(a + open.size(), b - a - open.size());
  for (size_t p; (p = data.find("<\\/")) != std::string::npos;) data.replace(p, 3, "</");
  ordered_json embedded = ordered_json::parse(data);
  CHECK(embedded == doc);
  // The charts are drawn by the inlined script (uPlot and page.js) from each run's memory_timeline.
  CHECK(html.find("id=\"timeline-charts\"") != std::string::npos);
  CHECK(html.find("var uPlot=") != std::string::npos);
  CHECK(doc["runs"][0]["memory_timeline"]["allocations"].size() == 10);
  CHECK(html.find("id=\"delta-peak-activation\"><span class=\"better\" data-bytes=\"-339\" title=\"-339 B\">-339 B</span>") !=
        std::string::npos);
  // The diff table's rows and its sum row.
  CHECK(html.find("<td class=\"change change-freed\">freed</td><td>moe_output") != std::string::npos);
  CHECK(html.find("id=\"diff-sum\"><span class=\"better\" data-bytes=\"-339\"") != std::string::npos);
}

TEST_CASE("the TP column says emulated, or all ranks for a merged multi-GPU trace", "[report]") {
  ordered_json run = {{"tp_rank", 0}, {"tp_size", 4}, {"extra", {{"tp_emulated", "true"}}}};
  CHECK(reports::run_tp_label(run) == "0/4 (emulated)");
  run["extra"] = {{"tp_emulated", "false"}, {"ranks", "2"}};
  run["tp_size"] = 2;
  CHECK(reports::run_tp_label(run) == "all 2 ranks of 2");
  run["extra"] = ordered_json::object();
  CHECK(reports::run_tp_label(run) == "0/2");
  // One device and no TP (a traced or imported program): nothing, never "0/1".
  run["tp_size"] = 1;
  CHECK(reports::run_tp_label(run).empty());
  run["tp_size"] = 0;
  CHECK(reports::run_tp_label(run).empty());
}

namespace {
// Bytes of the listed allocations of a memory_timeline live at replay position p.
uint64_t listed_live_at(const ordered_json& mt, uint64_t p, bool activation_only) {
  uint64_t sum = 0;
  for (const auto& r : mt["allocations"]) {
    const std::string cat = mt["categories"][r[3].get<size_t>()];
    const bool act = cat == "activation" || cat == "workspace" || cat == "communication" || cat == "unknown";
    const int64_t f = r[1].get<int64_t>();
    if (r[0].get<uint64_t>() <= p && (f < 0 || p < static_cast<uint64_t>(f)) && (act || !activation_only)) sum += r[2].get<uint64_t>();
  }
  return sum;
}
}  // namespace

TEST_CASE("memory_timeline: allocations, layer axis, peak exact when smaller ones are summarized", "[report][timeline]") {
  auto runs = golden_runs();
  const ordered_json mt = reports::memory_timeline_json(runs[0]);
  REQUIRE(mt.is_object());
  CHECK(mt["axis"]["unit"] == "layer");
  // Layer k starts at x = k, at its first activation allocation; the set-up before it at x = -1.
  bool l0 = false, l1 = false;
  for (const auto& l : mt["axis"]["labels"]) {
    l0 |= l[0] == 0.0 && l[1] == "layer.0";
    l1 |= l[0] == 1.0 && l[1] == "layer.1";
  }
  CHECK(l0);
  CHECK(l1);
  CHECK(mt["allocations"].size() == 10);
  CHECK(mt["summarized"]["allocations"] == 0);
  const uint64_t p = mt["peak"]["position"];
  CHECK(mt["peak"]["activation_bytes"] == 2296);
  CHECK(listed_live_at(mt, p, true) == 2296);
  CHECK(listed_live_at(mt, p, false) == 13796);
  // Only the 3 largest listed: the rest is summarized per panel, exact at the peak.
  reports::TimelineOptions small;
  small.max_allocations = 3;
  const ordered_json ms = reports::memory_timeline_json(runs[0], small);
  CHECK(ms["allocations"].size() == 3);
  CHECK(ms["summarized"]["allocations"] == 7);
  CHECK(listed_live_at(ms, p, true) + ms["summarized"]["activation_bytes_at_peak"].get<uint64_t>() == 2296);
  bool has_peak = false;
  for (const auto& pt : ms["summarized"]["activation"]) has_peak |= pt[0] == p;
  CHECK(has_peak);
  CHECK(reports::layer_of_scope("model/layers.3/attn") == 3);
  CHECK(reports::layer_of_scope("blk.12") == 12);
  CHECK(reports::layer_of_scope("model/embed") == -1);
}
