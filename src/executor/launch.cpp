#include "executor/launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

namespace moeprof {
namespace {

volatile sig_atomic_t g_interrupted = 0;
void on_interrupt(int sig) { g_interrupted = sig; }

std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  if (last.size() > 300) last = last.substr(0, 300) + "...";
  return last;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
                                  strsignal(WTERMSIG(status)) + ")";
  return "stopped (status " + std::to_string(status) + ")";
}

}  // namespace

Status run_rank_processes(const std::vector<RankProcess>& ranks, const LaunchOptions& options) {
  if (ranks.empty()) return Status::bad_input("no ranks to launch");
  std::vector<pid_t> pids(ranks.size(), -1);
  std::vector<bool> done(ranks.size(), false);
  struct sigaction sa {}, old_int{}, old_term{};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  g_interrupted = 0;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  auto restore = [&] {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  };
  auto signal_all = [&](int sig) {
    for (size_t i = 0; i < pids.size(); ++i)
      if (pids[i] > 0 && !done[i]) ::kill(pids[i], sig);
  };
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankProcess& rp = ranks[r];
    if (rp.argv.empty()) {
      signal_all(SIGKILL);
      restore();
      return Status::bad_input("rank " + std::to_string(r) + ": empty command");
    }
    const int fd = ::open(rp.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      signal_all(SIGKILL);
      restore();
      return Status::bad_input("cannot create " + rp.log_path + ": " + std::strerror(errno));
    }
    std::vector<char*> argv;
    for (const auto& a : rp.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::execvp(argv[0], argv.data());
      const std::string msg = std::string("cannot start ") + argv[0] + ": " + std::strerror(errno) + "\n";
      (void)!::write(STDERR_FILENO, msg.data(), msg.size());
      ::_exit(127);
    }
    ::close(fd);
    if (pid < 0) {
      signal_all(SIGKILL);
      restore();
      return Status::run_failure(std::string("fork failed: ") + std::strerror(errno));
    }
    pids[r] = pid;
  }

  int failed = -1, failed_status = 0;
  size_t remaining = ranks.size();
  std::chrono::steady_clock::time_point failed_at;
  int escalation = 0;  // 0: waiting, 1: SIGTERM sent, 2: SIGKILL sent
  while (remaining > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (size_t r = 0; r < pids.size(); ++r) {
        if (pids[r] != pid || done[r]) continue;
        done[r] = true;
        --remaining;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && failed < 0) {
          failed = static_cast<int>(r);
          failed_status = status;
          failed_at = std::chrono::steady_clock::now();
        }
      }
      continue;
    }
    if (pid < 0 && errno != EINTR && errno != 0) break;  // no children left
    if (g_interrupted && escalation == 0) {
      signal_all(SIGTERM);
      escalation = 1;
      failed_at = std::chrono::steady_clock::now();
    }
    if (failed >= 0 || g_interrupted) {
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - failed_at).count();
      if (escalation == 0 && waited > options.grace_seconds) {
        signal_all(SIGTERM);
        escalation = 1;
      } else if (escalation == 1 && waited > 2 * options.grace_seconds) {
        signal_all(SIGKILL);
        escalation = 2;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  restore();
  if (g_interrupted && failed < 0)
    return Status::run_failure("interrupted (signal " + std::to_string(g_interrupted) + "): every rank was stopped");
  if (failed >= 0) {
    const std::string line = last_line(ranks[static_cast<size_t>(failed)].log_path);
    return Status::run_failure("rank " + std::to_string(failed) + " " + describe(failed_status) +
                               (line.empty() ? std::string() : ": " + line) + " (log: " +
                               ranks[static_cast<size_t>(failed)].log_path + "); the other ranks were stopped");
  }
  return Status::ok();
}

}  // namespace moeprof
