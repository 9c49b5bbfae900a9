// libmoeprof_inject.so: traces an unmodified program.
//   CUDA_INJECTION64_PATH=libmoeprof_inject.so  -> the driver calls InitializeInjection() at cuInit;
//                                                 it starts a CuptiTracer for this process.
//   NVTX_INJECTION64_PATH=libmoeprof_inject.so  -> NVTX calls InitializeInjectionNvtx2() at the
//                                                 first NVTX call; it routes NVTX to CUPTI so the
//                                                 tracer sees the program's ranges.
// Configuration comes from the environment (profiler/trace_paths.h); `moeprof trace` sets it.
// Only these two symbols are exported (the rest is linked with --exclude-libs,ALL).
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>

#include <cupti.h>

#include "core/version.h"
#include "profiler/cupti_tracer.h"
#include "profiler/trace_paths.h"

extern "C" CUptiResult cuptiNvtxInitialize2(const void* get_export_table);

namespace {

using moeprof::profiler::CuptiTracer;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != 0 ? std::string(v) : fallback;
}

std::string command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (char& c : raw)
    if (c == 0) c = ' ';
  while (!raw.empty() && raw.back() == ' ') raw.pop_back();
  if (raw.size() > 2000) raw = raw.substr(0, 2000) + "...";
  return raw;
}

std::string program_name(const std::string& cmd) {
  std::string first = cmd.substr(0, cmd.find(' '));
  size_t slash = first.rfind('/');
  return slash == std::string::npos ? first : first.substr(slash + 1);
}

std::string allocator_note() {
  std::string conf = env_or("PYTORCH_CUDA_ALLOC_CONF", "");
  if (conf.find("backend:cudaMallocAsync") != std::string::npos)
    return "PYTORCH_CUDA_ALLOC_CONF selects cudaMallocAsync: PyTorch tensors are individual "
           "stream-ordered allocation records";
  return "under PyTorch's default caching allocator only its segments are visible (large "
         "cudaMalloc blocks), not tensors; trace with --torch-async "
         "(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync) for tensor-level records";
}

void write_error_file(const std::string& trace_path, const std::string& msg) {
  std::string p = trace_path + ".error";
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  std::string line = msg + "\n";
  ssize_t n = ::write(fd, line.data(), line.size());
  (void)n;
  ::close(fd);
}

std::once_flag g_init_once;
CuptiTracer* g_tracer = nullptr;  // intentionally leaked: stopped by the tracer's atexit hook

void start_tracer() {
  const long pid = static_cast<long>(getpid());
  std::string out = env_or(moeprof::profiler::kEnvTraceOut, "");
  std::string path;
  if (out.empty()) {
    path = "moeprof." + std::to_string(pid) + moeprof::profiler::kTraceExt;
  } else {
    std::string root = env_or(moeprof::profiler::kEnvTraceRootPid, "");
    path = (root == std::to_string(pid)) ? out : moeprof::profiler::per_process_trace_path(out, pid);
  }
  std::string cmd = command_line();
  moeprof::RunMeta meta;
  meta.name = program_name(cmd);
  meta.mode = "traced";
  meta.backend = "cupti";
  meta.moeprof_version = moeprof::kVersion;
  meta.extra["command"] = cmd;
  meta.extra["ppid"] = std::to_string(static_cast<long>(getppid()));
  meta.extra["injected"] = "CUDA_INJECTION64_PATH";
  meta.extra["allocator_note"] = allocator_note();
  if (env_or(moeprof::profiler::kEnvTorchAsync, "") == "1") meta.extra["torch_async"] = "true";
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  if (cvd != nullptr) meta.extra["cuda_visible_devices"] = cvd;

  moeprof::profiler::TracerOptions opt;
  opt.kernels = env_or(moeprof::profiler::kEnvTraceKernels, "0") == "1";
  opt.uses = env_or(moeprof::profiler::kEnvTraceUses, "0") == "1";
  if (!moeprof::profiler::parse_stack_mode(env_or(moeprof::profiler::kEnvTraceStacks, "none"), &opt.stacks))
    opt.stacks = moeprof::profiler::StackMode::kNone;
  opt.install_signal_handlers = env_or(moeprof::profiler::kEnvTraceSignals, "1") != "0";
  opt.flush_at_exit = true;
  auto t = CuptiTracer::start(path, meta, opt);
  if (!t.is_ok()) {
    std::string msg = "moeprof-inject[" + std::to_string(pid) + "]: not tracing this process: " +
                      t.status().message();
    std::fprintf(stderr, "%s\n", msg.c_str());
    write_error_file(path, msg);
    return;
  }
  g_tracer = std::move(t).value().release();
  if (env_or("MOEPROF_TRACE_VERBOSE", "0") == "1")
    std::fprintf(stderr, "moeprof-inject[%ld]: tracing into %s\n", pid, path.c_str());
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  std::call_once(g_init_once, start_tracer);
  return 1;  // never fail the program's cuInit because of the tracer
}

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(const void* get_export_table) {
  return cuptiNvtxInitialize2(get_export_table) == CUPTI_SUCCESS ? 1 : 0;
}
