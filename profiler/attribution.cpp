#include "profiler/attribution.h"

namespace moeprof::profiler {

uint32_t AttributionTable::intern(std::string_view s) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string key(s);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second;
  auto id = static_cast<uint32_t>(strings_.size());
  strings_.push_back(key);
  index_.emplace(std::move(key), id);
  return id;
}

std::string AttributionTable::str(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return id < strings_.size() ? strings_[id] : std::string();
}

void AttributionTable::put(uint32_t correlation, uint32_t partner, const Attribution& a) {
  if (correlation == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  entries_[correlation] = Entry{a, partner};
  if (partner != 0 && partner != correlation) entries_[partner] = Entry{a, correlation};
  if (entries_.size() > max_pending_) prune_locked();
}

bool AttributionTable::take(uint32_t correlation, Attribution* out) {
  if (correlation == 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(correlation);
  if (it == entries_.end()) return false;
  *out = it->second.a;
  uint32_t partner = it->second.partner;
  entries_.erase(it);
  if (partner != 0) {
    auto p = entries_.find(partner);
    if (p != entries_.end() && p->second.partner == correlation) entries_.erase(p);
  }
  return true;
}

void AttributionTable::prune_locked() {
  // Correlation ids grow over the process' life: the smallest are the oldest. Entries that were
  // never joined (failed calls, cudaFree(nullptr), APIs with no MEMORY2 record) end up here.
  size_t drop = entries_.size() / 4;
  auto it = entries_.begin();
  for (size_t i = 0; i < drop && it != entries_.end(); ++i) it = entries_.erase(it);
  pruned_ += drop;
}

size_t AttributionTable::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

uint64_t AttributionTable::pruned() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pruned_;
}

TraceAssembler::TraceAssembler(TraceWriter* writer, AttributionTable* table, StackCollector* stacks)
    : writer_(writer), table_(table), stacks_(stacks) {
  local_to_writer_.push_back(StrId::kNone);
}

StackId TraceAssembler::writer_stack(uint32_t local) {
  if (local == 0 || stacks_ == nullptr) return StackId::kNone;
  auto it = stack_to_writer_.find(local);
  if (it != stack_to_writer_.end()) return it->second;
  std::vector<uint32_t> frames;
  for (const ResolvedFrame& f : stacks_->resolve(local))
    frames.push_back(writer_->intern_frame(StackFrame{writer_->intern(f.function), writer_->intern(f.file), f.line, f.kind}));
  const StackId id = writer_->intern_stack(frames);
  stack_to_writer_.emplace(local, id);
  return id;
}

StrId TraceAssembler::writer_id(uint32_t local_id) {
  if (local_id == 0) return StrId::kNone;
  if (local_id >= local_to_writer_.size()) local_to_writer_.resize(local_id + 1, StrId::kNone);
  StrId& w = local_to_writer_[local_id];
  if (w == StrId::kNone) w = writer_->intern(table_->str(local_id));
  return w;
}

void TraceAssembler::on_record(const DecodedRecord& d) {
  TraceRecord r = d.record;
  const EventKind kind = r.kind;
  Attribution a;
  switch (kind) {
    case EventKind::kAlloc:
      ++stats_.allocs;
      if (table_ != nullptr && table_->take(d.correlation_id, &a)) {
        ++stats_.allocs_joined;
        r.tid = a.tid;
        r.scope_id = writer_id(a.scope);
        r.name_id = writer_id(a.name);
        // A tag's category wins; an untagged join keeps what the decoder knew (e.g. kGraph for the
        // driver's graph-memory reservation, which can share a correlation id with an API call).
        if (a.category != Category::kUnknown) r.category = a.category;
        r.flags |= a.flags;
        r.stack_id = writer_stack(a.stack);
        if (r.stack_id != StackId::kNone) ++stats_.allocs_with_stack;
        if (a.scope != 0 || a.name != 0) ++stats_.allocs_scoped;
        if ((a.flags & kFlagInferredScope) == 0 && (a.name != 0 || a.category != Category::kUnknown))
          ++stats_.allocs_tagged;
      }
      break;
    case EventKind::kFree:
      ++stats_.frees;
      if (table_ != nullptr && table_->take(d.correlation_id, &a)) {
        ++stats_.frees_joined;
        r.tid = a.tid;
      }
      break;
    case EventKind::kPoolReserve:
      ++stats_.pool_records;
      pools_.set(r.device, d.pool_address, d.pool_size);
      break;
    case EventKind::kKernel: {
      ++stats_.kernels;
      if (d.kernel_name != nullptr) {
        auto it = kernel_names_.find(d.kernel_name);
        if (it == kernel_names_.end())
          it = kernel_names_.emplace(d.kernel_name, writer_->intern(d.kernel_name)).first;
        r.name_id = it->second;
      }
      break;
    }
    default:
      break;
  }
  (void)writer_->append(r);  // sticky error, checked at flush/close
  TraceRecord pool;
  if ((kind == EventKind::kAlloc || kind == EventKind::kFree) && pools_.observe(d, &pool)) {
    ++stats_.pool_records;
    (void)writer_->append(pool);
  }
}

}  // namespace moeprof::profiler
