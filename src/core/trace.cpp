#include "core/trace.h"

#include <array>

namespace moeprof {

namespace {
constexpr std::array<std::string_view, kNumCategories> kCategoryNames = {
    "unknown", "weights", "kv_cache", "activation", "workspace", "communication", "graph"};
}

std::string_view category_name(Category c) {
  auto i = static_cast<size_t>(c);
  return i < kCategoryNames.size() ? kCategoryNames[i] : "unknown";
}

bool parse_category(std::string_view s, Category* out) {
  for (size_t i = 0; i < kCategoryNames.size(); ++i) {
    if (kCategoryNames[i] == s) {
      *out = static_cast<Category>(i);
      return true;
    }
  }
  return false;
}

std::string_view event_kind_name(EventKind k) {
  switch (k) {
    case EventKind::kAlloc: return "alloc";
    case EventKind::kFree: return "free";
    case EventKind::kUse: return "use";
    case EventKind::kMarkerBegin: return "marker_begin";
    case EventKind::kMarkerEnd: return "marker_end";
    case EventKind::kKernel: return "kernel";
    case EventKind::kPoolReserve: return "pool_reserve";
    case EventKind::kGraphMem: return "graph_mem";
    case EventKind::kCounter: return "counter";
  }
  return "invalid";
}

std::string_view mem_kind_name(MemKind k) {
  switch (k) {
    case MemKind::kHost: return "host";
    case MemKind::kDevice: return "device";
    case MemKind::kStreamOrdered: return "stream_ordered";
    case MemKind::kSymmetric: return "symmetric";
    case MemKind::kManaged: return "managed";
    case MemKind::kPinned: return "pinned";
    case MemKind::kOther: return "other";
  }
  return "invalid";
}

StrId StringTable::intern(std::string_view s) {
  auto it = index_.find(std::string(s));
  if (it != index_.end()) return it->second;
  return append(std::string(s));
}

bool StringTable::find(std::string_view s, StrId* id) const {
  auto it = index_.find(std::string(s));
  if (it == index_.end()) return false;
  *id = it->second;
  return true;
}

StrId StringTable::append(std::string s) {
  auto id = static_cast<StrId>(strings_.size());
  index_.emplace(s, id);
  strings_.push_back(std::move(s));
  return id;
}

size_t StackTable::FrameHash::operator()(const StackFrame& f) const {
  uint64_t h = (uint64_t(index_of(f.function)) << 32) ^ index_of(f.file);
  h = h * 0x9E3779B97F4A7C15ull ^ (uint64_t(f.line) << 8 | static_cast<uint8_t>(f.kind));
  return static_cast<size_t>(h * 0xBF58476D1CE4E5B9ull);
}

size_t StackTable::VecHash::operator()(const std::vector<uint32_t>& v) const {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t x : v) h = (h ^ x) * 1099511628211ull;
  return static_cast<size_t>(h);
}

uint32_t StackTable::intern_frame(const StackFrame& f) {
  auto it = frame_index_.find(f);
  if (it != frame_index_.end()) return it->second;
  return append_frame(f);
}

uint32_t StackTable::append_frame(const StackFrame& f) {
  auto id = static_cast<uint32_t>(frames_.size());
  frames_.push_back(f);
  frame_index_.emplace(f, id);
  return id;
}

StackId StackTable::intern_stack(const std::vector<uint32_t>& frame_ids) {
  if (frame_ids.empty()) return StackId::kNone;
  auto it = stack_index_.find(frame_ids);
  if (it != stack_index_.end()) return it->second;
  return append_stack(frame_ids);
}

StackId StackTable::append_stack(std::vector<uint32_t> frame_ids) {
  auto id = static_cast<StackId>(stacks_.size());
  stack_index_.emplace(frame_ids, id);
  stacks_.push_back(std::move(frame_ids));
  return id;
}

TraceRecord& Trace::add(EventKind kind, uint64_t ts, uint64_t address, uint64_t bytes) {
  TraceRecord r;
  r.kind = kind;
  r.timestamp_ns = ts;
  r.address = address;
  r.bytes = bytes;
  r.seq = records.size();
  records.push_back(r);
  return records.back();
}

}  // namespace moeprof
