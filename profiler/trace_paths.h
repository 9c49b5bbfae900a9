// Where `moeprof trace` and the injection library put per-process traces. Header-only.
//   MOEPROF_TRACE_OUT=<out>          the traced command's own process writes <out>
//   MOEPROF_TRACE_ROOT_PID=<pid>     that process' pid (set by moeprof trace in the child)
//   any other process (children that initialize CUDA) writes <stem>.<pid>.mtrace, where <stem>
//   is <out> without a trailing ".mtrace".
#pragma once

#include <string>

namespace moeprof::profiler {

inline constexpr const char* kEnvTraceOut = "MOEPROF_TRACE_OUT";
inline constexpr const char* kEnvTraceRootPid = "MOEPROF_TRACE_ROOT_PID";
inline constexpr const char* kEnvTraceKernels = "MOEPROF_TRACE_KERNELS";
inline constexpr const char* kEnvTraceUses = "MOEPROF_TRACE_USES";  // "1": TracerOptions::uses
inline constexpr const char* kEnvTraceStacks = "MOEPROF_TRACE_STACKS";  // python | native | both
inline constexpr const char* kEnvTraceSignals = "MOEPROF_TRACE_SIGNALS";
inline constexpr const char* kEnvTorchAsync = "MOEPROF_TRACE_TORCH_ASYNC";
inline constexpr const char* kTraceExt = ".mtrace";

inline std::string trace_stem(const std::string& out) {
  const std::string ext = kTraceExt;
  if (out.size() > ext.size() && out.compare(out.size() - ext.size(), ext.size(), ext) == 0)
    return out.substr(0, out.size() - ext.size());
  return out;
}

inline std::string per_process_trace_path(const std::string& out, long pid) {
  return trace_stem(out) + "." + std::to_string(pid) + kTraceExt;
}

}  // namespace moeprof::profiler
