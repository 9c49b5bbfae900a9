// CuptiTracer: the public face of the process-wide recording session. The tracer's parts:
//   session.cpp           start/stop, CUDA-graph memory, statistics and metadata
//   activity_buffers.cpp  CUPTI activity buffers, decoded into the trace
//   api_callbacks.cpp     the subscriber's callback: attribution and the live map of uses
//   api_table.{h,cpp}     the one table of runtime/driver callback ids and their decoders
//   nvtx_callbacks.cpp    per-thread NVTX range stacks
//   launch_uses.cpp       kernel-launch argument scan -> kUse records
//   process_hooks.cpp     atexit, fork, signal hooks
//   tracer_state.h        the state they share (private)
#include "profiler/cupti_tracer.h"

#include <cupti.h>

#include "profiler/tracer_state.h"

namespace moeprof::profiler {

using detail::g_session;
using detail::Session;
using detail::ThreadState;
using detail::thread_state;

std::string cupti_error_string(int result) {
  const char* s = nullptr;
  if (cuptiGetResultString(static_cast<CUptiResult>(result), &s) != CUPTI_SUCCESS || s == nullptr)
    s = "unknown CUPTI error";
  return std::string(s) + " (" + std::to_string(result) + ")";
}

Result<std::unique_ptr<CuptiTracer>> CuptiTracer::start(const std::string& trace_path, const RunMeta& meta,
                                                        const TracerOptions& options) {
  Result<Session*> s = detail::start_session(trace_path, meta, options);
  if (!s.is_ok()) return s.status();
  return std::unique_ptr<CuptiTracer>(new CuptiTracer(trace_path, *s));
}

CuptiTracer::~CuptiTracer() {
  if (!stopped_) (void)stop();
}

Status CuptiTracer::stop() {
  if (stopped_) return stop_status_;
  stopped_ = true;
  // stop_session is idempotent: atexit or a signal may have got there first.
  stop_status_ = detail::stop_session(static_cast<Session*>(session_), false);
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

void CuptiTracer::add_meta_extra(const std::map<std::string, std::string>& extra) {
  auto* s = static_cast<Session*>(session_);
  std::lock_guard<std::mutex> lock(s->writer_mu);
  if (s->closed) return;
  for (const auto& [k, v] : extra) s->meta.extra.emplace(k, v);
}

uint64_t CuptiTracer::dropped() const { return static_cast<Session*>(session_)->dropped.load(); }

TracerStats CuptiTracer::stats() const {
  auto* s = static_cast<Session*>(session_);
  std::lock_guard<std::mutex> lock(s->writer_mu);
  return s->closed ? s->final_stats : detail::collect_stats(s);
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
