// The CUPTI allocation tracer: records every device-memory allocation and release (MEMORY2),
// memory-pool reservations (MEMORY_POOL) and optionally kernels, attributes each allocation to its
// thread and NVTX scope, and streams everything into a .mtrace file (core/trace_io.h).
//
// One tracer per process (CUPTI's activity callbacks are process-wide). Used in-process by the
// executor (CuptiTracer::start/stop) and by the injection library libmoeprof_inject.so
// (CUDA_INJECTION64_PATH), which starts one at cuInit. See docs/tracing.md.
//
// In-process attribution, two routes:
//  - NVTX: ranges pushed with nvtxRangePushA/PushEx/nvtxDomainRangePushEx give the scope; a range
//    "moeprof.tensor:<scope>/<name>|<category>" around an allocation names it exactly. The program
//    must route NVTX to CUPTI: linking this library does it (it defines NVTX's static-injection
//    hook InitializeInjectionNvtx2_fnptr for NVTX code compiled into the same executable), unless
//    NVTX_INJECTION64_PATH names another tool or MOEPROF_NVTX_STATIC_INJECTION=0. NVTX code in
//    other shared libraries (e.g. libtorch) needs NVTX_INJECTION64_PATH=libmoeprof_inject.so set
//    before their first NVTX call.
//  - Side channel: tag_next_allocation() names the next allocation API call on the calling thread;
//    no NVTX needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "core/trace.h"
#include "profiler/stack_capture.h"

namespace moeprof::profiler {

struct TracerOptions {
  bool kernels = false;                  // CONCURRENT_KERNEL -> kKernel records (name, duration)
  bool uses = false;                     // kernel-argument scan -> kUse records: at each kernel
                                         // launch (cuLaunchKernel/Ex callbacks), every live device
                                         // allocation an argument word points into (flags
                                         // kUseRead|kUseWrite: read and write are not told apart).
                                         // See profiler/kernel_args.h and docs/tracing.md.
  bool memory_pool = true;               // MEMORY_POOL -> kPoolReserve records
  bool attribution = true;               // API + NVTX callbacks: tid, scope, tags
  bool graph_memory = true;              // read CUDA-graph memory attributes at stop (kGraphMem)
  bool flush_at_exit = true;             // atexit -> stop(), so an exiting program leaves a closed trace
  bool install_signal_handlers = false;  // SIGTERM/SIGINT: flush, close, re-raise; SIGSEGV/SIGBUS/
                                         // SIGABRT/SIGFPE/SIGILL: best-effort flush (only where the
                                         // program kept the default disposition)
  size_t buffer_bytes = size_t{8} << 20; // CUPTI activity buffers (4-8 MB recommended)
  size_t preallocated_buffers = 4;
  size_t max_buffers = 64;               // beyond this CUPTI drops records (counted)
  StackMode stacks = StackMode::kNone;   // call stacks at allocation (profiler/stack_capture.h)
  size_t records_per_frame = 4096;
  uint64_t flush_interval_ms = 1000;  // a pending frame older than this is written (a killed process loses at most this)
};

struct TracerStats {
  uint64_t records_written = 0;
  uint64_t allocs = 0, frees = 0, pool_records = 0, kernels = 0;
  uint64_t allocs_joined = 0, allocs_scoped = 0, allocs_tagged = 0, frees_joined = 0;
  uint64_t dropped_records = 0;    // CUPTI's count (cuptiActivityGetNumDroppedRecords)
  uint64_t buffers_denied = 0;     // buffer requests refused (max_buffers reached)
  uint64_t buffers_completed = 0;
  uint64_t decode_errors = 0;
  uint64_t attribution_pending = 0, attribution_pruned = 0;
  // TracerOptions::uses: kUse records written, launches whose arguments were scanned, launches
  // that could not be scanned (no parameter layout from the driver).
  uint64_t uses = 0, uses_launches_scanned = 0, uses_scan_failures = 0;
  // TracerOptions::stacks: allocations with a stack, and stacks captured with Python frames.
  uint64_t allocs_with_stack = 0, stacks_captured = 0, python_stacks = 0;
};

class CuptiTracer {
 public:
  // Starts tracing into `trace_path` (truncated). Fails with kRunFailure when: a tracer is already
  // active in this process; the runtime CUPTI is older than the one compiled against; another
  // CUPTI subscriber holds the slot (Nsight Systems/Compute, compute-sanitizer, PyTorch's Kineto
  // profiler); the file cannot be opened. `meta` is written as the trace's META frame; the tracer
  // adds extra keys (cupti_version, pid, ...) and rewrites META at stop with its statistics.
  static Result<std::unique_ptr<CuptiTracer>> start(const std::string& trace_path, const RunMeta& meta,
                                                    const TracerOptions& options = {});
  ~CuptiTracer();  // stop()s if still running (errors ignored)
  CuptiTracer(const CuptiTracer&) = delete;
  CuptiTracer& operator=(const CuptiTracer&) = delete;

  // Flushes all CUPTI buffers, writes graph-memory records, statistics and the END frame; stops
  // tracing. Idempotent (returns the first result).
  Status stop();
  // Flushes completed CUPTI buffers and the writer without closing (the trace stays readable).
  Status flush();
  // Adds the keys of `extra` that the trace's metadata lacks (the tracer's own keys win); written
  // with the META frame at stop(). The executor passes its run's figures this way (the serving
  // pool and request table that moeprof budget reads), so its CUPTI trace plugs in as its own does.
  void add_meta_extra(const std::map<std::string, std::string>& extra);
  uint64_t dropped() const;
  TracerStats stats() const;
  const std::string& path() const { return path_; }

  // True while a tracer is active in this process (any instance, including an injected one in
  // this copy of the library).
  static bool active();

  // Side channel: the next allocation API call (cudaMalloc*, cuMemAlloc*, ...) made on the calling
  // thread gets this scope, name and category, exactly like a moeprof.tensor NVTX tag. Consumed by
  // that call (successful or not); cleared by clear_allocation_tag(). Cheap; safe without a tracer.
  static void tag_next_allocation(std::string_view scope, std::string_view name, Category category);
  static void clear_allocation_tag();

 private:
  CuptiTracer(std::string path, void* session) : path_(std::move(path)), session_(session) {}
  std::string path_;
  void* session_ = nullptr;  // the process-wide recording session (opaque)
  bool stopped_ = false;
  Status stop_status_;
};

// Formats a CUptiResult as "CUPTI_ERROR_xxx (n)".
std::string cupti_error_string(int result);

}  // namespace moeprof::profiler
