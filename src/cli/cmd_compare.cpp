// moeprof compare A B [--json]: how run B (candidate) differs from run A (baseline).
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/status.h"
#include "reports/format.h"
#include "reports/json_report.h"
#include "reports/run_loader.h"
#include "reports/text_report.h"
#include "reports/whatif_report.h"
#include "planner/whatif.h"

#include <optional>

namespace moeprof::cli {

namespace {

struct CompareArgs {
  std::string a, b, predicted_by;
  bool json = false;
  size_t top = 20;
};

}  // namespace

void register_compare(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<CompareArgs>();
  auto* cmd = app.add_subcommand("compare", "Compare two traces: peak, per-category, per-scope and allocation differences");
  cmd->add_option("baseline", args->a, "baseline trace (A)")->required();
  cmd->add_option("candidate", args->b, "candidate trace (B); deltas are B - A")->required();
  cmd->add_flag("--json", args->json, "print the comparison as JSON (the report's comparison object)");
  cmd->add_option("--top", args->top, "entries listed per table")->check(CLI::PositiveNumber);
  cmd->add_option("--predicted-by", args->predicted_by,
                  "also predict the candidate's peak from the baseline trace with these what-if rules and show it beside "
                  "the measured one");
  cmd->callback([args, exit_code] {
    std::vector<planner::Rule> rules;
    if (!args->predicted_by.empty()) {
      auto r = planner::load_rules(args->predicted_by);
      if (!r) {
        *exit_code = fail("compare", r.status());
        return;
      }
      rules = std::move(r).value();
    }
    planner::AnalyzeOptions aopts;
    aopts.keep_lifetimes = false;
    aopts.timeline_points = 0;
    planner::AnalyzeOptions base_opts = aopts;
    base_opts.keep_lifetimes = base_opts.keep_event_index = !args->predicted_by.empty();
    auto a = reports::load_run(args->a, base_opts);
    if (!a) {
      fail("compare", a.status());
      *exit_code = a.status().exit_code();
      return;
    }
    auto b = reports::load_run(args->b, aopts);
    if (!b) {
      fail("compare", b.status());
      *exit_code = b.status().exit_code();
      return;
    }
    std::optional<nlohmann::ordered_json> prediction;
    if (!args->predicted_by.empty()) {
      auto w = planner::what_if(a->analysis, rules, planner::WhatIfOptions{0, 0, 0});
      if (!w) {
        *exit_code = fail("compare", w.status());
        return;
      }
      prediction = reports::prediction_json(*w, b->analysis, args->predicted_by);
    }
    std::vector<planner::RunAnalysis> runs = {std::move(a->analysis), std::move(b->analysis)};
    auto names = reports::unique_run_names(runs);
    planner::Comparison cmp = planner::compare(runs[0], runs[1]);
    cmp.baseline_name = names[0];
    cmp.candidate_name = names[1];
    reports::ReportOptions ropts;
    ropts.list_limit = args->top;
    auto j = reports::make_comparison_json(cmp, ropts);
    if (prediction) j["predicted"] = *prediction;
    if (args->json) {
      if (Status st = write_stdout(j.dump(2) + "\n"); !st) {
        *exit_code = fail("compare", st);
        return;
      }
    } else {
      std::string text = reports::comparison_text(j, args->a, args->b);
      if (prediction) text += "\n" + reports::prediction_text(*prediction);
      if (Status st = write_stdout(text); !st) {
        *exit_code = fail("compare", st);
        return;
      }
    }
    *exit_code = kExitOk;
  });
}

}  // namespace moeprof::cli
