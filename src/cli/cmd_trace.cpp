// moeprof trace [--out FILE] [--report] [--json] [--out-json FILE] [--torch-async] [--kernels] [--uses] -- CMD ARGS...
//
// Runs an unmodified program with libmoeprof_inject.so injected (CUDA_INJECTION64_PATH and
// NVTX_INJECTION64_PATH): every process of the command that initializes CUDA writes its own trace,
// the command's own process to FILE, any other to <FILE stem>.<pid>.mtrace. The library is looked
// up, in order: --inject-lib, $MOEPROF_INJECT_LIB, next to the moeprof binary, ../lib relative to
// it. SIGINT/SIGTERM sent to moeprof are forwarded to the child (a terminal's Ctrl-C already
// reaches it through the process group). Exit code: the child's (128+signal when killed).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/status.h"
#include "core/trace_io.h"
#include "reports/report_file.h"
#include "reports/trace_report.h"
#include "profiler/trace_paths.h"

namespace moeprof::cli {

namespace {

namespace fs = std::filesystem;

struct TraceOptions {
  std::string out = "moeprof.mtrace";
  std::string inject_lib;
  std::string out_json;
  bool report = false;
  bool json = false;
  bool torch_async = false;
  bool kernels = false;
  bool uses = false;
  std::string stacks = "none";
  std::vector<std::string> command;
};

std::atomic<pid_t> g_child{0};

void forward_signal(int sig, siginfo_t* info, void*) {
  // Ctrl-C from the terminal (si_code SI_KERNEL) already went to the whole foreground process
  // group, child included: forwarding it would deliver it twice.
  if (info != nullptr && info->si_code == SI_KERNEL) return;
  pid_t c = g_child.load();
  if (c > 0) kill(c, sig);
}

std::string find_inject_lib(const std::string& explicit_path, std::string* tried) {
  std::vector<fs::path> candidates;
  if (!explicit_path.empty()) candidates.emplace_back(explicit_path);
  if (const char* e = std::getenv("MOEPROF_INJECT_LIB"); e != nullptr && e[0] != 0) candidates.emplace_back(e);
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / "libmoeprof_inject.so");
    candidates.push_back(exe.parent_path() / ".." / "lib" / "libmoeprof_inject.so");
  }
  for (const fs::path& p : candidates) {
    if (!tried->empty()) *tried += ", ";
    *tried += p.string();
    if (fs::exists(p, ec)) return fs::canonical(p, ec).string();
  }
  return {};
}

std::string torch_alloc_conf(const char* current) {
  const std::string want = "backend:cudaMallocAsync";
  std::string conf = current != nullptr ? current : "";
  if (conf.find(want) != std::string::npos) return conf;
  // Drop any other backend:... entry, keep the rest.
  std::string kept;
  size_t pos = 0;
  while (pos <= conf.size()) {
    size_t comma = conf.find(',', pos);
    std::string item = conf.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!item.empty() && item.rfind("backend:", 0) != 0) kept += (kept.empty() ? "" : ",") + item;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return kept.empty() ? want : kept + "," + want;
}

// Traces written by this run: FILE and <stem>.<pid>.mtrace modified since `start`.
std::vector<std::string> written_traces(const std::string& out, fs::file_time_type start,
                                        std::vector<std::string>* errors) {
  std::vector<std::string> found;
  std::error_code ec;
  if (fs::exists(out, ec)) found.push_back(out);
  fs::path stem = profiler::trace_stem(out);
  fs::path dir = stem.parent_path().empty() ? fs::path(".") : stem.parent_path();
  std::string prefix = stem.filename().string() + ".";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    std::string rest = name.substr(prefix.size());
    bool is_trace = rest.size() > 7 && rest.compare(rest.size() - 7, 7, ".mtrace") == 0;
    bool is_error = rest.size() > 6 && rest.compare(rest.size() - 6, 6, ".error") == 0;
    if (!is_trace && !is_error) continue;
    std::string digits = rest.substr(0, rest.find('.'));
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    if (e.last_write_time(ec) < start) continue;
    (is_trace ? found : *errors).push_back(e.path().string());
  }
  if (fs::exists(out + ".error", ec) && fs::last_write_time(out + ".error", ec) >= start)
    errors->push_back(out + ".error");
  return found;
}

int run_trace(TraceOptions o) {
  if (o.command.empty()) {
    return fail("trace", Status::bad_input("no command given (usage: moeprof trace [OPTIONS] -- CMD ARGS...)"));
  }
  if (o.out == "-")  // a trace is a file of frames, read back by seeking; never stdout (as import)
    return fail("trace", Status::bad_input("--out: a trace is written to a file, not to stdout ('-')"));
  std::string tried;
  std::string lib = find_inject_lib(o.inject_lib, &tried);
  if (lib.empty()) {
    return fail("trace", Status::run_failure("libmoeprof_inject.so not found (tried " + tried +
                                             "); pass --inject-lib or set MOEPROF_INJECT_LIB"));
  }
  std::error_code ec;
  std::string out = fs::absolute(o.out, ec).lexically_normal().string();
  if (!fs::path(out).parent_path().empty()) fs::create_directories(fs::path(out).parent_path(), ec);
  fs::remove(out, ec);
  fs::remove(out + ".error", ec);
  if (const char* prev = std::getenv("CUDA_INJECTION64_PATH"); prev != nullptr && prev[0] != 0)
    note("trace", "replacing CUDA_INJECTION64_PATH={}", prev);
  // File times have coarse granularity on some file systems: start a little early.
  auto start = fs::file_time_type::clock::now() - std::chrono::seconds(2);

  std::vector<char*> argv;
  for (std::string& a : o.command) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string conf = o.torch_async ? torch_alloc_conf(std::getenv("PYTORCH_CUDA_ALLOC_CONF")) : "";

  std::fflush(stdout);
  std::fflush(stderr);
  pid_t child = fork();
  if (child < 0) {
    return fail("trace", Status::run_failure(std::string("fork failed: ") + std::strerror(errno)));
  }
  if (child == 0) {
    setenv("CUDA_INJECTION64_PATH", lib.c_str(), 1);
    setenv("NVTX_INJECTION64_PATH", lib.c_str(), 1);
    setenv(profiler::kEnvTraceOut, out.c_str(), 1);
    setenv(profiler::kEnvTraceRootPid, std::to_string(getpid()).c_str(), 1);
    setenv(profiler::kEnvTraceKernels, o.kernels ? "1" : "0", 1);
    if (o.uses) setenv(profiler::kEnvTraceUses, "1", 1);
    else unsetenv(profiler::kEnvTraceUses);
    setenv(profiler::kEnvTraceStacks, o.stacks.c_str(), 1);
    if (o.torch_async) {
      setenv("PYTORCH_CUDA_ALLOC_CONF", conf.c_str(), 1);
      setenv(profiler::kEnvTorchAsync, "1", 1);
    }
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "moeprof trace: error: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  g_child.store(child);
  struct sigaction sa {}, old_int {}, old_term {};
  sa.sa_sigaction = forward_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) {
      status = -1;
      break;
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  g_child.store(0);
  int rc = kExitRunFailure;
  if (status == -1) rc = kExitRunFailure;
  else if (WIFEXITED(status)) rc = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) rc = 128 + WTERMSIG(status);

  std::vector<std::string> errors;
  std::vector<std::string> traces = written_traces(out, start, &errors);
  for (const std::string& e : errors) {
    std::ifstream f(e);
    std::string line;
    std::getline(f, line);
    fail("trace", Status::run_failure(e + ": " + line));
  }
  if (traces.empty()) {
    fail("trace", Status::run_failure(fmt::format("no trace written (command exit {}). Did the program initialize CUDA? "
                                                  "Check that {} loads (LD_LIBRARY_PATH must reach libcupti.so).", rc, lib)));
    return rc != 0 ? rc : kExitRunFailure;
  }
  note("trace", "command exited with {}; {} trace(s):", rc, traces.size());
  std::vector<reports::TracedFile> files;
  for (const std::string& p : traces) {
    auto t = read_trace(p);
    if (!t.is_ok()) {
      std::fprintf(stderr, "  %s: unreadable: %s\n", p.c_str(), t.status().message().c_str());
      continue;
    }
    if (!o.report && !o.json && o.out_json.empty()) {
      std::fprintf(stderr, "  %s (%zu records%s)\n", p.c_str(), t->records.size(), t->truncated ? ", truncated" : "");
      continue;
    }
    files.push_back(reports::analyze_traced_file(p, *t));
    if (o.report) std::fputs(reports::trace_report_text(files.back()).c_str(), stderr);
  }
  if (!o.out_json.empty() || o.json) {
    const std::string text = reports::json_text(reports::make_trace_report(files), 2) + "\n";
    Status st = o.out_json.empty() ? Status::ok() : reports::write_text_file(o.out_json, text);
    if (st && o.json) st = write_stdout(text);
    if (!st) {
      fail("trace", st);
      if (rc == 0) rc = st.exit_code();
    }
  }
  return rc;
}

}  // namespace

void register_trace(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<TraceOptions>();
  CLI::App* cmd = app.add_subcommand(
      "trace", "Trace the device-memory allocations of an unmodified CUDA program (CUPTI injection)");
  cmd->footer(
      "Example: moeprof trace --torch-async --report --out run.mtrace -- python3 infer.py\n"
      "Each process that initializes CUDA writes a trace: the command's to --out, others to "
      "<out stem>.<pid>.mtrace. Exit code: the command's.");
  cmd->add_option("--out,-o", opts->out, "trace file of the command's own process")->type_name("FILE")->capture_default_str();
  cmd->add_flag("--report", opts->report, "print a peak summary of each trace written (on stderr, after the command)");
  cmd->add_flag("--json", opts->json, "print the summaries as JSON on stdout after the command exits");
  cmd->add_option("--out-json", opts->out_json, "write the summaries as JSON to this file")->type_name("FILE");
  cmd->add_flag("--torch-async", opts->torch_async,
                "set PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync so every PyTorch tensor is one "
                "allocation record (without it only caching-allocator segments are visible)");
  cmd->add_flag("--kernels", opts->kernels, "also record kernels (name, start, duration)");
  cmd->add_flag("--uses", opts->uses,
                "also record kernel uses: at each kernel launch, one use event per live device "
                "allocation that a kernel argument points into (first/last use, memory held after "
                "its last use; docs/tracing.md)");
  cmd->add_option("--stacks", opts->stacks,
                  "record the call stack of each allocation: python (the allocating thread's Python frames), native "
                  "(return addresses, symbolized once), both, or none (docs/tracing.md, \"Call stacks\")")
      ->check(CLI::IsMember({"none", "python", "native", "both"}))
      ->capture_default_str();
  cmd->add_option("--inject-lib", opts->inject_lib, "path of libmoeprof_inject.so [default: next to moeprof]")->type_name("FILE");
  cmd->add_option("command", opts->command, "the command to trace and its arguments, after --")->required()->type_name("CMD");
  cmd->callback([opts, exit_code] { *exit_code = run_trace(*opts); });
}

}  // namespace moeprof::cli
