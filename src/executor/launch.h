// `moeprof run --gpus N --launch processes`: one process per TP rank, started and watched here.
// POSIX (fork/exec/waitpid); knows nothing of CUDA or the model, so it is tested on the CPU.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace moeprof {

struct RankProcess {
  std::vector<std::string> argv;  // argv[0] is the program (an absolute path, or found on PATH)
  std::string log_path;           // stdout and stderr of the rank go here
};

struct LaunchOptions {
  // After the first rank fails, the others get this long to exit on their own, then SIGTERM,
  // then (after as long again) SIGKILL.
  double grace_seconds = 5;
};

// Starts every rank, waits for all of them. OK when every rank exits 0. Otherwise the first rank
// to fail (exit code != 0 or a signal) makes the others stop, and the error names it, its exit
// status and the last line of its log: "rank 1 exited with code 4: <line> (log: DIR/rank1.log)".
// Rank processes are killed if this process is interrupted while waiting (SIGINT/SIGTERM are
// forwarded to them).
Status run_rank_processes(const std::vector<RankProcess>& ranks, const LaunchOptions& options = {});

}  // namespace moeprof
