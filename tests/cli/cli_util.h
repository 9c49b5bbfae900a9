// Runs the built moeprof binary with shell-quoted arguments, capturing exit code, stdout, stderr.
#pragma once

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/reports/test_util.h"

namespace moeprof::testing {

struct CliResult {
  int rc = -1;
  std::string out, err;
};

inline CliResult run_cli(const std::string& args) {
  static std::filesystem::path dir = temp_dir("cli_io");
  std::string out = (dir / "stdout").string(), err = (dir / "stderr").string();
  std::string cmd = std::string("'") + MOEPROF_BINARY_DIR + "/src/cli/moeprof' " + args + " >'" + out + "' 2>'" + err + "'";
  int st = std::system(cmd.c_str());
  CliResult r;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

inline size_t count_lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace moeprof::testing
