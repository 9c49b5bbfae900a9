// moeprof compare A B [--json] [--out-md FILE]: how run B differs from run A (the baseline), with
// the live-at-peak diff tensor by tensor.
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/status.h"
#include "reports/format.h"
#include "reports/json_report.h"
#include "reports/markdown_report.h"
#include "reports/report_file.h"
#include "reports/run_loader.h"
#include "reports/text_report.h"
#include "reports/whatif_report.h"
#include "planner/whatif.h"

#include <optional>

namespace moeprof::cli {

namespace {

struct CompareArgs {
  std::string a, b, predicted_by, out_md, stream = "auto";
  CategoryArgs categories;
  bool json = false;
  size_t top = 20;
};

}  // namespace

void register_compare(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<CompareArgs>();
  auto* cmd = app.add_subcommand("compare", "Compare two traces: both runs' figures, the live-at-peak diff tensor by tensor, scopes, allocations");
  cmd->footer("Example: moeprof compare moeprof-out/baseline.mtrace moeprof-out/reuse.mtrace --out-md diff.md");
  cmd->add_option("baseline", args->a, "trace A, the baseline (.mtrace; the ranks of one run joined by commas)")->required()->type_name("FILE");
  cmd->add_option("candidate", args->b, "trace B; every change is B - A")->required()->type_name("FILE");
  cmd->add_flag("--json", args->json, "print the comparison as JSON on stdout (the report's comparison object)");
  cmd->add_option("--out-md", args->out_md, "write the comparison as Markdown to this file")->type_name("FILE");
  cmd->add_option("--top", args->top, "entries listed per table")->check(integer_range(1, 1000000))->type_name("N")->capture_default_str();
  cmd->add_option("--predicted-by", args->predicted_by,
                  "also predict B's peak from trace A with these what-if rules and show it beside the measured one")
      ->type_name("RULES");
  add_category_options(cmd, &args->categories);
  add_stream_option(cmd, &args->stream);
  cmd->callback([args, exit_code] {
    if (args->json && args->out_md == "-") {
      *exit_code = fail("compare", Status::bad_input("--json prints on stdout: give the --out-* options a file, not \"-\""));
      return;
    }
    if (Status st = check_output_not_input("--out-md", args->out_md, {args->a, args->b}); !st) {
      *exit_code = fail("compare", st);
      return;
    }
    auto cats = category_options(args->categories);
    if (!cats) {
      *exit_code = fail("compare", cats.status());
      return;
    }
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
    reports::LoadOptions la;
    la.analyze = base_opts;
    la.categories = *cats;
    la.stream = stream_mode(args->stream);
    la.needs_memory = args->predicted_by.empty() ? "" : "--predicted-by";
    reports::LoadOptions lb = la;
    lb.analyze = aopts;
    lb.needs_memory.clear();
    auto a = reports::load_run(reports::split_run_argument(args->a), la);
    if (!a) {
      *exit_code = fail("compare", a.status());
      return;
    }
    auto b = reports::load_run(reports::split_run_argument(args->b), lb);
    if (!b) {
      *exit_code = fail("compare", b.status());
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
    // A failed, truncated or empty input is said first (text, Markdown) and in "warnings" (JSON):
    // the deltas of a lower bound are not a comparison.
    std::vector<std::string> warnings;
    reports::ReportOptions wopts;
    wopts.top_entries = wopts.top_scopes = wopts.list_limit = 1;
    wopts.include_timeline = wopts.include_memory_timeline = false;
    std::vector<nlohmann::ordered_json> run_json;
    for (size_t i = 0; i < runs.size(); ++i) {
      run_json.push_back(reports::make_run_json(runs[i], names[i], wopts));
      for (auto& w : reports::run_warnings(run_json.back())) warnings.push_back(std::string(i == 0 ? "baseline " : "candidate ") + w);
    }
    // Another workload (as the gate says): the changes are those of the workload, not a change of
    // memory behaviour.
    if (auto diff = reports::workload_differences(run_json[0], run_json[1]); !diff.empty()) {
      std::string what;
      for (const auto& d : diff) what += (what.empty() ? "" : ", ") + d;
      warnings.push_back("A and B run different workloads (" + what + "): the changes below are the workloads' difference, "
                         "not a change of memory behaviour");
    }
    planner::Comparison cmp = planner::compare(runs[0], runs[1], args->top);  // lists only --top of each
    cmp.baseline_name = names[0];
    cmp.candidate_name = names[1];
    reports::ReportOptions ropts;
    ropts.list_limit = args->top;
    auto j = reports::make_comparison_json(cmp, ropts);
    if (prediction) j["predicted"] = *prediction;
    j["warnings"] = warnings;
    if (!args->out_md.empty()) {
      if (Status st = reports::write_text_file(args->out_md, reports::comparison_markdown(j)); !st) {
        *exit_code = fail("compare", st);
        return;
      }
      if (args->out_md != "-") note("compare", "wrote {}", args->out_md);
    }
    if (args->json) {
      if (Status st = write_stdout(reports::json_text(j, 2) + "\n"); !st) {
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
