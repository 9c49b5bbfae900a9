// Entry points for bench_pystack.py: a capture of the calling thread's Python stack as the CUPTI
// tracer makes it at each allocation (StackCollector::capture, frames interned, nothing resolved),
// and a call that does nothing, so that the script can subtract the cost of the ctypes call itself.
#include <cstdint>

#include "profiler/stack_capture.h"

namespace {
moeprof::profiler::StackCollector& collector() {
  static moeprof::profiler::StackCollector c(moeprof::profiler::StackMode::kPython);
  return c;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) uint32_t moeprof_bench_capture() { return collector().capture(); }
extern "C" __attribute__((visibility("default"))) uint32_t moeprof_bench_noop() { return 1; }
// The number of frames of stack `id` (to check that the walk saw the whole stack).
extern "C" __attribute__((visibility("default"))) int moeprof_bench_depth(uint32_t id) {
  return static_cast<int>(collector().resolve(id).size());
}
