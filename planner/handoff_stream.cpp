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

void HandoffStream::prefetch_size(uint16_t device, uint64_t bytes, int stage) const {
  if (stopped_) return;
  if (stage == 0) {
    key_index_.prefetch({device, bytes});
    return;
  }
  const uint32_t* v = key_index_.find({device, bytes});
  if (v == nullptr) return;
  if (*v & kSingleBit) {
    if (stage == 1) prefetch_slot(*v & ~kSingleBit, 1);
  } else {
    prefetch_key(*v - 1, kNone, stage);
  }
}

void HandoffStream::prefetch_slot(uint32_t slot, int stage) const {
  if (stopped_ || slot >= slots_.size()) return;
  if (stage == 1) {
    __builtin_prefetch(&slots_[slot]);
    return;
  }
  const SlotState& s = slots_[slot];
  prefetch_key(s.key, s.pos, stage);
}

// Stage 1 or 2: the key; stage 3: its order's element `pos` (or latest). (The waiting queue's ends
// as well cost more than they saved: one more dependent load.)
void HandoffStream::prefetch_key(uint32_t key, uint32_t pos, int stage) const {
  if (key >= keys_.size()) return;  // kNone, kSingle
  const Key& k = keys_[key];
  if (stage <= 2) {
    __builtin_prefetch(&k);
    return;
  }
  if (pos < k.order.size()) __builtin_prefetch(&k.order[pos]);
  else if (!k.order.empty()) __builtin_prefetch(&k.order.back());
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
  std::vector<Kept>().swap(kept_);
  std::vector<Waiting>().swap(waits_);
  std::vector<Pair>().swap(pairs_);
  std::vector<std::vector<Listed>>().swap(listed_);
  std::vector<uint32_t>().swap(listed_at_peak_);
  spare_keys_.clear();
  spare_kept_.clear();
  spare_waits_.clear();
  spare_pairs_.clear();
}

uint32_t HandoffStream::new_key(uint16_t device, uint64_t bytes) {
  Key fresh;
  if (!spare_keys_.empty()) {  // a freed key keeps its vectors' capacity
    Key& old = keys_[spare_keys_.back()];
    fresh.order = std::move(old.order);
    fresh.queue = std::move(old.queue);
    fresh.order.clear();
    fresh.queue.clear();
  }
  fresh.device = device;
  fresh.bytes = bytes;
  return put(keys_, spare_keys_, std::move(fresh));
}

// The index entry of a size with one used buffer becomes a key holding that buffer's element.
uint32_t HandoffStream::promote(uint32_t& index_value, uint16_t device, uint64_t bytes) {
  if (!(index_value & kSingleBit)) return index_value - 1;
  const uint32_t other = index_value & ~kSingleBit;
  const uint32_t key = new_key(device, bytes);
  SlotState& o = slots_[other];
  o.key = key;
  o.pos = 0;
  keys_[key].order.push_back(Element{o.u, other, o.number});
  keys_[key].valid = 1;
  index_value = key + 1;
  return key;
}

// An element is current while its buffer is open and this is its latest use, or while the freed
// buffer is kept.
bool HandoffStream::valid(uint32_t key, const Element& e) const {
  if (e.ref & kKeptBit) {
    const Kept& m = kept_[e.ref & ~kKeptBit];
    return m.valid && m.number == e.number;
  }
  const SlotState& s = slots_[e.ref];
  return s.key == key && s.number == e.number && s.u == e.u;
}

void HandoffStream::drop(Key& k, Element& e) {
  if (e.ref & kKeptBit) {
    Kept& m = kept_[e.ref & ~kKeptBit];
    m.valid = false;
    spare_kept_.push_back(e.ref & ~kKeptBit);
    --k.kept;
    count_waiting(-1);
  } else {
    slots_[e.ref].key = kNone;
  }
  --k.valid;
  ++k.invalid;
}

// Stale elements go once they outnumber the current ones (not while settle() walks the order).
void HandoffStream::maybe_compact(Key& k) {
  if (k.invalid <= k.valid + 4) return;
  const auto key = static_cast<uint32_t>(&k - keys_.data());
  size_t n = 0;
  for (size_t i = 0; i < k.order.size(); ++i) {
    const Element e = k.order[i];
    if (!valid(key, e)) continue;
    if (!(e.ref & kKeptBit)) slots_[e.ref].pos = static_cast<uint32_t>(n);
    k.order[n++] = e;
  }
  k.order.resize(n);
  k.invalid = 0;
}

// A key with nothing waiting and nothing kept goes back to an index entry: none when no used buffer
// is left, the buffer's slot when one is.
void HandoffStream::shrink_key(uint32_t key) {
  Key& k = keys_[key];
  if (k.valid > 1 || k.kept > 0 || k.head < k.queue.size()) return;
  uint32_t single = kNone;
  for (size_t i = k.order.size(); i-- > 0;)
    if (valid(key, k.order[i])) {
      single = k.order[i].ref;
      break;
    }
  if (single == kNone) {
    key_index_.erase({k.device, k.bytes});
  } else {
    *key_index_.find({k.device, k.bytes}) = kSingleBit | single;
    slots_[single].key = kSingle;
  }
  k.order.clear();
  k.queue.clear();
  k.head = 0;
  k.valid = k.invalid = k.kept = 0;
  k.blocker = kNone;
  spare_keys_.push_back(key);
}

void HandoffStream::alloc(DeviceAnalysis& d, uint32_t slot, const Lifetime& l) {
  const uint32_t number = next_number_++;
  if (stopped_) return;
  if (slot >= slots_.size()) slots_.resize(static_cast<size_t>(slot) + 1);
  SlotState& s = slots_[slot];
  s = SlotState{};
  s.number = number;
  s.name = l.name_id;
  s.scope = l.scope_id;
  if (l.bytes == 0) return;
  uint32_t* index = key_index_.find({l.device, l.bytes});
  if (index == nullptr) return;  // no used buffer of this size is live and nothing waits: no hand-off
  const uint32_t key = promote(*index, l.device, l.bytes);
  Waiting w;
  w.p = l.alloc_index;
  w.number = number;
  w.slot = slot;
  w.name = l.name_id;
  w.scope = l.scope_id;
  const uint32_t id = put(waits_, spare_waits_, w);
  s.wait = id;
  Key& k = keys_[key];
  k.queue.push_back(id);
  count_waiting(1);
  if (stopped_) return;
  if (k.queue.size() - k.head == 1) settle(d, key);
  shrink_key(key);
}

void HandoffStream::use(DeviceAnalysis& d, uint32_t slot, const Lifetime& l, uint32_t pos) {
  if (stopped_ || l.bytes == 0) return;
  SlotState& s = slots_[slot];
  if (s.key == kSingle) {  // alone of its size, nothing waits: only its latest use changes
    s.u = pos;
    return;
  }
  uint32_t key = s.key;
  bool blocked = false;  // a waiting allocation waited on this buffer's earlier use
  if (key != kNone) {
    Key& k = keys_[key];
    blocked = k.blocker == slot && k.blocker_number == s.number;
    ++k.invalid;  // its earlier use was not its last: that element is stale
  } else {
    uint32_t& index = key_index_[{l.device, l.bytes}];
    if (index == 0) {  // the first used buffer of its size
      index = kSingleBit | slot;
      s.key = kSingle;
      s.u = pos;
      return;
    }
    key = promote(index, l.device, l.bytes);
    s.key = key;
    ++keys_[key].valid;
  }
  Key& k = keys_[key];
  s.u = pos;
  s.pos = static_cast<uint32_t>(k.order.size());
  k.order.push_back(Element{pos, slot, s.number});  // uses come in replay order: the latest is the largest
  if (!blocked) {
    maybe_compact(k);
    return;
  }
  settle(d, key);
  shrink_key(key);
}

void HandoffStream::release(DeviceAnalysis& d, uint32_t slot, const Lifetime& l, uint32_t pos) {
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
  if (s.key == kNone) return;
  if (s.key == kSingle) {  // nothing waits on a size with one buffer
    key_index_.erase({l.device, l.bytes});
    s.key = kNone;
    return;
  }
  const uint32_t key = s.key;
  Key& k = keys_[key];
  Element& e = k.order[s.pos];
  // Kept only for allocations waiting after its last use: a later allocation comes after its
  // free, and one before its last use can neither take it nor wait on it.
  if (k.head == k.queue.size() || waits_[k.queue.back()].p <= s.u) {
    drop(k, e);
    maybe_compact(k);
    shrink_key(key);
    return;
  }
  const bool blocked = k.blocker == slot && k.blocker_number == s.number;
  Kept m;
  m.u = s.u;
  m.number = s.number;
  m.free = pos;
  m.name = s.name;
  m.scope = s.scope;
  m.valid = true;
  e.ref = kKeptBit | put(kept_, spare_kept_, m);
  s.key = kNone;
  ++k.kept;
  count_waiting(1);
  if (stopped_) return;
  if (blocked) settle(d, key);  // the first waiting allocation can take it now
  shrink_key(key);
}

// Decides the waiting allocations of a key in order while their answer is known.
void HandoffStream::settle(DeviceAnalysis& d, uint32_t key) {
  Key& k = keys_[key];
  k.blocker = kNone;
  while (k.head < k.queue.size()) {
    const uint32_t wid = k.queue[k.head];
    const Waiting w = waits_[wid];
    // Elements of uses before p, latest first: the first current one decides.
    auto it = std::lower_bound(k.order.begin(), k.order.end(), w.p, [](const Element& e, uint32_t p) { return e.u < p; });
    bool found = false;
    Found m{};
    for (size_t i = static_cast<size_t>(it - k.order.begin()); i-- > 0;) {
      Element& e = k.order[i];
      if (!valid(key, e)) continue;
      if (e.ref & kKeptBit) {
        const Kept& km = kept_[e.ref & ~kKeptBit];
        if (km.free <= w.p) {  // freed before p: no candidate, now or later
          drop(k, e);
          continue;
        }
        m = Found{km.number, km.free, km.name, km.scope};
      } else {
        if (!ended_) {  // the best candidate may still be used again: wait
          k.blocker = e.ref;
          k.blocker_number = e.number;
          maybe_compact(k);
          return;
        }
        const SlotState& ms = slots_[e.ref];
        m = Found{ms.number, kNoFree, ms.name, ms.scope};
      }
      drop(k, e);  // taken
      found = true;
      break;
    }
    ++k.head;
    if (w.slot != kNone) slots_[w.slot].wait = kNone;
    spare_waits_.push_back(wid);
    count_waiting(-1);
    if (found) take(d, k, w, m);
    if (k.head == k.queue.size()) {
      k.queue.clear();
      k.head = 0;
      if (k.kept > 0)  // freed buffers were kept for waiting allocations only
        for (Element& e : k.order)
          if ((e.ref & kKeptBit) && valid(key, e)) drop(k, e);
    } else if (k.head > 64 && 2 * k.head > k.queue.size()) {
      k.queue.erase(k.queue.begin(), k.queue.begin() + static_cast<ptrdiff_t>(k.head));
      k.head = 0;
    }
  }
  maybe_compact(k);
}

void HandoffStream::take(DeviceAnalysis& d, Key& k, const Waiting& w, const Found& m) {
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
  // What is open stays open: every element is final, every waiting allocation can be decided.
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
