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
  kCounter = 9,      // a counter's new value: name_id = counter ("kv_pool.tokens_used"), bytes = value (a count),
                     // address = the step it belongs to (serving runs), scope_id = enclosing marker
};
inline constexpr uint8_t kMaxEventKind = 9;

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
// An allocation whose size this run's data set (the executor's MoE rows under a drawn or the
// router's routing, EP buffers sized by the rows received): `moeprof fit` gives its site no law.
inline constexpr uint16_t kFlagDataDependent = 1u << 3;

// Typed ids into a trace's tables (strings, call stacks). 0 is "none" in both.
enum class StrId : uint32_t { kNone = 0 };
enum class StackId : uint32_t { kNone = 0 };
constexpr uint32_t index_of(StrId id) { return static_cast<uint32_t>(id); }
constexpr uint32_t index_of(StackId id) { return static_cast<uint32_t>(id); }

// One event. Plain struct, written to disk as is (little-endian), 64 bytes. The enum fields are
// one byte each; a value read from disk is range-checked by the reader (validate_record) before
// anything switches on it.
struct TraceRecord {
  uint64_t timestamp_ns = 0;  // monotonic, ns since an arbitrary epoch of the process
  uint64_t address = 0;
  uint64_t bytes = 0;
  uint64_t seq = 0;           // sequence / correlation id (unique per alloc in CPU traces)
  StrId name_id{};            // interned strings; kNone = none
  StrId scope_id{};           // e.g. "layer.17/moe/experts"
  StrId shape_id{};           // e.g. "16384x7168"
  uint32_t stream = 0;
  StackId stack_id{};         // call stack at allocation (format v2; v1 stored the process id here)
  uint32_t tid = 0;
  uint16_t device = 0;
  EventKind kind{};
  Category category = Category::kUnknown;
  DType dtype = DType::kUnknown;
  MemKind mem_kind = MemKind::kHost;
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
  uint32_t pid = 0;        // the recording process (0 = unknown)
  std::map<std::string, std::string> extra;  // e.g. "tp_emulated"="true", "weights"="shared"
};

// Interns strings; id 0 is the empty string.
class StringTable {
 public:
  StringTable() { strings_.emplace_back(); index_.emplace(std::string(), StrId::kNone); }
  StrId intern(std::string_view s);
  // Looks up without inserting; returns false if absent.
  bool find(std::string_view s, StrId* id) const;
  const std::string& get(StrId id) const {
    return index_of(id) < strings_.size() ? strings_[index_of(id)] : strings_[0];
  }
  size_t size() const { return strings_.size(); }
  // Appends a string with the next id (used by readers); returns its id.
  StrId append(std::string s);
  const std::vector<std::string>& all() const { return strings_; }

 private:
  std::vector<std::string> strings_;
  std::unordered_map<std::string, StrId> index_;
};

// A frame of a call stack. Python frames carry the source file and line; native frames the
// function (demangled), the source file and line when debug information has them, else the
// shared object.
enum class FrameKind : uint8_t { kNative = 0, kPython = 1 };
inline constexpr uint8_t kMaxFrameKind = 1;
struct StackFrame {
  StrId function{};
  StrId file{};
  uint32_t line = 0;
  FrameKind kind = FrameKind::kNative;
  bool operator==(const StackFrame& o) const {  // spelled out: CUDA sources include this as C++17
    return function == o.function && file == o.file && line == o.line && kind == o.kind;
  }
};

// Interned call stacks: frames are interned, and a stack is a list of frame indices, innermost
// first. StackId 0 is the empty stack (no stack recorded). Frame and stack ids are consecutive.
class StackTable {
 public:
  StackTable() { stacks_.emplace_back(); }
  uint32_t intern_frame(const StackFrame& f);
  StackId intern_stack(const std::vector<uint32_t>& frame_ids);
  // Appends with the next id (readers); frames of a stack must already exist.
  uint32_t append_frame(const StackFrame& f);
  StackId append_stack(std::vector<uint32_t> frame_ids);
  const StackFrame& frame(uint32_t id) const { return frames_.at(id); }
  const std::vector<uint32_t>& stack(StackId id) const {
    return index_of(id) < stacks_.size() ? stacks_[index_of(id)] : stacks_[0];
  }
  bool has_frame(const StackFrame& f) const { return frame_index_.count(f) != 0; }
  bool has_stack(const std::vector<uint32_t>& v) const { return stack_index_.count(v) != 0; }
  size_t frame_count() const { return frames_.size(); }
  size_t stack_count() const { return stacks_.size(); }

 private:
  struct FrameHash {
    size_t operator()(const StackFrame& f) const;
  };
  struct VecHash {
    size_t operator()(const std::vector<uint32_t>& v) const;
  };
  std::vector<StackFrame> frames_;
  std::unordered_map<StackFrame, uint32_t, FrameHash> frame_index_;
  std::vector<std::vector<uint32_t>> stacks_;
  std::unordered_map<std::vector<uint32_t>, StackId, VecHash> stack_index_;
};

// A trace in memory: what a reader returns and what the planner replays.
struct Trace {
  RunMeta meta;
  StringTable strings;
  StackTable stacks;
  std::vector<TraceRecord> records;
  uint64_t dropped_records = 0;   // reported by the recorder (e.g. CUPTI buffers lost)
  bool truncated = false;         // the file ended mid-frame (e.g. the program crashed)
  std::string truncation_note;    // "truncated at byte 123456: ..." when truncated
  std::string source_path;

  // Convenience used by tests and recorders building traces in memory.
  TraceRecord& add(EventKind kind, uint64_t ts, uint64_t address, uint64_t bytes);
  std::string_view str(StrId id) const { return strings.get(id); }
};

std::string_view event_kind_name(EventKind k);
std::string_view mem_kind_name(MemKind k);

}  // namespace moeprof
