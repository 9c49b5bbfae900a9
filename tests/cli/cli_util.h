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

// `stdout_to`: where stdout goes instead of being captured (e.g. "/dev/full"); out is then empty.
inline CliResult run_cli(const std::string& args, const std::string& stdout_to = "") {
  static std::filesystem::path dir = temp_dir("cli_io");
  std::string out = (dir / "stdout").string(), err = (dir / "stderr").string();
  std::filesystem::remove(out);
  std::string cmd = std::string("'") + MOEPROF_BINARY_DIR + "/src/cli/moeprof' " + args + " >'" + (stdout_to.empty() ? out : stdout_to) +
                    "' 2>'" + err + "'";
  int st = std::system(cmd.c_str());
  CliResult r;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

inline size_t count_lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace moeprof::testing
