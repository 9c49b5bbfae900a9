// Killed runs keep their records (issue 14). `moeprof run` on the CPU is stopped once its trace
// on disk shows the end of layer 0:
//  - SIGKILL: nothing of moeprof runs after the kill; the trace reads up to about the kill (the
//    writer flushes at least once a second from its own thread), is marked truncated, and plan
//    says so on its first line;
//  - SIGTERM / SIGINT: moeprof closes the trace as a failed run (extra.error "interrupted by
//    SIGTERM"), writes no report, moves the trace from its staging folder into --out and exits
//    128 + the signal.
// While it runs, `moeprof run` writes into OUT/.moeprof-run.<pid> (src/cli/run_output.h).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/trace_io.h"
#include "tests/cli/cli_util.h"

extern char** environ;

namespace fs = std::filesystem;
using namespace moeprof;

namespace {

// The run: the tiny model with enough tokens that a layer takes a while on the CPU reference
// (attention is quadratic in the tokens), one mode.
pid_t start_run(const fs::path& out) {
  const std::string bin = std::string(MOEPROF_BINARY_DIR) + "/src/cli/moeprof";
  std::vector<std::string> args = {bin, "run", "--backend", "cpu", "--model", "tiny", "--tokens", "3072", "--mode", "baseline",
                                   "--quiet", "--out", out.string()};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const std::string log = (out.parent_path() / "run.log").string();
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, bin.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE(rc == 0);
  return pid;
}

bool layer_ended(const Trace& t, const std::string& layer) {
  for (const auto& r : t.records)
    if (r.kind == EventKind::kMarkerEnd && t.str(r.name_id) == layer) return true;
  return false;
}

// Polls the trace as the run writes it until layer.0 has ended on disk; returns the records seen.
size_t wait_for_first_layer(pid_t pid, const std::string& trace) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (std::chrono::steady_clock::now() < deadline) {
    int st = 0;
    REQUIRE(waitpid(pid, &st, WNOHANG) == 0);  // still running: the workload must outlast layer 0
    if (fs::exists(trace)) {
      auto t = read_trace(trace);
      if (t.is_ok() && layer_ended(t.value(), "layer.0")) {
        CHECK(t->truncated);  // still being written: no END frame yet
        CHECK_FALSE(layer_ended(t.value(), "layer.3"));
        return t->records.size();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  FAIL("layer.0 did not end within 300 s");
  return 0;
}

}  // namespace

TEST_CASE("run killed with SIGKILL after its first layer: the trace reads up to the kill, truncated", "[cli][run][signal]") {
  const auto dir = moeprof::testing::temp_dir("signal_kill");
  const fs::path out = dir / "o";
  const pid_t pid = start_run(out);
  // Nothing runs after SIGKILL: the trace stays in the staging folder, and the next run names it.
  const std::string trace = (out / (".moeprof-run." + std::to_string(pid)) / "baseline.mtrace").string();
  const size_t seen = wait_for_first_layer(pid, trace);
  REQUIRE(kill(pid, SIGKILL) == 0);
  int st = 0;
  REQUIRE(waitpid(pid, &st, 0) == pid);
  REQUIRE(WIFSIGNALED(st));
  CHECK(WTERMSIG(st) == SIGKILL);

  auto t = read_trace(trace);
  REQUIRE(t.is_ok());
  CHECK(t->truncated);
  CHECK(t->truncation_note.find("no end frame: the recording process did not close the trace") != std::string::npos);
  CHECK(t->records.size() >= seen);
  CHECK(layer_ended(t.value(), "layer.0"));
  CHECK_FALSE(fs::exists(out / "report.json"));
  CHECK_FALSE(fs::exists(out / "baseline.mtrace"));

  auto plan = moeprof::testing::run_cli("plan '" + trace + "'");
  CHECK(plan.rc == 0);
  CHECK(plan.out.rfind("warning: run baseline: the trace is incomplete at byte offset ", 0) == 0);
  // The next run into the same folder says where the killed run's files are, and keeps them.
  auto next = moeprof::testing::run_cli("run --backend cpu --model tiny --tokens 17 --mode baseline --out '" + out.string() + "'");
  CHECK(next.rc == 0);
  CHECK(next.err.find("moeprof run: " + (out / (".moeprof-run." + std::to_string(pid))).string() +
                      " holds the files of an earlier run whose process was killed; they are kept there\n") != std::string::npos);
  CHECK(read_trace(trace).is_ok());
  CHECK(fs::exists(out / "report.json"));
  CHECK(plan.out.find("the figures cover the part read") != std::string::npos);
  CHECK(plan.out.find("  peak total       0 B") == std::string::npos);
  // Streamed, the same warning comes first.
  auto streamed = moeprof::testing::run_cli("plan --stream on '" + trace + "'");
  CHECK(streamed.rc == 0);
  CHECK(streamed.out.rfind("warning: run baseline: the trace is incomplete at byte offset ", 0) == 0);
}

TEST_CASE("run interrupted by SIGTERM or SIGINT: the trace is closed as a failed run, exit 128 + signal", "[cli][run][signal]") {
  for (int sig : {SIGTERM, SIGINT}) {
    const std::string name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
    INFO(name);
    const auto dir = moeprof::testing::temp_dir("signal_" + name);
    const fs::path out = dir / "o";
    // An earlier, complete run in the same folder: the interrupted run replaces it, since it wrote
    // its own trace, so no earlier report stays beside the failed trace for the gate to read.
    REQUIRE(moeprof::testing::run_cli("run --backend cpu --model tiny --tokens 17 --mode both --quiet --out '" + out.string() + "'").rc == 0);
    REQUIRE(fs::exists(out / "report.json"));
    REQUIRE(fs::exists(out / "reuse.mtrace"));
    const pid_t pid = start_run(out);
    const std::string staged = (out / (".moeprof-run." + std::to_string(pid)) / "baseline.mtrace").string();
    const std::string trace = (out / "baseline.mtrace").string();
    const size_t seen = wait_for_first_layer(pid, staged);
    REQUIRE(kill(pid, sig) == 0);
    int st = 0;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 128 + sig);
    const std::string log = moeprof::testing::slurp((dir / "run.log").string());
    CHECK(log.find("moeprof run: error: interrupted by " + name + "; trace(s) closed and marked failed: " + trace) != std::string::npos);

    auto t = read_trace(trace);
    REQUIRE(t.is_ok());
    CHECK_FALSE(t->truncated);
    CHECK(t->records.size() >= seen);
    CHECK(t->meta.extra.at("error") == "interrupted by " + name);
    CHECK_FALSE(fs::exists(out / "report.json"));
    CHECK_FALSE(fs::exists(out / "reuse.mtrace"));  // the earlier run's, which this run did not write again
    CHECK_FALSE(fs::exists(staged));  // published: the staging folder is gone
    CHECK_FALSE(fs::exists(fs::path(staged).parent_path()));
    auto plan = moeprof::testing::run_cli("plan '" + trace + "'");
    CHECK(plan.rc == 0);
    CHECK(plan.out.rfind("warning: run baseline failed: interrupted by " + name + ": the figures cover only what ran before the failure\n", 0) == 0);
  }
}
