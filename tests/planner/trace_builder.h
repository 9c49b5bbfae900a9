// Builds small traces in memory for the planner tests.
#pragma once

#include <string>

#include "core/trace.h"

namespace moeprof::planner::testing {

class TraceBuilder {
 public:
  explicit TraceBuilder(std::string name = "run") { trace.meta.name = std::move(name); }

  TraceRecord& alloc(uint64_t ts, uint64_t address, uint64_t bytes, Category c = Category::kActivation,
                     const std::string& scope = "", const std::string& name = "", uint16_t device = 0) {
    TraceRecord& r = trace.add(EventKind::kAlloc, ts, address, bytes);
    r.category = c;
    r.scope_id = trace.strings.intern(scope);
    r.name_id = trace.strings.intern(name);
    r.device = device;
    r.seq = next_seq_++;
    return r;
  }
  TraceRecord& free(uint64_t ts, uint64_t address, uint16_t device = 0, uint64_t bytes = 0) {
    TraceRecord& r = trace.add(EventKind::kFree, ts, address, bytes);
    r.device = device;
    r.seq = next_seq_++;
    return r;
  }
  TraceRecord& use(uint64_t ts, uint64_t address, uint16_t device = 0) {
    TraceRecord& r = trace.add(EventKind::kUse, ts, address, 0);
    r.device = device;
    r.seq = next_seq_++;
    r.flags = kUseRead;
    return r;
  }

  Trace trace;

 private:
  uint64_t next_seq_ = 1;
};

}  // namespace moeprof::planner::testing
