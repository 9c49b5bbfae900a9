// The gate on synthetic reports with random (non-zero) byte figures.
#include <catch2/catch.hpp>

#include <random>
#include <regex>

#include "reports/gate.h"
#include "reports/report_file.h"
#include "tests/reports/synthetic_run.h"

using namespace moeprof;
using nlohmann::ordered_json;

namespace {

ordered_json make_run(const std::string& name, uint64_t act, uint64_t total, uint64_t churn) {
  return moeprof::testing::synthetic_run(name, act, total, churn);
}

reports::ReportFile make_report(std::vector<ordered_json> runs) {
  ordered_json doc;
  doc["schema_version"] = 1;
  doc["generator"] = "moeprof test";
  doc["runs"] = runs;
  doc["comparison"] = nullptr;
  auto f = reports::parse_report(doc.dump(), "mem.json");
  REQUIRE(f.is_ok());
  return *f;
}

struct Figures {
  uint64_t act, total, churn;
};

Figures random_figures(std::mt19937_64& rng) {
  std::uniform_int_distribution<uint64_t> d(1'000'000, 5'000'000'000ull);
  uint64_t act = d(rng);
  return {act, act + d(rng), d(rng) * 7 + 13};
}

const reports::GateCheck& find(const reports::GateResult& r, const std::string& run, const std::string& metric) {
  for (const auto& c : r.checks) {
    if (c.run == run && c.metric == metric) return c;
  }
  FAIL("no check " << run << "/" << metric);
  return r.checks.front();
}

}  // namespace

TEST_CASE("gate passes on equal reports and fails on any byte of regression by default", "[gate]") {
  std::mt19937_64 rng(1234);
  for (int trial = 0; trial < 20; ++trial) {
    Figures a = random_figures(rng), b = random_figures(rng);
    auto base = make_report({make_run("baseline", a.act, a.total, a.churn), make_run("reuse", b.act, b.total, b.churn)});
    reports::GateOptions opts;
    auto same = reports::run_gate(base, base, opts);
    CHECK(same.passed());
    CHECK(same.checks.size() == 6);
    CHECK(same.failures == 0);

    auto cur = make_report({make_run("baseline", a.act, a.total, a.churn), make_run("reuse", b.act + 1, b.total, b.churn)});
    auto res = reports::run_gate(base, cur, opts);
    CHECK(!res.passed());
    CHECK(res.regressions == 1);
    const auto& c = find(res, "reuse", "peak_activation_bytes");
    CHECK(c.status == reports::GateStatus::kRegression);
    CHECK(c.delta == 1);
    CHECK(find(res, "reuse", "peak_total_bytes").status == reports::GateStatus::kPass);
  }
}

TEST_CASE("gate tolerances: the larger of relative and absolute applies", "[gate]") {
  std::mt19937_64 rng(99);
  Figures a = random_figures(rng);
  auto base = make_report({make_run("r", a.act, a.total, a.churn)});
  auto with_act = [&](uint64_t act) { return make_report({make_run("r", act, a.total, a.churn)}); };

  reports::GateOptions rel;
  rel.rel_tol = 0.01;
  uint64_t allowed = static_cast<uint64_t>(std::floor(0.01 * static_cast<double>(a.act)));
  CHECK(reports::run_gate(base, with_act(a.act + allowed), rel).passed());
  CHECK(!reports::run_gate(base, with_act(a.act + allowed + 1), rel).passed());
  // Improvements within tolerance pass; beyond, they fail unless allowed.
  CHECK(reports::run_gate(base, with_act(a.act - allowed), rel).passed());
  auto improved = reports::run_gate(base, with_act(a.act - allowed - 1), rel);
  CHECK(!improved.passed());
  CHECK(find(improved, "r", "peak_activation_bytes").status == reports::GateStatus::kImprovement);
  rel.allow_improvement = true;
  auto allowed_impr = reports::run_gate(base, with_act(a.act - allowed - 1), rel);
  CHECK(allowed_impr.passed());
  CHECK(allowed_impr.improvements == 1);

  reports::GateOptions abs;
  abs.abs_tol = 4097;
  CHECK(reports::run_gate(base, with_act(a.act + 4097), abs).passed());
  CHECK(!reports::run_gate(base, with_act(a.act + 4098), abs).passed());
  CHECK(!reports::run_gate(base, with_act(a.act - 4098), abs).passed());

  reports::GateOptions both = rel;
  both.allow_improvement = false;
  both.abs_tol = allowed + 500;  // absolute is larger here
  CHECK(reports::run_gate(base, with_act(a.act + allowed + 500), both).passed());
  CHECK(!reports::run_gate(base, with_act(a.act + allowed + 501), both).passed());
}

TEST_CASE("gate: missing and new runs fail", "[gate]") {
  std::mt19937_64 rng(7);
  Figures a = random_figures(rng), b = random_figures(rng);
  auto base = make_report({make_run("baseline", a.act, a.total, a.churn), make_run("reuse", b.act, b.total, b.churn)});
  auto only_baseline = make_report({make_run("baseline", a.act, a.total, a.churn)});
  auto missing = reports::run_gate(base, only_baseline, {});
  CHECK(!missing.passed());
  CHECK(missing.missing == 3);
  CHECK(find(missing, "reuse", "churn_bytes").status == reports::GateStatus::kMissing);
  CHECK(reports::gate_verdict(missing, {}).rfind("moeprof gate: FAIL: 3 checks of missing runs", 0) == 0);

  auto added = reports::run_gate(only_baseline, base, {});
  CHECK(!added.passed());
  CHECK(added.new_runs == 3);
}

TEST_CASE("gate: metric selection and option validation", "[gate]") {
  std::mt19937_64 rng(5);
  Figures a = random_figures(rng);
  auto base = make_report({make_run("r", a.act, a.total, a.churn)});
  auto cur = make_report({make_run("r", a.act, a.total, a.churn + 977)});
  reports::GateOptions opts;
  opts.metrics = {"peak_activation_bytes", "peak_total_bytes"};
  auto r = reports::run_gate(base, cur, opts);
  CHECK(r.passed());
  CHECK(r.checks.size() == 2);
  opts.metrics = {"churn_bytes"};
  CHECK(!reports::run_gate(base, cur, opts).passed());

  opts.metrics = {"peak_bytes"};
  CHECK(reports::validate_gate_options(opts).code() == ErrorCode::kBadInput);
  opts.metrics = {};
  CHECK(!reports::validate_gate_options(opts).is_ok());
  opts.metrics = {"churn_bytes"};
  opts.rel_tol = -0.5;
  CHECK(!reports::validate_gate_options(opts).is_ok());
}

TEST_CASE("gate outputs: verdict, Markdown table, JUnit XML, proposed baseline", "[gate]") {
  std::mt19937_64 rng(31337);
  Figures a = random_figures(rng), b = random_figures(rng);
  auto base = make_report({make_run("baseline", a.act, a.total, a.churn), make_run("reuse", b.act, b.total, b.churn)});
  auto cur = make_report({make_run("baseline", a.act + 2048, a.total + 2048, a.churn),
                          make_run("reuse", b.act - 539, b.total, b.churn)});
  reports::GateOptions opts;
  auto r = reports::run_gate(base, cur, opts);
  REQUIRE(!r.passed());
  CHECK(r.regressions == 2);
  CHECK(r.improvements == 1);
  CHECK(r.failures == 3);

  std::string verdict = reports::gate_verdict(r, opts);
  CHECK(verdict == "moeprof gate: FAIL: 2 regressions, 1 unexpected improvement (6 checks, 2 runs; rel-tol 0, abs-tol 0 B)");

  std::string md = reports::gate_markdown(r, opts);
  CHECK(md.rfind("### " + verdict + "\n\n| run | metric | baseline | current | delta | delta % | allowed | status |\n", 0) == 0);
  auto commas = [](uint64_t v) {
    std::string s = std::to_string(v), out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (i && (s.size() - i) % 3 == 0) out += ',';
      out += s[i];
    }
    return out;
  };
  // Every byte column in exact bytes.
  CHECK(md.find("| baseline | peak_activation_bytes | " + commas(a.act) + " B | " + commas(a.act + 2048) + " B | +2,048 B | ") !=
        std::string::npos);
  {
    std::string prefix = "| reuse | peak_activation_bytes | " + commas(b.act) + " B | " + commas(b.act - 539) + " B | -539 B | -";
    auto p = md.find(prefix);
    REQUIRE(p != std::string::npos);
    std::string line = md.substr(p, md.find('\n', p) - p);
    CHECK(line.size() > prefix.size());
    CHECK(line.substr(line.size() - std::string("% | 0 B | ❌ unexpected improvement |").size()) ==
          "% | 0 B | ❌ unexpected improvement |");
  }
  CHECK(md.find("| reuse | churn_bytes | " + commas(b.churn) + " B | " + commas(b.churn) + " B | 0 B | 0.0% | 0 B | ✅ pass |") !=
        std::string::npos);

  std::string xml = reports::gate_junit(r, opts);
  CHECK(xml.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites", 0) == 0);
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t p = xml.find(needle); p != std::string::npos; p = xml.find(needle, p + 1)) ++n;
    return n;
  };
  CHECK(count("<testcase ") == 6);
  CHECK(count("</testcase>") == 6);
  CHECK(count("<failure ") == 3);
  CHECK(xml.find("tests=\"6\" failures=\"3\"") != std::string::npos);
  CHECK(count("<testsuite ") == 1);
  CHECK(count("</testsuite>") == 1);
  // Crude well-formedness: no raw '&' that is not an entity, tags balanced.
  CHECK(!std::regex_search(xml, std::regex("&(?!amp;|lt;|gt;|quot;|#39;)")));

  // The proposed baseline is the current report; gating the current report against it passes.
  auto proposed = reports::parse_report(reports::proposed_baseline(cur), "proposed.json");
  REQUIRE(proposed.is_ok());
  auto again = reports::run_gate(*proposed, cur, opts);
  CHECK(again.passed());
  CHECK(again.checks.size() == 6);
}

TEST_CASE("a report without runs is bad input, so an empty baseline can never pass", "[gate]") {
  auto r = moeprof::reports::parse_report(R"({"schema_version":1,"generator":"moeprof x","runs":[],"comparison":null})", "empty.json");
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == moeprof::ErrorCode::kBadInput);
  CHECK(r.status().message().find("no runs") != std::string::npos);
}
