// moeprof: memory profiler and buffer planner for large-model inference.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "core/status.h"
#include "core/version.h"

int main(int argc, char** argv) {
  CLI::App app{"moeprof: memory profiler and buffer planner for large-model inference"};
  app.set_version_flag("--version", std::string("moeprof ") + moeprof::kVersion);
  app.require_subcommand(1);
  // Usage errors in one line (CLI11's default adds a second "Run with --help" line).
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("moeprof: ") + e.what() + " (see --help)\n";
  });
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    // CLI11 reports usage errors with its own codes (100+); an invalid option value is bad input.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::ValidationError) ||
        e.get_exit_code() == static_cast<int>(CLI::ExitCodes::ConversionError))
      return moeprof::kExitBadInput;
    return rc == 0 ? stdout_lost(rc) : rc;  // --help, --version
  } catch (const std::exception& e) {
    // Library code reports errors as Status; anything thrown is a bug or an exhausted resource.
    std::fflush(stdout);
    std::fprintf(stderr, "moeprof: unexpected error: %s\n", e.what());
    return moeprof::kExitRunFailure;
  }
  return stdout_lost(exit_code);
}
