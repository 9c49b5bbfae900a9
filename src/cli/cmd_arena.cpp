// moeprof arena FILE.csv [--json] [--out-csv OUT.csv] [--time-limit S] [--capacity BYTES]:
// plans one arena for an instance in the MiniMalloc CSV format (planner/arena_csv.h) with the
// arena solver (planner/arena_solver.h). Exit 0 with a plan (within --capacity when given),
// 2 bad input, 3 no plan within the capacity (or a plan that fails the checker: a bug).
#include <cmath>
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/status.h"
#include "planner/arena_csv.h"
#include "planner/arena_solver.h"
#include "reports/format.h"
#include "reports/report_file.h"

namespace moeprof::cli {

namespace {

struct ArenaArgs {
  std::string file;
  bool json = false;
  std::string write_offsets;
  double time_limit = 10.0;
  uint64_t capacity = 0;
};

int fail(const Status& st) { return cli::fail("arena", st); }

std::string bytes(uint64_t b) {
  return fmt::format("{:>14}  ({})", reports::format_bytes(b), reports::format_exact_bytes(b));
}

double over(uint64_t a, uint64_t load) {
  return load == 0 ? 0.0 : 100.0 * (static_cast<double>(a) - static_cast<double>(load)) / static_cast<double>(load);
}

// The improvements over time: all when they are few, else the first three and the last five.
std::string improvements_text(const planner::ArenaSolution& s) {
  std::string out = "  improvements       (time, arena, over LOAD, found by)\n";
  const size_t n = s.improvements.size();
  for (size_t i = 0; i < n; ++i) {
    if (n > 10 && i == 3) out += fmt::format("    ... {} more\n", n - 8);
    if (n > 10 && i >= 3 && i < n - 5) continue;
    const auto& m = s.improvements[i];
    out += fmt::format("    {:>9.3f} s  {:>20}  +{:.3f}%  {}\n", m.seconds, reports::format_exact_bytes(m.arena_bytes),
                       over(m.arena_bytes, s.load_bytes), m.algorithm);
  }
  return out;
}

int run_arena(const ArenaArgs& a) {
  if (!std::isfinite(a.time_limit) || a.time_limit < 0) {
    return fail(Status::bad_input("--time-limit must be a number of seconds >= 0"));
  }
  if (a.json && a.write_offsets == "-") return fail(Status::bad_input("--out-csv - and --json both write to stdout"));
  if (Status st = check_output_not_input("--out-csv", a.write_offsets, {a.file}, false); !st) return fail(st);
  auto csv = planner::read_arena_csv(a.file);
  if (!csv) return fail(csv.status());
  planner::ArenaSolveOptions opt;
  opt.time_limit_s = a.time_limit;
  opt.capacity = a.capacity;
  auto sol = planner::solve_arena(csv->buffers, opt);
  if (!sol) return fail(sol.status().with_context(a.file));
  planner::ArenaOptions check;
  check.capacity = a.capacity != 0 && sol->fits_capacity ? a.capacity : 0;
  const Status valid = planner::validate_plan(csv->buffers, planner::to_arena_plan(*sol), check);
  if (!valid) return fail(Status::run_failure("the plan failed the checker (a solver bug): " + valid.message()));

  if (a.json) {
    nlohmann::ordered_json j;
    j["file"] = a.file;
    j["buffers"] = csv->buffers.size();
    j["components"] = sol->components;
    j["load_bytes"] = sol->load_bytes;
    j["lower_bound_bytes"] = sol->lower_bound_bytes;
    j["arena_bytes"] = sol->arena_bytes;
    j["fragmentation_bytes"] = sol->arena_bytes - sol->load_bytes;
    j["gap_pct"] = sol->gap_pct();
    j["bound_gap_pct"] = over(sol->arena_bytes, sol->lower_bound_bytes);
    j["greedy_by_size_bytes"] = sol->greedy_by_size_bytes;
    j["greedy_by_size_gap_pct"] = over(sol->greedy_by_size_bytes, sol->load_bytes);
    j["algorithm"] = sol->algorithm;
    j["proven_optimal"] = sol->proven_optimal;
    if (a.capacity != 0) {
      j["capacity_bytes"] = a.capacity;
      j["fits_capacity"] = sol->fits_capacity;
    }
    j["valid"] = true;
    j["seconds"] = sol->seconds;
    j["first_answer_seconds"] = sol->first_answer_seconds;
    j["time_limit_seconds"] = a.time_limit;
    j["search_nodes"] = sol->search_nodes;
    j["searches"] = sol->searches;
    j["window_plans"] = sol->window_plans;
    j["lns_moves"] = sol->lns_moves;
    j["core_plans"] = sol->core_plans;
    nlohmann::ordered_json imp = nlohmann::ordered_json::array();
    for (const auto& m : sol->improvements)
      imp.push_back({{"seconds", m.seconds},
                     {"arena_bytes", m.arena_bytes},
                     {"gap_pct", over(m.arena_bytes, sol->load_bytes)},
                     {"algorithm", m.algorithm}});
    j["improvements"] = std::move(imp);
    std::cout << reports::json_text(j, 2) << "\n";
  } else if (a.write_offsets != "-") {
    fmt::print("moeprof arena {}: {} buffers, {} component{}\n", a.file, csv->buffers.size(), sol->components,
               sol->components == 1 ? "" : "s");
    fmt::print("  LOAD (lower bound) {}\n", bytes(sol->load_bytes));
    if (sol->lower_bound_bytes > sol->load_bytes)
      fmt::print("  lower bound        {}  (raised by the search)\n", bytes(sol->lower_bound_bytes));
    fmt::print("  greedy by size     {}  +{:.3f}% over LOAD\n", bytes(sol->greedy_by_size_bytes),
               over(sol->greedy_by_size_bytes, sol->load_bytes));
    fmt::print("  arena              {}  +{:.3f}% over LOAD, {}, {}\n", bytes(sol->arena_bytes), sol->gap_pct(),
               sol->algorithm, sol->proven_optimal ? "proven optimal" : "not proven optimal");
    if (!sol->proven_optimal && sol->lower_bound_bytes > sol->load_bytes)
      fmt::print("  final gap          +{:.3f}% over the lower bound\n", over(sol->arena_bytes, sol->lower_bound_bytes));
    if (a.capacity != 0)
      fmt::print("  capacity           {}  {}\n", bytes(a.capacity), sol->fits_capacity ? "fits" : "DOES NOT FIT");
    fmt::print("  search             {} exact-search nodes, {} neighbourhood moves, {} window plans, {} core plans\n",
               sol->search_nodes, sol->lns_moves, sol->window_plans, sol->core_plans);
    fmt::print("{}", improvements_text(*sol));
    fmt::print("  time               first answer {:.1f} ms, total {:.3f} s (limit {} s)\n", 1e3 * sol->first_answer_seconds,
               sol->seconds, a.time_limit);
  }
  if (!a.write_offsets.empty()) {
    const Status st = planner::write_arena_csv(a.write_offsets, *csv, sol->offsets);
    if (!st) return fail(st);
    if (a.write_offsets != "-") note("arena", "wrote {}", a.write_offsets);
  }
  if (!sol->fits_capacity) {
    return fail(Status::run_failure(fmt::format("no plan within the capacity {} B found (best {} B, lower bound {} B{})",
                                                a.capacity, sol->arena_bytes, sol->lower_bound_bytes,
                                                sol->lower_bound_bytes > a.capacity ? ": none exists" : "")));
  }
  return kExitOk;
}

}  // namespace

void register_arena(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ArenaArgs>();
  auto* cmd = app.add_subcommand(
      "arena", "Plan one arena for buffers given as a MiniMalloc CSV (id,lower,upper,size): offsets, LOAD, lower bound");
  cmd->footer("Example: moeprof arena instance.csv --time-limit 60 --out-csv instance.offsets.csv\n"
              "Exit 0: a plan (within --capacity when given); 2: bad input; 3: no plan within the capacity.");
  cmd->add_option("file", args->file, "instance (CSV, header id,lower,upper,size[,alignment]; [lower, upper) half-open)")
      ->required()
      ->type_name("FILE");
  cmd->add_flag("--json", args->json, "print the result as JSON on stdout");
  cmd->add_option("--out-csv", args->write_offsets, "write the input rows plus an offset column to this file (\"-\": stdout)")
      ->type_name("FILE");
  cmd->add_option("--time-limit", args->time_limit, "seconds for the whole run (0: greedy only)")
      ->check(seconds_range(0, 86400))
      ->type_name("SECONDS")
      ->capture_default_str();
  cmd->add_option("--capacity", args->capacity, "the arena must fit in this many bytes (exit 3 if no plan is found)")
      ->check(integer_range(1, INT64_MAX))
      ->type_name("BYTES");
  cmd->callback([args, exit_code] { *exit_code = run_arena(*args); });
}

}  // namespace moeprof::cli
