// Private to the tracer's own files (cupti_tracer.cpp, session.cpp, activity_buffers.cpp,
// nvtx_callbacks.cpp, api_callbacks.cpp, launch_uses.cpp, process_hooks.cpp): the state one
// running tracer shares between CUPTI's callbacks, the process hooks and CuptiTracer, and the
// functions those files call in each other. Not an API: nothing outside profiler/ includes it.
//
// Locking: writer_mu guards the writer and the assembler; live_mu and kernel_info_mu (uses) are
// never held across a driver or CUPTI call, nor together with writer_mu. Callbacks never throw
// into CUPTI and never call CUDA, except the launch scan's cu*GetParamInfo / cu*GetName (under the
// thread-local re-entrancy guard ThreadState::in_callback, with no lock held).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <cuda.h>   // driver types only: the driver is reached through dlsym, never linked
#include <cupti.h>

#include "core/status.h"
#include "core/trace.h"
#include "core/trace_io.h"
#include "profiler/api_table.h"
#include "profiler/attribution.h"
#include "profiler/cupti_tracer.h"
#include "profiler/kernel_args.h"

namespace moeprof::profiler::detail {

// A launched function's parameter layout and name (TracerOptions::uses), cached per handle
// (CUfunction or CUkernel). Immutable once in the cache, except name_id.
struct KernelInfo {
  bool layout_ok = false;
  std::vector<ParamSlot> layout;
  std::string name;                   // as the driver gives it (mangled), "" if unknown
  std::atomic<uint32_t> name_id{0};   // writer string id, interned on first use (writer_mu)
};

// Everything one running tracer owns. Sessions are never freed (CUPTI may still hold a pointer to
// one as callback userdata, and atexit/signal paths may run during teardown).
struct Session {
  std::string path;
  TracerOptions opt;
  RunMeta meta;
  uint32_t pid = 0;

  std::mutex writer_mu;  // guards writer, assembler, closed
  std::unique_ptr<TraceWriter> writer;
  std::unique_ptr<TraceAssembler> assembler;
  bool closed = false;

  AttributionTable table;
  std::unique_ptr<StackCollector> stacks;  // opt.stacks != kNone
  CUpti_SubscriberHandle subscriber = nullptr;
  std::vector<CUpti_ActivityKind> enabled_kinds;

  std::atomic<uint64_t> dropped{0}, buffers_denied{0}, buffers_completed{0}, decode_errors{0};

  // Kernel uses (opt.uses). Neither mutex is ever held across a driver or CUPTI call, nor together
  // with writer_mu.
  std::mutex live_mu;  // guards live
  LiveAllocationMap live;
  std::mutex kernel_info_mu;  // guards kernel_info (the KernelInfo objects are never freed)
  std::unordered_map<const void*, std::unique_ptr<KernelInfo>> kernel_info;
  std::atomic<uint64_t> uses{0}, uses_launches_scanned{0}, uses_scan_failures{0};

  std::mutex stop_mu;
  bool stopped = false;
  Status stop_status;
  TracerStats final_stats;
};

// The running session (nullptr when none) and whether this process is a fork of the traced one
// (a forked child records nothing). Defined in session.cpp.
extern std::atomic<Session*> g_session;
extern std::atomic<bool> g_forked_child;

// Per-thread state for the callbacks: NVTX range stack, the pending side-channel tag, the
// runtime->driver nesting of the current allocation call, and the re-entrancy guard.
struct RangeEntry {
  std::string text;
  const void* domain = nullptr;  // nullptr = the default domain
};

struct ThreadState {
  uint32_t tid = 0;
  bool in_callback = false;
  std::vector<RangeEntry> stack;
  uint32_t overflow = 0;  // pushes beyond kMaxRangeDepth (ignored, popped first)
  bool cache_valid = false;
  const AttributionTable* cache_table = nullptr;
  Attribution cached;
  int runtime_depth = 0;
  uint32_t nested_driver_corr = 0;
  bool pending_tag = false;
  std::string tag_scope, tag_name;
  Category tag_category = Category::kUnknown;
  // Kernel uses: the last context's device, scratch buffers of the argument scan.
  CUcontext device_ctx = nullptr;
  uint16_t device_of_ctx = 0;
  std::vector<uint64_t> words;
  std::vector<LiveRange> hits;
};
inline constexpr size_t kMaxRangeDepth = 256;

ThreadState& thread_state();  // api_callbacks.cpp
uint32_t current_tid();       // api_callbacks.cpp

// ---- activity_buffers.cpp: CUPTI activity buffers, decoded into the session's assembler.
void preallocate_buffers(size_t bytes, size_t n);
void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records);
void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t size, size_t valid);

// ---- nvtx_callbacks.cpp: the per-thread NVTX range stack.
void handle_nvtx(ThreadState& ts, CUpti_CallbackId cbid, const CUpti_NvtxData* d);
// Enables the NVTX callbacks it handles; a failure is noted in `extra` (NVTX is optional).
void enable_nvtx_callbacks(CUpti_SubscriberHandle subscriber, std::map<std::string, std::string>& extra);

// ---- api_callbacks.cpp: the subscriber's callback (CUPTI's userdata is the Session): NVTX,
// allocation APIs (attribution, the live map of uses) and launches, as api_table.h classifies them.
void CUPTIAPI on_callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* cbdata);
// cudaError_t / CUresult of an API callback's EXIT: true when 0 (success).
bool api_succeeded(const CUpti_CallbackData* cb);

// ---- launch_uses.cpp: a kernel launch (ENTER) -> kUse records (opt.uses).
void handle_launch(Session* s, ThreadState& ts, const ApiEntry& api, const CUpti_CallbackData* cb);

// ---- session.cpp: start and stop of the process-wide session.
Result<Session*> start_session(const std::string& trace_path, const RunMeta& meta, const TracerOptions& options);
// Stops a session once; later calls return the first result. `crashed`: called from the crash
// path, so skip driver queries.
Status stop_session(Session* s, bool crashed);
TracerStats collect_stats(Session* s);  // the caller holds s->writer_mu

// ---- process_hooks.cpp: atexit flush, fork guard (once per process), signal handlers (once).
void install_process_hooks(bool signals);

}  // namespace moeprof::profiler::detail
