// The CUPTI subscriber's callback. Every runtime/driver id is looked up in the one table
// (api_table.h): allocation and release APIs give the attribution of the MEMORY2 record that will
// follow (thread, NVTX scope or tag, keyed by correlation id) and, with TracerOptions::uses, the
// live-allocation map; launches go to the argument scan (launch_uses.cpp). NVTX callbacks keep the
// range stacks (nvtx_callbacks.cpp). Nothing here throws into CUPTI or calls CUDA.
#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <vector>

#include "profiler/nvtx_scope.h"
#include "profiler/tracer_state.h"

namespace moeprof::profiler::detail {

ThreadState& thread_state() {
  thread_local ThreadState ts;
  return ts;
}

uint32_t current_tid() { return static_cast<uint32_t>(::syscall(SYS_gettid)); }

bool api_succeeded(const CUpti_CallbackData* cb) {
  // cudaError_t / CUresult: both int-sized enums, 0 = success.
  return cb->functionReturnValue != nullptr && *static_cast<const int*>(cb->functionReturnValue) == 0;
}

namespace {

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
  if (is_alloc && s->stacks) a.stack = s->stacks->capture();
  s->table.put(corr, partner, a);
}

// Attribution (opt.attribution): at the EXIT of an allocation or release API. A runtime call
// (cudaMalloc) nests driver calls (cuMemAlloc_v2): the runtime EXIT records both correlation ids.
void handle_api(Session* s, ThreadState& ts, const ApiEntry& api, const CUpti_CallbackData* cb) {
  if (cb == nullptr) return;
  const bool alloc = is_allocation(api.kind);
  if (!alloc && !is_release(api.kind)) return;
  if (api.domain == ApiDomain::kRuntime) {
    if (cb->callbackSite == CUPTI_API_ENTER) {
      if (ts.runtime_depth++ == 0) ts.nested_driver_corr = 0;
      return;
    }
    if (ts.runtime_depth > 0) --ts.runtime_depth;
    if (ts.runtime_depth != 0) return;
    if (api_succeeded(cb)) {
      record_call(s, ts, cb->correlationId, ts.nested_driver_corr, alloc);
    } else if (alloc) {
      ts.pending_tag = false;
    }
    ts.nested_driver_corr = 0;
  } else {
    if (cb->callbackSite != CUPTI_API_EXIT) return;
    if (ts.runtime_depth > 0) {  // inside cudaMalloc & co: the runtime exit records both ids
      ts.nested_driver_corr = cb->correlationId;
      return;
    }
    if (api_succeeded(cb)) {
      record_call(s, ts, cb->correlationId, 0, alloc);
    } else if (alloc) {
      ts.pending_tag = false;
    }
  }
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

// The live map (opt.uses): device allocations at a successful EXIT (pointer and size from the
// parameters, device from the context), removal at the free's ENTER (before another thread can be
// handed the same address). Host (pinned) allocations are not tracked.
void track_allocation(Session* s, ThreadState& ts, const ApiEntry& api, const CUpti_CallbackData* cb) {
  if (!is_device_memory(api.kind) || cb->functionParams == nullptr) return;
  ApiArgs args;
  if (is_allocation(api.kind)) {
    if (cb->callbackSite != CUPTI_API_EXIT || !api_succeeded(cb)) return;
    if (!api.decode(cb->functionParams, &args) || args.address == 0 || args.bytes == 0) return;
    const uint16_t dev = device_of(ts, cb->context);  // a CUPTI call: before taking the lock
    std::lock_guard<std::mutex> lock(s->live_mu);
    s->live.insert(args.address, args.bytes, dev);
  } else {
    if (cb->callbackSite != CUPTI_API_ENTER) return;
    if (!api.decode(cb->functionParams, &args) || args.address == 0) return;
    std::lock_guard<std::mutex> lock(s->live_mu);
    s->live.erase(args.address);
  }
}

}  // namespace

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
      const ApiEntry* api =
          find_api(domain == CUPTI_CB_DOMAIN_RUNTIME_API ? ApiDomain::kRuntime : ApiDomain::kDriver, cbid);
      if (api == nullptr) {
        // not an id of the table (never enabled by start_session)
      } else if (api->kind == ApiKind::kLaunch) {
        if (s->opt.uses && cb != nullptr) handle_launch(s, ts, *api, cb);
      } else {
        if (s->opt.uses && cb != nullptr) track_allocation(s, ts, *api, cb);
        if (s->opt.attribution) handle_api(s, ts, *api, cb);
      }
    }
  } catch (...) {
    // Never let an exception cross into CUPTI; the allocation stays unattributed.
  }
  ts.in_callback = false;
}

}  // namespace moeprof::profiler::detail
