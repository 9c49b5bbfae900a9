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
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "planner/address_map.h"
#include "planner/analysis.h"

namespace moeprof::planner {

class HandoffStream {
 public:
  HandoffStream(size_t list_limit, size_t max_waiting, const std::vector<std::string>& strings)
      : limit_(list_limit), max_waiting_(max_waiting), strings_(strings) {}

  // The replayer's events; `slot` is the lifetime's slab slot (reused once released), `d` the
  // lifetime's device. alloc() is called for every allocation, in replay order (it numbers them as
  // RunAnalysis::lifetimes would).
  void alloc(DeviceAnalysis& d, uint32_t slot, const Lifetime& l);
  void use(DeviceAnalysis& d, uint32_t slot, const Lifetime& l, uint32_t pos);
  void release(DeviceAnalysis& d, uint32_t slot, const Lifetime& l, uint32_t pos);
  // The end of the trace: what is open stays open; every decision is made and every pair tested.
  void finish(const std::function<DeviceAnalysis&(uint16_t)>& device);
  // The device reached a new activation peak: no pair tested so far lies there (both its frees came
  // before), so the at-peak bytes and flags start again.
  void peak_moved(DeviceAnalysis& d);

  // Hints (Replayer::prefetch; stages 0 to 3 as the event comes closer) for an allocation of
  // (device, bytes), or a use or free of a slot: the index entry, the slot's state, the key they
  // name, then its order's element and its waiting queue. They change nothing.
  void prefetch_size(uint16_t device, uint64_t bytes, int stage) const;
  void prefetch_slot(uint32_t slot, int stage) const;

  bool stopped() const { return stopped_; }
  const std::string& stop_reason() const { return stop_reason_; }
  // Allocations and kept buffers held now, and the most held at once (tests).
  size_t waiting() const { return waiting_; }
  size_t max_waiting_seen() const { return max_seen_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr uint32_t kNoFree = UINT32_MAX;
  static constexpr uint32_t kKeptBit = 1u << 31;
  static constexpr uint32_t kSingleBit = 1u << 31;  // in key_index_: the one buffer's slot, no key
  static constexpr uint32_t kSingle = UINT32_MAX - 1;  // SlotState::key of that buffer
  struct SlotState {          // per replayer slot: the lifetime as a buffer M and as an allocation L
    uint32_t number = 0;      // the lifetime's number (allocation order)
    uint32_t key = kNone;     // its key while it is an open, used buffer (kSingle: alone, no key)
    uint32_t u = 0, pos = 0;  // its latest use, and that use's element in the key's order
    uint32_t wait = kNone;    // its waiting record (as an allocation L)
    uint32_t pair = kNone;    // its pair (as L) until its free
    StrId name{}, scope{};
  };
  struct Element {            // a buffer's use, in its key's order
    uint32_t u, ref, number;  // ref: its slot, or kKeptBit | kept record once freed
  };
  struct Kept {               // a freed buffer held for waiting allocations
    uint32_t u = 0, number = 0, free = 0;
    StrId name{}, scope{};
    bool valid = false;
  };
  struct Waiting {            // an allocation L not decided yet
    uint32_t p = 0, number = 0, free = kNoFree, slot = kNone;
    StrId name{}, scope{};
  };
  struct Key {
    uint16_t device = 0;
    uint64_t bytes = 0;
    std::vector<Element> order;   // by u, ascending
    std::vector<uint32_t> queue;  // waiting allocations in allocation order, from `head`
    size_t head = 0;
    uint32_t valid = 0, invalid = 0, kept = 0;  // elements: current ones (open or kept), stale ones
    // The open buffer the first waiting allocation waits on: the latest valid element before its
    // position (every element between is stale). Only its next use or its free decides.
    uint32_t blocker = kNone, blocker_number = 0;
  };
  struct Pair {
    uint32_t a = 0, b = 0, number = 0;  // [a, b): L.alloc to M.free so far; number: L's
    uint64_t bytes = 0;
    uint16_t device = 0;
    bool listed = false;
  };
  struct Listed {
    Handoff h;
    uint32_t pair = kNone;  // open pair whose peak test is pending
  };
  struct Found {  // a candidate, as settle() found it
    uint32_t number, free;
    StrId name, scope;
  };

  void prefetch_key(uint32_t key, uint32_t pos, int stage) const;
  uint32_t new_key(uint16_t device, uint64_t bytes);
  uint32_t promote(uint32_t& index_value, uint16_t device, uint64_t bytes);
  bool valid(uint32_t key, const Element& e) const;
  void settle(DeviceAnalysis& d, uint32_t key);
  void take(DeviceAnalysis& d, Key& k, const Waiting& w, const Found& m);
  void close(DeviceAnalysis& d, uint32_t pair, uint32_t l_free);
  void drop(Key& k, Element& e);  // a current element stops being one
  void maybe_compact(Key& k);
  void shrink_key(uint32_t key);
  void count_waiting(ptrdiff_t delta);
  void stop(std::string reason);
  template <class T>
  static uint32_t put(std::vector<T>& v, std::vector<uint32_t>& spare, T x);

  size_t limit_, max_waiting_;
  const std::vector<std::string>& strings_;
  bool stopped_ = false, ended_ = false;
  std::string stop_reason_;
  uint32_t next_number_ = 0;
  size_t waiting_ = 0, max_seen_ = 0;
  std::vector<SlotState> slots_;
  PairMap key_index_;  // (device, bytes) -> 1 + key, or kSingleBit | slot of the one used buffer
  std::vector<Key> keys_;
  std::vector<Kept> kept_;
  std::vector<Waiting> waits_;
  std::vector<Pair> pairs_;
  std::vector<uint32_t> spare_keys_, spare_kept_, spare_waits_, spare_pairs_;
  std::vector<std::vector<Listed>> listed_;  // per device: a max-heap by L's number, at most limit_
  std::vector<uint32_t> listed_at_peak_;      // per device: listed pairs tested and found at the peak
};

}  // namespace moeprof::planner
