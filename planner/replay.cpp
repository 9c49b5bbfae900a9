// Trace replay: one pass over the memory events in replay order keeps per-device counters (live
// bytes per category and per scope node, peaks, timeline buckets, the live set at the activation
// peak) and the lifetimes. analyze() drives it: directly when the input is in replay order,
// through a sort otherwise.
#include <algorithm>
#include <memory>
#include <thread>

#include "planner/counters.h"
#include "planner/handoff_stream.h"
#include "planner/replayer.h"

namespace moeprof::planner {

Replayer::Replayer(const std::vector<std::string>& strings, const AnalyzeOptions& opt, uint64_t t0, uint64_t t1,
                   size_t expected_allocs, const StackTable* stacks, HandoffSearch search)
    : opt_(opt), keep_all_(opt.keep_lifetimes || (opt.findings && search == HandoffSearch::kAtEnd)), t0_(t0), t1_(t1),
      scopes_(strings), slot_of_(65536, -1), filtering_(opt.category_mask != ~0u || opt.mem_kind_mask != ~0u), strings_(strings),
      strings_stacks_(stacks) {
  // Reserved once (the caller counts the allocations): growing by doubling would hold the old and
  // the new array at once, up to 3x the lifetimes at the peak.
  if (keep_all_) {
    lts_.reserve(expected_allocs);
    slot_chain_.reserve(expected_allocs);
    advise_huge(lts_.data(), lts_.capacity() * sizeof(Lifetime));
    advise_huge(slot_chain_.data(), slot_chain_.capacity() * sizeof(uint32_t));
  }
  if (opt.findings && search == HandoffSearch::kAsItGoes)
    handoffs_ = std::make_unique<HandoffStream>(opt.handoff_limit, opt.handoff_max_waiting,
                                                std::thread::hardware_concurrency() >= 2 ? opt.handoff_thread_slots : SIZE_MAX);
}

Replayer::~Replayer() = default;

DeviceState& Replayer::new_device(uint16_t device) {
  const auto s = static_cast<int32_t>(devs_.size());
  slot_of_[device] = s;
  devs_.emplace_back();
  devs_.back().out.device = device;
  if (t1_ == UINT64_MAX) {  // streaming: the time range is not known in advance
    devs_.back().tl_total.init_adaptive(opt_.timeline_points);
    devs_.back().tl_act.init_adaptive(opt_.timeline_points);
  } else {
    devs_.back().tl_total.init(opt_.timeline_points, t0_, t1_);
    devs_.back().tl_act.init(opt_.timeline_points, t0_, t1_);
  }
  return devs_.back();
}

// The scope slots an allocation of (device, scope) counts toward.
std::pair<uint32_t, uint32_t> Replayer::scope_slots(uint16_t device, StrId scope) {
  return chain_ranges_[scope_chain(device, scope)];
}

// The index into chain_ranges_ of (device, scope): from the device's cache of recent ones, else
// one hash lookup.
uint32_t Replayer::scope_chain(uint16_t device, StrId scope) {
  DeviceState& d = devs_[static_cast<size_t>(slot_of_[device])];
  DeviceState::ChainHit& hit = d.chain_cache[index_of(scope) % DeviceState::kChainCache];
  if (hit.scope == index_of(scope)) return hit.chain;
  uint32_t& c = chain_of_[{device, index_of(scope)}];
  if (c == 0) {
    auto [cb, ce] = scopes_.chain(scope);
    const auto begin = static_cast<uint32_t>(chain_slots_.size());
    for (uint32_t k = cb; k < ce; ++k) {
      const uint32_t node = scopes_.chain_nodes()[k];
      uint32_t& slot = node_slot_[{device, node}];
      if (slot == 0) {
        scope_stats_.push_back(ScopeSlot{0, 0, 0, 0, 0, 0, node, device});
        slot = static_cast<uint32_t>(scope_stats_.size());
      }
      chain_slots_.push_back(slot - 1);
    }
    chain_ranges_.emplace_back(begin, static_cast<uint32_t>(chain_slots_.size()));
    c = static_cast<uint32_t>(chain_ranges_.size());
  }
  hit = DeviceState::ChainHit{index_of(scope), c - 1};
  return c - 1;
}

uint32_t Replayer::new_slot() {
  if (!keep_all_ && !free_slots_.empty()) {
    const uint32_t s = free_slots_.back();
    free_slots_.pop_back();
    lts_[s] = Lifetime{};
    return s;
  }
  if (!keep_all_) reserve_huge(lts_, lts_.size() + 1);  // the slab of open lifetimes (keep_all_: reserved once)
  lts_.emplace_back();
  return static_cast<uint32_t>(lts_.size() - 1);
}

void Replayer::free_slot(uint32_t s) {
  if (!keep_all_) free_slots_.push_back(s);
}

void Replayer::release(DeviceState& d, uint32_t slot, uint64_t ts, uint32_t pos) {
  Lifetime& l = lts_[slot];
  l.t_free = ts;
  l.free_index = pos;
  const uint64_t b = l.bytes;
  d.live_total -= b;
  d.live_cat[l.category] -= b;
  const bool act = counts_as_activation(l.category);
  if (act) d.live_act -= b;
  auto [sb, se] = chain_ranges_[slot_chain_[slot]];
  for (uint32_t k = sb; k < se; ++k) {
    ScopeSlot& s = scope_stats_[chain_slots_[k]];
    s.live -= b;
    if (act) s.act_live -= b;
  }
  // Live at the device's current activation peak: keep a copy (the slot may be reused).
  if (!keep_all_ && d.out.peak_activation_bytes > 0 && live_at(l, d.out.peak_activation_index)) {
    reserve_huge(d.kept, d.kept.size() + 1);
    d.kept.push_back(l);
  }
  if (handoffs_) handoffs_->release(slot, l, pos);
}

void Replayer::on_alloc(DeviceState& d, const TraceRecord& r, uint32_t pos) {
  const uint32_t li = new_slot();
  Lifetime& l = lts_[li];
  l.seq = r.seq;
  l.address = r.address;
  l.bytes = r.bytes;
  l.t_alloc = r.timestamp_ns;
  l.alloc_index = pos;
  l.free_index = kNoIndex;
  l.name_id = r.name_id;
  l.scope_id = r.scope_id;
  l.shape_id = r.shape_id;
  l.stack_id = r.stack_id;
  l.stream = r.stream;
  l.device = r.device;
  l.category = r.category;  // in range: readers validate records
  l.dtype = r.dtype;
  l.mem_kind = r.mem_kind;
  l.data_dependent = (r.flags & kFlagDataDependent) != 0;
  if (handoffs_) handoffs_->alloc(li, l);
  if (r.bytes == 0) ++an_.zero_size_allocs;
  if (r.address == 0 && r.bytes == 0) {
    // malloc(0) returning null: nothing to free later; a zero-length lifetime.
    l.t_free = r.timestamp_ns;
    l.free_index = pos;
    free_slot(li);
  } else {
    uint32_t& st = addrs_.slot(r.device, r.address);
    if (st != 0 && !(st & AddressMap::kFreedBit)) {
      ++an_.alloc_over_live;
      const uint32_t old = (st & ~AddressMap::kFreedBit) - 1;
      release(d, old, r.timestamp_ns, pos);
      free_slot(old);
    }
    st = li + 1;
  }
  const uint64_t b = r.bytes;
  if (!add_bytes(all_churn_, b) && limit_error_.empty())
    limit_error_ = "the allocations add up to more than 2^63-1 bytes (at replay position " + std::to_string(pos) +
                   "): not a recording of real memory";
  const Category c = l.category;
  const bool act = counts_as_activation(c);
  d.live_total += b;
  d.live_cat[c] += b;
  if (act) d.live_act += b;
  d.out.churn_bytes += b;
  d.out.churn_by_category[c] += b;
  ++d.out.allocations;
  if (d.live_cat[c] > d.out.peak_by_category[c]) d.out.peak_by_category[c] = d.live_cat[c];
  if (d.live_total > d.out.peak_total_bytes) {
    d.out.peak_total_bytes = d.live_total;
    d.out.peak_total_ts = r.timestamp_ns;
    d.out.peak_total_index = pos;
    d.out.live_at_total_peak = d.live_cat;
  }
  if (act && d.live_act > d.out.peak_activation_bytes) {
    d.out.peak_activation_bytes = d.live_act;
    d.out.peak_activation_ts = r.timestamp_ns;
    d.out.peak_activation_index = pos;
    d.out.live_at_activation_peak = d.live_cat;
    d.kept.clear();
    if (handoffs_) handoffs_->peak_moved(r.device, pos, d.live_act);
  }
  const uint32_t chain = scope_chain(r.device, r.scope_id);
  if (slot_chain_.size() <= li) slot_chain_.resize(static_cast<size_t>(li) + 1);
  slot_chain_[li] = chain;  // the free finds its scope counters without a lookup
  auto [sb, se] = chain_ranges_[chain];
  for (uint32_t k = sb; k < se; ++k) {
    ScopeSlot& s = scope_stats_[chain_slots_[k]];
    s.live += b;
    if (s.live > s.hw) s.hw = s.live;
    if (act) {
      s.act_live += b;
      if (s.act_live > s.act_hw) s.act_hw = s.act_live;
    }
    s.alloc_bytes += b;
    ++s.allocs;
  }
  // Unnamed allocations with a call stack (traced programs) are grouped by their stack; finish()
  // names each group by its innermost user frame (AllocGroup::frame).
  if (opt_.alloc_groups) {
    uint64_t who = index_of(r.name_id);
    if (who == 0 && r.stack_id != StackId::kNone && index_of(r.stack_id) < kGroupByStack) who = kGroupByStack | index_of(r.stack_id);
    const uint64_t key = uint64_t{index_of(r.scope_id)} << 32 | who;
    if (key != last_group_key_ || last_group_slot_ == UINT32_MAX) {
      uint32_t& s = group_slot_[{key, 0}];
      if (s == 0) {
        group_keys_.push_back(key);
        s = static_cast<uint32_t>(group_keys_.size());
      }
      last_group_key_ = key;
      last_group_slot_ = s - 1;
    }
    groups_.add(last_group_slot_, r.bytes);
  }
  d.tl_total.sample(r.timestamp_ns, d.live_total);
  d.tl_act.sample(r.timestamp_ns, d.live_act);
}

// AnalyzeOptions::category_mask / mem_kind_mask. ignored_ holds, per (device, address), 1 while
// the most recent allocation there was left out and not yet freed (2 otherwise): its free and
// uses are left out with it.
bool Replayer::takes_part(const TraceRecord& r) {
  switch (r.kind) {
    case EventKind::kAlloc: {
      const bool in = (opt_.category_mask & category_bit(r.category)) != 0 &&
                      (opt_.mem_kind_mask & mem_kind_bit(r.mem_kind)) != 0;
      if (in) {
        if (uint32_t* st = ignored_.find(r.device, r.address)) *st = 2;
      } else if (r.address != 0 || r.bytes != 0) {  // malloc(0) returning null has no free to match
        ignored_.slot(r.device, r.address) = 1;
      }
      return in;
    }
    case EventKind::kFree: {
      uint32_t* st = ignored_.find(r.device, r.address);
      if (st == nullptr || *st != 1) return true;
      *st = 2;
      return false;
    }
    case EventKind::kUse: {
      const uint32_t* st = ignored_.find(r.device, r.address);
      return st == nullptr || *st != 1;
    }
    default: return true;
  }
}

void Replayer::on_free(DeviceState& d, const TraceRecord& r, uint32_t pos) {
  uint32_t* st = addrs_.find(r.device, r.address);
  if (r.address == 0 && (st == nullptr || (*st & AddressMap::kFreedBit))) {
    // Address 0 with nothing live there: free(nullptr). (The driver reports CUDA-graph memory as
    // an allocation at address 0; its free, if any, ends it.)
    ++an_.null_frees;
    return;
  }
  if (st == nullptr) {
    ++an_.unknown_frees;
    return;
  }
  if (*st & AddressMap::kFreedBit) {
    ++an_.double_frees;
    return;
  }
  const uint32_t li = *st - 1;
  Lifetime& l = lts_[li];
  if (r.bytes != 0 && r.bytes != l.bytes) ++an_.free_size_mismatches;
  release(d, li, r.timestamp_ns, pos);
  note_growth(l);
  free_slot(li);
  ++d.out.frees;
  *st |= AddressMap::kFreedBit;
  d.tl_total.sample(r.timestamp_ns, d.live_total);
  d.tl_act.sample(r.timestamp_ns, d.live_act);
}

void Replayer::prefetch(const TraceRecord& r, int stage) {
  if (r.kind == EventKind::kAlloc) {
    if (stage == 0) addrs_.prefetch(r.device, r.address);
    return;
  }
  if (r.kind != EventKind::kUse && r.kind != EventKind::kFree) return;
  if (stage == 0) {
    addrs_.prefetch(r.device, r.address);
    return;
  }
  if (stage != 1) return;
  const uint32_t* st = addrs_.find(r.device, r.address);
  if (st == nullptr || (*st & AddressMap::kFreedBit) || *st - 1 >= lts_.size()) return;
  // A use reads and writes the lifetime's first fields; a free reads all of it, and the slot's
  // scope chain (release()).
  if (r.kind == EventKind::kUse) {
    prefetch_bytes(&lts_[*st - 1], Lifetime::kUseFields);
    return;
  }
  prefetch_object(&lts_[*st - 1]);
  if (*st - 1 < slot_chain_.size()) __builtin_prefetch(&slot_chain_[*st - 1]);
}

void Replayer::on_use(DeviceState& d, const TraceRecord& r, uint32_t pos) {
  d.out.has_uses = true;
  if (opt_.keep_event_index) op_uses_.push_back(OpEvent{pos, r.device, r.name_id});
  uint32_t* st = addrs_.find(r.device, r.address);
  if (st == nullptr || (*st & AddressMap::kFreedBit)) {
    ++an_.unknown_uses;
    return;
  }
  Lifetime& l = lts_[*st - 1];
  l.last_use = r.timestamp_ns;
  l.last_use_index = pos;
  ++l.uses;
  if (handoffs_) handoffs_->use(*st - 1, r.device, l.bytes, pos);
}

void Replayer::on_pool(DeviceState& d, const TraceRecord& r) {
  bool found = false;
  for (auto& p : d.pools) {
    if (p.address == r.address) {
      p.reserved = r.bytes;
      found = true;
    }
  }
  const auto kind = static_cast<uint8_t>(r.mem_kind) <= kMaxMemKind ? r.mem_kind : MemKind::kOther;
  if (!found) d.pools.push_back({r.address, r.bytes, kind});
  uint64_t sum = 0, kind_sum = 0;
  bool ok = true;
  for (const auto& p : d.pools) {
    ok = add_bytes(sum, p.reserved) && ok;
    if (p.kind == kind) ok = add_bytes(kind_sum, p.reserved) && ok;
  }
  if (!ok && limit_error_.empty())
    limit_error_ = "the memory pools of device " + std::to_string(r.device) + " reserve more than 2^63-1 bytes: not a recording of real memory";
  d.out.pool_reserved_peak_bytes = std::max(d.out.pool_reserved_peak_bytes, sum);
  uint64_t& kp = d.out.pool_reserved_peak_by_kind[static_cast<size_t>(kind)];
  kp = std::max(kp, kind_sum);
}

RunAnalysis analyze(const Trace& trace, const AnalyzeOptions& opt) {
  RunAnalysis run;
  run.meta = trace.meta;
  run.dropped_records = trace.dropped_records;
  run.truncated = trace.truncated;
  run.truncation_note = trace.truncation_note;
  run.strings = trace.strings.all();
  run.stacks = trace.stacks;

  const auto& recs = trace.records;
  const size_t n = recs.size();
  size_t allocs = 0;  // the lifetimes' count, for one reservation
  {
    CounterCollector counters;
    for (const TraceRecord& r : recs) {
      counters.add(r);
      allocs += r.kind == EventKind::kAlloc;
    }
    run.counters = counters.finish(run.strings);
  }
  // Replay positions are 32-bit (Lifetime::alloc_index): beyond that the trace is refused, not wrapped.
  if (n >= kNoIndex) {
    run.limit_error = "the trace has " + std::to_string(n) + " records; the planner replays at most " +
                      std::to_string(kNoIndex - 1);
    return run;
  }
  // Time range of the replayed events (exact when the input is in order; recomputed otherwise).
  size_t first = 0, last = n;
  while (first < n && !is_replayed(recs[first].kind)) ++first;
  while (last > first && !is_replayed(recs[last - 1].kind)) --last;
  const uint64_t t0 = first < n ? recs[first].timestamp_ns : 0;
  const uint64_t t1 = last > first ? recs[last - 1].timestamp_ns : 0;
  run.start_ts = t0;
  const bool markers = opt.keep_event_index;
  auto takes_order = [&](EventKind k) { return is_replayed(k) || (markers && k == EventKind::kMarkerEnd); };

  // Optimistic pass: most traces are already in replay order. Replay directly and fall back to
  // sorting at the first record out of order.
  {
    auto rp = std::make_unique<Replayer>(run.strings, opt, t0, t1, allocs, &run.stacks);
    uint32_t pos = 0;
    const TraceRecord* prev = nullptr;
    bool in_order = true;
    for (size_t i = 0; i < n; ++i) {
      const TraceRecord& r = recs[i];
      if (!takes_order(r.kind)) continue;
      if (prev != nullptr &&
          (r.timestamp_ns < prev->timestamp_ns || (r.timestamp_ns == prev->timestamp_ns && r.seq < prev->seq))) {
        in_order = false;
        break;
      }
      prev = &r;
      if (!is_replayed(r.kind)) {
        rp->marker(r, pos);
        continue;
      }
      if (rp->event(r, pos, i)) ++pos;
    }
    if (in_order) {
      run.replayed_events = pos;
      rp->finish(&run, pos);
      return run;
    }
  }

  // Sorted pass: (timestamp, seq, file position) keys sorted directly (no indirection).
  struct Key {
    uint64_t ts, seq;
    uint32_t idx;
  };
  std::vector<Key> keys;
  keys.reserve(n);
  uint64_t lo = UINT64_MAX, hi = 0;
  for (size_t i = 0; i < n; ++i) {
    const TraceRecord& r = recs[i];
    if (!takes_order(r.kind)) continue;
    keys.push_back(Key{r.timestamp_ns, r.seq, static_cast<uint32_t>(i)});
    if (!is_replayed(r.kind)) continue;
    lo = std::min(lo, r.timestamp_ns);
    hi = std::max(hi, r.timestamp_ns);
  }
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    if (a.ts != b.ts) return a.ts < b.ts;
    if (a.seq != b.seq) return a.seq < b.seq;
    return a.idx < b.idx;
  });
  Replayer rp(run.strings, opt, lo, hi, allocs, &run.stacks);
  uint32_t pos = 0;
  for (const Key& k : keys) {
    const TraceRecord& r = recs[k.idx];
    if (!is_replayed(r.kind)) {
      rp.marker(r, pos);
      continue;
    }
    if (rp.event(r, pos, k.idx)) ++pos;
  }
  run.reordered = true;
  run.start_ts = lo == UINT64_MAX ? 0 : lo;
  run.replayed_events = pos;
  rp.finish(&run, pos);
  return run;
}

}  // namespace moeprof::planner
