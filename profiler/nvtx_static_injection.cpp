// NVTX static injection for the in-process tracer: NVTX code compiled into the same executable
// declares the weak symbol InitializeInjectionNvtx2_fnptr; this strong definition makes NVTX route
// its calls to CUPTI (cuptiNvtxInitialize2), so the tracer's NVTX callbacks see the ranges.
// NVTX consults it only when NVTX_INJECTION64_PATH is unset (an explicit tool wins). Opt out with
// MOEPROF_NVTX_STATIC_INJECTION=0. Kept in its own file: it must not include the NVTX headers,
// which carry the weak definition. Pulled into a link by moeprof_nvtx_static_injection_anchor(), which CuptiTracer::start calls.
#include <cstdlib>
#include <cstring>

#include <cupti_result.h>

extern "C" CUptiResult cuptiNvtxInitialize2(const void* get_export_table);

extern "C" {
// Set by CuptiTracer::start once it holds the CUPTI subscriber. NVTX initializes once per process,
// at its first call: before any tracer has started, routing NVTX to CUPTI would call into an
// uninitialized CUPTI (seen to crash), so NVTX calls then stay no-ops.
int moeprof_nvtx_static_injection_enabled = 0;
}

namespace {
using NvtxGetExportTable = const void* (*)(unsigned int);

int moeprof_nvtx_init(NvtxGetExportTable get_export_table) {
  const char* env = std::getenv("MOEPROF_NVTX_STATIC_INJECTION");
  if (env != nullptr && std::strcmp(env, "0") == 0) return 0;  // NVTX calls become no-ops
  if (!moeprof_nvtx_static_injection_enabled) return 0;        // no tracer has started
  return cuptiNvtxInitialize2(reinterpret_cast<const void*>(get_export_table)) == CUPTI_SUCCESS ? 1 : 0;
}
}  // namespace

extern "C" {
int (*InitializeInjectionNvtx2_fnptr)(NvtxGetExportTable) = &moeprof_nvtx_init;
// Called by CuptiTracer::start (so the linker keeps this file); 1 if NVTX in this executable will
// use the hook (it may still be overridden by NVTX_INJECTION64_PATH).
int moeprof_nvtx_static_injection_anchor() { return InitializeInjectionNvtx2_fnptr == &moeprof_nvtx_init ? 1 : 0; }
}
