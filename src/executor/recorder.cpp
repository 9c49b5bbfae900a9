#include "executor/recorder.h"

#include <algorithm>
#include <sys/syscall.h>
#include <unistd.h>

namespace moeprof {

TraceRecorder::TraceRecorder(TraceWriter* writer, uint16_t device)
    : writer_(writer), device_(device), t0_(std::chrono::steady_clock::now()) {}

uint64_t TraceRecorder::now_ns() const {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_).count());
}

void TraceRecorder::append(TraceRecord r) {
  r.seq = seq_++;
  r.timestamp_ns = now_ns();
  r.device = device_;
  r.tid = static_cast<uint32_t>(::syscall(SYS_gettid));
  Status st = writer_->append(r);
  if (!st.is_ok() && status_.is_ok()) status_ = st;
}

void TraceRecorder::on_alloc(const Storage& s, const AllocTag& tag, DType dtype, const std::string& shape) {
  Live l{writer_->intern(tag.name), writer_->intern(tag.scope), writer_->intern(shape), tag.category, dtype};
  live_[s.id()] = l;
  TraceRecord r;
  r.kind = EventKind::kAlloc;
  r.address = reinterpret_cast<uint64_t>(s.data());
  r.bytes = s.bytes();
  r.name_id = l.name_id;
  r.scope_id = l.scope_id;
  r.shape_id = l.shape_id;
  r.category = l.category;
  r.dtype = l.dtype;
  r.mem_kind = s.mem_kind();
  if (tag.data_dependent) r.flags = kFlagDataDependent;
  append(r);
}

void TraceRecorder::on_free(const Storage& s) {
  TraceRecord r;
  r.kind = EventKind::kFree;
  r.address = reinterpret_cast<uint64_t>(s.data());
  r.bytes = s.bytes();
  r.mem_kind = s.mem_kind();
  auto it = live_.find(s.id());
  if (it != live_.end()) {
    r.name_id = it->second.name_id;
    r.scope_id = it->second.scope_id;
    r.shape_id = it->second.shape_id;
    r.category = it->second.category;
    r.dtype = it->second.dtype;
    live_.erase(it);
  }
  append(r);
}

void TraceRecorder::on_use(const Storage& s, const std::string& op, bool write) {
  TraceRecord r;
  r.kind = EventKind::kUse;
  r.address = reinterpret_cast<uint64_t>(s.data());
  r.bytes = s.bytes();
  r.name_id = writer_->intern(op);
  auto it = live_.find(s.id());
  if (it != live_.end()) r.category = it->second.category;
  r.scope_id = marker_scopes_.empty() ? StrId::kNone : marker_scopes_.back();
  r.flags = write ? kUseWrite : kUseRead;
  append(r);
}

// A kPoolReserve record: the pool's reserved size (the planner's pool_reserved_peak_bytes), not
// an allocation: the tensors inside it are recorded one by one.
void TraceRecorder::on_pool(uint64_t pool, uint64_t reserved_bytes, MemKind kind, const std::string& name) {
  TraceRecord r;
  r.kind = EventKind::kPoolReserve;
  r.address = pool;
  r.bytes = reserved_bytes;
  r.mem_kind = kind;
  r.category = kind == MemKind::kSymmetric ? Category::kCommunication : Category::kActivation;
  r.name_id = writer_->intern(name);
  append(r);
}

void TraceRecorder::on_counter(const std::string& name, uint64_t value, uint64_t step) {
  TraceRecord r;
  r.kind = EventKind::kCounter;
  r.address = step;
  r.bytes = value;
  r.name_id = writer_->intern(name);
  r.scope_id = marker_scopes_.empty() ? StrId::kNone : marker_scopes_.back();
  append(r);
}

void TraceRecorder::on_marker(const std::string& name, bool begin) {
  TraceRecord r;
  r.kind = begin ? EventKind::kMarkerBegin : EventKind::kMarkerEnd;
  r.name_id = writer_->intern(name);
  if (begin) {
    marker_scopes_.push_back(r.name_id);
  } else if (!marker_scopes_.empty()) {
    marker_scopes_.pop_back();
  }
  r.scope_id = marker_scopes_.empty() ? StrId::kNone : marker_scopes_.back();
  append(r);
}

void MemoryAccounting::on_alloc(const Storage& s, const AllocTag& tag, DType, const std::string&) {
  auto c = static_cast<size_t>(tag.category);
  if (tag.worst_only) {  // no bytes, no allocation: only the peaks under the worst routing
    worst_extra_[s.id()] = tag.worst_bytes;
    c_.current_total_worst += tag.worst_bytes;
    c_.peak_total_worst = std::max(c_.peak_total_worst, c_.current_total_worst);
    if (counts_as_activation(tag.category)) {
      c_.current_activation_worst += tag.worst_bytes;
      c_.peak_activation_worst = std::max(c_.peak_activation_worst, c_.current_activation_worst);
    }
    return;
  }
  c_.current[c] += s.bytes();
  c_.allocated[c] += s.bytes();
  c_.allocations[c] += 1;
  if (c_.current[c] > c_.peak[c]) c_.peak[c] = c_.current[c];
  c_.current_total += s.bytes();
  if (c_.current_total > c_.peak_total) c_.peak_total = c_.current_total;
  if (counts_as_activation(tag.category)) {
    c_.current_activation += s.bytes();
    if (c_.current_activation > c_.peak_activation) c_.peak_activation = c_.current_activation;
  }
  // The same under the worst routing: a routed tensor counts its worst_bytes.
  const uint64_t worst = tag.worst_bytes > s.bytes() ? tag.worst_bytes : s.bytes();
  if (worst != s.bytes()) worst_extra_[s.id()] = worst - s.bytes();
  c_.current_total_worst += worst;
  c_.peak_total_worst = std::max(c_.peak_total_worst, c_.current_total_worst);
  if (counts_as_activation(tag.category)) {
    c_.current_activation_worst += worst;
    c_.peak_activation_worst = std::max(c_.peak_activation_worst, c_.current_activation_worst);
  }
}

void MemoryAccounting::on_free(const Storage& s) {
  auto c = static_cast<size_t>(s.category());
  c_.current[c] -= s.bytes();
  c_.current_total -= s.bytes();
  if (counts_as_activation(s.category())) c_.current_activation -= s.bytes();
  uint64_t worst = s.bytes();
  if (auto it = worst_extra_.find(s.id()); it != worst_extra_.end()) {
    worst += it->second;
    worst_extra_.erase(it);
  }
  c_.current_total_worst -= worst;
  if (counts_as_activation(s.category())) c_.current_activation_worst -= worst;
}

}  // namespace moeprof
