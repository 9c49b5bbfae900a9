// moeprof gate --baseline B.json --current C.json [--json] [--out-md F] [--out-junit F] [--out-baseline F]:
// the memory-regression gate (docs/gate.md).
// Exit 0 pass, 1 regression (or unexpected improvement, missing or new run), 2 bad input.
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/status.h"
#include "core/utf8.h"
#include "reports/gate.h"
#include "reports/report_file.h"

namespace moeprof::cli {

namespace {

struct GateArgs {
  std::string baseline, current, out_baseline, out_junit, out_md;
  std::string rel_tol = "0";  // parsed by reports::parse_rel_tol (exact: a decimal, not a double)
  std::string abs_tol = "0";  // parsed by reports::parse_abs_tol (CLI11 would saturate 2^64 to UINT64_MAX)
  std::vector<std::string> metrics;  // --metrics as given, one string per use (split here: "," alone is an error)
  bool json = false;
  reports::GateOptions opts;
};

}  // namespace

void register_gate(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<GateArgs>();
  auto* cmd = app.add_subcommand("gate", "Fail when peak memory or churn differs from a baseline report beyond tolerance");
  cmd->footer("Example: moeprof gate --baseline examples/ci/tiny-memory-baseline.json --current moeprof-out/report.json --out-junit gate.xml\n"
              "Exit 0: pass; 1: a regression, an unexpected improvement, a missing or new run; 2: bad input.");
  cmd->add_option("--baseline", args->baseline, "baseline JSON report")->required()->type_name("FILE");
  cmd->add_option("--current", args->current, "current JSON report")->required()->type_name("FILE");
  cmd->add_flag("--json", args->json, "print the verdict and every check as JSON on stdout");
  cmd->add_option("--rel-tol", args->rel_tol, "relative tolerance, a fraction of the baseline from 0 to 1 (0.01 = 1%)")
      ->type_name("X")
      ->capture_default_str();
  cmd->add_option("--abs-tol", args->abs_tol, "absolute tolerance in bytes, a whole number from 0 to 2^63-1")
      ->type_name("BYTES")
      ->capture_default_str();
  cmd->add_flag("--allow-improvement", args->opts.allow_improvement, "do not fail when a metric shrinks beyond tolerance");
  cmd->add_flag("--allow-incomplete", args->opts.allow_incomplete,
                "do not fail when a current run's trace was truncated or dropped records");
  cmd->add_flag("--allow-config-change", args->opts.allow_config_change,
                "do not fail when a run's model, tokens, layers or TP differ from the baseline's (notes only)");
  cmd->add_option("--metrics", args->metrics,
                  "metrics to check, comma-separated: peak_activation_bytes, peak_total_bytes, churn_bytes [default: all three]")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->type_name("LIST");
  cmd->add_option("--out-md", args->out_md, "write the verdict and table as Markdown to this file")->type_name("FILE");
  cmd->add_option("--out-junit", args->out_junit, "write JUnit XML to this file (one testcase per run and metric)")->type_name("FILE");
  cmd->add_option("--out-baseline", args->out_baseline, "write the proposed new baseline (the current report's figures) to this file")
      ->type_name("FILE");
  cmd->callback([args, exit_code] {
    {
      int to_stdout = 0;
      for (const std::string* f : {&args->out_md, &args->out_junit, &args->out_baseline}) to_stdout += *f == "-";
      if (to_stdout > 0 && args->json) {
        *exit_code = fail("gate", Status::bad_input("--json prints on stdout: give the --out-* options a file, not \"-\""));
        return;
      }
      if (to_stdout > 1) {
        *exit_code = fail("gate", Status::bad_input("more than one --out-* option is \"-\": stdout takes one; give the others a file"));
        return;
      }
    }
    // Outputs over the reports read: refused, but for --out-baseline over --baseline (how a change
    // is accepted: the old baseline is read first).
    for (const auto& [opt, path] : {std::pair<const char*, std::string>{"--out-md", args->out_md}, {"--out-junit", args->out_junit},
                                    {"--out-baseline", args->out_baseline}}) {
      std::vector<std::string> inputs = {args->current};
      if (std::string(opt) != "--out-baseline") inputs.push_back(args->baseline);
      if (Status st = check_output_not_input(opt, path, inputs, false); !st) {
        *exit_code = fail("gate", st);
        return;
      }
    }
    if (!args->metrics.empty()) {
      args->opts.metrics.clear();
      for (const std::string& given : args->metrics) {
        size_t p = 0;
        while (true) {
          const size_t c = given.find(',', p);
          const std::string m = given.substr(p, c == std::string::npos ? std::string::npos : c - p);
          if (m != "peak_activation_bytes" && m != "peak_total_bytes" && m != "churn_bytes") {
            *exit_code = fail("gate", Status::bad_input("--metrics " + printable(given) + ": " +
                                                        (m.empty() ? std::string("an empty metric name") : "unknown metric '" + printable(m) + "'") +
                                                        " (peak_activation_bytes, peak_total_bytes, churn_bytes)"));
            return;
          }
          args->opts.metrics.push_back(m);
          if (c == std::string::npos) break;
          p = c + 1;
        }
      }
    }
    if (Status rt = reports::parse_rel_tol(args->rel_tol, &args->opts); !rt) {
      *exit_code = fail("gate", rt);
      return;
    }
    {
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
    // A current run that failed, or whose trace is incomplete, measured part of its workload: its
    // figures cannot be the baseline (the gate would fail every later call on them).
    std::string not_evidence;
    for (const auto& crun : current->runs()) {
      const std::string name = crun.value("name", std::string());
      if (crun.contains("extra") && crun["extra"].is_object() && crun["extra"].contains("error"))
        not_evidence = "current run " + name + " failed";
      else if (not_evidence.empty() && !args->opts.allow_incomplete &&
               (crun.value("truncated", false) || crun.value("dropped_records", uint64_t{0}) > 0))
        not_evidence = "current run " + name + "'s trace is incomplete";
      if (!not_evidence.empty()) break;
    }
    const bool propose = not_evidence.empty();
    if (!propose && !args->out_baseline.empty())
      note("gate", "not writing {}: {}, so its figures cannot be a baseline (an incomplete one can, with --allow-incomplete)",
           args->out_baseline, not_evidence);
    for (const auto& [path, text] : {std::pair{args->out_junit, reports::gate_junit(res, args->opts)}, std::pair{args->out_md, md},
                                     std::pair{propose ? args->out_baseline : std::string(), reports::proposed_baseline(*current)}}) {
      if (path.empty()) continue;
      Status wst = reports::write_text_file(path, text);
      if (!wst) {
        *exit_code = fail("gate", wst);
        return;
      }
      if (path != "-") note("gate", "wrote {}", path);
    }
    std::string out = args->json ? reports::json_text(reports::gate_json(res, args->opts), 2) + "\n"
                                 : reports::gate_verdict(res, args->opts) + "\n\n" + md.substr(md.find('\n') + 2);
    // How to accept an intended change: the current figures become the baseline (never a failed or
    // incomplete run's).
    if (!res.passed() && !args->json && !propose)
      out += "\nThe " + not_evidence + ": run it again (a failed run's figures are never a baseline; an incomplete one's only with "
             "--allow-incomplete).\n";
    else if (!res.passed() && !args->json)
      out += "\nIf the change is intended, make the current figures the baseline and commit it:\n  moeprof gate --baseline " +
             args->baseline + " --current " + args->current + " --out-baseline " + args->baseline +
             (res.config_changes ? " --allow-config-change" : "") + "\n(docs/gate.md, \"Accepting a change\")\n";
    // With an --out-* option on stdout, the verdict goes to stderr (stdout holds that file alone).
    const bool stdout_taken = args->out_md == "-" || args->out_junit == "-" || args->out_baseline == "-";
    if (stdout_taken) {
      std::fputs(out.c_str(), stderr);
    } else if (Status st = write_stdout(out); !st) {
      *exit_code = fail("gate", st);
      return;
    }
    *exit_code = res.passed() ? kExitOk : kExitRegression;
  });
}

}  // namespace moeprof::cli
