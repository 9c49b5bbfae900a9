// Subcommand registration. Each cmd_*.cpp defines one register_* function; main.cpp calls them.
// A subcommand's callback stores its exit code in `*exit_code` (see README "Exit codes").
#pragma once

#include <CLI/CLI.hpp>

namespace moeprof::cli {

void register_plan(CLI::App& app, int* exit_code);
void register_arena(CLI::App& app, int* exit_code);
void register_compare(CLI::App& app, int* exit_code);
void register_report(CLI::App& app, int* exit_code);
void register_gate(CLI::App& app, int* exit_code);
void register_export(CLI::App& app, int* exit_code);
void register_run(CLI::App& app, int* exit_code);
void register_devices(CLI::App& app, int* exit_code);
void register_import(CLI::App& app, int* exit_code);
void register_fit(CLI::App& app, int* exit_code);
void register_budget(CLI::App& app, int* exit_code);
#ifdef MOEPROF_HAVE_CUDA
void register_trace(CLI::App& app, int* exit_code);
#endif

}  // namespace moeprof::cli
