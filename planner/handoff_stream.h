// Hand-off findings as the replay goes (internal to the planner): the pairs that find_handoffs
// (handoffs.cpp) finds from every lifetime at the end, found with state in proportion to what is
// live, for the streamed analysis.
//
// The rule (docs/metrics.md): allocations L in allocation order; L of B bytes at replay position p
// takes, among the buffers M of the same device and size with final last use < p < free that no
// earlier L took, the one whose last use is latest. Per (device, bytes) key this is decided in
// allocation order, as soon as it no longer depends on the future: a candidate still open may be
// used again (then it was not dead at p), so while the best candidate is open, L and the later
// allocations of its key wait; a new use of that buffer, its free or the end of the trace decides.
// A pair counts at the activation peak when both are live there, i.e. the peak lies in
// [L.alloc, min(L.free, M.free)); it is tested when both frees are known, against the device's
// peak of that moment; a later peak lies after both frees, so each new peak starts the at-peak
// bytes again (as the replay's copies of what is live at the peak start again).
//
// State: per (device, bytes) with a used live buffer, the buffers' latest uses in order (one
// element per use; the earlier ones of a buffer are stale and compacted away), the allocations that
// wait, and freed buffers kept while an allocation before their free waits. A size with one used
// buffer and nothing waiting (most, when sizes vary) is only an index entry naming that buffer: its
// uses touch nothing else. A key with an order exists once a second buffer or a waiting allocation
// needs one, and goes back to an index entry when they are gone. When
// waiting allocations and kept buffers exceed `max_waiting` (a trace whose buffers are used once
// and held to the end, with many allocations of their size after), the search stops: stopped()
// says why, and the run reports no hand-offs rather than grow with the trace.
//
// Events are queued in batches (32 B each) and decided a batch at a time, with hints for the
// events ahead in the batch. Once the search's slot table outgrows the caches (`thread_slots`
// slots), the batches go to a thread of its own: the replay (its own tables of that size) and the
// search then wait on their cache misses side by side. The search keeps its own copy of each
// device's activation peak, given by peak_moved(), so it reads nothing of the replay's; names are
// kept as ids and resolved at finish() (the string table grows while the worker runs).
#pragma once

#include <algorithm>
#include <cassert>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <iterator>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "planner/address_map.h"
#include "planner/analysis.h"

namespace moeprof::planner {

class HandoffStream {
 public:
  // thread_slots: the slot count from which batches go to a thread of their own (0: from the first
  // batch; SIZE_MAX: never; where no thread can be started, every batch is decided on the caller's
  // thread). max_waiting is held to 2^30 at most, so kept records stay numbered below kStale.
  HandoffStream(size_t list_limit, size_t max_waiting, size_t thread_slots)
      : thread_slots_(thread_slots), limit_(list_limit), max_waiting_(std::min(max_waiting, size_t{1} << 30)) {}
  ~HandoffStream();
  HandoffStream(const HandoffStream&) = delete;
  HandoffStream& operator=(const HandoffStream&) = delete;

  // The replayer's events, in replay order; `slot` is the lifetime's slab slot (reused once
  // released), `l` the lifetime. alloc() is called for every allocation (it numbers them as
  // RunAnalysis::lifetimes would). They are queued: nothing is decided before the batch is.
  void alloc(uint32_t slot, const Lifetime& l) { push(Event{Event::kAlloc, l.device, slot, l.alloc_index, index_of(l.name_id), index_of(l.scope_id), l.bytes}); }
  void use(uint32_t slot, uint16_t device, uint64_t bytes, uint32_t pos) { push(Event{Event::kUse, device, slot, pos, 0, 0, bytes}); }
  void release(uint32_t slot, const Lifetime& l, uint32_t pos) { push(Event{Event::kRelease, l.device, slot, pos, 0, 0, l.bytes}); }
  // The device reached a new activation peak at replay position `index`: no pair tested so far lies
  // there (both its frees came before), so the at-peak bytes and flags start again.
  void peak_moved(uint16_t device, uint32_t index, uint64_t bytes) { push(Event{Event::kPeak, device, 0, index, 0, 0, bytes}); }
  // The end of the trace: every queued event is decided (the thread, if any, is joined), what is
  // open stays open, every decision is made and every pair tested; each device's counts and listed
  // hand-offs (names from `strings`) are written into `device(d)`.
  void finish(const std::function<DeviceAnalysis&(uint16_t)>& device, const std::vector<std::string>& strings);

  // After finish():
  bool stopped() const { return stopped_; }
  const std::string& stop_reason() const { return stop_reason_; }
  // Allocations and kept buffers held now, and the most held at once (tests).
  size_t waiting() const { return waiting_; }
  size_t max_waiting_seen() const { return max_seen_; }
  // Whether the batches went to a thread of their own (tests).
  bool threaded() const { return threaded_; }

 private:
  struct Event {  // what the replay saw, as the search needs it
    enum Kind : uint8_t { kAlloc, kUse, kRelease, kPeak };
    uint8_t kind;
    uint16_t device;
    uint32_t slot, pos;  // kPeak: pos = the peak's replay position
    uint32_t name, scope;
    uint64_t bytes;      // kPeak: the peak's bytes
  };
  struct Tally {  // per device: the counts, and the activation peak as the replay last told it
    uint64_t count = 0, bytes = 0, at_peak_bytes = 0, peak_bytes = 0;
    uint32_t peak_index = 0;
    bool seen = false;  // the device had an event
  };
  static constexpr size_t kBatch = 8192;
  static constexpr size_t kInFlight = 4;  // batches queued for the thread at most

  void push(const Event& e) {
    // The batch's lines were last read by the thread: ask for them 32 events (16 lines) ahead.
    if (threaded_ && batch_.size() % 2 == 0 && batch_.size() + 32 < kBatch) __builtin_prefetch(batch_.data() + batch_.size() + 32, 1);
    batch_.push_back(e);
    if (batch_.size() == kBatch) flush();
  }
  void flush();                                   // hands the batch on, or decides it here
  void run_batch(const std::vector<Event>& b);    // decides a batch (hints ahead within it)
  void work();                                    // the thread
  Tally& tally(uint16_t device);
  void do_alloc(const Event& e);
  void do_use(const Event& e);
  void do_release(const Event& e);
  void do_peak(const Event& e);
  struct Hint {  // what a stage of the hints found for an event, for the later stages
    uint32_t key, pos;
  };
  void hint_first(const Event& e) const;
  Hint hint_key_of(const Event& e) const;
  void hint_order(Hint h) const;
  void hint_record(Hint h) const;

  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr uint32_t kNoFree = UINT32_MAX;
  static constexpr uint32_t kKeptBit = 1u << 31;
  static constexpr uint32_t kStale = UINT32_MAX;  // Element::ref of an element no longer current
  static constexpr uint32_t kSingleBit = 1u << 31;  // in key_index_: the one buffer's slot, no key
  static constexpr uint32_t kSingle = UINT32_MAX - 1;  // SlotState::key of that buffer
  // The records read at random are 32-byte aligned, so that none spans two cache lines (16-byte
  // aligned, as malloc gives them, half of them did: two misses where one would do).
  struct alignas(32) SlotState {  // per replayer slot: the lifetime as a buffer M and as an allocation L
    uint32_t number = 0;      // the lifetime's number (allocation order)
    uint32_t key = kNone;     // its key while it is an open, used buffer (kSingle: alone, no key)
    uint32_t u = 0, pos = 0;  // its latest use, and that use's element in the key's order
    uint32_t wait = kNone;    // its waiting record (as an allocation L)
    uint32_t pair = kNone;    // its pair (as L) until its free
    uint32_t name = 0, scope = 0;
  };
  struct Element {            // a buffer's use, in its key's order
    uint32_t u, ref, number;  // ref: its slot, kKeptBit | kept record once freed, or kStale
    // An index at or before which the latest current element before this one lies (kNone: none):
    // the previous index when appended, moved back over stale elements as they are skipped (an
    // element once stale stays stale until compaction, so the links only ever shorten the walk).
    uint32_t back;
  };
  struct alignas(32) Kept {   // a freed buffer held for waiting allocations
    uint32_t u = 0, number = 0, free = 0;
    uint32_t name = 0, scope = 0;
    bool valid = false;
  };
  struct alignas(32) Waiting {  // an allocation L not decided yet
    uint32_t p = 0, number = 0, free = kNoFree, slot = kNone;
    uint32_t name = 0, scope = 0;
  };
  struct Queued {             // a waiting allocation in its key's queue, with its position (read
    uint32_t id, p;           // where it is decided, or checked against a buffer's last use)
  };
  // The blocks of the keys' vectors: 64-byte aligned, of 64 B to 4 KiB in powers of two, carved
  // from chunks of 64 KiB to 4 MiB and kept on a free list per size once given back; larger ones come from
  // aligned_alloc. (From malloc, a block of 64 B had a 16-byte header before it and spanned two
  // cache lines three times in four, and malloc's own bookkeeping missed the caches too.)
  class BlockPool {
   public:
    static constexpr size_t kMin = 64, kMaxPooled = 4096, kFirstChunk = size_t{64} << 10, kChunk = size_t{4} << 20;
    BlockPool() = default;
    BlockPool(const BlockPool&) = delete;
    BlockPool& operator=(const BlockPool&) = delete;
    ~BlockPool() { clear(); }
    // A block of `bytes`, a power of two of at least kMin.
    void* get(size_t bytes) {
      assert(bytes >= kMin && (bytes & (bytes - 1)) == 0);
      if (bytes > kMaxPooled) return checked(std::aligned_alloc(kMin, bytes));
      void*& head = free_[list_of(bytes)];
      if (head != nullptr) {
        void* b = head;
        std::memcpy(&head, b, sizeof head);
        return b;
      }
      if (static_cast<size_t>(end_ - next_) < bytes) {
        // Chunks of 64 KiB first, each twice the last up to kChunk (aligned to their size, the
        // largest advised for huge pages): a small search keeps a small footprint.
        const size_t chunk = chunks_.empty() ? kFirstChunk : std::min(kChunk, 2 * chunk_);
        chunks_.push_back(nullptr);  // room first: the chunk is not lost if this throws
        chunks_.back() = checked(std::aligned_alloc(chunk, chunk));
        advise_huge(chunks_.back(), chunk);
        chunk_ = chunk;
        next_ = static_cast<char*>(chunks_.back());
        end_ = next_ + chunk;
      }
      void* b = next_;
      next_ += bytes;
      return b;
    }
    void put(void* b, size_t bytes) {
      if (b == nullptr) return;
      if (bytes > kMaxPooled) {
        std::free(b);
        return;
      }
      void*& head = free_[list_of(bytes)];
      std::memcpy(b, &head, sizeof head);
      head = b;
    }
    // Every pooled block at once (the blocks of kMaxPooled and less need not be given back).
    void clear() {
      for (void* c : chunks_) std::free(c);
      chunks_.clear();
      chunk_ = 0;
      std::fill(std::begin(free_), std::end(free_), nullptr);
      next_ = end_ = nullptr;
    }

   private:
    static void* checked(void* p) {
      if (p == nullptr) throw std::bad_alloc();
      return p;
    }
    static size_t list_of(size_t bytes) { return static_cast<size_t>(__builtin_ctzll(bytes / kMin)); }
    void* free_[7] = {};  // 64 B .. 4 KiB
    std::vector<void*> chunks_;
    size_t chunk_ = 0;  // the last chunk's size
    char *next_ = nullptr, *end_ = nullptr;
  };
  // A vector of trivially copyable T in 16 B (pointer, 32-bit size and capacity), so that a Key
  // fits one cache line. Its block comes from the search's BlockPool (growth takes the pool); the
  // pool owns the blocks of its chunks, so a vector frees only a block larger than those.
  template <class T>
  class Small {
   public:
    Small() = default;
    Small(Small&& o) noexcept : data_(o.data_), size_(o.size_), cap_(o.cap_) { o.data_ = nullptr, o.size_ = o.cap_ = 0; }
    Small& operator=(Small&& o) noexcept {
      if (this != &o) {
        release();
        data_ = o.data_, size_ = o.size_, cap_ = o.cap_;
        o.data_ = nullptr, o.size_ = o.cap_ = 0;
      }
      return *this;
    }
    Small(const Small&) = delete;
    Small& operator=(const Small&) = delete;
    ~Small() { release(); }
    size_t size() const { return size_; }
    size_t capacity() const { return cap_; }
    bool empty() const { return size_ == 0; }
    T* data() { return data_; }
    const T* data() const { return data_; }
    T* begin() { return data_; }
    T* end() { return data_ + size_; }
    T& operator[](size_t i) {
      assert(i < size_);
      return data_[i];
    }
    const T& operator[](size_t i) const {
      assert(i < size_);
      return data_[i];
    }
    const T& back() const { return (*this)[size_ - 1]; }
    void clear() { size_ = 0; }
    void shrink_to(size_t n) {
      assert(n <= size_);
      size_ = static_cast<uint32_t>(n);
    }
    void erase_front(size_t n) {
      assert(n <= size_);
      std::memmove(data_, data_ + n, (size_ - n) * sizeof(T));
      size_ -= static_cast<uint32_t>(n);
    }
    void push_back(const T& x, BlockPool& pool) {
      if (size_ == cap_) grow(pool);
      data_[size_++] = x;
    }

   private:
    static_assert(std::is_trivially_copyable_v<T> && (sizeof(T) & (sizeof(T) - 1)) == 0 && sizeof(T) <= BlockPool::kMin);
    void grow(BlockPool& pool) {
      if (cap_ >= (uint32_t{1} << 31)) throw std::length_error("hand-off search: a size's list outgrew 2^31 entries");
      const uint32_t cap = cap_ == 0 ? static_cast<uint32_t>(BlockPool::kMin / sizeof(T)) : 2 * cap_;
      T* p = static_cast<T*>(pool.get(size_t{cap} * sizeof(T)));
      if (size_ > 0) std::memcpy(p, data_, size_t{size_} * sizeof(T));
      pool.put(data_, size_t{cap_} * sizeof(T));
      data_ = p;
      cap_ = cap;
    }
    void release() {
      if (size_t{cap_} * sizeof(T) > BlockPool::kMaxPooled) std::free(data_);
      data_ = nullptr;
      size_ = cap_ = 0;
    }
    T* data_ = nullptr;
    uint32_t size_ = 0, cap_ = 0;
  };
  // A (device, bytes) with an order: one cache line. Its elements are `valid` current ones (open
  // or kept) and order.size() - valid stale ones.
  struct alignas(64) Key {
    uint64_t bytes = 0;
    Small<Element> order;   // by u, ascending
    Small<Queued> queue;    // waiting allocations in allocation order, from `head`
    uint32_t head = 0;
    uint32_t valid = 0, kept = 0;
    // The open buffer the first waiting allocation waits on: the latest valid element before its
    // position (every element between is stale). Only its next use or its free decides.
    uint32_t blocker = kNone, blocker_number = 0;
    uint16_t device = 0;
    size_t invalid() const { return order.size() - valid; }
  };
  static_assert(sizeof(Key) == 64, "a hand-off key is one cache line");

  static_assert(std::is_nothrow_move_constructible_v<Key>, "keys_ moves its keys as it grows");
  struct alignas(32) Pair {
    uint32_t a = 0, b = 0, number = 0;  // [a, b): L.alloc to M.free so far; number: L's
    uint64_t bytes = 0;
    uint16_t device = 0;
    bool listed = false;
  };
  static_assert(sizeof(SlotState) == 32 && sizeof(Kept) == 32 && sizeof(Waiting) == 32 && sizeof(Pair) == 32,
                "records of half a line");
  struct Listed {  // a listed hand-off; names as string ids until finish()
    uint32_t alloc_lifetime = 0, dead_lifetime = 0;
    uint64_t bytes = 0;
    uint32_t alloc_name = 0, alloc_scope = 0, dead_name = 0, dead_scope = 0;
    bool at_activation_peak = false;
    uint32_t pair = kNone;  // open pair whose peak test is pending
  };
  struct Found {  // a candidate, as settle() found it
    uint32_t number, free;
    uint32_t name, scope;
  };

  void append(Key& k, uint32_t u, uint32_t ref, uint32_t number);
  static uint32_t latest_current(Key& k, uint32_t end);
  uint32_t new_key(uint16_t device, uint64_t bytes);
  uint32_t promote(uint32_t& index_value, uint16_t device, uint64_t bytes);
  bool valid(uint32_t key, const Element& e) const;
  void settle(uint32_t key);
  void take(Key& k, const Waiting& w, const Found& m);
  void close(uint32_t pair, uint32_t l_free);
  void drop(Key& k, Element& e);  // a current element stops being one
  void maybe_compact(Key& k);
  void shrink_key(uint32_t key);
  void count_waiting(ptrdiff_t delta);
  void stop(std::string reason);
  template <class T, class U>
  static uint32_t put(std::vector<T>& v, std::vector<uint32_t>& spare, U&& x);

  // The caller's side, written at every event: a cache line of its own. (Beside the search's
  // settings, read at every decision, each push made the thread's next read a miss.)
  alignas(64) std::vector<Event> batch_;  // the batch being filled
  size_t thread_slots_;
  bool threaded_ = false;
  // Shared, once a batch: the thread's batches in order, and spent ones to reuse.
  alignas(64) std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<Event>> queue_;
  std::vector<std::vector<Event>> spare_batches_;
  bool closing_ = false;
  std::thread thread_;
  std::exception_ptr failure_;  // what the thread threw (written by it, read after the join)
  // The search's state: the thread's once it has one.
  alignas(64) size_t limit_, max_waiting_;
  std::vector<Tally> tallies_;  // by device number
  bool stopped_ = false, ended_ = false;
  std::string stop_reason_;
  uint32_t next_number_ = 0;
  size_t waiting_ = 0, max_seen_ = 0;
  std::vector<SlotState> slots_;
  DeviceMap key_index_;  // (device, bytes) -> 1 + key, or kSingleBit | slot of the one used buffer
  BlockPool blocks_;     // the keys' vectors (declared first: it outlives them)
  std::vector<Key> keys_;
  std::vector<Kept> kept_;
  std::vector<Waiting> waits_;
  std::vector<Pair> pairs_;
  std::vector<uint32_t> spare_keys_, spare_kept_, spare_waits_, spare_pairs_;
  std::vector<std::vector<Listed>> listed_;  // per device: a max-heap by L's number, at most limit_
  std::vector<uint32_t> listed_at_peak_;      // per device: listed pairs tested and found at the peak
};

}  // namespace moeprof::planner
