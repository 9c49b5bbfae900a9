// moeprof: memory profiler and buffer planner for large-model inference.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/help_format.h"
#include "core/nearest.h"
#include "core/status.h"
#include "core/utf8.h"
#include "core/version.h"

namespace {

// The subcommand a command line names (its first argument that is one), or "" for none.
std::string subcommand_of(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
      if (sub->get_name() == argv[i]) return argv[i];
    if (argv[i][0] != '-') break;
  }
  return "";
}

// "unknown option '--tokns'; did you mean '--tokens'?" for every argument of `cmd`'s command line
// that looks like an option and that `cmd` does not define.
std::string unknown_options_message(const CLI::App& cmd, int argc, char** argv) {
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd.get_options()) {
    for (const auto& l : o->get_lnames()) names.push_back("--" + l);
    for (const auto& sn : o->get_snames()) names.push_back("-" + sn);
  }
  std::string msg;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.size() < 2 || a[0] != '-' || a == "--") continue;
    const std::string name = a.substr(0, a.find('='));
    if (std::find(names.begin(), names.end(), name) != names.end()) continue;
    msg += (msg.empty() ? "" : "; ") + ("unknown option '" + moeprof::printable(name, 80) + "'") + moeprof::did_you_mean(name, names);
  }
  if (msg.empty()) {
    // Not an option: a positional argument too many.
    return "unexpected argument(s): " + std::string(cmd.remaining().empty() ? "" : moeprof::printable(cmd.remaining().front(), 80));
  }
  return msg;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"moeprof: memory profiler and buffer planner for large-model inference", "moeprof"};
  app.formatter(std::make_shared<moeprof::cli::HelpFormatter>());
  app.set_version_flag("--version", std::string("moeprof ") + moeprof::kVersion);
  app.require_subcommand(1);
  app.footer("Run moeprof SUBCOMMAND --help for the options of each; docs/cli.md has them all.\n"
             "Example: moeprof run --backend meta --model kimi-k2.5 --tokens 16384 --tp 4 --mode all");
  int exit_code = moeprof::kExitOk;
  moeprof::cli::register_run(app, &exit_code);
#ifdef MOEPROF_HAVE_CUDA
  moeprof::cli::register_trace(app, &exit_code);
#endif
  moeprof::cli::register_plan(app, &exit_code);
  moeprof::cli::register_arena(app, &exit_code);
  moeprof::cli::register_compare(app, &exit_code);
  moeprof::cli::register_report(app, &exit_code);
  moeprof::cli::register_gate(app, &exit_code);
  moeprof::cli::register_export(app, &exit_code);
  moeprof::cli::register_devices(app, &exit_code);
  moeprof::cli::register_import(app, &exit_code);
  moeprof::cli::register_fit(app, &exit_code);
  moeprof::cli::register_budget(app, &exit_code);
  // Results on stdout are checked where they are written (cli::write_stdout); this is the last
  // check for any that were not: output lost to a full disk or a closed pipe is never exit 0.
  auto stdout_lost = [&](int code) {
    std::cout.flush();
    errno = 0;
    const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout) || !std::cout;
    if (!failed || code == moeprof::kExitBadInput || code == moeprof::kExitRunFailure) return code;
    const int e = errno;
    const auto subs = app.get_subcommands();
    const std::string who = subs.empty() ? "moeprof" : "moeprof " + subs.front()->get_name();
    std::fprintf(stderr, "%s: error: writing to standard output failed%s%s\n", who.c_str(), e ? ": " : "",
                 e ? std::strerror(e) : "");
    return moeprof::kExitRunFailure;
  };
  // Plain `moeprof` prints the help; a first word that names no subcommand is refused with the
  // nearest names (CLI11 would say "A subcommand is required").
  std::vector<std::string> sub_names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) sub_names.push_back(sub->get_name());
  if (argc == 1) {
    std::fputs(app.help().c_str(), stdout);
    return stdout_lost(moeprof::kExitOk);
  }
  if (argv[1][0] != '-' && std::find(sub_names.begin(), sub_names.end(), argv[1]) == sub_names.end()) {
    std::string known;
    for (const auto& n : sub_names) known += (known.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "moeprof: error: unknown subcommand '%s'%s (subcommands: %s; see moeprof --help)\n",
                 moeprof::printable(argv[1], 80).c_str(), moeprof::did_you_mean(argv[1], sub_names).c_str(), known.c_str());
    return moeprof::kExitBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return stdout_lost(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    return stdout_lost(app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    return stdout_lost(app.exit(e));
  } catch (const CLI::ParseError& e) {
    // Usage errors in the one error format: "moeprof <cmd>: error: <message>", one line.
    const std::string sub = subcommand_of(app, argc, argv);
    const std::string who = sub.empty() ? "moeprof" : "moeprof " + sub;
    std::fflush(stdout);
    std::string message = e.what();
    // An option nobody defined: name it, with the nearest options of the subcommand.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::ExtrasError))
      message = unknown_options_message(sub.empty() ? app : *app.get_subcommand(sub), argc, argv);
    std::fprintf(stderr, "%s: error: %s (see %s --help)\n", who.c_str(), message.c_str(), who.c_str());
    // CLI11 reports usage errors with its own codes (100+); an invalid option value is bad input.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::ValidationError) ||
        e.get_exit_code() == static_cast<int>(CLI::ExitCodes::ConversionError))
      return moeprof::kExitBadInput;
    return e.get_exit_code();
  } catch (const std::exception& e) {
    // Library code reports errors as Status; anything thrown is a bug or an exhausted resource.
    const std::string sub = subcommand_of(app, argc, argv);
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: unexpected: %s\n", sub.empty() ? "moeprof" : ("moeprof " + sub).c_str(), e.what());
    return moeprof::kExitRunFailure;
  }
  return stdout_lost(exit_code);
}
