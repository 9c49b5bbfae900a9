// moeprof plan TRACE [--json] [--top N] [--arena [--arena-time-limit S] [--arena-out-csv FILE]]: the memory
// analysis of one trace.
#include <cstdio>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/status.h"
#include "reports/format.h"
#include "planner/arena.h"
#include "planner/arena_csv.h"
#include "planner/arena_solver.h"
#include "reports/json_report.h"
#include "reports/run_loader.h"
#include "reports/text_report.h"
#include "reports/whatif_report.h"
#include "planner/whatif.h"

namespace moeprof::cli {

namespace {

struct PlanArgs {
  std::vector<std::string> traces;
  std::string stream = "auto";
  bool json = false;
  bool arena = false;
  double arena_time_limit = 1.0;
  std::string arena_out_csv;
  size_t top = 10;
  std::string what_if;  // rule file
  size_t fixes = 0;
  CategoryArgs categories;
};

std::string plan_text(const nlohmann::ordered_json& r) {
  using reports::with_commas;
  std::string out = reports::run_text(r);
  if (r.contains("arena")) {
    const auto& a = r["arena"];
    if (a.contains("arena_bytes")) {
      out += fmt::format("\narena plan for the activation buffers of device {} ({} buffers, {} B alignment):\n",
                         a["device"].get<int>(), a["buffers"].get<uint64_t>(), a["alignment"].get<uint64_t>());
      out += fmt::format("  LOAD (lower bound) {:>16} B\n", with_commas(a["load_bytes"].get<int64_t>()));
      if (a["lower_bound_bytes"].get<uint64_t>() > a["load_bytes"].get<uint64_t>())
        out += fmt::format("  lower bound        {:>16} B  (raised by the search)\n", with_commas(a["lower_bound_bytes"].get<int64_t>()));
      out += fmt::format("  greedy by size     {:>16} B  (+{:.3f}%)\n", with_commas(a["greedy_by_size_bytes"].get<int64_t>()),
                         a["greedy_by_size_gap_pct"].get<double>());
      out += fmt::format("  arena              {:>16} B  (+{:.3f}%, {}, {}, {:.3f} s{})\n", with_commas(a["arena_bytes"].get<int64_t>()),
                         a["gap_pct"].get<double>(), a["algorithm"].get<std::string>(),
                         a["proven_optimal"].get<bool>() ? "proven optimal" : "not proven optimal", a["seconds"].get<double>(),
                         a["valid"].get<bool>() ? "" : ", INVALID");
    }
  }
  return out;
}

}  // namespace

// The offline arena for the activation buffers of the device with the largest activation peak.
// Time is the replay position, so LOAD equals that device's activation peak. With out_csv, the
// instance and its plan are written as a MiniMalloc CSV (sizes as planned: rounded up to the
// alignment, which the `alignment` column repeats).
Result<nlohmann::ordered_json> arena_json(const planner::RunAnalysis& run, double time_limit_s, const std::string& out_csv) {
  nlohmann::ordered_json a;
  if (run.devices.empty()) {
    if (!out_csv.empty()) return Status::bad_input("--arena-out-csv: the trace has no device with allocations");
    return a;
  }
  const planner::DeviceAnalysis* dev = &run.devices[0];
  for (const auto& d : run.devices)
    if (d.peak_activation_bytes > dev->peak_activation_bytes) dev = &d;
  const auto buffers = planner::buffers_from_lifetimes(run, dev->device, /*activation_only=*/true);
  a["device"] = dev->device;
  a["buffers"] = buffers.size();
  planner::ArenaSolveOptions opt;
  opt.alignment = 256;  // CUDA allocation granularity of cudaMalloc / the stream-ordered pool
  opt.time_limit_s = time_limit_s;
  auto sol = planner::solve_arena(buffers, opt);
  if (!sol) {
    a["error"] = sol.status().message();
    return a;
  }
  planner::ArenaOptions check;
  check.alignment = opt.alignment;
  a["alignment"] = opt.alignment;
  a["load_bytes"] = sol->load_bytes;
  a["lower_bound_bytes"] = sol->lower_bound_bytes;
  a["arena_bytes"] = sol->arena_bytes;
  a["fragmentation_bytes"] = sol->arena_bytes - sol->load_bytes;
  a["gap_pct"] = sol->gap_pct();
  a["greedy_by_size_bytes"] = sol->greedy_by_size_bytes;
  a["greedy_by_size_gap_pct"] =
      sol->load_bytes == 0 ? 0.0
                           : 100.0 * static_cast<double>(sol->greedy_by_size_bytes - sol->load_bytes) / static_cast<double>(sol->load_bytes);
  a["algorithm"] = sol->algorithm;
  // The greedy order that won, or "search" (kept for readers of the earlier greedy-only output).
  a["order"] = sol->algorithm.rfind("greedy:", 0) == 0 ? sol->algorithm.substr(7) : sol->algorithm;
  a["proven_optimal"] = sol->proven_optimal;
  a["seconds"] = sol->seconds;
  a["search_nodes"] = sol->search_nodes;
  a["window_plans"] = sol->window_plans;
  a["lns_moves"] = sol->lns_moves;
  a["core_plans"] = sol->core_plans;
  a["improvements"] = sol->improvements.size();
  a["valid"] = planner::validate_plan(buffers, planner::to_arena_plan(*sol), check).is_ok();
  if (!out_csv.empty()) {
    planner::ArenaCsv csv;
    csv.buffers = buffers;
    csv.columns = {"id", "lower", "upper", "size", "alignment"};
    csv.has_alignment = true;
    for (const planner::Buffer& b : buffers) {
      const uint64_t size = (b.size + opt.alignment - 1) / opt.alignment * opt.alignment;
      csv.rows.push_back({std::to_string(b.id), std::to_string(b.lower), std::to_string(b.upper), std::to_string(size),
                          std::to_string(opt.alignment)});
    }
    if (Status st = planner::write_arena_csv(out_csv, csv, sol->offsets); !st) return st;
  }
  return a;
}

void register_plan(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand("plan", "Analyse one run: peaks, the live set at the peak, scopes, churn, reuse findings, anomalies");
  cmd->footer("Example: moeprof plan moeprof-out/baseline.mtrace --what-if examples/what-if/sglang-pr-25379.rules --fixes\n"
              "Several traces are the ranks of one run: moeprof plan rank0.mtrace rank1.mtrace (or rank0.mtrace,rank1.mtrace).");
  cmd->add_option("traces", args->traces, "trace file (.mtrace); several: the ranks of one run")->required()->type_name("FILE");
  cmd->add_flag("--json", args->json, "print the run as JSON on stdout (the element of a report's runs array)");
  cmd->add_option("--top", args->top, "entries listed in the live set and scope tables")
      ->check(integer_range(1, 1000000))
      ->type_name("N")
      ->capture_default_str();
  cmd->add_flag("--arena", args->arena,
                "also plan one offline arena for the activation buffers of the peak device (the arena solver: greedy "
                "orders, then the exact search, core plans, window plans and neighbourhood search within --arena-time-limit) and "
                "compare it with LOAD, the lower bound");
  cmd->add_option("--arena-time-limit", args->arena_time_limit, "seconds for the arena plan (0: greedy only)")
      ->check(seconds_range(0, 86400))
      ->type_name("SECONDS")
      ->capture_default_str();
  cmd->add_option("--arena-out-csv", args->arena_out_csv,
                  "with --arena: write the buffers and their offsets as a MiniMalloc CSV (input of `moeprof arena`)")
      ->type_name("FILE");
  cmd->add_option("--what-if", args->what_if,
                  "predict the peaks if the rules in this file were applied (docs/planner.md, \"What-if\"; "
                  "e.g. examples/what-if/sglang-pr-25379.rules)")
      ->type_name("RULES");
  cmd->add_option("--fixes", args->fixes, "rank up to N fixes: the single changes that lower the peak most, one after the other (N: 10 when not given)")
      ->expected(0, 1)
      ->check(integer_range(1, 1000))
      ->type_name("N");
  add_category_options(cmd, &args->categories);
  add_stream_option(cmd, &args->stream);
  cmd->callback([args, exit_code, cmd] {
    if (cmd->count("--fixes") > 0 && args->fixes == 0) args->fixes = 10;
    const bool predict = !args->what_if.empty() || args->fixes > 0;
    std::vector<planner::Rule> rules;
    if (!args->what_if.empty()) {
      auto r = planner::load_rules(args->what_if);
      if (!r) {
        *exit_code = fail("plan", r.status());
        return;
      }
      rules = std::move(r).value();
    }
    planner::AnalyzeOptions aopts;
    aopts.keep_lifetimes = args->arena || predict;
    aopts.keep_event_index = predict;
    aopts.alloc_groups = false;  // only compare() matches runs by them
    // The report lists the live set's first --top entries (and counts the rest): the analysis
    // makes only those (a live set of 262,144 allocations took a tenth of a second to list).
    aopts.live_set_limit = args->top;
    auto cats = category_options(args->categories);
    if (!cats) {
      *exit_code = fail("plan", cats.status());
      return;
    }
    reports::LoadOptions lo;
    lo.analyze = aopts;
    lo.categories = *cats;
    lo.stream = stream_mode(args->stream);
    lo.needs_memory = !args->what_if.empty() ? "--what-if" : (args->fixes > 0 ? "--fixes" : (args->arena ? "--arena" : ""));
    std::vector<std::string> paths;
    for (const auto& t : args->traces)
      for (auto& p : reports::split_run_argument(t)) paths.push_back(std::move(p));
    auto run = reports::load_run(paths, lo);
    if (!run) {
      *exit_code = fail("plan", run.status());
      return;
    }
    reports::ReportOptions ropts;
    ropts.top_entries = args->top;
    ropts.top_scopes = args->top;
    ropts.include_timeline = false;
    auto j = reports::make_run_json(run->analysis, run->analysis.meta.name, ropts);
    if (Status st = check_output_not_input("--arena-out-csv", args->arena_out_csv, args->traces); !st) {
      *exit_code = fail("plan", st);
      return;
    }
    if (!args->arena_out_csv.empty() && (!args->arena || args->arena_out_csv == "-")) {
      *exit_code = fail("plan", Status::bad_input(args->arena ? "--arena-out-csv needs a file (stdout holds the report)"
                                                              : "--arena-out-csv needs --arena"));
      return;
    }
    if (args->arena) {
      auto a = arena_json(run->analysis, args->arena_time_limit, args->arena_out_csv);
      if (!a) {
        *exit_code = fail("plan", a.status());
        return;
      }
      j["arena"] = std::move(a).value();
      if (!args->arena_out_csv.empty()) note("plan", "wrote {}", args->arena_out_csv);
    }
    std::string text;
    if (predict) {
      planner::WhatIfOptions wopt;
      wopt.fixes = args->fixes;
      auto w = planner::what_if(run->analysis, rules, wopt);
      if (!w) {
        *exit_code = fail("plan", w.status());
        return;
      }
      j["what_if"] = reports::what_if_json(*w, run->analysis, args->top);
      text = reports::what_if_text(*w, args->top);
    }
    if (args->json) {
      if (Status st = write_stdout(reports::json_text(j, 2) + "\n"); !st) {
        *exit_code = fail("plan", st);
        return;
      }
    } else if (Status st = write_stdout(plan_text(j) + (text.empty() ? "" : "\n" + text)); !st) {
      *exit_code = fail("plan", st);
      return;
    }
    *exit_code = kExitOk;
  });
}

}  // namespace moeprof::cli
