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
// State: per key with a used live buffer, its entries (one per buffer: its latest use) and the
// waiting allocations, plus freed buffers kept while an allocation before their free waits. When
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

  bool stopped() const { return stopped_; }
  const std::string& stop_reason() const { return stop_reason_; }
  // Allocations and kept buffers held now, and the most held at once (tests).
  size_t waiting() const { return waiting_; }
  size_t max_waiting_seen() const { return max_seen_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct SlotState {        // per replayer slot
    uint32_t number = 0;    // the lifetime's number (allocation order)
    uint32_t key = kNone;   // its key, while it has an entry
    uint32_t entry = kNone; // its entry (as a buffer M): its latest use
    uint32_t wait = kNone;  // its waiting record (as an allocation L)
    uint32_t pair = kNone;  // its pair (as L) until its free
  };
  struct Entry {            // a used buffer M at its latest use
    uint32_t u = 0, number = 0, free = kNoFree;
    StrId name{}, scope{};
    bool open = true, valid = true, kept = false;  // kept: freed, held for a waiting allocation
  };
  struct Waiting {          // an allocation L not decided yet
    uint32_t p = 0, number = 0, free = kNoFree, slot = kNone;
    StrId name{}, scope{};
  };
  struct Key {
    uint16_t device = 0;
    uint64_t bytes = 0;
    std::vector<uint32_t> order;  // entries by u, ascending
    std::vector<uint32_t> queue;  // waiting allocations in allocation order, from `head`
    size_t head = 0;
    uint32_t valid = 0, invalid = 0, kept = 0;  // kept: valid freed entries held for waiting ones
    // The open entry the first waiting allocation waits on: the latest valid entry before its
    // position (every entry between is invalid). Only its next use or its free decides.
    uint32_t blocker = kNone;
    bool idle = false;  // no entry, nothing waiting: dropped at the next sweep unless used again
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
  static constexpr uint32_t kNoFree = UINT32_MAX;

  uint32_t key_of(uint16_t device, uint64_t bytes, bool create);
  void settle(DeviceAnalysis& d, uint32_t key);
  void take(DeviceAnalysis& d, Key& k, const Waiting& w, const Entry& m);
  void close(DeviceAnalysis& d, uint32_t pair, uint32_t l_free);
  void invalidate(Key& k, Entry& e);
  void maybe_compact(Key& k);
  void drop_key_if_empty(uint32_t key);
  void sweep_idle_keys();
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
  size_t idle_keys_ = 0;  // keys in key_index_ with nothing in them (kept for sizes that recur)
  std::vector<SlotState> slots_;
  PairMap key_index_;  // (device, bytes) -> 1 + key, for keys in use
  std::vector<Key> keys_;
  std::vector<Entry> entries_;
  std::vector<Waiting> waits_;
  std::vector<Pair> pairs_;
  std::vector<uint32_t> spare_keys_, spare_entries_, spare_waits_, spare_pairs_;
  std::vector<std::vector<Listed>> listed_;  // per device: a max-heap by L's number, at most limit_
  std::vector<uint32_t> listed_at_peak_;      // per device: listed pairs tested and found at the peak
};

}  // namespace moeprof::planner
