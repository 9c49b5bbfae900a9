// Process hooks, installed once per process by the first tracer: atexit (flush and close the
// trace of a program that never called stop), fork (a forked child records nothing) and, when
// asked (TracerOptions::install_signal_handlers), signal handlers that flush and close the trace
// before the process dies (only where the program kept the default disposition).
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "profiler/tracer_state.h"

namespace moeprof::profiler::detail {
namespace {

void at_exit_handler() {
  Session* s = g_session.load();
  if (s != nullptr && s->opt.flush_at_exit && !g_forked_child.load()) {
    Status st = stop_session(s, false);
    if (!st.is_ok()) std::fprintf(stderr, "moeprof: closing trace %s: %s\n", s->path.c_str(), st.message().c_str());
  }
}

void at_fork_child() {
  // A forked child must not write into the parent's trace file; it records nothing (a child that
  // exec()s and initializes CUDA gets its own trace through the injection library).
  g_forked_child.store(true);
}

int g_signal_pipe[2] = {-1, -1};
std::atomic<int> g_pending_signal{0};
std::atomic<bool> g_signal_flush_done{false};

bool is_crash_signal(int sig) {
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGABRT || sig == SIGFPE || sig == SIGILL;
}

void signal_handler(int sig) {
  int expected = 0;
  if (!g_pending_signal.compare_exchange_strong(expected, sig)) {
    // A second signal while flushing: give up and die the default way.
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  char c = 1;
  ssize_t n = write(g_signal_pipe[1], &c, 1);
  (void)n;
  if (is_crash_signal(sig)) {
    // The faulting thread cannot continue: wait (bounded) for the watcher to flush, then die.
    for (int i = 0; i < 300 && !g_signal_flush_done.load(); ++i) {
      struct timespec ts = {0, 10 * 1000 * 1000};
      nanosleep(&ts, nullptr);
    }
    signal(sig, SIG_DFL);
    raise(sig);
  }
  // SIGTERM/SIGINT: return; the watcher flushes, closes and re-raises with the default action.
}

void signal_watcher() {
  for (;;) {
    char c = 0;
    ssize_t n = read(g_signal_pipe[0], &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    int sig = g_pending_signal.load();
    Session* s = g_session.load();
    if (s != nullptr && !g_forked_child.load()) (void)stop_session(s, is_crash_signal(sig));
    g_signal_flush_done.store(true);
    if (!is_crash_signal(sig)) {
      signal(sig, SIG_DFL);
      kill(getpid(), sig);
    }
    return;
  }
}

void install_signal_handlers() {
  if (pipe2(g_signal_pipe, O_CLOEXEC) != 0) return;
  const int sigs[] = {SIGTERM, SIGINT, SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
  int installed = 0;
  for (int sig : sigs) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0) continue;
    if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) continue;  // the program's own
    struct sigaction sa {};
    sa.sa_handler = signal_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(sig, &sa, nullptr) == 0) ++installed;
  }
  if (installed > 0) {
    std::thread(signal_watcher).detach();
  }
}

std::once_flag g_process_hooks_once;
std::once_flag g_signal_once;

}  // namespace

void install_process_hooks(bool signals) {
  std::call_once(g_process_hooks_once, [] {
    std::atexit(at_exit_handler);
    pthread_atfork(nullptr, nullptr, at_fork_child);
  });
  if (signals) std::call_once(g_signal_once, install_signal_handlers);
}

}  // namespace moeprof::profiler::detail
