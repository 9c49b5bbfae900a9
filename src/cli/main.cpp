// moeprof: memory profiler and buffer planner for large-model inference.
#include <cstdio>
#include <exception>

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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    // CLI11 reports usage errors with its own codes (100+); an invalid option value is bad input.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::ValidationError) ||
        e.get_exit_code() == static_cast<int>(CLI::ExitCodes::ConversionError))
      return moeprof::kExitBadInput;
    return rc;
  } catch (const std::exception& e) {
    // Library code reports errors as Status; anything thrown is a bug or an exhausted resource.
    std::fflush(stdout);
    std::fprintf(stderr, "moeprof: unexpected error: %s\n", e.what());
    return moeprof::kExitRunFailure;
  }
  std::fflush(stdout);
  return exit_code;
}
