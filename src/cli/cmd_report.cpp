// moeprof report TRACE... [--json OUT] [--markdown OUT] [--html OUT] [--perfetto OUT] [--name NAME...]
// Writes the versioned JSON report (docs/report.md) and its renderings. With no output option the
// Markdown rendering goes to stdout. "-" as a path means stdout.
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/status.h"
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
  std::string json, markdown, html, perfetto, compare_baseline;
  size_t top = 20;
  size_t max_slices = 20000;
  CategoryArgs categories;
};

}  // namespace

void register_report(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ReportArgs>();
  auto* cmd = app.add_subcommand("report", "Write the JSON report (and Markdown, HTML, Perfetto renderings) of one or more traces");
  cmd->add_option("traces", args->traces, "trace files (.mtrace), one run each")->required();
  cmd->add_option("--json", args->json, "write the JSON report here");
  cmd->add_option("--markdown", args->markdown, "write the Markdown report here");
  cmd->add_option("--html", args->html, "write the self-contained HTML report here");
  cmd->add_option("--perfetto", args->perfetto, "write a Chrome JSON trace (Perfetto UI) of all runs here");
  cmd->add_option("--name", args->names, "run names, one per trace (default: the trace's run name, else its file stem)");
  cmd->add_option("--compare-baseline", args->compare_baseline, "compare every other run against this run");
  cmd->add_option("--top", args->top, "live allocations and scopes listed per run")->check(CLI::PositiveNumber);
  cmd->add_option("--max-slices", args->max_slices, "allocation slices per run in the Perfetto export")->check(CLI::PositiveNumber);
  add_category_options(cmd, &args->categories);
  cmd->callback([args, exit_code] {
    auto cats = category_options(args->categories);
    if (!cats) {
      *exit_code = fail("report", cats.status());
      return;
    }
    if (!args->names.empty() && args->names.size() != args->traces.size()) {
      *exit_code = fail("report", Status::bad_input(fmt::format("--name given {} time(s) for {} trace(s)", args->names.size(), args->traces.size())));
      return;
    }
    planner::AnalyzeOptions aopts;
    aopts.keep_lifetimes = !args->perfetto.empty();
    std::vector<reports::LoadedRun> loaded;
    for (size_t i = 0; i < args->traces.size(); ++i) {
      auto run = reports::load_run(args->traces[i], aopts, args->names.empty() ? "" : args->names[i], *cats);
      if (!run) {
        *exit_code = fail("report", run.status());
        return;
      }
      loaded.push_back(std::move(run).value());
    }
    std::vector<planner::RunAnalysis> analyses;
    for (const auto& l : loaded) analyses.push_back(l.analysis);
    reports::ReportOptions ropts;
    ropts.top_entries = args->top;
    ropts.top_scopes = args->top;
    ropts.compare_baseline = args->compare_baseline;
    auto doc = reports::make_report(analyses, ropts);
    if (!doc) {
      *exit_code = fail("report", doc.status());
      return;
    }
    bool any = false;
    auto write = [&](const std::string& path, const std::string& text) {
      if (path.empty()) return true;
      any = true;
      Status st = reports::write_text_file(path, text);
      if (!st) {
        *exit_code = fail("report", st);
        return false;
      }
      if (path != "-") fmt::print(stderr, "moeprof report: wrote {}\n", path);
      return true;
    };
    if (!write(args->json, doc->dump(2) + "\n")) return;
    if (!write(args->markdown, reports::report_markdown(*doc))) return;
    if (!write(args->html, reports::report_html(*doc))) return;
    if (!args->perfetto.empty()) {
      auto names = reports::unique_run_names(analyses);
      std::vector<reports::PerfettoRun> pruns;
      for (size_t i = 0; i < loaded.size(); ++i) pruns.push_back({names[i], &loaded[i].trace, &loaded[i].analysis});
      reports::PerfettoOptions popts;
      popts.max_slices = args->max_slices;
      if (!write(args->perfetto, reports::perfetto_json(pruns, popts))) return;
    }
    if (!any) {
      if (Status st = write_stdout(reports::report_markdown(*doc)); !st) {
        *exit_code = fail("report", st);
        return;
      }
    }
    *exit_code = kExitOk;
  });
}

}  // namespace moeprof::cli
