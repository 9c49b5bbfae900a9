// The memory-regression gate: compares two JSON reports run by run (matched by name) on byte
// metrics with a relative and an absolute tolerance. Bytes of a deterministic workload do not
// vary, so the defaults are tight (0 and 0) and an unexpected improvement fails too, so that the
// baseline gets updated (docs/gate.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "reports/report_file.h"

namespace moeprof::reports {

struct GateOptions {
  double rel_tol = 0.0;         // fraction of the baseline value (0.01 = 1%), as shown
  // The same fraction exactly, rel_num / rel_den (parse_rel_tol: the decimal as written); the
  // allowed delta is computed from it in integers. rel_den 0: from rel_tol (tests, the API).
  uint64_t rel_num = 0, rel_den = 0;
  uint64_t abs_tol = 0;         // bytes
  bool allow_improvement = false;
  // A current run whose trace was truncated or lost records has figures that are lower bounds:
  // it fails the gate unless this is set.
  bool allow_incomplete = false;
  // A run whose model, tokens, layers or TP (size, rank) differ from the baseline's measured
  // another workload: its figures say nothing about a regression. It fails the gate unless this
  // is set (the differences are then notes).
  bool allow_config_change = false;
  std::vector<std::string> metrics = {"peak_activation_bytes", "peak_total_bytes", "churn_bytes"};
};

enum class GateStatus {
  kPass,         // |delta| <= allowed
  kRegression,   // delta > allowed
  kImprovement,  // delta < -allowed (fails unless allow_improvement)
  kMissing,      // the run is in the baseline and not in the current report
  kNew,          // the run is in the current report and not in the baseline
};
const char* gate_status_name(GateStatus s);

struct GateCheck {
  std::string run;
  std::string metric;
  bool has_baseline = false;
  bool has_current = false;
  uint64_t baseline = 0;
  uint64_t current = 0;
  int64_t delta = 0;        // current - baseline
  uint64_t allowed = 0;     // max(abs_tol, rel_tol * baseline)
  GateStatus status = GateStatus::kPass;
  bool failed = false;      // counts toward the verdict
};

// A finding about a run's evidence rather than its figures: the run failed, its trace is
// incomplete, or it measured another workload. `failed` when it counts toward the verdict.
struct GateRunIssue {
  std::string run;
  std::string kind;     // "failed_run", "incomplete_trace", "workload_change"
  std::string message;  // one line, as in notes
  bool failed = false;
};

struct GateResult {
  std::vector<GateCheck> checks;   // baseline run order, then new runs; metrics in option order
  std::vector<GateRunIssue> issues;  // failed runs, then workload changes, then incomplete traces
  std::vector<std::string> notes;  // e.g. "run reuse: tokens differ (16384 vs 8192)"
  int regressions = 0;
  int improvements = 0;            // all improvements beyond tolerance (allowed or not)
  int missing = 0;                 // checks of runs missing from the current report
  int new_runs = 0;                // checks of runs missing from the baseline
  int incomplete = 0;              // current runs with a truncated trace or dropped records
  int failed_runs = 0;             // runs (of either report) whose run failed (extra.error): always fail
  int config_changes = 0;          // matched runs of another model, tokens, layers or TP
  int failures = 0;
  bool passed() const { return failures == 0; }
};

// Validates option values (metric names; rel_tol finite in [0, 1]; abs_tol <= 2^63-1 bytes);
// kBadInput naming the bad value.
Status validate_gate_options(const GateOptions& opts);
// Parses --abs-tol: a decimal byte count <= 2^63-1 (no sign, no exponent: never saturated).
// --rel-tol as written: a decimal from 0 to 1 ("0.29", ".5", "1", "2.5e-3"), at most 18 decimal
// places; sets rel_tol, rel_num and rel_den.
Status parse_rel_tol(std::string_view text, GateOptions* opts);
Result<uint64_t> parse_abs_tol(std::string_view text);

GateResult run_gate(const ReportFile& baseline, const ReportFile& current, const GateOptions& opts);

// One line: "moeprof gate: PASS (6 checks, 2 runs; rel-tol 0, abs-tol 0 B)" or
// "moeprof gate: FAIL: 1 regression, 1 unexpected improvement (6 checks, ...)".
std::string gate_verdict(const GateResult& r, const GateOptions& opts);
// Verdict as a heading, then a table: run | metric | baseline | current | delta | delta % | allowed | status.
std::string gate_markdown(const GateResult& r, const GateOptions& opts);
// JUnit XML: one <testsuite name="moeprof-gate">, one <testcase> per run x metric.
std::string gate_junit(const GateResult& r, const GateOptions& opts);
// The result for machines (moeprof gate --json): verdict, counts, tolerances and every check
// with exact bytes.
nlohmann::ordered_json gate_json(const GateResult& r, const GateOptions& opts);
// The proposed new baseline: the current report (every run as measured now), pretty-printed.
std::string proposed_baseline(const ReportFile& current);

}  // namespace moeprof::reports
