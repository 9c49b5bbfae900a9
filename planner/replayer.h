// The replay state machine (internal to the planner): feed it the memory events in replay order;
// finish() builds the RunAnalysis. Split over replay.cpp (events), live_set.cpp (live sets at the
// peaks, scopes, totals) and handoffs.cpp (reuse findings).
//
// Memory: open allocations, the scope table, per-device counters and the live set at each
// device's current activation peak; every lifetime only when AnalyzeOptions::keep_lifetimes or
// ::findings asks for them. The live set at the peak is kept incrementally: when a device reaches
// a new activation maximum at position P, what is live there is exactly its open allocations;
// an allocation freed later that was allocated at or before P is copied aside; a new maximum
// discards the copies. At the end, the copies plus the open allocations allocated at or before P
// are the live set at the peak.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/checked.h"
#include "core/trace.h"
#include "planner/address_map.h"
#include "planner/analysis.h"
#include "planner/scope_tree.h"
#include "planner/timeline.h"

namespace moeprof::planner {

inline constexpr uint32_t kNoIndex = UINT32_MAX;
// In the (scope, name) half of an allocation group's key: the low 32 bits are a name id, or, with
// this bit set, the stack id of an unnamed allocation.
inline constexpr uint64_t kGroupByStack = uint64_t{1} << 31;

// Asked of every record: inline.
inline bool is_replayed(EventKind kind) {
  return kind == EventKind::kAlloc || kind == EventKind::kFree || kind == EventKind::kUse ||
         kind == EventKind::kPoolReserve || kind == EventKind::kGraphMem;
}
inline bool live_at(const Lifetime& l, uint32_t pos) {
  return l.alloc_index <= pos && pos < l.free_index && l.bytes > 0;
}

struct DeviceState {
  DeviceAnalysis out;
  uint64_t live_total = 0, live_act = 0;
  CategoryBytes live_cat;
  std::vector<Lifetime> kept;                         // freed, live at the current activation peak
  struct Pool {
    uint64_t address = 0, reserved = 0;
    MemKind kind = MemKind::kOther;  // the kind of the tensors it holds (kStreamOrdered: cudaMallocAsync)
  };
  std::vector<Pool> pools;
  Timeline tl_total, tl_act;
  // Recent (scope id, chain index) pairs, by scope id modulo their count: scopes alternate from one
  // allocation to the next (a layer's attention and MoE tensors), each a hash lookup otherwise.
  static constexpr size_t kChainCache = 256;
  struct ChainHit {
    uint32_t scope = UINT32_MAX, chain = 0;
  };
  std::array<ChainHit, kChainCache> chain_cache{};
};

// Per (device, scope node) counters.
struct ScopeSlot {
  uint64_t live = 0, hw = 0, act_live = 0, act_hw = 0, alloc_bytes = 0, allocs = 0;
  uint32_t node = 0;
  uint16_t device = 0;
};

class HandoffStream;

// How hand-offs are searched (AnalyzeOptions::findings): from every lifetime at the end
// (handoffs.cpp; they are all kept), or as the replay goes (handoff_stream.h; streaming).
enum class HandoffSearch { kAtEnd, kAsItGoes };

class Replayer {
 public:
  Replayer(const std::vector<std::string>& strings, const AnalyzeOptions& opt, uint64_t t0, uint64_t t1,
           size_t expected_allocs, const StackTable* stacks = nullptr, HandoffSearch search = HandoffSearch::kAtEnd);
  ~Replayer();

  // Replays one event at replay position `pos`; false when the filter left it out (it then takes
  // no position).
  bool event(const TraceRecord& rec, uint32_t pos, size_t index) {
    const TraceRecord* rp = &rec;
    TraceRecord inferred;
    if (opt_.record_categories != nullptr && rec.kind == EventKind::kAlloc && index < opt_.record_categories->size()) {
      inferred = rec;
      inferred.category = (*opt_.record_categories)[index];
      rp = &inferred;
    }
    const TraceRecord& r = *rp;
    if (filtering_ && !takes_part(r)) return false;
    DeviceState& d = dev_state(r.device);
    switch (r.kind) {
      case EventKind::kAlloc: on_alloc(d, r, pos); break;
      case EventKind::kFree: on_free(d, r, pos); break;
      case EventKind::kUse: on_use(d, r, pos); break;
      case EventKind::kPoolReserve: on_pool(d, r); break;
      case EventKind::kGraphMem: d.out.graph_mem_peak_bytes = std::max(d.out.graph_mem_peak_bytes, r.bytes); break;
      default: break;
    }
    if (opt_.keep_event_index) position_ts_.push_back(r.timestamp_ns);
    return true;
  }
  // Hints for an event that comes some events later (the streamed replay's reorder window holds
  // them), in stages as it comes closer: 0 loads the hash entries its lookups will read; 1 (those
  // entries cached) the lifetime they name, and for a free its slot's scope chain; later stages
  // have nothing more to load (the hand-off search hints its own state within its batches). They
  // change nothing. A replay is random accesses into tables that grow with what is live; without
  // the hints each event waits for several cache misses in turn.
  void prefetch(const TraceRecord& r, int stage);
  // Whether the hints pay: once the lifetimes' slab holds kManyLiveSlots slots (1.3 MB of
  // lifetimes, with the address map and the hand-off search's tables past the 2 MB L2 cache), its
  // random accesses miss the caches.
  bool prefetching() const { return lts_.size() >= kManyLiveSlots; }
  // A marker between replayed events: `pos` is the number of replayed events before it.
  void marker(const TraceRecord& r, uint32_t pos) {
    if (opt_.keep_event_index && r.kind == EventKind::kMarkerEnd) marker_ends_.push_back(OpEvent{pos, r.device, r.name_id});
  }

  // Live sets, scope tables, reuse findings; moves everything into `run`.
  void finish(RunAnalysis* run, uint32_t num_events);

 private:
  // Every event asks: inline, the first event of a device out of line.
  DeviceState& dev_state(uint16_t device) {
    const int32_t s = slot_of_[device];
    return s >= 0 ? devs_[static_cast<size_t>(s)] : new_device(device);
  }
  DeviceState& new_device(uint16_t device);
  std::pair<uint32_t, uint32_t> scope_slots(uint16_t device, StrId scope);
  uint32_t scope_chain(uint16_t device, StrId scope);
  void release(DeviceState& d, uint32_t slot, uint64_t ts, uint32_t pos);
  void on_alloc(DeviceState& d, const TraceRecord& r, uint32_t pos);
  void on_free(DeviceState& d, const TraceRecord& r, uint32_t pos);
  void on_use(DeviceState& d, const TraceRecord& r, uint32_t pos);
  void on_pool(DeviceState& d, const TraceRecord& r);
  bool takes_part(const TraceRecord& r);
  uint32_t new_slot();
  void free_slot(uint32_t s);
  void find_handoffs(const RunAnalysis& run, uint32_t num_events);
  void find_growth(RunAnalysis* run);
  void note_growth(const Lifetime& l);
  void build_live_sets(RunAnalysis* run);

  const AnalyzeOptions& opt_;
  const bool keep_all_;  // every lifetime stays (keep_lifetimes, or findings searched at the end)
  std::unique_ptr<HandoffStream> handoffs_;  // findings searched as the replay goes
  uint64_t t0_, t1_;
  AddressMap addrs_;
  ScopeTree scopes_;
  std::vector<int32_t> slot_of_;
  std::vector<DeviceState> devs_;
  std::vector<Lifetime> lts_;       // all lifetimes in alloc order (keep_all_), else a slab of open ones
  std::vector<uint32_t> free_slots_;  // reusable slab slots (!keep_all_)
  std::vector<ScopeSlot> scope_stats_;
  PairMap chain_of_;                 // (device, scope id) -> 1 + index into chain_ranges_
  PairMap node_slot_;                // (device, scope node) -> 1 + index into scope_stats_
  std::vector<std::pair<uint32_t, uint32_t>> chain_ranges_;  // [begin, end) into chain_slots_
  std::vector<uint32_t> chain_slots_;                        // indices into scope_stats_
  std::vector<uint32_t> slot_chain_;                         // per lifetime slot: its chain index
  // Allocation groups (AnalyzeOptions::alloc_groups): each (scope id << 32 | name id, or
  // kGroupByStack | stack id when unnamed) gets a label slot; groups_ counts (slot, bytes).
  PairMap group_slot_;                  // (that key, 0) -> 1 + slot
  std::vector<uint64_t> group_keys_;    // slot -> that key
  uint64_t last_group_key_ = 0;         // the last allocation's key and slot (runs of one scope and name)
  uint32_t last_group_slot_ = UINT32_MAX;
  GroupCounter groups_;
  Anomalies an_;
  // Bytes allocated over all devices, checked against kMaxBytes: every other byte figure of the
  // analysis (live bytes, peaks, scope counters, groups, never-freed bytes) is at most this sum,
  // so with it in range none of them wraps (core/checked.h).
  uint64_t all_churn_ = 0;
  std::string limit_error_;
  bool filtering_;
  AddressMap ignored_;  // see takes_part
  std::vector<uint64_t> position_ts_;
  // Growth findings, counted as lifetimes are freed (handoffs.cpp).
  struct GrowthGroup {
    std::pair<uint64_t, uint64_t> key;  // (label: name id, or 1 << 40 | innermost frame; scope family)
    uint64_t n = 0, first = 0, last = 0;
    bool monotone = true;
  };
  const std::vector<std::string>& strings_;
  const StackTable* strings_stacks_ = nullptr;
  std::vector<uint32_t> scope_family_;
  std::map<std::string, uint32_t> family_ids_;
  std::vector<std::string> family_names_;
  PairMap growth_index_;              // key -> 1 + index into growth_
  std::vector<GrowthGroup> growth_;
  std::vector<OpEvent> op_uses_, marker_ends_;
};

}  // namespace moeprof::planner
