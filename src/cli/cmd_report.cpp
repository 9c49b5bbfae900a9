// moeprof report TRACE... [--json] [--out-json F] [--out-md F] [--out-html F] [--out-perfetto F] [--name NAME...]
// The versioned JSON report (docs/report.md) and its renderings. --json prints the JSON report on
// stdout; the --out-* options write files; with neither, the Markdown goes to stdout.
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/status.h"
#include "reports/format.h"
#include "reports/json_report.h"
#include "reports/html_report.h"
#include "reports/markdown_report.h"
#include "reports/perfetto.h"
#include "reports/run_loader.h"

namespace moeprof::cli {

namespace {

struct ReportArgs {
  std::vector<std::string> traces;
  std::vector<std::string> names;
  std::string out_json, out_md, out_html, out_perfetto, compare_baseline, stream = "auto";
  bool json = false, ranks = false;
  size_t top = 20;
  size_t max_slices = 20000;
  size_t max_allocations = 6000;
  CategoryArgs categories;
};

}  // namespace

void register_report(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ReportArgs>();
  auto* cmd = app.add_subcommand("report", "The JSON report of one or more traces and its renderings: Markdown, the HTML page, Perfetto");
  cmd->footer("Example: moeprof report baseline.mtrace reuse.mtrace --out-html report.html --out-md report.md\n"
              "Without --json or an --out-* option the Markdown goes to stdout; \"-\" as a file is stdout.");
  cmd->add_option("traces", args->traces, "trace files (.mtrace), one run each (the ranks of one run joined by commas)")
      ->required()
      ->type_name("FILE");
  cmd->add_flag("--ranks", args->ranks, "the traces are the ranks of one run: one merged run");
  cmd->add_flag("--json", args->json, "print the JSON report on stdout");
  cmd->add_option("--out-json", args->out_json, "write the JSON report to this file")->type_name("FILE");
  cmd->add_option("--out-md", args->out_md, "write the Markdown report to this file")->type_name("FILE");
  cmd->add_option("--out-html", args->out_html, "write the single-file HTML page to this file")->type_name("FILE");
  cmd->add_option("--out-perfetto", args->out_perfetto, "write a Perfetto trace (Chrome JSON) of every run to this file")
      ->type_name("FILE");
  // One value per --name: the traces after it are not names.
  cmd->add_option("--name", args->names, "run names, one per trace, in order (--name A --name B) [default: the trace's run name, else its file stem]")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->type_name("NAME");
  cmd->add_option("--compare-baseline", args->compare_baseline, "compare every other run against this run [default: with two runs, the first]")
      ->type_name("NAME");
  cmd->add_option("--top", args->top, "live allocations and scopes listed per run")
      ->check(integer_range(1, 1000000))
      ->type_name("N")
      ->capture_default_str();
  cmd->add_option("--max-allocations", args->max_allocations,
                  "allocations listed one by one per run in the memory timeline (the largest; the rest summarized, exact at the peak)")
      ->check(integer_range(1, 100000000))
      ->type_name("N")
      ->capture_default_str();
  cmd->add_option("--max-slices", args->max_slices, "allocation slices per run in the Perfetto trace (the largest)")
      ->check(integer_range(1, 100000000))
      ->type_name("N")
      ->capture_default_str();
  add_category_options(cmd, &args->categories);
  add_stream_option(cmd, &args->stream);
  cmd->callback([args, exit_code] {
    auto cats = category_options(args->categories);
    if (!cats) {
      *exit_code = fail("report", cats.status());
      return;
    }
    std::vector<std::vector<std::string>> runs;
    if (args->ranks) {
      runs.emplace_back();
      for (const auto& t : args->traces)
        for (auto& p : reports::split_run_argument(t)) runs.back().push_back(std::move(p));
    } else {
      for (const auto& t : args->traces) runs.push_back(reports::split_run_argument(t));
    }
    if (!args->names.empty() && args->names.size() != runs.size()) {
      *exit_code = fail("report", Status::bad_input(fmt::format("--name given {} time(s) for {} run(s)", args->names.size(), runs.size())));
      return;
    }
    for (const std::string* f : {&args->out_json, &args->out_md, &args->out_html, &args->out_perfetto}) {
      if (args->json && *f == "-") {
        *exit_code = fail("report", Status::bad_input("--json prints on stdout: give the --out-* options a file, not \"-\""));
        return;
      }
    }
    {
      int to_stdout = 0;
      for (const auto& [opt, f] : {std::pair<const char*, const std::string*>{"--out-json", &args->out_json}, {"--out-md", &args->out_md},
                                   {"--out-html", &args->out_html}, {"--out-perfetto", &args->out_perfetto}}) {
        to_stdout += *f == "-";
        Status st = check_output_not_input(opt, *f, args->traces);
        if (st) st = check_output_writable(opt, *f);
        if (!st) {
          *exit_code = fail("report", st);
          return;
        }
      }
      if (to_stdout > 1) {
        *exit_code = fail("report", Status::bad_input("more than one --out-* option is \"-\": stdout takes one; give the others a file"));
        return;
      }
    }
    planner::AnalyzeOptions aopts;
    aopts.keep_lifetimes = true;  // the per-allocation timeline (memory_timeline) and the Perfetto slices
    aopts.alloc_groups = runs.size() > 1;  // what compare() matches the runs by
    std::vector<reports::LoadedRun> loaded;
    for (size_t i = 0; i < runs.size(); ++i) {
      reports::LoadOptions lo;
      lo.analyze = aopts;
      lo.name = args->names.empty() ? "" : args->names[i];
      lo.categories = *cats;
      lo.stream = stream_mode(args->stream);
      lo.needs_memory = args->out_perfetto.empty() ? "" : "--out-perfetto";
      lo.prefers_memory = "the per-allocation timeline (memory_timeline)";
      auto run = reports::load_run(runs[i], lo);
      if (!run) {
        *exit_code = fail("report", run.status());
        return;
      }
      loaded.push_back(std::move(run).value());
    }
    std::vector<planner::RunAnalysis> analyses;
    for (auto& l : loaded) analyses.push_back(std::move(l.analysis));  // not copied: every lifetime is in there
    reports::ReportOptions ropts;
    ropts.top_entries = args->top;
    ropts.top_scopes = args->top;
    ropts.compare_baseline = args->compare_baseline;
    ropts.memory_timeline.max_allocations = args->max_allocations;
    auto doc = reports::make_report(analyses, ropts);
    if (!doc) {
      *exit_code = fail("report", doc.status());
      return;
    }
    bool any = args->json;
    auto write = [&](const std::string& path, const std::string& text) {
      if (path.empty()) return true;
      any = true;
      Status st = reports::write_text_file(path, text);
      if (!st) {
        *exit_code = fail("report", st);
        return false;
      }
      note("report", "wrote {} ({})", path, reports::format_bytes(text.size()));
      return true;
    };
    if (!write(args->out_json, reports::report_text(*doc))) return;
    if (!write(args->out_md, reports::report_markdown(*doc))) return;
    if (!write(args->out_html, reports::report_html(*doc))) return;
    if (!args->out_perfetto.empty()) {
      auto names = reports::unique_run_names(analyses);
      std::vector<reports::PerfettoRun> pruns;
      for (size_t i = 0; i < loaded.size(); ++i) pruns.push_back({names[i], &loaded[i].trace, &analyses[i]});
      reports::PerfettoOptions popts;
      popts.max_slices = args->max_slices;
      if (!write(args->out_perfetto, reports::perfetto_json(pruns, popts))) return;
    }
    Status st = Status::ok();
    if (args->json) st = write_stdout(reports::report_text(*doc));
    else if (!any) st = write_stdout(reports::report_markdown(*doc));
    *exit_code = st ? kExitOk : fail("report", st);
  });
}

}  // namespace moeprof::cli
