// Hand-off findings as the replay goes (planner/handoff_stream.h).
#include "planner/handoff_stream.h"

#include <algorithm>
#include <cassert>
#include <system_error>
#include <utility>

namespace moeprof::planner {

template <class T, class U>
uint32_t HandoffStream::put(std::vector<T>& v, std::vector<uint32_t>& spare, U&& x) {
  if (!spare.empty()) {
    const uint32_t id = spare.back();
    spare.pop_back();
    v[id] = std::forward<U>(x);
    return id;
  }
  reserve_huge(v, v.size() + 1);
  v.push_back(std::forward<U>(x));
  return static_cast<uint32_t>(v.size() - 1);
}

// Without finish() (a pass restarted with a larger window, or an error): the queued batches are
// dropped, not decided.
HandoffStream::~HandoffStream() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  thread_.join();
}

HandoffStream::Tally& HandoffStream::tally(uint16_t device) {
  if (tallies_.size() <= device) tallies_.resize(static_cast<size_t>(device) + 1);
  Tally& t = tallies_[device];
  t.seen = true;
  return t;
}

// The batch is full (or the trace ended): to the thread when there is one, or when the slot table
// has outgrown the caches; else decided here.
void HandoffStream::flush() {
  if (batch_.empty()) return;
  if (!threaded_ && !stopped_ && slots_.size() >= thread_slots_) {
    try {
      thread_ = std::thread([this] { work(); });
      threaded_ = true;  // from here on only the thread touches the search's state
    } catch (const std::system_error&) {
      thread_slots_ = SIZE_MAX;  // no thread to be had: every batch is decided here
    }
  }
  if (!threaded_) {
    run_batch(batch_);
    batch_.clear();
    return;
  }
  std::vector<Event> next;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.size() < kInFlight; });
    queue_.push_back(std::move(batch_));
    if (!spare_batches_.empty()) {
      next = std::move(spare_batches_.back());
      spare_batches_.pop_back();
    }
  }
  cv_.notify_all();
  batch_ = std::move(next);
  batch_.clear();
  batch_.reserve(kBatch);
}

void HandoffStream::work() {
  for (;;) {
    std::vector<Event> b;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty() || closing_; });
      if (queue_.empty()) return;  // closing, and every batch decided
      b = std::move(queue_.front());
      queue_.pop_front();
    }
    cv_.notify_all();  // room in the queue
    // Out of memory in the thread: finish() rethrows it on the caller's thread, and the batches
    // after it are dropped.
    try {
      if (!failure_) run_batch(b);
      b.clear();
      std::lock_guard<std::mutex> lock(mu_);
      spare_batches_.push_back(std::move(b));
    } catch (...) {
      if (!failure_) failure_ = std::current_exception();
    }
  }
}

// Hints run ahead of the decisions within the batch, each stage loading what the one before made
// readable: the index entry or slot 32 events ahead; 24 ahead, the key that the entry or slot
// names (with the one buffer of an index entry, or a slot's index entry, pair and waiting record),
// noted in a ring; its order's element and waiting queue 8 ahead, and the first waiting
// allocation's record 4 ahead, both from the ring. (Each stage once looked the event up again:
// four hash probes per allocation, more instructions than the decisions.)
void HandoffStream::run_batch(const std::vector<Event>& b) {
  constexpr size_t kFirst = 32, kKey = 24, kOrder = 8, kRecord = 4;
  constexpr size_t kRing = 32;  // more than the 20 events between a note and its last reader
  const size_t n = b.size();
  const bool hints = slots_.size() >= kManyLiveSlots;  // as Replayer::prefetching
  Hint ring[kRing];
  std::fill(std::begin(ring), std::end(ring), Hint{kNone, kNone});
  for (size_t i = 0; i < n; ++i) {
    if (hints && !stopped_) {
      // The batch was written on the replay's core: its lines are asked for 64 events ahead.
      if (i % 2 == 0 && i + 64 < n) __builtin_prefetch(&b[i + 64]);
      if (i + kFirst < n) hint_first(b[i + kFirst]);
      if (i + kKey < n) ring[(i + kKey) % kRing] = hint_key_of(b[i + kKey]);
      if (i + kOrder < n) hint_order(ring[(i + kOrder) % kRing]);
      if (i + kRecord < n) hint_record(ring[(i + kRecord) % kRing]);
    }
    const Event& e = b[i];
    switch (e.kind) {
      case Event::kAlloc: do_alloc(e); break;
      case Event::kUse: do_use(e); break;
      case Event::kRelease: do_release(e); break;
      case Event::kPeak: do_peak(e); break;
      default: break;
    }
  }
}

// Stage 0: what the event looks up first, its size's index entry or its slot.
void HandoffStream::hint_first(const Event& e) const {
  if (e.kind == Event::kAlloc) {
    if (e.bytes != 0) key_index_.prefetch({e.device, e.bytes});
  } else if ((e.kind == Event::kUse || e.kind == Event::kRelease) && e.slot < slots_.size()) {
    prefetch_object(&slots_[e.slot]);
  }
}

// Stage 1: the key the event will read (its line is asked for at once: its address needs no
// load), and its element's index for a use or a release.
HandoffStream::Hint HandoffStream::hint_key_of(const Event& e) const {
  Hint h{kNone, kNone};
  if (e.kind == Event::kAlloc) {
    if (e.bytes == 0) return h;
    const uint32_t* v = key_index_.find({e.device, e.bytes});
    if (v == nullptr) return h;
    if (*v & kSingleBit) {
      if ((*v & ~kSingleBit) < slots_.size()) prefetch_object(&slots_[*v & ~kSingleBit]);  // the one buffer
      return h;
    }
    h.key = *v - 1;
  } else if ((e.kind == Event::kUse || e.kind == Event::kRelease) && e.slot < slots_.size()) {
    const SlotState& s = slots_[e.slot];
    // A buffer alone of its size reads its index entry as it is released (erased), and so does the
    // first use of a buffer with no key (looked up, perhaps inserted).
    if (e.bytes != 0 && (e.kind == Event::kRelease ? s.key == kSingle : s.key == kNone)) key_index_.prefetch({e.device, e.bytes});
    if (e.kind == Event::kRelease) {  // what a release reads besides its key
      if (s.pair < pairs_.size()) __builtin_prefetch(&pairs_[s.pair]);
      if (s.wait < waits_.size()) __builtin_prefetch(&waits_[s.wait]);
    }
    h = Hint{s.key, s.pos};
  }
  if (h.key < keys_.size()) prefetch_object(&keys_[h.key]);  // not kNone or kSingle
  return h;
}

// Stage 2: the key's order element `pos` (a use marks it stale, a release reads it), the order's
// end (a use appends there, an allocation's settle() reads back from there) and the waiting
// queue's ends. A key noted in the ring may have been freed or reused since: a hint only.
void HandoffStream::hint_order(Hint h) const {
  if (h.key >= keys_.size()) return;
  const Key& k = keys_[h.key];
  if (h.pos < k.order.size()) __builtin_prefetch(&k.order[h.pos]);
  if (k.order.size() < k.order.capacity()) __builtin_prefetch(k.order.data() + k.order.size());
  else if (!k.order.empty()) __builtin_prefetch(&k.order.back());
  if (k.head < k.queue.size()) {
    __builtin_prefetch(&k.queue[k.head]);
    __builtin_prefetch(&k.queue.back());
  }
}

// Stage 3: the record of the key's first waiting allocation (read once settle() decides it).
void HandoffStream::hint_record(Hint h) const {
  if (h.key >= keys_.size()) return;
  const Key& k = keys_[h.key];
  if (k.head < k.queue.size() && k.queue[k.head].id < waits_.size()) prefetch_object(&waits_[k.queue[k.head].id]);
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
  decltype(slots_)().swap(slots_);
  key_index_ = DeviceMap();
  decltype(keys_)().swap(keys_);
  blocks_.clear();
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
  append(keys_[key], o.u, other, o.number);
  keys_[key].valid = 1;
  index_value = key + 1;
  return key;
}

// An element is current while its buffer is open and this is its latest use, or while the freed
// buffer is kept. Where it stops being current (a newer use of its buffer, drop()) it is marked
// stale, so the check reads the element alone, not the buffer's state (a random access each);
// debug builds check the two agree.
bool HandoffStream::valid(uint32_t key, const Element& e) const {
  const bool current = e.ref != kStale;
#ifndef NDEBUG
  bool full = false;
  if (!current) {
    full = false;
  } else if (e.ref & kKeptBit) {
    const Kept& m = kept_[e.ref & ~kKeptBit];
    full = m.valid && m.number == e.number;
  } else {
    const SlotState& s = slots_[e.ref];
    full = s.key == key && s.number == e.number && s.u == e.u;
  }
  assert(current == full);
#else
  (void)key;
#endif
  return current;
}

void HandoffStream::append(Key& k, uint32_t u, uint32_t ref, uint32_t number) {
  const auto n = static_cast<uint32_t>(k.order.size());
  k.order.push_back(Element{u, ref, number, n == 0 ? kNone : n - 1}, blocks_);
}

// The latest current element before index `end` (kNone: none), found over the back links, which
// are then pointed at it (path compression): settle() no longer walks the same stale elements again
// and again when a size has thousands of buffers that are used over and over (a traced program's
// activations: the walk made the search quadratic in the buffers of a size).
uint32_t HandoffStream::latest_current(Key& k, uint32_t end) {
  if (end == 0) return kNone;
  uint32_t r = end - 1;
  while (r != kNone && k.order[r].ref == kStale) r = k.order[r].back;
  for (uint32_t i = end - 1; i != r && k.order[i].ref == kStale;) {
    const uint32_t next = k.order[i].back;
    k.order[i].back = r;
    i = next;
  }
  return r;
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
  e.ref = kStale;
  --k.valid;
}

// Stale elements go once they outnumber the current ones (not while settle() walks the order).
void HandoffStream::maybe_compact(Key& k) {
  if (k.invalid() <= k.valid + 4) return;
  const auto key = static_cast<uint32_t>(&k - keys_.data());
  size_t n = 0;
  for (size_t i = 0; i < k.order.size(); ++i) {
    Element e = k.order[i];
    if (!valid(key, e)) continue;
    if (!(e.ref & kKeptBit)) slots_[e.ref].pos = static_cast<uint32_t>(n);
    e.back = n == 0 ? kNone : static_cast<uint32_t>(n - 1);
    k.order[n++] = e;
  }
  k.order.shrink_to(n);
  assert(n == k.valid);  // the stale count, order.size() - valid, is now 0
}

// A key with nothing waiting and nothing kept goes back to an index entry: none when no used buffer
// is left, the buffer's slot when one is.
void HandoffStream::shrink_key(uint32_t key) {
  Key& k = keys_[key];
  if (k.valid > 1 || k.kept > 0 || k.head < k.queue.size()) return;
  // The one current element, if any (over the back links: the stale ones after it are not read).
  const uint32_t last = latest_current(k, static_cast<uint32_t>(k.order.size()));
  assert(last == kNone || valid(key, k.order[last]));
  const uint32_t single = last == kNone ? kNone : k.order[last].ref;
  if (single == kNone) {
    key_index_.erase({k.device, k.bytes});
  } else {
    *key_index_.find({k.device, k.bytes}) = kSingleBit | single;
    slots_[single].key = kSingle;
  }
  k.order.clear();
  k.queue.clear();
  k.head = 0;
  k.valid = k.kept = 0;
  k.blocker = kNone;
  spare_keys_.push_back(key);
}

void HandoffStream::do_alloc(const Event& e) {
  const uint32_t number = next_number_++;
  if (stopped_) return;
  const uint32_t slot = e.slot;
  if (slot >= slots_.size()) {
    reserve_huge(slots_, static_cast<size_t>(slot) + 1);
    slots_.resize(static_cast<size_t>(slot) + 1);
  }
  SlotState& s = slots_[slot];
  s = SlotState{};
  s.number = number;
  s.name = e.name;
  s.scope = e.scope;
  if (e.bytes == 0) return;
  uint32_t* index = key_index_.find({e.device, e.bytes});
  if (index == nullptr) return;  // no used buffer of this size is live and nothing waits: no hand-off
  const uint32_t key = promote(*index, e.device, e.bytes);
  Waiting w;
  w.p = e.pos;
  w.number = number;
  w.slot = slot;
  w.name = e.name;
  w.scope = e.scope;
  const uint32_t id = put(waits_, spare_waits_, w);
  s.wait = id;
  Key& k = keys_[key];
  k.queue.push_back(Queued{id, e.pos}, blocks_);
  count_waiting(1);
  if (stopped_) return;
  if (k.queue.size() - k.head == 1) settle(key);
  shrink_key(key);
}

void HandoffStream::do_use(const Event& e) {
  if (stopped_ || e.bytes == 0) return;
  const uint32_t slot = e.slot, pos = e.pos;
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
    k.order[s.pos].ref = kStale;  // its earlier use was not its last: that element is stale
  } else {
    uint32_t& index = key_index_[{e.device, e.bytes}];
    if (index == 0) {  // the first used buffer of its size
      index = kSingleBit | slot;
      s.key = kSingle;
      s.u = pos;
      return;
    }
    key = promote(index, e.device, e.bytes);
    s.key = key;
    ++keys_[key].valid;
  }
  Key& k = keys_[key];
  s.u = pos;
  s.pos = static_cast<uint32_t>(k.order.size());
  append(k, pos, slot, s.number);  // uses come in replay order: the latest is the largest
  if (!blocked) {
    maybe_compact(k);
    return;
  }
  settle(key);
  shrink_key(key);
}

void HandoffStream::do_release(const Event& e) {
  if (stopped_) return;
  const uint32_t slot = e.slot, pos = e.pos;
  SlotState& s = slots_[slot];
  if (s.wait != kNone) {  // still waiting as an allocation: its free is now known
    waits_[s.wait].free = pos;
    waits_[s.wait].slot = kNone;
    s.wait = kNone;
  }
  if (s.pair != kNone) {
    close(s.pair, pos);
    s.pair = kNone;
  }
  if (s.key == kNone) return;
  if (s.key == kSingle) {  // nothing waits on a size with one buffer
    key_index_.erase({e.device, e.bytes});
    s.key = kNone;
    return;
  }
  const uint32_t key = s.key;
  Key& k = keys_[key];
  Element& el = k.order[s.pos];
  // Kept only for allocations waiting after its last use: a later allocation comes after its
  // free, and one before its last use can neither take it nor wait on it.
  if (k.head == k.queue.size() || k.queue.back().p <= s.u) {
    drop(k, el);
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
  el.ref = kKeptBit | put(kept_, spare_kept_, m);
  s.key = kNone;
  ++k.kept;
  count_waiting(1);
  if (stopped_) return;
  if (blocked) settle(key);  // the first waiting allocation can take it now
  shrink_key(key);
}

// Decides the waiting allocations of a key in order while their answer is known.
void HandoffStream::settle(uint32_t key) {
  Key& k = keys_[key];
  k.blocker = kNone;
  while (k.head < k.queue.size()) {
    const uint32_t wid = k.queue[k.head].id, p = k.queue[k.head].p;
    // The next waiting allocation's record, read if this one is decided and it is too.
    if (k.head + 1 < k.queue.size()) prefetch_object(&waits_[k.queue[k.head + 1].id]);
    // Elements of uses before p, latest first: the first current one decides.
    // (An allocation just made comes after every use: the search starts at the order's end.)
    auto it = k.order.empty() || k.order.back().u < p
                  ? k.order.end()
                  : std::lower_bound(k.order.begin(), k.order.end(), p, [](const Element& e, uint32_t x) { return e.u < x; });
    bool found = false;
    Found m{};
    for (uint32_t i = latest_current(k, static_cast<uint32_t>(it - k.order.begin())); i != kNone; i = latest_current(k, i)) {
      Element& e = k.order[i];
      assert(valid(key, e));
      if (e.ref & kKeptBit) {
        const Kept& km = kept_[e.ref & ~kKeptBit];
        if (km.free <= p) {  // freed before p: no candidate, now or later
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
    const Waiting w = waits_[wid];  // decided: the rest of its record
    if (w.slot != kNone) slots_[w.slot].wait = kNone;
    spare_waits_.push_back(wid);
    count_waiting(-1);
    if (found) take(k, w, m);
    if (k.head == k.queue.size()) {
      k.queue.clear();
      k.head = 0;
      if (k.kept > 0)  // freed buffers were kept for waiting allocations only
        for (Element& e : k.order)
          if ((e.ref & kKeptBit) && valid(key, e)) drop(k, e);
    } else if (k.head > 64 && 2 * k.head > k.queue.size()) {
      k.queue.erase_front(k.head);
      k.head = 0;
    }
  }
  maybe_compact(k);
}

void HandoffStream::take(Key& k, const Waiting& w, const Found& m) {
  Tally& t = tally(k.device);
  ++t.count;
  t.bytes += k.bytes;
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
    auto later = [](const Listed& a, const Listed& b) { return a.alloc_lifetime < b.alloc_lifetime; };
    if (heap.size() >= limit_ && heap.front().alloc_lifetime > w.number) {
      std::pop_heap(heap.begin(), heap.end(), later);
      if (heap.back().pair != kNone) pairs_[heap.back().pair].listed = false;
      heap.pop_back();
    }
    if (heap.size() < limit_) {
      Listed x;
      x.alloc_lifetime = w.number;
      x.dead_lifetime = m.number;
      x.bytes = k.bytes;
      x.alloc_name = w.name;
      x.alloc_scope = w.scope;
      x.dead_name = m.name;
      x.dead_scope = m.scope;
      heap.push_back(x);
      std::push_heap(heap.begin(), heap.end(), later);
      pr.listed = true;
    }
  }
  const uint32_t id = put(pairs_, spare_pairs_, pr);
  if (pr.listed)
    for (Listed& x : listed_[k.device])
      if (x.alloc_lifetime == w.number) x.pair = id;
  if (w.free != kNoFree || w.slot == kNone) close(id, w.free);  // L's free is known (or L never ends)
  else slots_[w.slot].pair = id;
}

void HandoffStream::close(uint32_t id, uint32_t l_free) {
  const Pair pr = pairs_[id];
  spare_pairs_.push_back(id);
  Tally& t = tally(pr.device);
  const uint32_t b = std::min(pr.b, l_free);
  const uint32_t peak = t.peak_index;
  const bool at_peak = t.peak_bytes > 0 && pr.a <= peak && peak < b;
  if (at_peak) t.at_peak_bytes += pr.bytes;
  if (pr.listed) {
    for (Listed& x : listed_[pr.device])
      if (x.alloc_lifetime == pr.number) {
        x.at_activation_peak = at_peak;
        x.pair = kNone;
      }
    if (at_peak) {
      if (listed_at_peak_.size() <= pr.device) listed_at_peak_.resize(static_cast<size_t>(pr.device) + 1, 0);
      ++listed_at_peak_[pr.device];
    }
  }
}

void HandoffStream::do_peak(const Event& e) {
  if (stopped_) return;
  Tally& t = tally(e.device);
  t.peak_index = e.pos;
  t.peak_bytes = e.bytes;
  t.at_peak_bytes = 0;
  if (e.device >= listed_at_peak_.size() || listed_at_peak_[e.device] == 0) return;
  for (Listed& x : listed_[e.device])
    if (x.pair == kNone) x.at_activation_peak = false;
  listed_at_peak_[e.device] = 0;
}

void HandoffStream::finish(const std::function<DeviceAnalysis&(uint16_t)>& device, const std::vector<std::string>& strings) {
  flush();
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  if (failure_) std::rethrow_exception(failure_);
  if (stopped_ || ended_) return;
  ended_ = true;
  // What is open stays open: every element is final, every waiting allocation can be decided.
  for (uint32_t key = 0; key < keys_.size(); ++key) {
    Key& k = keys_[key];
    if (k.head < k.queue.size()) settle(key);
    if (stopped_) return;
  }
  // Pairs whose allocation is never freed.
  for (SlotState& s : slots_) {
    if (s.pair == kNone) continue;
    close(s.pair, kNoFree);
    s.pair = kNone;
  }
  for (size_t dev = 0; dev < tallies_.size(); ++dev) {
    const Tally& t = tallies_[dev];
    if (!t.seen) continue;
    DeviceAnalysis& d = device(static_cast<uint16_t>(dev));
    d.handoff_count = t.count;
    d.handoff_bytes = t.bytes;
    d.handoff_bytes_at_activation_peak = t.at_peak_bytes;
  }
  static const std::string kEmpty;
  auto str = [&](uint32_t id) -> const std::string& { return id < strings.size() ? strings[id] : kEmpty; };
  for (size_t dev = 0; dev < listed_.size(); ++dev) {
    auto& heap = listed_[dev];
    if (heap.empty()) continue;
    std::sort(heap.begin(), heap.end(), [](const Listed& a, const Listed& b) { return a.alloc_lifetime < b.alloc_lifetime; });
    DeviceAnalysis& d = device(static_cast<uint16_t>(dev));
    d.handoffs.clear();
    for (const Listed& x : heap) {
      Handoff h;
      h.alloc_lifetime = x.alloc_lifetime;
      h.dead_lifetime = x.dead_lifetime;
      h.bytes = x.bytes;
      h.alloc_name = str(x.alloc_name);
      h.alloc_scope = str(x.alloc_scope);
      h.dead_name = str(x.dead_name);
      h.dead_scope = str(x.dead_scope);
      h.at_activation_peak = x.at_activation_peak;
      d.handoffs.push_back(std::move(h));
    }
  }
}

}  // namespace moeprof::planner
