// Pure decoding of CUPTI activity records into moeprof TraceRecords. No CUDA, no CUPTI state:
// only the record layouts of cupti_activity.h (CUDA 13: CUpti_ActivityMemory4,
// CUpti_ActivityMemoryPool3, CUpti_ActivityKernel10) and cuptiActivityGetNextRecord, which walks a
// buffer without a GPU. Testable on a CPU-only machine (tests/profiler/activity_decode_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include <cupti_activity.h>

#include "core/trace.h"

namespace moeprof::profiler {

// One decoded activity record. `record` holds everything the activity record says; strings are
// left as pointers (owned by CUPTI, valid while the buffer is) for the sink to intern.
struct DecodedRecord {
  TraceRecord record;               // kind, timestamp, address, bytes, seq (= correlation id),
                                    // device, stream, pid, mem_kind
  uint32_t correlation_id = 0;      // 0 = none
  const char* kernel_name = nullptr;  // kKernel only
  uint64_t pool_address = 0;        // kAlloc/kFree from a memory pool (stream-ordered), else 0
  uint64_t pool_size = 0;           // the pool's reserved size reported with the record, else 0
};

class RecordSink {
 public:
  virtual ~RecordSink() = default;
  virtual void on_record(const DecodedRecord& r) = 0;
};

// Record -> TraceRecord conversions. Return false for records moeprof does not keep (e.g. an
// INVALID memory operation); `out` is then unspecified.
bool convert_memory_record(const CUpti_ActivityMemory4& m, DecodedRecord* out);
bool convert_memory_pool_record(const CUpti_ActivityMemoryPool3& p, DecodedRecord* out);
bool convert_kernel_record(const CUpti_ActivityKernel10& k, DecodedRecord* out);
MemKind mem_kind_from_cupti(CUpti_ActivityMemoryKind kind, bool stream_ordered);

struct DecodeStats {
  size_t records = 0;   // records walked in the buffer
  size_t kept = 0;      // passed to the sink
  size_t skipped = 0;   // other activity kinds or unusable records
  bool error = false;   // cuptiActivityGetNextRecord failed before the end of the buffer
  int last_result = 0;  // CUptiResult that ended the walk (CUPTI_ERROR_MAX_LIMIT_REACHED = end)
};

// Walks the first `valid` bytes of an activity buffer and hands each kept record to `sink`.
// Returns the number of records kept.
size_t decode_activity_buffer(const uint8_t* buf, size_t valid, RecordSink& sink,
                              DecodeStats* stats = nullptr);

// Tracks the reserved size of each stream-ordered memory pool from the pool sizes that MEMORY2
// records carry (MEMORY_POOL records only come at create/trim/destroy), and emits a kPoolReserve
// record whenever a pool's size changes.
class PoolTracker {
 public:
  // Returns true and fills `out` (a kPoolReserve record) when `r`'s pool size differs from the
  // last one seen for that pool.
  bool observe(const DecodedRecord& r, TraceRecord* out);
  // A MEMORY_POOL record (already converted) sets the pool's size; returns it unchanged.
  void set(uint16_t device, uint64_t pool_address, uint64_t size);

 private:
  struct Key {
    uint16_t device;
    uint64_t address;
    bool operator==(const Key& o) const { return device == o.device && address == o.address; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<uint64_t>()(k.address) ^ k.device; }
  };
  std::unordered_map<Key, uint64_t, KeyHash> sizes_;
};

}  // namespace moeprof::profiler
