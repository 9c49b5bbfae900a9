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

uint32_t StringTable::intern(std::string_view s) {
  auto it = index_.find(std::string(s));
  if (it != index_.end()) return it->second;
  return append(std::string(s));
}

bool StringTable::find(std::string_view s, uint32_t* id) const {
  auto it = index_.find(std::string(s));
  if (it == index_.end()) return false;
  *id = it->second;
  return true;
}

uint32_t StringTable::append(std::string s) {
  auto id = static_cast<uint32_t>(strings_.size());
  index_.emplace(s, id);
  strings_.push_back(std::move(s));
  return id;
}

TraceRecord& Trace::add(EventKind kind, uint64_t ts, uint64_t address, uint64_t bytes) {
  TraceRecord r;
  r.kind = static_cast<uint8_t>(kind);
  r.timestamp_ns = ts;
  r.address = address;
  r.bytes = bytes;
  r.seq = records.size();
  records.push_back(r);
  return records.back();
}

}  // namespace moeprof
