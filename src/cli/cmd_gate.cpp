// moeprof gate --baseline B.json --current C.json: the memory-regression gate (docs/gate.md).
// Exit 0 pass, 1 regression (or unexpected improvement, missing or new run), 2 bad input.
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/status.h"
#include "reports/gate.h"
#include "reports/report_file.h"

namespace moeprof::cli {

namespace {

struct GateArgs {
  std::string baseline, current, update_baseline, junit, markdown;
  std::string abs_tol;  // parsed by reports::parse_abs_tol (CLI11 would saturate 2^64 to UINT64_MAX)
  reports::GateOptions opts;
};

}  // namespace

void register_gate(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<GateArgs>();
  auto* cmd = app.add_subcommand("gate", "Fail when peak memory or churn differs from a baseline report beyond tolerance");
  cmd->add_option("--baseline", args->baseline, "baseline JSON report")->required();
  cmd->add_option("--current", args->current, "current JSON report")->required();
  cmd->add_option("--rel-tol", args->opts.rel_tol, "relative tolerance, a fraction of the baseline in [0, 1] (0.01 = 1%)");
  cmd->add_option("--abs-tol", args->abs_tol, "absolute tolerance in bytes (0 to 2^63-1)");
  cmd->add_flag("--allow-improvement", args->opts.allow_improvement, "do not fail when a metric shrinks beyond tolerance");
  cmd->add_flag("--allow-incomplete", args->opts.allow_incomplete,
                "do not fail when a current run's trace was truncated or dropped records");
  cmd->add_flag("--allow-config-change", args->opts.allow_config_change,
                "do not fail when a run's model, tokens, layers or TP differ from the baseline's (notes only)");
  cmd->add_option("--metrics", args->opts.metrics, "metrics to check (comma-separated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"peak_activation_bytes", "peak_total_bytes", "churn_bytes"}));
  cmd->add_option("--update-baseline", args->update_baseline, "write the proposed new baseline (the current report) here");
  cmd->add_option("--junit", args->junit, "write JUnit XML here (one testcase per run x metric)");
  cmd->add_option("--markdown", args->markdown, "write the verdict and table as Markdown here");
  cmd->callback([args, exit_code] {
    if (!args->abs_tol.empty()) {
      auto tol = reports::parse_abs_tol(args->abs_tol);
      if (!tol) {
        *exit_code = fail("gate", tol.status());
        return;
      }
      args->opts.abs_tol = *tol;
    }
    Status st = reports::validate_gate_options(args->opts);
    if (!st) {
      *exit_code = fail("gate", st);
      return;
    }
    auto baseline = reports::read_report(args->baseline);
    if (!baseline) {
      *exit_code = fail("gate", baseline.status().with_context("baseline"));
      return;
    }
    auto current = reports::read_report(args->current);
    if (!current) {
      *exit_code = fail("gate", current.status().with_context("current"));
      return;
    }
    reports::GateResult res = reports::run_gate(*baseline, *current, args->opts);
    std::string md = reports::gate_markdown(res, args->opts);
    if (Status wst = write_stdout(reports::gate_verdict(res, args->opts) + "\n\n" + md.substr(md.find('\n') + 2)); !wst) {
      *exit_code = fail("gate", wst);
      return;
    }
    for (const auto& [path, text] : {std::pair{args->junit, reports::gate_junit(res, args->opts)}, std::pair{args->markdown, md},
                                     std::pair{args->update_baseline, reports::proposed_baseline(*current)}}) {
      if (path.empty()) continue;
      Status wst = reports::write_text_file(path, text);
      if (!wst) {
        *exit_code = fail("gate", wst);
        return;
      }
      fmt::print(stderr, "moeprof gate: wrote {}\n", path);
    }
    *exit_code = res.passed() ? kExitOk : kExitRegression;
  });
}

}  // namespace moeprof::cli
