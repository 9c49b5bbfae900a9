// What every subcommand shares: one error format, notes on stderr, checked writes to stdout.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "reports/run_loader.h"

namespace moeprof::cli {

// Prints "moeprof <cmd>: error: <message>" (one line) on stderr; returns the Status's exit code.
int fail(std::string_view cmd, const Status& st);

// "moeprof <cmd>: <text>" on stderr (progress, files written, notes).
template <typename... Args>
void note(std::string_view cmd, fmt::format_string<Args...> f, Args&&... args) {
  std::fflush(stdout);
  fmt::print(stderr, "moeprof {}: {}\n", cmd, fmt::format(f, std::forward<Args>(args)...));
}

// Writes text to stdout and flushes; a failed write (a closed pipe, a full disk, /dev/full) is a
// kRunFailure, so results are never lost with exit 0.
Status write_stdout(std::string_view text);

// An output file that is one of the command's inputs (the same file, by its path or through a
// link) would be replaced by what is written: refused (kBadInput) before anything is read or
// written. Inputs may be comma-joined lists (rank traces); "-" and empty paths never match.
Status check_output_not_input(std::string_view option, const std::string& out, const std::vector<std::string>& inputs,
                              bool comma_lists = true);

// An output path that cannot be written (a folder, a missing or read-only parent folder), found
// before anything is written, so a command with several outputs never leaves some of them.
Status check_output_writable(std::string_view option, const std::string& out);

// Writes a file through a temporary beside it, renamed over it once complete, so a write that
// fails (an input that cannot be read, a full disk) leaves the earlier file as it was. A path that
// is not a regular file (a device, a pipe) is written directly.
Status write_file_replacing(const std::string& path, const std::function<Status(std::ostream&)>& body);

// Range checks whose error is one short line with the option's real range, e.g.
// "--top: must be an integer from 1 to 1,000,000 (got 0)" (CLI11's own prints the limits of a
// double). A value that is not a number gets the same line.
CLI::Validator integer_range(int64_t lo, int64_t hi);
CLI::Validator seconds_range(double lo, double hi);
// "must be a number from LO to HI (got V)": NaN and infinities are refused (CLI::Range lets NaN by).
CLI::Validator number_range(double lo, double hi);
// "must be a number greater than 0".
CLI::Validator positive_number();

// --categories auto|infer|keep and --category-rules FILE (planner/categories.h), shared by the
// commands that read traces.
struct CategoryArgs {
  std::string mode = "auto";
  std::string rules;
};
void add_category_options(CLI::App* cmd, CategoryArgs* a);
Result<reports::CategoryOptions> category_options(const CategoryArgs& a);

// --stream auto|on|off (reports::StreamMode; docs/planner.md, "Streaming").
void add_stream_option(CLI::App* cmd, std::string* mode);
reports::StreamMode stream_mode(const std::string& mode);

}  // namespace moeprof::cli
