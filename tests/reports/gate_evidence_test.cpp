// The gate trusts no bad evidence (issue 14): a failed run fails it in either report, another
// workload (model, tokens, layers, TP) fails unless --allow-config-change, tolerances are
// range-checked (2^64 does not saturate), figures are exact up to 2^63-1 bytes and the reader
// refuses what lies beyond (1e400, 2^64-1) as bad input in one line.
#include <catch2/catch.hpp>

#include <limits>

#include "core/checked.h"
#include "reports/format.h"
#include "reports/gate.h"
#include "reports/report_file.h"
#include "tests/reports/synthetic_run.h"

using namespace moeprof;
using nlohmann::ordered_json;

namespace {

// Total and churn a fixed distance above the activation peak.
ordered_json run(const std::string& name, uint64_t act) {
  return moeprof::testing::synthetic_run(name, act, act + 1000, act + 5000);
}

std::string doc_text(std::vector<ordered_json> runs) {
  ordered_json d;
  d["schema_version"] = 1;
  d["generator"] = "test";
  d["runs"] = runs;
  return d.dump();
}

reports::ReportFile report(std::vector<ordered_json> runs) {
  auto f = reports::parse_report(doc_text(std::move(runs)), "r.json");
  REQUIRE(f.is_ok());
  return *f;
}

}  // namespace

TEST_CASE("gate: a failed run fails, in the current report and in the baseline", "[gate][evidence]") {
  auto base = report({run("baseline", 2296)});
  ordered_json failed = run("baseline", 2296);  // equal figures: they used to pass
  failed["extra"]["error"] = "layer 1 moe: out of memory";
  auto cur = report({failed});
  const auto r = reports::run_gate(base, cur, {});
  CHECK_FALSE(r.passed());
  CHECK(r.failed_runs == 1);
  CHECK(r.regressions == 0);
  CHECK(reports::gate_verdict(r, {}) == "moeprof gate: FAIL: 1 failed run (3 checks, 1 runs; rel-tol 0, abs-tol 0 B)");
  REQUIRE(r.notes.size() == 1);
  CHECK(r.notes[0] == "current run baseline failed (layer 1 moe: out of memory): its figures are not evidence");
  // --allow-incomplete and tolerances do not excuse it.
  reports::GateOptions lax;
  lax.allow_incomplete = lax.allow_improvement = lax.allow_config_change = true;
  lax.abs_tol = kMaxBytes;
  CHECK_FALSE(reports::run_gate(base, cur, lax).passed());
  CHECK_FALSE(reports::run_gate(cur, base, {}).passed());
}

TEST_CASE("gate: JUnit and JSON carry every evidence issue as a failure", "[gate][evidence]") {
  auto base = report({run("baseline", 2296)});
  ordered_json failed = run("baseline", 2296);
  failed["extra"]["error"] = "interrupted by SIGTERM";
  failed["tokens"] = 200;
  failed["truncated"] = true;
  auto cur = report({failed});
  const auto r = reports::run_gate(base, cur, {});
  REQUIRE(r.issues.size() == 3);
  CHECK(r.issues[0].kind == "failed_run");
  CHECK(r.issues[1].kind == "workload_change");
  CHECK(r.issues[2].kind == "incomplete_trace");
  const std::string junit = reports::gate_junit(r, {});
  // 3 checks that pass (equal figures) and 3 issues that fail: CI that reads only JUnit sees them.
  CHECK(junit.find("<testsuite name=\"moeprof-gate\" tests=\"6\" failures=\"3\"") != std::string::npos);
  CHECK(junit.find("name=\"failed_run\" time=\"0\">\n      <failure message=\"current run baseline failed (interrupted by SIGTERM)") !=
        std::string::npos);
  const auto j = reports::gate_json(r, {});
  CHECK(j["passed"] == false);
  CHECK(j["failed_runs"] == 1);
  CHECK(j["workload_changes"] == 1);
  CHECK(j["issues"].size() == 3);
  CHECK(j["issues"][1]["kind"] == "workload_change");
  CHECK(j["issues"][1]["failed"] == true);
}

TEST_CASE("gate: another model, token count, layer count or TP degree fails unless allowed", "[gate][evidence]") {
  auto base = report({run("baseline", 2296)});
  for (const auto& [key, value] : std::vector<std::pair<std::string, ordered_json>>{
           {"model", "deepseek-v3"}, {"tokens", 8192}, {"layers", 2}, {"tp_size", 4}, {"tp_rank", 1}}) {
    INFO(key);
    ordered_json c = run("baseline", 2296);
    c[key] = value;
    auto cur = report({c});
    const auto r = reports::run_gate(base, cur, {});
    CHECK_FALSE(r.passed());
    CHECK(r.config_changes == 1);
    CHECK(reports::gate_verdict(r, {}).rfind("moeprof gate: FAIL: 1 workload difference (", 0) == 0);
    reports::GateOptions allow;
    allow.allow_config_change = true;
    const auto a = reports::run_gate(base, cur, allow);
    CHECK(a.passed());
    REQUIRE(a.notes.size() == 1);
    CHECK(a.notes[0].find("(allowed by --allow-config-change)") != std::string::npos);
  }
  // Mode and backend stay notes.
  ordered_json c = run("baseline", 2296);
  c["backend"] = "meta";
  CHECK(reports::run_gate(base, report({c}), {}).passed());
}

TEST_CASE("gate: tolerances are range-checked and never saturate", "[gate][evidence]") {
  CHECK(reports::parse_abs_tol("0").value() == 0u);
  CHECK(reports::parse_abs_tol("9223372036854775807").value() == kMaxBytes);
  for (const char* bad : {"18446744073709551616", "9223372036854775808", "-1", "1e9", "", "12a", "99999999999999999999"}) {
    INFO(bad);
    auto r = reports::parse_abs_tol(bad);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == ErrorCode::kBadInput);
    CHECK(r.status().message() == std::string("--abs-tol ") + bad + ": must be a whole number of bytes in [0, 2^63-1]");
  }
  reports::GateOptions o;
  for (double rel : {-0.1, 1.5, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    o.rel_tol = rel;
    CHECK(reports::validate_gate_options(o).code() == ErrorCode::kBadInput);
  }
  o.rel_tol = 1.0;
  CHECK(reports::validate_gate_options(o).is_ok());
  o.rel_tol = 0;
  o.abs_tol = kMaxBytes + 1;
  CHECK(reports::validate_gate_options(o).message() == "--abs-tol 9223372036854775808: must be at most 2^63-1 bytes");
}

TEST_CASE("gate: figures at the byte limit are exact, beyond it the report is bad input", "[gate][evidence]") {
  auto zero = report({run("r", 0)});
  auto max = report({run("r", kMaxBytes - 5000)});
  const auto up = reports::run_gate(zero, max, {});
  const auto* c = &up.checks.at(2);  // churn: 5000 -> 2^63-1
  CHECK(c->metric == "churn_bytes");
  CHECK(c->delta == std::numeric_limits<int64_t>::max() - 5000);
  const auto down = reports::run_gate(max, zero, {});
  CHECK(down.checks.at(2).delta == -(std::numeric_limits<int64_t>::max() - 5000));  // negating used to overflow
  const std::string md = reports::gate_markdown(down, {});
  CHECK(md.find("| r | churn_bytes | 9,223,372,036,854,775,807 B | 5,000 B | -9,223,372,036,854,770,807 B |") != std::string::npos);
  CHECK(reports::gate_junit(down, {}).find("shrank by 9,223,372,036,854,770,807 (") != std::string::npos);

  std::string text = doc_text({run("r", 1)});
  const auto over = reports::parse_report(doc_text({run("r", uint64_t{1} << 63)}), "over.json");
  REQUIRE_FALSE(over.is_ok());
  CHECK(over.status().message() ==
        "over.json: runs[0] (r): peak_activation_bytes 9223372036854775808 exceeds the limit of 2^63-1 bytes");
  // A number JSON cannot hold in 64 bits: nlohmann throws out_of_range (it escaped as exit 3).
  const std::string huge = std::string(text).replace(text.find("\"peak_activation_bytes\":1"), 25, "\"peak_activation_bytes\":1e400");
  const auto r = reports::parse_report(huge, "huge.json");
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == ErrorCode::kBadInput);
  CHECK(r.status().message().rfind("huge.json: not a valid report: a number out of range (", 0) == 0);
  CHECK(r.status().message().find('\n') == std::string::npos);
  const auto deep = reports::parse_report(std::string(100000, '['), "deep.json");
  REQUIRE_FALSE(deep.is_ok());
  CHECK(deep.status().code() == ErrorCode::kBadInput);
  const auto utf = reports::parse_report(std::string(text).replace(text.find("\"r\""), 3, "\"\xff\""), "utf.json");
  REQUIRE_FALSE(utf.is_ok());
  CHECK(utf.status().message().rfind("utf.json: byte offset ", 0) == 0);
}
