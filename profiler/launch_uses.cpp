// Kernel uses (TracerOptions::uses): at the ENTER of each kernel launch, every aligned 8-byte word
// of its arguments is looked up in the live-allocation map (kept by api_callbacks.cpp) and each
// allocation hit gives one kUse record (profiler/kernel_args.h for the scan itself). The launch's
// parameter layout and name come from the driver (through dlsym), cached per function handle.
#include <dlfcn.h>

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "profiler/tracer_state.h"

namespace moeprof::profiler::detail {
namespace {

static_assert(CU_LAUNCH_PARAM_END_AS_INT == kLaunchParamEnd);
static_assert(CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT == kLaunchParamBufferPointer);
static_assert(CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT == kLaunchParamBufferSize);

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

}  // namespace

// A kernel launch (ENTER): one kUse record per live allocation that an argument word points into.
void handle_launch(Session* s, ThreadState& ts, const ApiEntry& api, const CUpti_CallbackData* cb) {
  if (cb->callbackSite != CUPTI_API_ENTER || cb->functionParams == nullptr) return;
  uint64_t now = 0;
  cuptiGetTimestamp(&now);
  ApiArgs args;
  if (api.kind != ApiKind::kLaunch || !api.decode(cb->functionParams, &args)) return;
  const void* f = args.function;
  void** params = args.kernel_params;
  void** extra = args.extra;
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

}  // namespace moeprof::profiler::detail
