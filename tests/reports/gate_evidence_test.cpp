// The gate trusts no bad evidence (issue 14): a failed run fails it in either report, another
// workload (model, tokens, layers, TP) fails unless --allow-config-change, tolerances are
// range-checked (2^64 does not saturate), figures are exact up to 2^63-1 bytes and the reader
// refuses what lies beyond (1e400, 2^64-1) as bad input in one line.
#include <catch2/catch.hpp>

#include <functional>
#include <limits>
#include <tuple>

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
  d["generator"] = "moeprof test";
  d["runs"] = runs;
  d["comparison"] = nullptr;
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
  // Mode, backend and device stay notes.
  ordered_json c = run("baseline", 2296);
  c["backend"] = "meta";
  c["device_name"] = "NVIDIA H100 80GB HBM3";
  const auto notes = reports::run_gate(base, report({c}), {});
  CHECK(notes.passed());
  CHECK(notes.notes.size() >= 1);
}

TEST_CASE("gate: another EP layout, routing or serving workload fails unless allowed, and a missing key is a difference", "[gate][evidence]") {
  ordered_json b = run("baseline", 2296);
  b["extra"]["routing"] = "uniform";
  b["extra"]["ep_buffers"] = "exact";
  auto base = report({b});
  struct Case {
    const char* what;
    std::function<void(ordered_json&)> change;
  };
  const std::vector<Case> cases = {
      {"extra.ep_size", [](ordered_json& c) { c["extra"]["ep_size"] = "4"; }},   // absent in the baseline: EP 1
      {"extra.ep_rank", [](ordered_json& c) { c["extra"]["ep_rank"] = "1"; }},   // absent: rank 0
      {"extra.dp_attention", [](ordered_json& c) { c["extra"]["dp_attention"] = "true"; }},
      {"extra.routing", [](ordered_json& c) { c["extra"]["routing"] = "zipf:1.2"; }},
      {"extra.ep_buffers", [](ordered_json& c) { c["extra"]["ep_buffers"] = "worst-case"; }},
      {"layers", [](ordered_json& c) { c.erase("layers"); }},
      {"serving", [](ordered_json& c) { c["serving"] = {{"requests", 8}, {"output_tokens", 160}}; }},
  };
  for (const Case& k : cases) {
    INFO(k.what);
    ordered_json c = b;
    k.change(c);
    const auto r = reports::run_gate(base, report({c}), {});
    CHECK_FALSE(r.passed());
    CHECK(r.config_changes == 1);
    REQUIRE(r.notes.size() >= 1);
    CHECK(r.notes[0].find(std::string(k.what) + " differs") != std::string::npos);
    reports::GateOptions allow;
    allow.allow_config_change = true;
    CHECK(reports::run_gate(base, report({c}), allow).passed());
  }
  // Two serving runs: their requests, output tokens, chunk, page and pool are the workload.
  ordered_json sb = b;
  sb["serving"] = {{"requests", 8}, {"output_tokens", 160}, {"chunked_prefill_size", 8192}, {"page_size", 1}, {"kv_pool_tokens", 5000},
                   {"pool_sizing", {{"method", "kv-tokens"}}}};
  for (const char* key : {"requests", "output_tokens", "chunked_prefill_size", "page_size", "kv_pool_tokens"}) {
    INFO(key);
    ordered_json sc = sb;
    sc["serving"][key] = 7;
    const auto r = reports::run_gate(report({sb}), report({sc}), {});
    CHECK(r.config_changes == 1);
    CHECK_FALSE(r.passed());
  }
  CHECK(reports::run_gate(report({sb}), report({sb}), {}).passed());
  // A pool from --mem-fraction-static follows the device's free memory: its fraction is the
  // workload, its tokens are not.
  ordered_json fb = sb;
  fb["serving"]["pool_sizing"] = {{"method", "mem-fraction-static"}, {"mem_fraction_static", 0.88}};
  ordered_json fc = fb;
  fc["serving"]["kv_pool_tokens"] = 5123;
  CHECK(reports::run_gate(report({fb}), report({fc}), {}).passed());
  fc["serving"]["pool_sizing"]["mem_fraction_static"] = 0.85;
  CHECK(reports::run_gate(report({fb}), report({fc}), {}).config_changes == 1);
  CHECK(reports::run_gate(report({sb}), report({fb}), {}).config_changes == 1);  // another sizing
}

TEST_CASE("gate: --rel-tol is the decimal as written, so a change exactly at the limit passes", "[gate][evidence]") {
  struct Case {
    const char* text;
    uint64_t num, den;
  };
  for (const Case& c : {Case{"0.29", 29, 100}, Case{"2.9e-1", 29, 100}, Case{".5", 1, 2}, Case{"1", 1, 1}, Case{"0", 0, 1},
                        Case{"0.000", 0, 1}, Case{"1.000", 1, 1}, Case{"0.9999999999999999", 9999999999999999, 10000000000000000},
                        Case{"5e-18", 5, 1000000000000000000}}) {
    INFO(c.text);
    reports::GateOptions o;
    REQUIRE(reports::parse_rel_tol(c.text, &o).is_ok());
    // .5 is 5/10: compare as fractions.
    CHECK(static_cast<unsigned __int128>(o.rel_num) * c.den == static_cast<unsigned __int128>(c.num) * o.rel_den);
  }
  for (const char* bad : {"", "-0", "-0.1", "1.0000001", "2", "1e-400", "0.1234567890123456789", "abc", "0.1.2", "1e", "nan", "inf", " 0.1"}) {
    INFO(bad);
    reports::GateOptions o;
    const Status st = reports::parse_rel_tol(bad, &o);
    CHECK(st.code() == ErrorCode::kBadInput);
    CHECK(st.message() == std::string("--rel-tol ") + bad + ": must be a decimal fraction of the baseline from 0 to 1 with at most 18 decimal places");
  }
  // 129,000 against 100,000 at 0.29: 29,000 B allowed, exactly the delta (floating point gave 28,999).
  for (const auto& [b, c, tol, pass] : std::vector<std::tuple<uint64_t, uint64_t, const char*, bool>>{
           {100000, 129000, "0.29", true}, {100000, 129001, "0.29", false}, {100, 129, "0.29", true}, {100, 157, "0.57", true},
           {kMaxBytes / 4, kMaxBytes / 2 - 1, "1", true}, {1000000000, 1000000000 + 333333335, "0.333333335", true},
           {1000000000, 1000000000 + 333333336, "0.333333335", false}}) {
    INFO(b << " " << c << " " << tol);
    reports::GateOptions o;
    o.metrics = {"peak_activation_bytes"};
    REQUIRE(reports::parse_rel_tol(tol, &o).is_ok());
    CHECK(reports::run_gate(report({run("r", b)}), report({run("r", c)}), o).passed() == pass);
  }
}

TEST_CASE("gate: a report without a comparison key, or from another generator, is bad input", "[gate][evidence]") {
  ordered_json d;
  d["schema_version"] = 1;
  d["generator"] = "moeprof test";
  d["runs"] = ordered_json::array({run("baseline", 2296)});  // (a one-element brace list is an array with GCC, a copy with clang)
  auto no_cmp = reports::parse_report(d.dump(), "r.json");
  REQUIRE_FALSE(no_cmp.is_ok());
  CHECK(no_cmp.status().message().find("missing comparison (an object, or null)") != std::string::npos);
  d["comparison"] = nullptr;
  CHECK(reports::parse_report(d.dump(), "r.json").is_ok());
  d["generator"] = "foo";
  auto other = reports::parse_report(d.dump(), "r.json");
  REQUIRE_FALSE(other.is_ok());
  CHECK(other.status().message().find("generator \"foo\" does not start with \"moeprof \"") != std::string::npos);
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
