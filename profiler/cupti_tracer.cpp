#include "profiler/cupti_tracer.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <map>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <cuda.h>  // driver types only: the driver is reached through dlsym, never linked
#include <cupti.h>  // also the runtime/driver API callback parameter structs (generated_cuda*_meta.h)
#include <generated_nvtx_meta.h>  // NVTX callback parameter structs (includes nvtx3 headers)

#include "core/trace_io.h"
#include "profiler/activity_decode.h"
#include "profiler/attribution.h"
#include "profiler/kernel_args.h"
#include "profiler/nvtx_scope.h"

extern "C" int moeprof_nvtx_static_injection_anchor();
extern "C" int moeprof_nvtx_static_injection_enabled;

namespace moeprof::profiler {

std::string cupti_error_string(int result) {
  const char* s = nullptr;
  if (cuptiGetResultString(static_cast<CUptiResult>(result), &s) != CUPTI_SUCCESS || s == nullptr)
    s = "unknown CUPTI error";
  return std::string(s) + " (" + std::to_string(result) + ")";
}

namespace {

static_assert(CU_LAUNCH_PARAM_END_AS_INT == kLaunchParamEnd);
static_assert(CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT == kLaunchParamBufferPointer);
static_assert(CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT == kLaunchParamBufferSize);

// A launched function's parameter layout and name (TracerOptions::uses), cached per handle
// (CUfunction or CUkernel). Immutable once in the cache, except name_id.
struct KernelInfo {
  bool layout_ok = false;
  std::vector<ParamSlot> layout;
  std::string name;                   // as the driver gives it (mangled), "" if unknown
  std::atomic<uint32_t> name_id{0};   // writer string id, interned on first use (writer_mu)
};

// ---------------------------------------------------------------------------------------------
// Session: everything one running tracer owns. Sessions are never freed (CUPTI may still hold a
// pointer to one as callback userdata, and atexit/signal paths may run during teardown).
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

std::atomic<Session*> g_session{nullptr};
std::atomic<bool> g_forked_child{false};

// ---------------------------------------------------------------------------------------------
// Activity buffers: a process-wide free list of equally sized buffers, never returned to the OS.
struct BufferPool {
  std::mutex mu;
  std::vector<uint8_t*> free_list;
  size_t allocated = 0;
  size_t bytes = 0;
};
BufferPool& buffer_pool() {
  static auto* p = new BufferPool;
  return *p;
}

uint8_t* new_buffer(size_t bytes) {
  // CUPTI requires ACTIVITY_RECORD_ALIGNMENT (8); malloc gives 16.
  return static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
}

void preallocate_buffers(size_t bytes, size_t n) {
  BufferPool& p = buffer_pool();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.bytes == 0) p.bytes = bytes;
  while (p.free_list.size() < n) {
    uint8_t* b = new_buffer(p.bytes);
    if (b == nullptr) break;
    p.free_list.push_back(b);
    ++p.allocated;
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;  // as many as fit
  *buffer = nullptr;
  *size = 0;
  Session* s = g_session.load(std::memory_order_acquire);
  size_t max_buffers = s != nullptr ? s->opt.max_buffers : 64;
  BufferPool& p = buffer_pool();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.bytes == 0) p.bytes = size_t{8} << 20;
  uint8_t* b = nullptr;
  if (!p.free_list.empty()) {
    b = p.free_list.back();
    p.free_list.pop_back();
  } else if (p.allocated < max_buffers) {
    b = new_buffer(p.bytes);
    if (b != nullptr) ++p.allocated;
  }
  if (b == nullptr) {
    // CUPTI drops the records it cannot store and counts them (cuptiActivityGetNumDroppedRecords).
    if (s != nullptr) s->buffers_denied.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  *buffer = b;
  *size = p.bytes;
}

void release_buffer(uint8_t* b) {
  if (b == nullptr) return;
  BufferPool& p = buffer_pool();
  std::lock_guard<std::mutex> lock(p.mu);
  p.free_list.push_back(b);
}

// MOEPROF_CUPTI_DUMP_DIR=DIR writes the valid bytes of the first 16 completed buffers to
// DIR/buf<N>.cuptibuf, for the CPU-only decoding tests (tests/golden/cupti). Off by default.
void dump_buffer(const uint8_t* buffer, size_t valid) {
  static const char* dir = std::getenv("MOEPROF_CUPTI_DUMP_DIR");
  static std::atomic<int> n{0};
  if (dir == nullptr || valid == 0) return;
  const int i = n.fetch_add(1);
  if (i >= 16) return;
  const std::string path = std::string(dir) + "/buf" + std::to_string(i) + ".cuptibuf";
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(buffer, 1, valid, f);
    std::fclose(f);
  }
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t /*size*/,
                               size_t valid) {
  dump_buffer(buffer, valid);
  Session* s = g_session.load(std::memory_order_acquire);
  if (s != nullptr && !g_forked_child.load(std::memory_order_relaxed)) {
    try {
      if (valid > 0) {
        std::lock_guard<std::mutex> lock(s->writer_mu);
        if (!s->closed && s->assembler) {
          DecodeStats st;
          decode_activity_buffer(buffer, valid, *s->assembler, &st);
          if (st.error) s->decode_errors.fetch_add(1, std::memory_order_relaxed);
        }
      }
    } catch (...) {
      s->decode_errors.fetch_add(1, std::memory_order_relaxed);
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS && dropped > 0)
      s->dropped.fetch_add(dropped, std::memory_order_relaxed);
    s->buffers_completed.fetch_add(1, std::memory_order_relaxed);
  }
  release_buffer(buffer);
}

// ---------------------------------------------------------------------------------------------
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
  uint32_t overflow = 0;  // pushes beyond kMaxDepth (ignored, popped first)
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
constexpr size_t kMaxDepth = 256;

ThreadState& thread_state() {
  thread_local ThreadState ts;
  return ts;
}

uint32_t current_tid() { return static_cast<uint32_t>(::syscall(SYS_gettid)); }

// Strings registered with nvtxDomainRegisterStringA/W, by handle.
std::mutex& registered_mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::unordered_map<const void*, std::string>& registered_strings() {
  static auto* m = new std::unordered_map<const void*, std::string>;
  return *m;
}

std::string narrow(const wchar_t* w) {
  std::string s;
  if (w == nullptr) return s;
  for (; *w != 0 && s.size() < 4096; ++w) s += (*w > 0 && *w < 128) ? static_cast<char>(*w) : '?';
  return s;
}

std::string message_of(const nvtxEventAttributes_t* a) {
  if (a == nullptr) return {};
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
      return a->message.ascii != nullptr ? std::string(a->message.ascii) : std::string();
    case NVTX_MESSAGE_TYPE_UNICODE:
      return narrow(a->message.unicode);
    case NVTX_MESSAGE_TYPE_REGISTERED: {
      std::lock_guard<std::mutex> lock(registered_mu());
      auto it = registered_strings().find(static_cast<const void*>(a->message.registered));
      return it != registered_strings().end() ? it->second : std::string();
    }
    default:
      return {};
  }
}

void push_range(ThreadState& ts, std::string text, const void* domain) {
  if (ts.stack.size() >= kMaxDepth) {
    ++ts.overflow;
    return;
  }
  ts.stack.push_back(RangeEntry{std::move(text), domain});
  ts.cache_valid = false;
}

void pop_range(ThreadState& ts, const void* domain) {
  if (ts.overflow > 0) {
    --ts.overflow;
    return;
  }
  for (size_t i = ts.stack.size(); i > 0; --i) {
    if (ts.stack[i - 1].domain == domain) {
      ts.stack.erase(ts.stack.begin() + static_cast<std::ptrdiff_t>(i - 1));
      ts.cache_valid = false;
      return;
    }
  }
}

void handle_nvtx(ThreadState& ts, CUpti_CallbackId cbid, const CUpti_NvtxData* d) {
  if (d == nullptr) return;
  const void* params = d->functionParams;
  switch (cbid) {
    case CUPTI_CBID_NVTX_nvtxRangePushA: {
      auto* p = static_cast<const nvtxRangePushA_params*>(params);
      push_range(ts, p != nullptr && p->message != nullptr ? p->message : "", nullptr);
      break;
    }
    case CUPTI_CBID_NVTX_nvtxRangePushW: {
      auto* p = static_cast<const nvtxRangePushW_params*>(params);
      push_range(ts, p != nullptr ? narrow(p->message) : std::string(), nullptr);
      break;
    }
    case CUPTI_CBID_NVTX_nvtxRangePushEx: {
      auto* p = static_cast<const nvtxRangePushEx_params*>(params);
      push_range(ts, p != nullptr ? message_of(p->eventAttrib) : std::string(), nullptr);
      break;
    }
    case CUPTI_CBID_NVTX_nvtxRangePop:
      pop_range(ts, nullptr);
      break;
    case CUPTI_CBID_NVTX_nvtxDomainRangePushEx: {
      auto* p = static_cast<const nvtxDomainRangePushEx_params*>(params);
      if (p != nullptr) push_range(ts, message_of(p->core.eventAttrib), static_cast<const void*>(p->domain));
      break;
    }
    case CUPTI_CBID_NVTX_nvtxDomainRangePop: {
      auto* p = static_cast<const nvtxDomainRangePop_params*>(params);
      if (p != nullptr) pop_range(ts, static_cast<const void*>(p->domain));
      break;
    }
    case CUPTI_CBID_NVTX_nvtxDomainRegisterStringA:
    case CUPTI_CBID_NVTX_nvtxDomainRegisterStringW: {
      if (d->functionReturnValue == nullptr || params == nullptr) break;
      auto handle = *static_cast<const nvtxStringHandle_t*>(d->functionReturnValue);
      if (handle == nullptr) break;
      std::string text;
      if (cbid == CUPTI_CBID_NVTX_nvtxDomainRegisterStringA) {
        auto* p = static_cast<const nvtxDomainRegisterStringA_params*>(params);
        if (p->string != nullptr) text = p->string;
      } else {
        auto* p = static_cast<const nvtxDomainRegisterStringW_params*>(params);
        text = narrow(reinterpret_cast<const wchar_t*>(p->string));
      }
      std::lock_guard<std::mutex> lock(registered_mu());
      registered_strings()[static_cast<const void*>(handle)] = std::move(text);
      break;
    }
    default:
      break;
  }
}

// 1 = allocation, 2 = release, 0 = not an allocation API.
int classify_runtime(CUpti_CallbackId cbid) {
  switch (cbid) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMalloc3D_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020:
      return 1;
    case CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020:
      return 2;
    default:
      return 0;
  }
}

int classify_driver(CUpti_CallbackId cbid) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc:
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz:
      return 1;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree:
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost:
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz:
      return 2;
    default:
      return 0;
  }
}

constexpr CUpti_CallbackId kNvtxCbids[] = {
    CUPTI_CBID_NVTX_nvtxRangePushA,          CUPTI_CBID_NVTX_nvtxRangePushW,
    CUPTI_CBID_NVTX_nvtxRangePushEx,         CUPTI_CBID_NVTX_nvtxRangePop,
    CUPTI_CBID_NVTX_nvtxDomainRangePushEx,   CUPTI_CBID_NVTX_nvtxDomainRangePop,
    CUPTI_CBID_NVTX_nvtxDomainRegisterStringA, CUPTI_CBID_NVTX_nvtxDomainRegisterStringW,
};

bool api_succeeded(const CUpti_CallbackData* cb) {
  // cudaError_t / CUresult: both int-sized enums, 0 = success.
  return cb->functionReturnValue != nullptr && *static_cast<const int*>(cb->functionReturnValue) == 0;
}

const Attribution& scope_of_stack(Session* s, ThreadState& ts) {
  if (ts.cache_valid && ts.cache_table == &s->table) return ts.cached;
  std::vector<std::string> names;
  names.reserve(ts.stack.size());
  for (const RangeEntry& e : ts.stack) names.push_back(e.text);
  ResolvedScope r = resolve_scope(names);
  Attribution a;
  if (r.tagged) {
    a.scope = s->table.intern(r.tag.scope);
    a.name = s->table.intern(r.tag.name);
    a.category = r.tag.category;
  } else if (!r.path.empty()) {
    a.scope = s->table.intern(r.path);
    a.flags = kFlagInferredScope;
  }
  ts.cached = a;
  ts.cache_table = &s->table;
  ts.cache_valid = true;
  return ts.cached;
}

void record_call(Session* s, ThreadState& ts, uint32_t corr, uint32_t partner, bool is_alloc) {
  if (ts.tid == 0) ts.tid = current_tid();
  Attribution a;
  if (is_alloc) {
    if (ts.pending_tag) {
      a.scope = s->table.intern(ts.tag_scope);
      a.name = s->table.intern(ts.tag_name);
      a.category = ts.tag_category;
      ts.pending_tag = false;
    } else {
      a = scope_of_stack(s, ts);
    }
  }
  a.tid = ts.tid;
  s->table.put(corr, partner, a);
}

void handle_api(Session* s, ThreadState& ts, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                const CUpti_CallbackData* cb) {
  if (cb == nullptr) return;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    int cls = classify_runtime(cbid);
    if (cls == 0) return;
    if (cb->callbackSite == CUPTI_API_ENTER) {
      if (ts.runtime_depth++ == 0) ts.nested_driver_corr = 0;
      return;
    }
    if (ts.runtime_depth > 0) --ts.runtime_depth;
    if (ts.runtime_depth != 0) return;
    if (api_succeeded(cb)) {
      record_call(s, ts, cb->correlationId, ts.nested_driver_corr, cls == 1);
    } else if (cls == 1) {
      ts.pending_tag = false;
    }
    ts.nested_driver_corr = 0;
  } else {
    int cls = classify_driver(cbid);
    if (cls == 0 || cb->callbackSite != CUPTI_API_EXIT) return;
    if (ts.runtime_depth > 0) {  // inside cudaMalloc & co: the runtime exit records both ids
      ts.nested_driver_corr = cb->correlationId;
      return;
    }
    if (api_succeeded(cb)) {
      record_call(s, ts, cb->correlationId, 0, cls == 1);
    } else if (cls == 1) {
      ts.pending_tag = false;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Kernel uses (TracerOptions::uses): a map of live device allocations kept from the allocation API
// callbacks, and a scan of every kernel launch's arguments against it (profiler/kernel_args.h).

// Driver entry points for the argument layout and the kernel name, reached through dlsym (the
// tracer never links libcuda). Calling them inside a callback re-enters the callbacks: the caller
// holds ThreadState::in_callback and no lock.
struct DriverFns {
  using FuncParamInfo = CUresult (*)(CUfunction, size_t, size_t*, size_t*);
  using KernelParamInfo = CUresult (*)(CUkernel, size_t, size_t*, size_t*);
  using FuncName = CUresult (*)(const char**, CUfunction);
  using KernelName = CUresult (*)(const char**, CUkernel);
  FuncParamInfo func_param_info = nullptr;
  KernelParamInfo kernel_param_info = nullptr;
  FuncName func_name = nullptr;
  KernelName kernel_name = nullptr;
};

const DriverFns& driver_fns() {
  static const DriverFns fns = [] {
    DriverFns f;
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);  // loaded: a kernel is being launched
    if (h == nullptr) return f;
    f.func_param_info = reinterpret_cast<DriverFns::FuncParamInfo>(dlsym(h, "cuFuncGetParamInfo"));
    f.kernel_param_info = reinterpret_cast<DriverFns::KernelParamInfo>(dlsym(h, "cuKernelGetParamInfo"));
    f.func_name = reinterpret_cast<DriverFns::FuncName>(dlsym(h, "cuFuncGetName"));
    f.kernel_name = reinterpret_cast<DriverFns::KernelName>(dlsym(h, "cuKernelGetName"));
    return f;  // the handle stays open (the driver stays loaded for the process' life)
  }();
  return fns;
}

// The parameter layout of a launched function. Runtime launches pass a CUkernel (cuFuncGetParamInfo
// answers CUDA_ERROR_INVALID_HANDLE, cuKernelGetParamInfo works), driver launches of a module's
// function a CUfunction: try cuFuncGetParamInfo, then cuKernelGetParamInfo (the order verified on
// the H200, docs: cupti-facts). Parameters are read until the driver says the index is past the
// end; index 0 past the end = no parameters.
constexpr size_t kMaxKernelParams = 4096;

std::unique_ptr<KernelInfo> describe_kernel(const void* handle) {
  auto info = std::make_unique<KernelInfo>();
  const DriverFns& d = driver_fns();
  bool no_params = false, via_kernel = false;
  for (int attempt = 0; attempt < 2 && !info->layout_ok; ++attempt) {
    std::vector<ParamSlot> slots;
    CUresult r = CUDA_ERROR_NOT_FOUND;
    for (size_t i = 0; i < kMaxKernelParams; ++i) {
      size_t off = 0, sz = 0;
      if (attempt == 0)
        r = d.func_param_info != nullptr ? d.func_param_info(reinterpret_cast<CUfunction>(const_cast<void*>(handle)), i, &off, &sz)
                                         : CUDA_ERROR_NOT_FOUND;
      else
        r = d.kernel_param_info != nullptr ? d.kernel_param_info(reinterpret_cast<CUkernel>(const_cast<void*>(handle)), i, &off, &sz)
                                           : CUDA_ERROR_NOT_FOUND;
      if (r != CUDA_SUCCESS) break;
      slots.push_back(ParamSlot{off, sz});
    }
    if (!slots.empty()) {
      info->layout = std::move(slots);
      info->layout_ok = true;
      via_kernel = attempt == 1;
    } else if (r == CUDA_ERROR_INVALID_VALUE) {
      no_params = true;  // a valid handle with no parameter 0 (unless the other call finds some)
    }
  }
  if (!info->layout_ok && no_params) info->layout_ok = true;
  const char* name = nullptr;
  auto by_func = [&] {
    return d.func_name != nullptr &&
           d.func_name(&name, reinterpret_cast<CUfunction>(const_cast<void*>(handle))) == CUDA_SUCCESS && name != nullptr;
  };
  auto by_kernel = [&] {
    return d.kernel_name != nullptr &&
           d.kernel_name(&name, reinterpret_cast<CUkernel>(const_cast<void*>(handle))) == CUDA_SUCCESS && name != nullptr;
  };
  bool named = via_kernel ? (by_kernel() || by_func()) : (by_func() || by_kernel());
  if (named) info->name = name;
  return info;
}

KernelInfo* kernel_info(Session* s, const void* handle) {
  {
    std::lock_guard<std::mutex> lock(s->kernel_info_mu);
    auto it = s->kernel_info.find(handle);
    if (it != s->kernel_info.end()) return it->second.get();
  }
  std::unique_ptr<KernelInfo> info = describe_kernel(handle);  // driver calls: no lock held
  std::lock_guard<std::mutex> lock(s->kernel_info_mu);
  auto it = s->kernel_info.emplace(handle, std::move(info)).first;  // another thread may have won
  return it->second.get();
}

uint16_t device_of(ThreadState& ts, CUcontext ctx) {
  if (ctx == nullptr) return 0;
  if (ctx == ts.device_ctx) return ts.device_of_ctx;
  uint32_t dev = 0;
  if (cuptiGetDeviceId(ctx, &dev) != CUPTI_SUCCESS) return 0;
  ts.device_ctx = ctx;
  ts.device_of_ctx = static_cast<uint16_t>(dev);
  return ts.device_of_ctx;
}

// Allocation API callbacks -> the live map: device allocations at a successful EXIT (pointer and
// size from the parameters), removal at the free's ENTER (before another thread can be handed
// the same address). Host (pinned) allocations are not tracked.
void track_allocation(Session* s, ThreadState& ts, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                      const CUpti_CallbackData* cb) {
  const void* p = cb->functionParams;
  if (p == nullptr) return;
  uint64_t base = 0, size = 0, freed = 0;
  bool alloc = false, release = false;
  const bool exit_ok = cb->callbackSite == CUPTI_API_EXIT && api_succeeded(cb);
  const bool enter = cb->callbackSite == CUPTI_API_ENTER;
  auto ptr_of = [](void* const* pp) -> uint64_t { return pp != nullptr ? reinterpret_cast<uintptr_t>(*pp) : 0; };
  auto dptr_of = [](const CUdeviceptr* pp) -> uint64_t { return pp != nullptr ? static_cast<uint64_t>(*pp) : 0; };
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    switch (cbid) {
      case CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020: {
        if (!exit_ok) return;
        auto* a = static_cast<const cudaMalloc_v3020_params*>(p);
        base = ptr_of(a->devPtr), size = a->size, alloc = true;
        break;
      }
      case CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000: {
        if (!exit_ok) return;
        auto* a = static_cast<const cudaMallocManaged_v6000_params*>(p);
        base = ptr_of(a->devPtr), size = a->size, alloc = true;
        break;
      }
      case CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020: {
        if (!exit_ok) return;
        auto* a = static_cast<const cudaMallocPitch_v3020_params*>(p);
        base = ptr_of(a->devPtr), size = (a->pitch != nullptr ? *a->pitch : a->width) * a->height, alloc = true;
        break;
      }
      case CUPTI_RUNTIME_TRACE_CBID_cudaMalloc3D_v3020: {
        if (!exit_ok) return;
        auto* a = static_cast<const cudaMalloc3D_v3020_params*>(p);
        if (a->pitchedDevPtr == nullptr) return;
        base = reinterpret_cast<uintptr_t>(a->pitchedDevPtr->ptr);
        size = a->pitchedDevPtr->pitch * a->extent.height * a->extent.depth;
        alloc = true;
        break;
      }
      case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020:
      case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020: {  // same layout
        if (!exit_ok) return;
        auto* a = static_cast<const cudaMallocAsync_v11020_params*>(p);
        base = ptr_of(a->devPtr), size = a->size, alloc = true;
        break;
      }
      case CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020:
      case CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020: {
        if (!exit_ok) return;
        auto* a = static_cast<const cudaMallocFromPoolAsync_v11020_params*>(p);
        base = ptr_of(a->ptr), size = a->size, alloc = true;
        break;
      }
      case CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020:
        if (!enter) return;
        freed = reinterpret_cast<uintptr_t>(static_cast<const cudaFree_v3020_params*>(p)->devPtr), release = true;
        break;
      case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020:
      case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020:
        if (!enter) return;
        freed = reinterpret_cast<uintptr_t>(static_cast<const cudaFreeAsync_v11020_params*>(p)->devPtr), release = true;
        break;
      default:
        return;
    }
  } else {
    switch (cbid) {
      case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2: {
        if (!exit_ok) return;
        auto* a = static_cast<const cuMemAlloc_v2_params*>(p);
        base = dptr_of(a->dptr), size = a->bytesize, alloc = true;
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2: {
        if (!exit_ok) return;
        auto* a = static_cast<const cuMemAllocPitch_v2_params*>(p);
        base = dptr_of(a->dptr), size = (a->pPitch != nullptr ? *a->pPitch : a->WidthInBytes) * a->Height, alloc = true;
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged: {
        if (!exit_ok) return;
        auto* a = static_cast<const cuMemAllocManaged_params*>(p);
        base = dptr_of(a->dptr), size = a->bytesize, alloc = true;
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
      case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz: {  // same layout
        if (!exit_ok) return;
        auto* a = static_cast<const cuMemAllocAsync_params*>(p);
        base = dptr_of(a->dptr), size = a->bytesize, alloc = true;
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
      case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz: {
        if (!exit_ok) return;
        auto* a = static_cast<const cuMemAllocFromPoolAsync_params*>(p);
        base = dptr_of(a->dptr), size = a->bytesize, alloc = true;
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2:
        if (!enter) return;
        freed = static_cast<const cuMemFree_v2_params*>(p)->dptr, release = true;
        break;
      case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
      case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz:
        if (!enter) return;
        freed = static_cast<const cuMemFreeAsync_params*>(p)->dptr, release = true;
        break;
      default:
        return;
    }
  }
  if (alloc && base != 0 && size != 0) {
    const uint16_t dev = device_of(ts, cb->context);  // a CUPTI call: before taking the lock
    std::lock_guard<std::mutex> lock(s->live_mu);
    s->live.insert(base, size, dev);
  } else if (release && freed != 0) {
    std::lock_guard<std::mutex> lock(s->live_mu);
    s->live.erase(freed);
  }
}

bool is_launch(CUpti_CallbackId cbid) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
      return true;
    default:
      return false;
  }
}
constexpr CUpti_CallbackId kLaunchCbids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,           CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,         CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
};

// A kernel launch (ENTER): one kUse record per live allocation that an argument word points into.
void handle_launch(Session* s, ThreadState& ts, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  if (cb->callbackSite != CUPTI_API_ENTER || cb->functionParams == nullptr) return;
  uint64_t now = 0;
  cuptiGetTimestamp(&now);
  const void* f = nullptr;
  void** params = nullptr;
  void** extra = nullptr;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz: {  // same layout
      auto* a = static_cast<const cuLaunchKernel_params*>(cb->functionParams);
      f = a->f, params = a->kernelParams, extra = a->extra;
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
      auto* a = static_cast<const cuLaunchKernelEx_params*>(cb->functionParams);
      f = a->f, params = a->kernelParams, extra = a->extra;
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz: {
      auto* a = static_cast<const cuLaunchCooperativeKernel_params*>(cb->functionParams);
      f = a->f, params = a->kernelParams;
      break;
    }
    default:
      return;
  }
  if (f == nullptr) return;
  KernelInfo* info = kernel_info(s, f);
  ts.words.clear();
  ts.hits.clear();
  const void* packed = nullptr;
  size_t packed_size = 0;
  if (params != nullptr) {
    if (!info->layout_ok) {
      s->uses_scan_failures.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    collect_param_words(params, info->layout.data(), info->layout.size(), &ts.words);
  } else if (find_packed_buffer(extra, &packed, &packed_size)) {
    collect_buffer_words(packed, packed_size, &ts.words);
  }
  s->uses_launches_scanned.fetch_add(1, std::memory_order_relaxed);
  if (ts.words.empty()) return;
  {
    std::lock_guard<std::mutex> lock(s->live_mu);
    match_words(s->live, ts.words, &ts.hits);
  }
  if (ts.hits.empty()) return;
  if (ts.tid == 0) ts.tid = current_tid();
  std::lock_guard<std::mutex> lock(s->writer_mu);
  if (s->closed || !s->assembler) return;
  auto name_id = static_cast<StrId>(info->name_id.load(std::memory_order_relaxed));
  if (name_id == StrId::kNone && !info->name.empty()) {
    name_id = s->assembler->intern(info->name);
    info->name_id.store(index_of(name_id), std::memory_order_relaxed);
  }
  for (const LiveRange& h : ts.hits) {
    TraceRecord rec;
    rec.kind = EventKind::kUse;
    rec.timestamp_ns = now;
    rec.address = h.base;
    rec.bytes = h.size;
    rec.seq = cb->correlationId;
    rec.name_id = name_id;
    rec.device = h.device;
    rec.tid = ts.tid;
    rec.flags = kUseRead | kUseWrite;  // a scanned argument: read or write is unknown
    (void)s->assembler->append(rec);   // sticky error, checked at flush/close
  }
  s->uses.fetch_add(ts.hits.size(), std::memory_order_relaxed);
}

void CUPTIAPI on_callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                          const void* cbdata) {
  if (g_forked_child.load(std::memory_order_relaxed)) return;
  auto* s = static_cast<Session*>(userdata);
  if (s == nullptr) return;
  ThreadState& ts = thread_state();
  if (ts.in_callback) return;  // a callback that re-entered CUDA/CUPTI
  ts.in_callback = true;
  try {
    if (domain == CUPTI_CB_DOMAIN_NVTX) {
      handle_nvtx(ts, cbid, static_cast<const CUpti_NvtxData*>(cbdata));
    } else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API || domain == CUPTI_CB_DOMAIN_DRIVER_API) {
      auto* cb = static_cast<const CUpti_CallbackData*>(cbdata);
      if (domain == CUPTI_CB_DOMAIN_DRIVER_API && is_launch(cbid)) {
        if (s->opt.uses && cb != nullptr) handle_launch(s, ts, cbid, cb);
      } else {
        if (s->opt.uses && cb != nullptr) track_allocation(s, ts, domain, cbid, cb);
        if (s->opt.attribution) handle_api(s, ts, domain, cbid, cb);
      }
    }
  } catch (...) {
    // Never let an exception cross into CUPTI; the allocation stays unattributed.
  }
  ts.in_callback = false;
}

// ---------------------------------------------------------------------------------------------
// CUDA-graph memory, read from the driver at stop (only for devices whose primary context is
// active, so the query never creates a context).
void query_graph_memory(Session* s, std::vector<TraceRecord>* out) {
  std::map<std::string, std::string>& extra = s->meta.extra;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) {
    extra["graph_mem"] = "not queried: libcuda.so.1 not loaded (the program did not use CUDA)";
    return;
  }
  using GetCount = CUresult (*)(int*);
  using GetDevice = CUresult (*)(CUdevice*, int);
  using GetAttr = CUresult (*)(CUdevice, CUgraphMem_attribute, void*);
  using CtxState = CUresult (*)(CUdevice, unsigned int*, int*);
  using GetName = CUresult (*)(char*, int, CUdevice);
  auto get_count = reinterpret_cast<GetCount>(dlsym(h, "cuDeviceGetCount"));
  auto get_device = reinterpret_cast<GetDevice>(dlsym(h, "cuDeviceGet"));
  auto get_attr = reinterpret_cast<GetAttr>(dlsym(h, "cuDeviceGetGraphMemAttribute"));
  auto ctx_state = reinterpret_cast<CtxState>(dlsym(h, "cuDevicePrimaryCtxGetState"));
  auto get_name = reinterpret_cast<GetName>(dlsym(h, "cuDeviceGetName"));
  if (!get_count || !get_device || !get_attr || !ctx_state) {
    extra["graph_mem"] = "not queried: driver entry points missing";
    dlclose(h);
    return;
  }
  int n = 0;
  CUresult r = get_count(&n);
  if (r != CUDA_SUCCESS) {
    extra["graph_mem"] = "not queried: cuDeviceGetCount returned " + std::to_string(r) +
                         " (CUDA not initialized)";
    dlclose(h);
    return;
  }
  uint64_t now = 0;
  cuptiGetTimestamp(&now);
  int queried = 0;
  for (int i = 0; i < n; ++i) {
    CUdevice dev = 0;
    if (get_device(&dev, i) != CUDA_SUCCESS) continue;
    unsigned int flags = 0;
    int active = 0;
    if (ctx_state(dev, &flags, &active) != CUDA_SUCCESS || active == 0) continue;
    if (get_name != nullptr && s->meta.device_name.empty()) {
      char name[256] = {0};
      if (get_name(name, sizeof(name) - 1, dev) == CUDA_SUCCESS) s->meta.device_name = name;
    }
    cuuint64_t current = 0, high = 0;
    CUresult r1 = get_attr(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &current);
    CUresult r2 = get_attr(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &high);
    std::string key = ".dev" + std::to_string(i);
    if (r1 != CUDA_SUCCESS || r2 != CUDA_SUCCESS) {
      extra["graph_mem" + key] = "error " + std::to_string(r1 != CUDA_SUCCESS ? r1 : r2);
      continue;
    }
    ++queried;
    extra["graph_mem_used_current_bytes" + key] = std::to_string(current);
    extra["graph_mem_used_high_bytes" + key] = std::to_string(high);
    if (current == 0 && high == 0) continue;
    TraceRecord rec;
    rec.kind = EventKind::kGraphMem;
    rec.category = Category::kGraph;
    rec.mem_kind = MemKind::kDevice;
    rec.timestamp_ns = now;
    rec.bytes = current;
    rec.device = static_cast<uint16_t>(i);
    out->push_back(rec);
  }
  extra["graph_mem"] = "queried " + std::to_string(queried) + " device(s) with an active context";
  dlclose(h);
}

TracerStats collect_stats(Session* s) {
  TracerStats t;
  if (s->assembler) {
    const AssemblerStats& a = s->assembler->stats();
    t.allocs = a.allocs;
    t.frees = a.frees;
    t.pool_records = a.pool_records;
    t.kernels = a.kernels;
    t.allocs_joined = a.allocs_joined;
    t.allocs_scoped = a.allocs_scoped;
    t.allocs_tagged = a.allocs_tagged;
    t.frees_joined = a.frees_joined;
  }
  if (s->writer) t.records_written = s->writer->records_written();
  t.dropped_records = s->dropped.load();
  t.buffers_denied = s->buffers_denied.load();
  t.buffers_completed = s->buffers_completed.load();
  t.decode_errors = s->decode_errors.load();
  t.attribution_pending = s->table.pending();
  t.attribution_pruned = s->table.pruned();
  t.uses = s->uses.load();
  t.uses_launches_scanned = s->uses_launches_scanned.load();
  t.uses_scan_failures = s->uses_scan_failures.load();
  return t;
}

// Stops a session once; later calls return the first result. `crashed`: called from the crash
// path, so skip driver queries.
Status stop_session(Session* s, bool crashed) {
  std::lock_guard<std::mutex> stop_lock(s->stop_mu);
  if (s->stopped) return s->stop_status;
  s->stopped = true;
  ThreadState& ts = thread_state();
  bool was_in_callback = ts.in_callback;
  ts.in_callback = true;  // driver calls below must not be attributed

  std::vector<TraceRecord> graph_records;
  if (!crashed && s->opt.graph_memory && !g_forked_child.load()) query_graph_memory(s, &graph_records);

  std::string notes;
  CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  if (r != CUPTI_SUCCESS) notes += "cuptiActivityFlushAll: " + cupti_error_string(r) + "; ";
  for (CUpti_ActivityKind k : s->enabled_kinds) cuptiActivityDisable(k);
  if (s->subscriber != nullptr) {
    cuptiUnsubscribe(s->subscriber);
    s->subscriber = nullptr;
  }
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  size_t global_dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &global_dropped) == CUPTI_SUCCESS)
    s->dropped.fetch_add(global_dropped);

  Status st;
  {
    std::lock_guard<std::mutex> lock(s->writer_mu);
    for (const TraceRecord& g : graph_records) (void)s->assembler->append(g);
    TracerStats t = collect_stats(s);
    s->final_stats = t;
    auto& x = s->meta.extra;
    x["tracer.allocs"] = std::to_string(t.allocs);
    x["tracer.frees"] = std::to_string(t.frees);
    x["tracer.allocs_joined"] = std::to_string(t.allocs_joined);
    x["tracer.allocs_scoped"] = std::to_string(t.allocs_scoped);
    x["tracer.allocs_tagged"] = std::to_string(t.allocs_tagged);
    x["tracer.frees_joined"] = std::to_string(t.frees_joined);
    x["tracer.pool_records"] = std::to_string(t.pool_records);
    x["tracer.kernels"] = std::to_string(t.kernels);
    x["tracer.dropped_records"] = std::to_string(t.dropped_records);
    x["tracer.buffers_denied"] = std::to_string(t.buffers_denied);
    x["tracer.decode_errors"] = std::to_string(t.decode_errors);
    x["tracer.attribution_unjoined"] = std::to_string(t.attribution_pending + t.attribution_pruned);
    if (s->opt.uses) {
      x["tracer.uses"] = std::to_string(t.uses);
      x["tracer.uses_launches_scanned"] = std::to_string(t.uses_launches_scanned);
      x["tracer.uses_scan_failures"] = std::to_string(t.uses_scan_failures);
    }
    x["tracer.stopped_by"] = crashed ? "signal" : "stop";
    if (!notes.empty()) x["tracer.notes"] = notes;
    s->writer->add_dropped(t.dropped_records);
    Status m = s->writer->set_meta(s->meta);
    Status c = s->writer->close();
    s->closed = true;
    st = !m.is_ok() ? m : c;
  }
  Session* expected = s;
  g_session.compare_exchange_strong(expected, nullptr);
  ts.in_callback = was_in_callback;
  s->stop_status = st;
  return st;
}

// ---------------------------------------------------------------------------------------------
// Process hooks: atexit, fork, signals (installed once per process).
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

void install_process_hooks(bool signals) {
  std::call_once(g_process_hooks_once, [] {
    std::atexit(at_exit_handler);
    pthread_atfork(nullptr, nullptr, at_fork_child);
  });
  if (signals) std::call_once(g_signal_once, install_signal_handlers);
}

std::string subscriber_conflict_message(const char* holder) {
  std::string m =
      "another CUPTI subscriber is already active in this process";
  if (holder != nullptr && holder[0] != 0) m += std::string(" (") + holder + ")";
  m += "; only one is allowed on this CUDA/driver version. Likely holders: Nsight Systems or Nsight "
       "Compute (nsys/ncu), compute-sanitizer, cuda-gdb, PyTorch's Kineto profiler (torch.profiler), "
       "or a second moeprof tracer. Run without them";
  return m;
}

}  // namespace

// -----------------------------------------------------------------------------------------------
Result<std::unique_ptr<CuptiTracer>> CuptiTracer::start(const std::string& trace_path, const RunMeta& meta,
                                                        const TracerOptions& options) {
  if (g_session.load() != nullptr)
    return Status::run_failure("cupti tracer: a tracer is already active in this process (" +
                               g_session.load()->path + ")");
  if (g_forked_child.load()) return Status::run_failure("cupti tracer: cannot start in a forked child");

  uint32_t version = 0;
  CUptiResult r = cuptiGetVersion(&version);
  if (r != CUPTI_SUCCESS)
    return Status::run_failure("cupti tracer: cuptiGetVersion failed: " + cupti_error_string(r) +
                               " (is libcupti.so from CUDA 13 on the library path?)");
  if (version < CUPTI_API_VERSION)
    return Status::run_failure("cupti tracer: the CUPTI library loaded at run time is API version " +
                               std::to_string(version) + ", older than " +
                               std::to_string(CUPTI_API_VERSION) +
                               " which moeprof was built against; put a newer libcupti.so first on "
                               "LD_LIBRARY_PATH (e.g. /usr/local/cuda/lib64)");

  auto* s = new Session;  // never freed (see Session)
  s->path = trace_path;
  s->opt = options;
  if (s->opt.max_buffers < 2) s->opt.max_buffers = 2;
  s->meta = meta;
  s->pid = static_cast<uint32_t>(getpid());
  if (s->meta.pid == 0) s->meta.pid = s->pid;
  if (s->meta.backend.empty()) s->meta.backend = "cupti";
  if (s->meta.mode.empty()) s->meta.mode = "traced";
  auto& x = s->meta.extra;
  x["tracer"] = "cupti";
  x["cupti_version"] = std::to_string(version);
  x["cupti_api_compiled"] = std::to_string(CUPTI_API_VERSION);
  x["pid"] = std::to_string(s->pid);
  x["tracer.kernels"] = options.kernels ? "on" : "off";
  x["tracer.attribution"] = options.attribution ? "on" : "off";
  if (options.uses) x["tracer.uses"] = "on (kernel-argument scan; counts written at stop)";
  {
    const char* nvtx_env = std::getenv("NVTX_INJECTION64_PATH");
    x["tracer.nvtx_route"] = (nvtx_env != nullptr && nvtx_env[0] != 0)
                                 ? std::string("NVTX_INJECTION64_PATH=") + nvtx_env
                                 : (moeprof_nvtx_static_injection_anchor() ? "static injection hook"
                                                                            : "none (NVTX ranges not seen)");
  }
  x["timestamps"] = "CUPTI timestamps (ns); release times are host API times";

  // Claim the subscriber slot first: it tells us whether another tool is active.
  char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN * 2] = {0};
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "moeprof";
  params.oldSubscriberName = holder;
  params.oldSubscriberSize = sizeof(holder);
  r = cuptiSubscribe_v2(&s->subscriber, on_callback, s, &params);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
    return Status::run_failure("cupti tracer: " + subscriber_conflict_message(holder));
  if (r != CUPTI_SUCCESS)
    return Status::run_failure("cupti tracer: cuptiSubscribe failed: " + cupti_error_string(r));
  moeprof_nvtx_static_injection_enabled = 1;

  auto w = TraceWriter::open(trace_path, s->meta, TraceWriterOptions{options.records_per_frame, options.flush_interval_ms});
  if (!w.is_ok()) {
    cuptiUnsubscribe(s->subscriber);
    return w.status().with_context("cupti tracer");
  }
  s->writer = std::move(w).value();
  s->assembler = std::make_unique<TraceAssembler>(s->writer.get(), &s->table);

  auto fail = [&](const std::string& what, CUptiResult res) -> Status {
    for (CUpti_ActivityKind k : s->enabled_kinds) cuptiActivityDisable(k);
    cuptiUnsubscribe(s->subscriber);
    s->subscriber = nullptr;
    g_session.store(nullptr);
    std::lock_guard<std::mutex> lock(s->writer_mu);
    s->closed = true;
    (void)s->writer->close();
    return Status::run_failure("cupti tracer: " + what + ": " + cupti_error_string(res));
  };

  if (options.attribution || options.uses) {  // uses: the allocation callbacks keep the live map
    for (int cbid = 0; cbid < CUPTI_RUNTIME_TRACE_CBID_SIZE; ++cbid) {
      if (classify_runtime(static_cast<CUpti_CallbackId>(cbid)) == 0) continue;
      r = cuptiEnableCallback(1, s->subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, static_cast<CUpti_CallbackId>(cbid));
      if (r != CUPTI_SUCCESS) return fail("enabling runtime API callbacks", r);
    }
    for (int cbid = 0; cbid < CUPTI_DRIVER_TRACE_CBID_SIZE; ++cbid) {
      if (classify_driver(static_cast<CUpti_CallbackId>(cbid)) == 0) continue;
      r = cuptiEnableCallback(1, s->subscriber, CUPTI_CB_DOMAIN_DRIVER_API, static_cast<CUpti_CallbackId>(cbid));
      if (r != CUPTI_SUCCESS) return fail("enabling driver API callbacks", r);
    }
    for (CUpti_CallbackId cbid : kNvtxCbids) {
      if (!options.attribution) break;
      r = cuptiEnableCallback(1, s->subscriber, CUPTI_CB_DOMAIN_NVTX, cbid);
      if (r != CUPTI_SUCCESS) x["tracer.nvtx"] = "NVTX callbacks unavailable: " + cupti_error_string(r);
    }
  }
  if (options.uses) {
    for (CUpti_CallbackId cbid : kLaunchCbids) {
      r = cuptiEnableCallback(1, s->subscriber, CUPTI_CB_DOMAIN_DRIVER_API, cbid);
      if (r != CUPTI_SUCCESS) return fail("enabling kernel launch callbacks", r);
    }
  }

  preallocate_buffers(options.buffer_bytes, options.preallocated_buffers);
  g_session.store(s, std::memory_order_release);
  r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (r != CUPTI_SUCCESS) return fail("cuptiActivityRegisterCallbacks", r);

  r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY2);
  if (r != CUPTI_SUCCESS) return fail("enabling MEMORY2 activity records", r);
  s->enabled_kinds.push_back(CUPTI_ACTIVITY_KIND_MEMORY2);
  if (options.memory_pool) {
    r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY_POOL);
    if (r == CUPTI_SUCCESS)
      s->enabled_kinds.push_back(CUPTI_ACTIVITY_KIND_MEMORY_POOL);
    else
      x["tracer.memory_pool"] = "unavailable: " + cupti_error_string(r);
  }
  if (options.kernels) {
    r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (r == CUPTI_SUCCESS)
      s->enabled_kinds.push_back(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    else
      x["tracer.kernels"] = "unavailable: " + cupti_error_string(r);
  }

  install_process_hooks(options.install_signal_handlers);
  return std::unique_ptr<CuptiTracer>(new CuptiTracer(trace_path, s));
}

CuptiTracer::~CuptiTracer() {
  if (!stopped_) (void)stop();
}

Status CuptiTracer::stop() {
  if (stopped_) return stop_status_;
  stopped_ = true;
  // stop_session is idempotent: atexit or a signal may have got there first.
  stop_status_ = stop_session(static_cast<Session*>(session_), false);
  return stop_status_;
}

Status CuptiTracer::flush() {
  auto* s = static_cast<Session*>(session_);
  if (g_session.load() != s) return Status::ok();  // stopped
  ThreadState& ts = thread_state();
  bool was = ts.in_callback;
  ts.in_callback = true;
  CUptiResult r = cuptiActivityFlushAll(0);
  ts.in_callback = was;
  if (r != CUPTI_SUCCESS) return Status::run_failure("cuptiActivityFlushAll: " + cupti_error_string(r));
  std::lock_guard<std::mutex> lock(s->writer_mu);
  if (s->closed) return Status::ok();
  return s->writer->flush();
}

uint64_t CuptiTracer::dropped() const { return static_cast<Session*>(session_)->dropped.load(); }

TracerStats CuptiTracer::stats() const {
  auto* s = static_cast<Session*>(session_);
  std::lock_guard<std::mutex> lock(s->writer_mu);
  return s->closed ? s->final_stats : collect_stats(s);
}

bool CuptiTracer::active() { return g_session.load() != nullptr; }

void CuptiTracer::tag_next_allocation(std::string_view scope, std::string_view name, Category category) {
  ThreadState& ts = thread_state();
  ts.pending_tag = true;
  ts.tag_scope.assign(scope);
  ts.tag_name.assign(name);
  ts.tag_category = category;
}

void CuptiTracer::clear_allocation_tag() { thread_state().pending_tag = false; }

}  // namespace moeprof::profiler
