// The one event model shared by every recorder (CPU recorder, CUPTI tracer) and by the planner.
// A trace is a list of fixed-size records plus an interned string table plus run metadata.
// The on-disk format (.mtrace) is defined in trace_io.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"

namespace moeprof {

// What an allocation holds. kGraph is memory owned by CUDA graphs (read from the driver, not
// from allocation records).
enum class Category : uint8_t {
  kUnknown = 0,
  kWeights = 1,
  kKvCache = 2,
  kActivation = 3,
  kWorkspace = 4,
  kCommunication = 5,
  kGraph = 6,
};
inline constexpr int kNumCategories = 7;
std::string_view category_name(Category c);
// Parses a category name ("weights", "kv_cache", ...); returns false if unknown.
bool parse_category(std::string_view s, Category* out);
// "Activation memory" in moeprof is everything that is neither weights nor KV cache (and not
// CUDA-graph pools, which are reported on their own). Defined once here; see docs/metrics.md.
constexpr bool counts_as_activation(Category c) {
  return c == Category::kActivation || c == Category::kWorkspace || c == Category::kCommunication ||
         c == Category::kUnknown;
}

enum class EventKind : uint8_t {
  kAlloc = 1,        // address, bytes, device, stream, mem kind; name/scope/category when known
  kFree = 2,         // address, device (bytes may be 0 = unknown; the replay takes the alloc's)
  kUse = 3,          // an op (name_id) reads/writes the allocation at address; flags: kUseRead/kUseWrite
  kMarkerBegin = 4,  // phase/range begin, name_id = marker name, scope_id = enclosing scope
  kMarkerEnd = 5,
  kKernel = 6,       // a kernel ran: timestamp = start, bytes = duration ns, name_id = kernel name
  kPoolReserve = 7,  // memory-pool reserved size changed: bytes = new reserved size, address = pool
  kGraphMem = 8,     // CUDA-graph memory in use: bytes = current used (driver attribute)
};
inline constexpr uint8_t kMaxEventKind = 8;

enum class MemKind : uint8_t {
  kHost = 0,          // CPU backend allocations
  kDevice = 1,        // cudaMalloc / cuMemAlloc
  kStreamOrdered = 2, // cudaMallocAsync from a memory pool
  kSymmetric = 3,     // NCCL symmetric-memory window
  kManaged = 4,
  kPinned = 5,
  kOther = 6,
};
inline constexpr uint8_t kMaxMemKind = 6;

// Record flags.
inline constexpr uint16_t kUseRead = 1u << 0;
inline constexpr uint16_t kUseWrite = 1u << 1;
inline constexpr uint16_t kFlagInferredScope = 1u << 2;  // scope came from an NVTX range, not a tag

// One event. Plain struct, written to disk as is (little-endian), 64 bytes.
struct TraceRecord {
  uint64_t timestamp_ns = 0;  // monotonic, ns since an arbitrary epoch of the process
  uint64_t address = 0;
  uint64_t bytes = 0;
  uint64_t seq = 0;           // sequence / correlation id (unique per alloc in CPU traces)
  uint32_t name_id = 0;       // interned strings; 0 = none
  uint32_t scope_id = 0;      // e.g. "layer.17/moe/experts"
  uint32_t shape_id = 0;      // e.g. "16384x7168"
  uint32_t stream = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint16_t device = 0;
  uint8_t kind = 0;           // EventKind
  uint8_t category = 0;       // Category
  uint8_t dtype = 0;          // DType
  uint8_t mem_kind = 0;       // MemKind
  uint16_t flags = 0;
};
static_assert(sizeof(TraceRecord) == 64, "TraceRecord is the on-disk record: keep it 64 bytes");

// Run metadata. Known keys have typed fields; anything else goes to `extra`.
struct RunMeta {
  std::string name;        // run name (defaults to the mode or the file stem)
  std::string model;
  std::string mode;        // baseline | reuse | traced | ...
  std::string backend;     // cpu | cuda | cupti
  std::string device_name;
  std::string moeprof_version;
  int64_t tokens = 0;
  int64_t layers = 0;
  int tp_rank = 0;
  int tp_size = 1;
  std::map<std::string, std::string> extra;  // e.g. "tp_emulated"="true", "weights"="shared"
};

// Interns strings; id 0 is the empty string.
class StringTable {
 public:
  StringTable() { strings_.emplace_back(); index_.emplace(std::string(), 0); }
  uint32_t intern(std::string_view s);
  // Looks up without inserting; returns false if absent.
  bool find(std::string_view s, uint32_t* id) const;
  const std::string& get(uint32_t id) const { return id < strings_.size() ? strings_[id] : strings_[0]; }
  size_t size() const { return strings_.size(); }
  // Appends a string with the next id (used by readers); returns its id.
  uint32_t append(std::string s);

 private:
  std::vector<std::string> strings_;
  std::unordered_map<std::string, uint32_t> index_;
};

// A trace in memory: what a reader returns and what the planner replays.
struct Trace {
  RunMeta meta;
  StringTable strings;
  std::vector<TraceRecord> records;
  uint64_t dropped_records = 0;   // reported by the recorder (e.g. CUPTI buffers lost)
  bool truncated = false;         // the file ended mid-frame (e.g. the program crashed)
  std::string truncation_note;    // "truncated at byte 123456: ..." when truncated
  std::string source_path;

  // Convenience used by tests and recorders building traces in memory.
  TraceRecord& add(EventKind kind, uint64_t ts, uint64_t address, uint64_t bytes);
  std::string_view str(uint32_t id) const { return strings.get(id); }
};

std::string_view event_kind_name(EventKind k);
std::string_view mem_kind_name(MemKind k);

}  // namespace moeprof
