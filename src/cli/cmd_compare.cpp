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
#include "reports/whatif_report.h"
#include "planner/whatif.h"

#include <optional>

namespace moeprof::cli {

namespace {

struct CompareArgs {
  std::string a, b, predicted_by;
  CategoryArgs categories;
  bool json = false;
  size_t top = 20;
};

void print_compare_text(const nlohmann::ordered_json& c) {
  using namespace reports;
  auto row = [](const char* what, uint64_t b, uint64_t c, int64_t d) {
    fmt::print("  {:<16} {:>16} {:>16} {:>16}  {} ({})\n", what, with_commas(static_cast<int64_t>(b)), with_commas(static_cast<int64_t>(c)),
               with_commas(d), format_delta_bytes(d), format_percent(d, b));
  };
  fmt::print("{} (candidate) vs {} (baseline)\n", c["candidate"].get<std::string>(), c["baseline"].get<std::string>());
  fmt::print("  {:<16} {:>16} {:>16} {:>16}\n", "bytes", "baseline", "candidate", "delta");
  row("peak activation", c["baseline_peak_activation_bytes"].get<uint64_t>(), c["candidate_peak_activation_bytes"].get<uint64_t>(),
      c["peak_activation_delta_bytes"].get<int64_t>());
  row("peak total", c["baseline_peak_total_bytes"].get<uint64_t>(), c["candidate_peak_total_bytes"].get<uint64_t>(),
      c["peak_total_delta_bytes"].get<int64_t>());
  fmt::print("  {:<16} {:>16} {:>16} {:>16}  {}\n", "churn", "", "", with_commas(c["churn_delta_bytes"].get<int64_t>()),
             format_delta_bytes(c["churn_delta_bytes"].get<int64_t>()));
  fmt::print("  {:<16} {:>16} {:>16} {:>+16}\n", "allocations", "", "", c["allocations_delta"].get<int64_t>());
  fmt::print("\nlive at the activation peak, by category (delta):\n");
  for (const auto& [cat, v] : c["live_at_peak_delta_by_category"].items()) {
    if (v.get<int64_t>()) fmt::print("  {:<14} {}\n", cat, format_delta_bytes(v.get<int64_t>()));
  }
  if (!c["scope_deltas"].empty()) {
    fmt::print("\nscope high-water deltas:\n");
    for (const auto& s : c["scope_deltas"]) {
      std::string name = s["scope"].get<std::string>();
      fmt::print("  {:>12}  {}\n", format_delta_bytes(s["delta_bytes"].get<int64_t>()), name.empty() ? "(unscoped)" : name);
    }
  }
  for (const char* key : {"only_in_baseline", "only_in_candidate"}) {
    if (c[key].empty()) continue;
    fmt::print("\nallocations only in the {} ({}):\n", std::string(key).substr(8), format_bytes(c[std::string(key) + "_bytes"].get<uint64_t>()));
    for (const auto& g : c[key]) {
      fmt::print("  {:>5} x {:>12}  {} {}\n", g["count"].get<uint64_t>(), format_bytes(g["bytes"].get<uint64_t>()),
                 g["scope"].get<std::string>(), g["name"].get<std::string>());
    }
  }
}

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
  add_category_options(cmd, &args->categories);
  cmd->callback([args, exit_code] {
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
    auto a = reports::load_run(args->a, base_opts, "", *cats);
    if (!a) {
      fail("compare", a.status());
      *exit_code = a.status().exit_code();
      return;
    }
    auto b = reports::load_run(args->b, aopts, "", *cats);
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
    // A truncated, failed or empty input is said first (text) and in "warnings" (JSON): the
    // deltas of a lower bound are not a comparison.
    std::vector<std::string> warnings;
    for (const auto& [which, run] : {std::pair<const char*, const planner::RunAnalysis*>{"baseline", &a->analysis},
                                     {"candidate", &b->analysis}})
      for (auto& w : run_warnings(*run)) warnings.push_back(std::string(which) + " " + w);
    std::vector<planner::RunAnalysis> runs = {std::move(a->analysis), std::move(b->analysis)};
    auto names = reports::unique_run_names(runs);
    planner::Comparison cmp = planner::compare(runs[0], runs[1]);
    cmp.baseline_name = names[0];
    cmp.candidate_name = names[1];
    reports::ReportOptions ropts;
    ropts.list_limit = args->top;
    auto j = reports::make_comparison_json(cmp, ropts);
    if (prediction) j["predicted"] = *prediction;
    j["warnings"] = warnings;
    if (args->json) {
      if (Status st = write_stdout(j.dump(2) + "\n"); !st) {
        *exit_code = fail("compare", st);
        return;
      }
    } else {
      for (const auto& w : warnings) fmt::print("warning: {}\n", w);
      print_compare_text(j);
      if (prediction) std::cout << "\n" << reports::prediction_text(*prediction);
      std::cout.flush();
    }
    *exit_code = kExitOk;
  });
}

}  // namespace moeprof::cli
