// Attribution of allocation records: what the allocating thread was doing (thread id, NVTX scope,
// tensor tag), captured in the synchronous API callback and keyed by correlation id, then joined
// to the MEMORY2 activity record that arrives later (possibly much later, from another thread).
// Pure C++ (no CUPTI): the join and the TraceRecord assembly are tested on a CPU-only machine.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/trace.h"
#include "core/trace_io.h"
#include "profiler/activity_decode.h"
#include "profiler/stack_capture.h"

namespace moeprof::profiler {

struct Attribution {
  uint32_t tid = 0;
  uint32_t scope = 0;  // id in AttributionTable's string pool (0 = none)
  uint32_t name = 0;
  Category category = Category::kUnknown;
  uint16_t flags = 0;  // kFlagInferredScope when the scope came from NVTX ranges
  uint32_t stack = 0;  // id in the session's StackCollector (0 = none)
};

// Thread-safe. An API call made through the runtime (cudaMalloc) nests a driver call (cuMemAlloc)
// with its own correlation id; the activity record carries one of the two. Both are stored as
// partners: taking either removes both.
class AttributionTable {
 public:
  explicit AttributionTable(size_t max_pending = size_t{1} << 18) : max_pending_(max_pending) {}

  uint32_t intern(std::string_view s);
  std::string str(uint32_t id) const;

  // partner = 0: none.
  void put(uint32_t correlation, uint32_t partner, const Attribution& a);
  bool take(uint32_t correlation, Attribution* out);

  size_t pending() const;
  uint64_t pruned() const;  // entries dropped unjoined because the table was full

 private:
  struct Entry {
    Attribution a;
    uint32_t partner = 0;
  };
  void prune_locked();

  mutable std::mutex mu_;
  size_t max_pending_;
  std::map<uint32_t, Entry> entries_;
  std::deque<std::string> strings_{std::string()};
  std::unordered_map<std::string, uint32_t> index_{{std::string(), 0}};
  uint64_t pruned_ = 0;
};

struct AssemblerStats {
  uint64_t allocs = 0, frees = 0, pool_records = 0, kernels = 0;
  uint64_t allocs_joined = 0;   // alloc records matched to an API callback (tid known)
  uint64_t allocs_scoped = 0;   // ... with a scope (NVTX path or tag)
  uint64_t allocs_tagged = 0;   // ... with a moeprof.tensor tag
  uint64_t frees_joined = 0;
  uint64_t allocs_with_stack = 0;
};

// RecordSink that joins attribution, tracks pool sizes, interns strings and appends to a
// TraceWriter. Not thread-safe: the caller serializes (the tracer holds its writer mutex).
class TraceAssembler : public RecordSink {
 public:
  TraceAssembler(TraceWriter* writer, AttributionTable* table, StackCollector* stacks = nullptr);
  void on_record(const DecodedRecord& r) override;
  const AssemblerStats& stats() const { return stats_; }
  // Appends a record as is (e.g. kGraphMem at flush).
  Status append(const TraceRecord& r) { return writer_->append(r); }
  StrId intern(std::string_view s) { return writer_->intern(s); }

 private:
  StrId writer_id(uint32_t local_id);
  StackId writer_stack(uint32_t local_stack);

  TraceWriter* writer_;
  AttributionTable* table_;
  StackCollector* stacks_;
  std::unordered_map<uint32_t, StackId> stack_to_writer_;
  PoolTracker pools_;
  std::vector<StrId> local_to_writer_;              // kNone = not yet interned (except id 0)
  std::unordered_map<const char*, StrId> kernel_names_;
  AssemblerStats stats_;
};

}  // namespace moeprof::profiler
