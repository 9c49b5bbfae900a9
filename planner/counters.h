// Counter samples (EventKind::kCounter records) gathered from a trace as its records go by, in
// record order; the in-memory and the streamed analysis both use it. Memory: one point per
// counter record.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/trace.h"
#include "planner/analysis.h"

namespace moeprof::planner {

class CounterCollector {
 public:
  // Takes a kCounter record (anything else is ignored).
  void add(const TraceRecord& r);
  // The series with their names resolved from the trace's string table, in order of first sample.
  std::vector<CounterSeries> finish(const std::vector<std::string>& strings);

 private:
  std::unordered_map<uint64_t, size_t> index_;  // (device << 32 | name id) -> series
  std::vector<uint32_t> name_ids_;
  std::vector<CounterSeries> series_;
};

}  // namespace moeprof::planner
