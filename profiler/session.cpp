// The process-wide recording session: start (version check, the CUPTI subscriber, the writer, the
// callbacks of the API table, activity kinds, process hooks) and stop (flush, CUDA-graph memory,
// the tracer's statistics in the metadata, END frame).
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "profiler/tracer_state.h"

extern "C" int moeprof_nvtx_static_injection_anchor();
extern "C" int moeprof_nvtx_static_injection_enabled;

namespace moeprof::profiler::detail {

std::atomic<Session*> g_session{nullptr};
std::atomic<bool> g_forked_child{false};

namespace {

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

std::string subscriber_conflict_message(const char* holder) {
  std::string m =
      "another CUPTI subscriber is already active in this process";
  if (holder != nullptr && holder[0] != 0) m += std::string(" (") + holder + ")";
  m += "; only one is allowed on this CUDA/driver version. Likely holders: Nsight Systems or Nsight "
       "Compute (nsys/ncu), compute-sanitizer, cuda-gdb, PyTorch's Kineto profiler (torch.profiler), "
       "or a second moeprof tracer. Run without them";
  return m;
}

CUpti_CallbackDomain cupti_domain(ApiDomain d) {
  return d == ApiDomain::kRuntime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
}

}  // namespace

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
    t.allocs_with_stack = a.allocs_with_stack;
  }
  if (s->stacks) {
    t.stacks_captured = s->stacks->captured();
    t.python_stacks = s->stacks->python_captured();
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
    if (s->stacks) {
      x["tracer.allocs_with_stack"] = std::to_string(t.allocs_with_stack);
      x["tracer.stacks_captured"] = std::to_string(t.stacks_captured);
      x["tracer.stacks_with_python"] = std::to_string(t.python_stacks);
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

Result<Session*> start_session(const std::string& trace_path, const RunMeta& meta, const TracerOptions& options) {
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
  x["tracer.stacks"] = stack_mode_name(options.stacks);
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
  if (options.stacks != StackMode::kNone) s->stacks = std::make_unique<StackCollector>(options.stacks);
  s->assembler = std::make_unique<TraceAssembler>(s->writer.get(), &s->table, s->stacks.get());

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

  // The API callbacks: every id of the table (api_table.h), launches only for uses.
  if (options.attribution || options.uses) {  // uses: the allocation callbacks keep the live map
    for (const ApiEntry& e : api_table()) {
      if (e.kind == ApiKind::kLaunch) continue;
      r = cuptiEnableCallback(1, s->subscriber, cupti_domain(e.domain), e.cbid);
      if (r != CUPTI_SUCCESS)
        return fail(e.domain == ApiDomain::kRuntime ? "enabling runtime API callbacks" : "enabling driver API callbacks", r);
    }
    if (options.attribution) enable_nvtx_callbacks(s->subscriber, x);
  }
  if (options.uses) {
    for (const ApiEntry& e : api_table()) {
      if (e.kind != ApiKind::kLaunch) continue;
      r = cuptiEnableCallback(1, s->subscriber, cupti_domain(e.domain), e.cbid);
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
  return s;
}

}  // namespace moeprof::profiler::detail
