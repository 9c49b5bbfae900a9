// Hand-off findings as the replay goes (planner/handoff_stream.h).
#include "planner/handoff_stream.h"

#include <algorithm>

namespace moeprof::planner {

template <class T>
uint32_t HandoffStream::put(std::vector<T>& v, std::vector<uint32_t>& spare, T x) {
  if (!spare.empty()) {
    const uint32_t id = spare.back();
    spare.pop_back();
    v[id] = std::move(x);
    return id;
  }
  v.push_back(std::move(x));
  return static_cast<uint32_t>(v.size() - 1);
}

void HandoffStream::count_waiting(ptrdiff_t delta) {
  waiting_ = static_cast<size_t>(static_cast<ptrdiff_t>(waiting_) + delta);
  max_seen_ = std::max(max_seen_, waiting_);
  if (waiting_ > max_waiting_ && !stopped_)
    stop("more than " + std::to_string(max_waiting_) +
         " allocations waited on buffers still live whose last use was not yet known");
}

void HandoffStream::stop(std::string reason) {
  stopped_ = true;
  stop_reason_ = std::move(reason);
  // Nothing more is needed: the run reports no hand-offs.
  std::vector<SlotState>().swap(slots_);
  key_index_ = PairMap();
  std::vector<Key>().swap(keys_);
  std::vector<Entry>().swap(entries_);
  std::vector<Waiting>().swap(waits_);
  std::vector<Pair>().swap(pairs_);
  std::vector<std::vector<Listed>>().swap(listed_);
  std::vector<uint32_t>().swap(listed_at_peak_);
  spare_keys_.clear();
  spare_entries_.clear();
  spare_waits_.clear();
  spare_pairs_.clear();
}

uint32_t HandoffStream::key_of(uint16_t device, uint64_t bytes, bool create) {
  if (!create) {
    const uint32_t* k = key_index_.find({device, bytes});
    return k == nullptr || keys_[*k - 1].idle ? kNone : *k - 1;
  }
  uint32_t& k = key_index_[{device, bytes}];
  if (k != 0 && keys_[k - 1].idle) {
    keys_[k - 1].idle = false;
    --idle_keys_;
  }
  if (k == 0) {
    Key fresh;
    if (!spare_keys_.empty()) {  // a freed key keeps its vectors' capacity
      fresh.order = std::move(keys_[spare_keys_.back()].order);
      fresh.queue = std::move(keys_[spare_keys_.back()].queue);
      fresh.order.clear();
      fresh.queue.clear();
    }
    fresh.device = device;
    fresh.bytes = bytes;
    k = put(keys_, spare_keys_, std::move(fresh)) + 1;
  }
  return k - 1;
}

// An empty key stays in the index, idle, for a size that recurs (an executor allocates the same
// sizes layer after layer); idle keys go in a sweep once they outnumber the others, so they stay
// bounded by what is live.
void HandoffStream::drop_key_if_empty(uint32_t key) {
  Key& k = keys_[key];
  if (k.idle || k.valid > 0 || k.head < k.queue.size()) return;
  for (uint32_t id : k.order) spare_entries_.push_back(id);  // all invalid
  k.order.clear();
  k.queue.clear();
  k.head = 0;
  k.invalid = k.kept = 0;
  k.blocker = kNone;
  k.idle = true;
  if (++idle_keys_ > 2 * (keys_.size() - spare_keys_.size() - idle_keys_) + 4096) sweep_idle_keys();
}

void HandoffStream::sweep_idle_keys() {
  for (uint32_t key = 0; key < keys_.size(); ++key) {
    Key& k = keys_[key];
    if (!k.idle) continue;
    k.idle = false;
    key_index_.erase({k.device, k.bytes});
    spare_keys_.push_back(key);
  }
  idle_keys_ = 0;
}

void HandoffStream::invalidate(Key& k, Entry& e) {
  if (!e.valid) return;
  e.valid = false;
  --k.valid;
  ++k.invalid;
  if (e.kept) {
    e.kept = false;
    --k.kept;
    count_waiting(-1);
  }
}

// Invalid entries go once they outnumber the valid ones (not while settle() walks the order).
void HandoffStream::maybe_compact(Key& k) {
  if (k.invalid <= k.valid + 4) return;
  size_t n = 0;
  for (uint32_t id : k.order) {
    if (entries_[id].valid) k.order[n++] = id;
    else spare_entries_.push_back(id);
  }
  k.order.resize(n);
  k.invalid = 0;
}

void HandoffStream::alloc(DeviceAnalysis& d, uint32_t slot, const Lifetime& l) {
  const uint32_t number = next_number_++;
  if (stopped_) return;
  if (slot >= slots_.size()) slots_.resize(static_cast<size_t>(slot) + 1);
  slots_[slot] = SlotState{};
  slots_[slot].number = number;
  if (l.bytes == 0) return;
  const uint32_t key = key_of(l.device, l.bytes, false);
  if (key == kNone) return;  // no used buffer of this size is live and nothing waits: no hand-off
  Waiting w;
  w.p = l.alloc_index;
  w.number = number;
  w.slot = slot;
  w.name = l.name_id;
  w.scope = l.scope_id;
  const uint32_t id = put(waits_, spare_waits_, w);
  slots_[slot].wait = id;
  Key& k = keys_[key];
  k.queue.push_back(id);
  count_waiting(1);
  if (stopped_) return;
  if (k.queue.size() - k.head == 1) settle(d, key);
  drop_key_if_empty(key);
}

void HandoffStream::use(DeviceAnalysis& d, uint32_t slot, const Lifetime& l, uint32_t pos) {
  if (stopped_ || l.bytes == 0) return;
  SlotState& s = slots_[slot];
  uint32_t key = s.key;
  bool blocked = false;  // a waiting allocation waited on this buffer's earlier use
  if (s.entry != kNone) {
    blocked = keys_[key].blocker == s.entry;
    invalidate(keys_[key], entries_[s.entry]);  // its earlier use was not its last
    maybe_compact(keys_[key]);
  } else {
    key = key_of(l.device, l.bytes, true);
    s.key = key;
  }
  Entry e;
  e.u = pos;
  e.number = s.number;
  e.name = l.name_id;
  e.scope = l.scope_id;
  const uint32_t id = put(entries_, spare_entries_, e);
  Key& k = keys_[key];
  k.order.push_back(id);  // uses come in replay order: the latest is the largest
  ++k.valid;
  s.entry = id;
  if (blocked) settle(d, key);
}

void HandoffStream::release(DeviceAnalysis& d, uint32_t slot, const Lifetime& l, uint32_t pos) {
  (void)l;
  if (stopped_) return;
  SlotState& s = slots_[slot];
  if (s.wait != kNone) {  // still waiting as an allocation: its free is now known
    waits_[s.wait].free = pos;
    waits_[s.wait].slot = kNone;
    s.wait = kNone;
  }
  if (s.pair != kNone) {
    close(d, s.pair, pos);
    s.pair = kNone;
  }
  if (s.entry != kNone) {
    const uint32_t key = s.key, eid = s.entry;
    Key& k = keys_[key];
    Entry& e = entries_[eid];
    e.open = false;
    e.free = pos;
    s.entry = kNone;
    s.key = kNone;
    // Kept only for allocations waiting after its last use: a later allocation comes after its
    // free, and one before its last use cannot take it (nor wait on it).
    if (k.head == k.queue.size() || waits_[k.queue.back()].p <= e.u) {
      invalidate(k, e);
      maybe_compact(k);
    } else {
      e.kept = true;
      ++k.kept;
      count_waiting(1);
      if (stopped_) return;
      if (k.blocker == eid) settle(d, key);  // the first waiting allocation can take it now
    }
    drop_key_if_empty(key);
  }
}

// Decides the waiting allocations of a key in order while their answer is known.
void HandoffStream::settle(DeviceAnalysis& d, uint32_t key) {
  Key& k = keys_[key];
  struct Compact {  // on every way out
    HandoffStream* self;
    Key& k;
    ~Compact() { self->maybe_compact(k); }
  } compact_after{this, k};
  k.blocker = kNone;
  while (k.head < k.queue.size()) {
    const uint32_t wid = k.queue[k.head];
    const Waiting w = waits_[wid];
    // Entries whose (latest) use is before p, latest first.
    auto it = std::lower_bound(k.order.begin(), k.order.end(), w.p,
                               [&](uint32_t id, uint32_t p) { return entries_[id].u < p; });
    uint32_t found = kNone;
    for (size_t i = static_cast<size_t>(it - k.order.begin()); i-- > 0;) {
      Entry& e = entries_[k.order[i]];
      if (!e.valid) continue;
      if (e.open && !ended_) {  // the best candidate may still be used again: wait
        k.blocker = k.order[i];
        return;
      }
      if (e.free <= w.p) {            // freed before p: no candidate, now or later
        invalidate(k, e);
        continue;
      }
      found = k.order[i];
      break;
    }
    ++k.head;
    if (w.slot != kNone) slots_[w.slot].wait = kNone;
    spare_waits_.push_back(wid);
    count_waiting(-1);
    if (found != kNone) {
      Entry& m = entries_[found];
      take(d, k, w, m);
      invalidate(k, m);
    }
    if (k.head == k.queue.size()) {
      k.queue.clear();
      k.head = 0;
      if (k.kept > 0)  // freed buffers were kept for waiting allocations only
        for (uint32_t id : k.order)
          if (entries_[id].valid && !entries_[id].open) invalidate(k, entries_[id]);
    } else if (k.head > 64 && 2 * k.head > k.queue.size()) {
      k.queue.erase(k.queue.begin(), k.queue.begin() + static_cast<ptrdiff_t>(k.head));
      k.head = 0;
    }
  }
}

void HandoffStream::take(DeviceAnalysis& d, Key& k, const Waiting& w, const Entry& m) {
  ++d.handoff_count;
  d.handoff_bytes += k.bytes;
  Pair pr;
  pr.a = w.p;
  pr.b = m.free;
  pr.number = w.number;
  pr.bytes = k.bytes;
  pr.device = k.device;
  // The first list_limit hand-offs of the device by L's number (a max-heap while deciding).
  if (limit_ > 0) {
    if (listed_.size() <= k.device) listed_.resize(static_cast<size_t>(k.device) + 1);
    auto& heap = listed_[k.device];
    auto later = [](const Listed& a, const Listed& b) { return a.h.alloc_lifetime < b.h.alloc_lifetime; };
    if (heap.size() >= limit_ && heap.front().h.alloc_lifetime > w.number) {
      std::pop_heap(heap.begin(), heap.end(), later);
      if (heap.back().pair != kNone) pairs_[heap.back().pair].listed = false;
      heap.pop_back();
    }
    if (heap.size() < limit_) {
      Listed x;
      x.h.alloc_lifetime = w.number;
      x.h.dead_lifetime = m.number;
      x.h.bytes = k.bytes;
      x.h.alloc_name = strings_[index_of(w.name)];
      x.h.alloc_scope = strings_[index_of(w.scope)];
      x.h.dead_name = strings_[index_of(m.name)];
      x.h.dead_scope = strings_[index_of(m.scope)];
      heap.push_back(std::move(x));
      std::push_heap(heap.begin(), heap.end(), later);
      pr.listed = true;
    }
  }
  const uint32_t id = put(pairs_, spare_pairs_, pr);
  if (pr.listed)
    for (Listed& x : listed_[k.device])
      if (x.h.alloc_lifetime == w.number) x.pair = id;
  if (w.free != kNoFree || w.slot == kNone) close(d, id, w.free);  // L's free is known (or L never ends)
  else slots_[w.slot].pair = id;
}

void HandoffStream::close(DeviceAnalysis& d, uint32_t id, uint32_t l_free) {
  const Pair pr = pairs_[id];
  spare_pairs_.push_back(id);
  const uint32_t b = std::min(pr.b, l_free);
  const uint32_t peak = d.peak_activation_index;
  const bool at_peak = d.peak_activation_bytes > 0 && pr.a <= peak && peak < b;
  if (at_peak) d.handoff_bytes_at_activation_peak += pr.bytes;
  if (pr.listed) {
    for (Listed& x : listed_[pr.device])
      if (x.h.alloc_lifetime == pr.number) {
        x.h.at_activation_peak = at_peak;
        x.pair = kNone;
      }
    if (at_peak) {
      if (listed_at_peak_.size() <= pr.device) listed_at_peak_.resize(static_cast<size_t>(pr.device) + 1, 0);
      ++listed_at_peak_[pr.device];
    }
  }
}

void HandoffStream::peak_moved(DeviceAnalysis& d) {
  if (stopped_) return;
  d.handoff_bytes_at_activation_peak = 0;
  if (d.device >= listed_at_peak_.size() || listed_at_peak_[d.device] == 0) return;
  for (Listed& x : listed_[d.device])
    if (x.pair == kNone) x.h.at_activation_peak = false;
  listed_at_peak_[d.device] = 0;
}

void HandoffStream::finish(const std::function<DeviceAnalysis&(uint16_t)>& device) {
  if (stopped_) return;
  ended_ = true;
  // What is open stays open: every entry is final, every waiting allocation can be decided.
  for (uint32_t key = 0; key < keys_.size(); ++key) {
    Key& k = keys_[key];
    if (k.head < k.queue.size()) settle(device(k.device), key);
    if (stopped_) return;
  }
  // Pairs whose allocation is never freed.
  for (SlotState& s : slots_) {
    if (s.pair == kNone) continue;
    close(device(pairs_[s.pair].device), s.pair, kNoFree);
    s.pair = kNone;
  }
  for (size_t dev = 0; dev < listed_.size(); ++dev) {
    auto& heap = listed_[dev];
    if (heap.empty()) continue;
    std::sort(heap.begin(), heap.end(), [](const Listed& a, const Listed& b) { return a.h.alloc_lifetime < b.h.alloc_lifetime; });
    DeviceAnalysis& d = device(static_cast<uint16_t>(dev));
    d.handoffs.clear();
    for (Listed& x : heap) d.handoffs.push_back(std::move(x.h));
  }
}

}  // namespace moeprof::planner
