// moeprof export TRACE [--jsonl OUT] [--perfetto OUT.json] [--max-slices N]
#include <fstream>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/status.h"
#include "core/trace_io.h"
#include "reports/perfetto.h"
#include "reports/run_loader.h"

namespace moeprof::cli {

namespace {

struct ExportArgs {
  std::string trace, jsonl, perfetto;
  size_t max_slices = 20000;
};

}  // namespace

void register_export(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ExportArgs>();
  auto* cmd = app.add_subcommand("export", "Convert a trace to JSON lines or to a Chrome JSON trace for Perfetto UI");
  cmd->add_option("trace", args->trace, "trace file (.mtrace)")->required();
  cmd->add_option("--jsonl", args->jsonl, "write one JSON object per record here (\"-\" = stdout)");
  cmd->add_option("--perfetto", args->perfetto, "write a Chrome JSON trace (counters, allocation slices, markers) here");
  cmd->add_option("--max-slices", args->max_slices, "allocation slices kept (the largest)")->check(CLI::PositiveNumber);
  cmd->callback([args, exit_code] {
    if (args->jsonl.empty() && args->perfetto.empty()) {
      *exit_code = fail("export", Status::bad_input("nothing to do: give --jsonl and/or --perfetto"));
      return;
    }
    planner::AnalyzeOptions aopts;
    aopts.keep_lifetimes = !args->perfetto.empty();
    if (args->perfetto.empty()) aopts.timeline_points = 0;
    auto run = reports::load_run(args->trace, aopts);
    if (!run) {
      *exit_code = fail("export", run.status());
      return;
    }
    if (!args->jsonl.empty()) {
      if (args->jsonl == "-") {
        write_jsonl(run->trace, std::cout);  // streamed (a copy could be larger than the trace), then checked
        if (Status st = write_stdout(""); !st || !std::cout) {
          std::cout.clear();
          *exit_code = fail("export", st ? Status::run_failure("writing to standard output failed") : st);
          return;
        }
      } else {
        std::ofstream out(args->jsonl, std::ios::binary | std::ios::trunc);
        if (!out) {
          *exit_code = fail("export", Status::bad_input("cannot create " + args->jsonl));
          return;
        }
        write_jsonl(run->trace, out);
        out.close();
        if (!out) {
          *exit_code = fail("export", Status::run_failure("writing " + args->jsonl + " failed"));
          return;
        }
        fmt::print(stderr, "moeprof export: wrote {}\n", args->jsonl);
      }
    }
    if (!args->perfetto.empty()) {
      reports::PerfettoOptions popts;
      popts.max_slices = args->max_slices;
      std::vector<reports::PerfettoRun> runs = {{run->analysis.meta.name, &run->trace, &run->analysis}};
      Status st = reports::write_perfetto(args->perfetto, runs, popts);
      if (!st) {
        *exit_code = fail("export", st);
        return;
      }
      if (args->perfetto != "-") fmt::print(stderr, "moeprof export: wrote {}\n", args->perfetto);
    }
    *exit_code = kExitOk;
  });
}

}  // namespace moeprof::cli
