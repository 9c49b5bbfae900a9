// moeprof export TRACE [--out-jsonl F] [--out-perfetto F] [--max-slices N] [--json]
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/status.h"
#include "core/trace_io.h"
#include "core/utf8.h"
#include "reports/format.h"
#include "reports/perfetto.h"
#include "reports/report_file.h"
#include "reports/run_loader.h"

namespace moeprof::cli {

namespace {

struct ExportArgs {
  std::string trace, jsonl, perfetto, stream = "auto";
  size_t max_slices = 20000;
  bool json = false;
};

}  // namespace

void register_export(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ExportArgs>();
  auto* cmd = app.add_subcommand("export", "Convert a trace to JSON lines or to a Perfetto trace (Chrome JSON, ui.perfetto.dev)");
  cmd->footer("Example: moeprof export moeprof-out/baseline.mtrace --out-perfetto baseline.perfetto.json\n"
              "\"-\" as a file is stdout.");
  cmd->add_option("trace", args->trace, "trace file (.mtrace)")->required()->type_name("FILE");
  cmd->add_option("--out-jsonl", args->jsonl, "write a meta line, then one JSON object per record, to this file")->type_name("FILE");
  cmd->add_option("--out-perfetto", args->perfetto,
                  "write a Perfetto trace to this file: a counter per category, the peaks, allocations by scope, markers, kernels")
      ->type_name("FILE");
  cmd->add_option("--max-slices", args->max_slices, "allocation slices kept (the largest)")
      ->check(integer_range(1, 100000000))
      ->type_name("N")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "print what was written (files, records, bytes) as JSON on stdout");
  add_stream_option(cmd, &args->stream);
  cmd->callback([args, exit_code] {
    if (args->jsonl.empty() && args->perfetto.empty()) {
      *exit_code = fail("export", Status::bad_input("nothing to do: give --out-jsonl and/or --out-perfetto"));
      return;
    }
    if (args->json && (args->jsonl == "-" || args->perfetto == "-")) {
      *exit_code = fail("export", Status::bad_input("--json prints on stdout: give --out-jsonl and --out-perfetto a file, not \"-\""));
      return;
    }
    if (args->jsonl == "-" && args->perfetto == "-") {
      *exit_code = fail("export", Status::bad_input("--out-jsonl and --out-perfetto both \"-\": give one of them a file"));
      return;
    }
    for (const auto& [opt, path] : {std::pair<const char*, std::string>{"--out-jsonl", args->jsonl}, {"--out-perfetto", args->perfetto}})
      if (Status st = check_output_not_input(opt, path, {args->trace}, false); !st) {
        *exit_code = fail("export", st);
        return;
      }
    // JSON lines alone stream (auto too); the Perfetto trace needs the run in memory.
    const reports::StreamMode mode = stream_mode(args->stream);
    if (mode == reports::StreamMode::kOn && !args->perfetto.empty()) {
      *exit_code = fail("export", Status::bad_input("--out-perfetto needs the whole trace in memory: drop --stream on"));
      return;
    }
    const bool stream_jsonl = args->perfetto.empty() && mode != reports::StreamMode::kOff;
    std::string run_name;  // a streamed export's run: the trace's meta name, else the file stem (as load_run names it)
    planner::AnalyzeOptions aopts;
    aopts.keep_lifetimes = true;
    reports::LoadedRun loaded;
    reports::LoadedRun* run = &loaded;
    if (!stream_jsonl) {
      auto r = reports::load_run(args->trace, aopts);
      if (!r) {
        *exit_code = fail("export", r.status());
        return;
      }
      loaded = std::move(r).value();
    }
    uint64_t records = run->trace.records.size();
    auto jsonl_to = [&](std::ostream& os) -> Status {
      if (!stream_jsonl) {
        write_jsonl(run->trace, os);
        return os ? Status::ok() : Status::run_failure("writing the JSON lines failed");
      }
      RunMeta meta;
      auto n = write_jsonl_stream(args->trace, os, &meta);
      if (!n) return n.status();
      records = *n;
      run_name = meta.name.empty() ? std::filesystem::path(args->trace).stem().string() : meta.name;
      return Status::ok();
    };
    nlohmann::ordered_json written = nlohmann::ordered_json::array();
    if (!args->jsonl.empty()) {
      if (args->jsonl == "-") {
        // Streamed (a copy could be larger than the trace), then checked: output lost to a full
        // disk or a closed pipe is never exit 0.
        Status st = jsonl_to(std::cout);
        // A failed write to stdout is said as every subcommand says it (cli::write_stdout).
        if (Status w = write_stdout(""); !w || !st) st = !w ? w : Status::run_failure("writing to standard output failed");
        if (!st) {
          std::cout.clear();
          *exit_code = fail("export", st);
          return;
        }
      } else {
        if (Status st = write_file_replacing(args->jsonl, jsonl_to); !st) {
          *exit_code = fail("export", st);
          return;
        }
        note("export", "wrote {}", args->jsonl);
      }
      written.push_back({{"format", "jsonl"}, {"path", args->jsonl}, {"records", records}});
    }
    if (!args->perfetto.empty()) {
      reports::PerfettoOptions popts;
      popts.max_slices = args->max_slices;
      std::vector<reports::PerfettoRun> runs = {{run->analysis.meta.name, &run->trace, &run->analysis}};
      const std::string text = reports::perfetto_json(runs, popts);
      Status st = reports::write_text_file(args->perfetto, text);
      if (!st) {
        *exit_code = fail("export", st);
        return;
      }
      if (args->perfetto != "-") note("export", "wrote {} ({})", args->perfetto, reports::format_bytes(text.size()));
      written.push_back({{"format", "perfetto"}, {"path", args->perfetto}, {"bytes", text.size()}});
    }
    if (args->json) {
      nlohmann::ordered_json j = {{"trace", args->trace}, {"run", stream_jsonl ? valid_utf8(run_name) : run->analysis.meta.name}, {"records", records},
                                  {"written", written}};
      if (Status st = write_stdout(reports::json_text(j, 2) + "\n"); !st) {
        *exit_code = fail("export", st);
        return;
      }
    }
    *exit_code = kExitOk;
  });
}

}  // namespace moeprof::cli
