// Trace replay. One pass over the memory events in replay order keeps per-device counters (live
// bytes per category and per scope node, peaks, timeline buckets) and builds the lifetimes; the
// live sets at the peaks and the reuse findings are computed afterwards from the lifetimes, using
// the replay positions of allocs, frees and uses.
#include "planner/analysis.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string_view>
#include <tuple>
#include <unordered_map>

namespace moeprof::planner {

uint64_t CategoryBytes::total() const {
  uint64_t t = 0;
  for (uint64_t b : bytes) t += b;
  return t;
}

uint64_t CategoryBytes::activation() const {
  uint64_t t = 0;
  for (int i = 0; i < kNumCategories; ++i) {
    if (counts_as_activation(static_cast<Category>(i))) t += bytes[static_cast<size_t>(i)];
  }
  return t;
}

const DeviceAnalysis* RunAnalysis::device(uint16_t id) const {
  for (const auto& d : devices) {
    if (d.device == id) return &d;
  }
  return nullptr;
}

namespace {

constexpr uint32_t kNoIndex = UINT32_MAX;
constexpr uint32_t kFreedBit = 1u << 31;

// Open-addressing map from a pair of 64-bit words to a uint32, for the hot per-event lookups:
// (device, address) -> allocation state, and ((scope, name), bytes) -> count. Entries are never
// erased. Linear probing, power-of-two capacity, at most half full.
class PairMap {
 public:
  using Key = std::pair<uint64_t, uint64_t>;
  PairMap() { rehash(256); }

  // The value for the key, inserted as 0 when absent.
  uint32_t& operator[](Key k) {
    if ((size_ + 1) * 2 > cap_) rehash(cap_ * 2);
    size_t i = hash(k) & (cap_ - 1);
    while (true) {
      Entry& e = entries_[i];
      if (!e.used) {
        e.used = true;
        e.key = k;
        e.value = 0;
        ++size_;
        return e.value;
      }
      if (e.key == k) return e.value;
      i = (i + 1) & (cap_ - 1);
    }
  }
  // nullptr when absent.
  uint32_t* find(Key k) {
    size_t i = hash(k) & (cap_ - 1);
    while (true) {
      Entry& e = entries_[i];
      if (!e.used) return nullptr;
      if (e.key == k) return &e.value;
      i = (i + 1) & (cap_ - 1);
    }
  }
  template <typename F>
  void for_each(F&& f) const {
    for (const Entry& e : entries_) {
      if (e.used) f(e.key, e.value);
    }
  }

 private:
  struct Entry {
    Key key;
    uint32_t value = 0;
    bool used = false;
  };
  static size_t hash(Key k) {
    uint64_t x = k.first * 0x9e3779b97f4a7c15ULL ^ (k.second + 0x632be59bd9b4e019ULL);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return static_cast<size_t>(x);
  }
  void rehash(size_t cap) {
    std::vector<Entry> old = std::move(entries_);
    entries_.assign(cap, Entry{});
    cap_ = cap;
    size_ = 0;
    for (const Entry& e : old) {
      if (e.used) (*this)[e.key] = e.value;
    }
  }
  std::vector<Entry> entries_;
  size_t cap_ = 0, size_ = 0;
};

// Allocation state per (device, address). A freed allocation leaves its address marked freed, so
// a second free is told apart from a free of an unknown address. State: (lifetime index + 1),
// | kFreedBit once freed.
class AddressMap {
 public:
  uint32_t& slot(uint16_t device, uint64_t address) { return map_[{device, address}]; }
  uint32_t* find(uint16_t device, uint64_t address) { return map_.find({device, address}); }

 private:
  PairMap map_;
};

// Scope tree: every distinct scope path and each of its '/'-prefixes is a node. chain(scope_id)
// lists the nodes an allocation in that scope counts toward (exact scope first).
class ScopeTree {
 public:
  explicit ScopeTree(const StringTable& strings) : strings_(strings) {}

  // [begin, end) into chain_nodes().
  std::pair<uint32_t, uint32_t> chain(StrId scope) {
    const uint32_t scope_id = index_of(scope);
    if (scope_id >= chain_of_.size()) chain_of_.resize(std::max<size_t>(scope_id + 1, strings_.size()), {kNoIndex, 0});
    auto& c = chain_of_[scope_id];
    if (c.first != kNoIndex) return c;
    std::string_view s = strings_.get(scope);
    uint32_t begin = static_cast<uint32_t>(chain_nodes_.size());
    if (s.empty()) {
      chain_nodes_.push_back(node(""));
    } else {
      // Exact scope, then shorter prefixes. Empty components ("a//b") are kept as written.
      size_t end = s.size();
      while (true) {
        chain_nodes_.push_back(node(s.substr(0, end)));
        size_t slash = s.rfind('/', end - 1);
        if (slash == std::string_view::npos || slash == 0) break;
        end = slash;
      }
    }
    c = {begin, static_cast<uint32_t>(chain_nodes_.size())};
    return c;
  }
  const std::vector<uint32_t>& chain_nodes() const { return chain_nodes_; }
  size_t num_nodes() const { return names_.size(); }
  const std::string& name(uint32_t n) const { return names_[n]; }

 private:
  uint32_t node(std::string_view path) {
    auto it = index_.find(std::string(path));
    if (it != index_.end()) return it->second;
    uint32_t id = static_cast<uint32_t>(names_.size());
    names_.emplace_back(path);
    index_.emplace(std::string(path), id);
    return id;
  }
  const StringTable& strings_;
  std::vector<std::pair<uint32_t, uint32_t>> chain_of_;
  std::vector<uint32_t> chain_nodes_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> index_;
};

uint32_t scope_depth(std::string_view s) {
  if (s.empty()) return 0;
  return static_cast<uint32_t>(std::count(s.begin(), s.end(), '/') + 1);
}

// Downsampled timeline: the time range is cut into buckets; each keeps its first min and first
// max sample.
class Timeline {
 public:
  void init(size_t points, uint64_t t0, uint64_t t1) {
    buckets_ = points / 2;
    if (points > 0 && buckets_ == 0) buckets_ = 1;
    t0_ = t0;
    // Monotone in ts, so buckets stay in time order; the clamp absorbs rounding at t1.
    scale_ = static_cast<double>(buckets_) / (static_cast<double>(t1 - t0) + 1.0);
    lo_.assign(buckets_, {0, kNever});
    hi_.assign(buckets_, {0, 0});
    seen_.assign(buckets_, 0);
    points_ = points;
  }
  void sample(uint64_t ts, uint64_t v) {
    if (buckets_ == 0) return;
    size_t b = static_cast<size_t>(static_cast<double>(ts - t0_) * scale_);
    if (b >= buckets_) b = buckets_ - 1;
    if (!seen_[b]) {
      seen_[b] = 1;
      lo_[b] = {ts, v};
      hi_[b] = {ts, v};
      return;
    }
    if (v < lo_[b].second) lo_[b] = {ts, v};
    if (v > hi_[b].second) hi_[b] = {ts, v};
  }
  std::vector<std::pair<uint64_t, uint64_t>> points() const {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (size_t b = 0; b < buckets_; ++b) {
      if (!seen_[b]) continue;
      auto a = lo_[b], c = hi_[b];
      if (a == c) {
        out.push_back(a);
      } else if (a.first <= c.first) {
        out.push_back(a);
        out.push_back(c);
      } else {
        out.push_back(c);
        out.push_back(a);
      }
    }
    if (out.size() > points_) out.resize(points_);  // only when points_ == 1
    return out;
  }

 private:
  size_t buckets_ = 0, points_ = 0;
  uint64_t t0_ = 0;
  double scale_ = 0.0;
  std::vector<std::pair<uint64_t, uint64_t>> lo_, hi_;
  std::vector<uint8_t> seen_;
};

bool is_replayed(EventKind kind) {
  return kind == EventKind::kAlloc || kind == EventKind::kFree || kind == EventKind::kUse ||
         kind == EventKind::kPoolReserve || kind == EventKind::kGraphMem;
}

LiveEntry make_entry(const Lifetime& l, const RunAnalysis& run, uint32_t at) {
  LiveEntry e;
  e.name = run.str(l.name_id);
  e.scope = run.str(l.scope_id);
  e.shape = run.str(l.shape_id);
  e.category = l.category;
  e.dtype = l.dtype;
  e.bytes = l.bytes;
  e.address = l.address;
  e.t_alloc = l.t_alloc;
  e.uses = l.uses;
  e.last_use = l.uses ? l.last_use : 0;
  e.held_after_last_use = l.uses > 0 && l.last_use_index < at;
  return e;
}

bool live_at(const Lifetime& l, uint32_t pos) { return l.alloc_index <= pos && pos < l.free_index && l.bytes > 0; }

struct DeviceState {
  DeviceAnalysis out;
  uint64_t live_total = 0, live_act = 0;
  CategoryBytes live_cat;
  std::vector<uint64_t> scope_live, scope_hw, scope_act_live, scope_act_hw, scope_alloc_bytes, scope_allocs;
  std::vector<std::pair<uint64_t, uint64_t>> pools;  // (pool address, reserved)
  Timeline tl_total, tl_act;
};

// The replay state machine: feed it the memory events in replay order.
class Replayer {
 public:
  Replayer(const Trace& trace, const AnalyzeOptions& opt, uint64_t t0, uint64_t t1)
      : opt_(opt), t0_(t0), t1_(t1), scopes_(trace.strings), slot_of_(65536, -1),
        filtering_(opt.category_mask != ~0u || opt.mem_kind_mask != ~0u) {
    // Allocations are at most about half of the events in traces that free what they allocate;
    // untouched capacity costs address space only.
    lts_.reserve(trace.records.size() / 2 + 16);
  }

  // Replays one event at replay position `pos`; false when the filter left it out (it then takes
  // no position).
  bool event(const TraceRecord& r, uint32_t pos) {
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
    return true;
  }

  // Live sets, scope tables, reuse findings; moves everything into `run`.
  void finish(RunAnalysis* run, uint32_t num_events);

 private:
  DeviceState& dev_state(uint16_t device) {
    int32_t s = slot_of_[device];
    if (s < 0) {
      s = static_cast<int32_t>(devs_.size());
      slot_of_[device] = s;
      devs_.emplace_back();
      devs_.back().out.device = device;
      devs_.back().tl_total.init(opt_.timeline_points, t0_, t1_);
      devs_.back().tl_act.init(opt_.timeline_points, t0_, t1_);
    }
    return devs_[static_cast<size_t>(s)];
  }

  void release(DeviceState& d, Lifetime& l, uint64_t ts, uint32_t pos) {
    l.t_free = ts;
    l.free_index = pos;
    const uint64_t b = l.bytes;
    d.live_total -= b;
    d.live_cat[l.category] -= b;
    const bool act = counts_as_activation(l.category);
    if (act) d.live_act -= b;
    auto [cb, ce] = scopes_.chain(l.scope_id);
    const auto& nodes = scopes_.chain_nodes();
    for (uint32_t k = cb; k < ce; ++k) {
      d.scope_live[nodes[k]] -= b;
      if (act) d.scope_act_live[nodes[k]] -= b;
    }
  }

  void on_alloc(DeviceState& d, const TraceRecord& r, uint32_t pos) {
    const uint32_t li = static_cast<uint32_t>(lts_.size());
    Lifetime& l = lts_.emplace_back();
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
    if (r.bytes == 0) ++an_.zero_size_allocs;
    if (r.address == 0 && r.bytes == 0) {
      // malloc(0) returning null: nothing to free later; a zero-length lifetime.
      l.t_free = r.timestamp_ns;
      l.free_index = pos;
    } else {
      uint32_t& st = addrs_.slot(r.device, r.address);
      if (st != 0 && !(st & kFreedBit)) {
        ++an_.alloc_over_live;
        release(d, lts_[(st & ~kFreedBit) - 1], r.timestamp_ns, pos);
      }
      st = li + 1;
    }
    const uint64_t b = r.bytes;
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
    }
    if (act && d.live_act > d.out.peak_activation_bytes) {
      d.out.peak_activation_bytes = d.live_act;
      d.out.peak_activation_ts = r.timestamp_ns;
      d.out.peak_activation_index = pos;
    }
    auto [cb, ce] = scopes_.chain(r.scope_id);
    if (d.scope_live.size() < scopes_.num_nodes()) {
      const size_t n = scopes_.num_nodes();
      for (auto* v : {&d.scope_live, &d.scope_hw, &d.scope_act_live, &d.scope_act_hw, &d.scope_alloc_bytes,
                      &d.scope_allocs}) {
        v->resize(n, 0);
      }
    }
    const auto& nodes = scopes_.chain_nodes();
    for (uint32_t k = cb; k < ce; ++k) {
      const uint32_t n = nodes[k];
      d.scope_live[n] += b;
      if (d.scope_live[n] > d.scope_hw[n]) d.scope_hw[n] = d.scope_live[n];
      if (act) {
        d.scope_act_live[n] += b;
        if (d.scope_act_live[n] > d.scope_act_hw[n]) d.scope_act_hw[n] = d.scope_act_live[n];
      }
      d.scope_alloc_bytes[n] += b;
      ++d.scope_allocs[n];
    }
    ++groups_[{uint64_t{index_of(r.scope_id)} << 32 | index_of(r.name_id), r.bytes}];
    d.tl_total.sample(r.timestamp_ns, d.live_total);
    d.tl_act.sample(r.timestamp_ns, d.live_act);
  }

  // AnalyzeOptions::category_mask / mem_kind_mask. ignored_ holds, per (device, address), 1 while
  // the most recent allocation there was left out and not yet freed (2 otherwise): its free and
  // uses are left out with it.
  bool takes_part(const TraceRecord& r) {
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

  void on_free(DeviceState& d, const TraceRecord& r, uint32_t pos) {
    uint32_t* st = addrs_.find(r.device, r.address);
    if (r.address == 0 && (st == nullptr || (*st & kFreedBit))) {
      // Address 0 with nothing live there: free(nullptr). (The driver reports CUDA-graph memory as
      // an allocation at address 0; its free, if any, ends it.)
      ++an_.null_frees;
      return;
    }
    if (st == nullptr) {
      ++an_.unknown_frees;
      return;
    }
    if (*st & kFreedBit) {
      ++an_.double_frees;
      return;
    }
    Lifetime& l = lts_[*st - 1];
    if (r.bytes != 0 && r.bytes != l.bytes) ++an_.free_size_mismatches;
    release(d, l, r.timestamp_ns, pos);
    ++d.out.frees;
    *st |= kFreedBit;
    d.tl_total.sample(r.timestamp_ns, d.live_total);
    d.tl_act.sample(r.timestamp_ns, d.live_act);
  }

  void on_use(DeviceState& d, const TraceRecord& r, uint32_t pos) {
    d.out.has_uses = true;
    uint32_t* st = addrs_.find(r.device, r.address);
    if (st == nullptr || (*st & kFreedBit)) {
      ++an_.unknown_uses;
      return;
    }
    Lifetime& l = lts_[*st - 1];
    if (l.uses == 0) l.first_use = r.timestamp_ns;
    l.last_use = r.timestamp_ns;
    l.last_use_index = pos;
    ++l.uses;
  }

  void on_pool(DeviceState& d, const TraceRecord& r) {
    uint64_t sum = 0;
    bool found = false;
    for (auto& p : d.pools) {
      if (p.first == r.address) {
        p.second = r.bytes;
        found = true;
      }
      sum += p.second;
    }
    if (!found) {
      d.pools.emplace_back(r.address, r.bytes);
      sum += r.bytes;
    }
    d.out.pool_reserved_peak_bytes = std::max(d.out.pool_reserved_peak_bytes, sum);
  }

  void find_handoffs(const RunAnalysis& run, uint32_t num_events);

  const AnalyzeOptions& opt_;
  uint64_t t0_, t1_;
  AddressMap addrs_;
  ScopeTree scopes_;
  std::vector<int32_t> slot_of_;
  std::vector<DeviceState> devs_;
  std::vector<Lifetime> lts_;
  PairMap groups_;  // ((scope_id << 32) | name_id, bytes) -> count
  Anomalies an_;
  bool filtering_;
  AddressMap ignored_;  // see takes_part
};

// Reuse findings: pairs (new alloc L, dead buffer M) on one device with M.bytes == L.bytes and
// M.last_use_index < L.alloc_index < M.free_index; each M is offered once, the most recently dead
// first. One sweep over replay positions for all devices (no sort: each position holds at most
// one last use).
void Replayer::find_handoffs(const RunAnalysis& run, uint32_t num_events) {
  bool any = false;
  for (const auto& d : devs_) any = any || d.out.has_uses;
  if (!any) return;
  std::vector<uint32_t> dead_at(num_events, kNoIndex);
  for (uint32_t i = 0; i < lts_.size(); ++i) {
    const Lifetime& l = lts_[i];
    if (l.uses > 0 && l.bytes > 0 && l.last_use_index + 1 < l.free_index) dead_at[l.last_use_index] = i;
  }
  PairMap stack_of;  // (device, bytes) -> index + 1 into stacks
  std::vector<std::vector<uint32_t>> stacks;
  auto stack_for = [&](uint16_t device, uint64_t bytes, bool create) -> std::vector<uint32_t>* {
    uint32_t& s = stack_of[{device, bytes}];
    if (s == 0) {
      if (!create) return nullptr;
      stacks.emplace_back();
      s = static_cast<uint32_t>(stacks.size());
    }
    return &stacks[s - 1];
  };
  uint32_t next = 0;
  for (uint32_t li = 0; li < lts_.size(); ++li) {  // lifetimes are in alloc order
    const Lifetime& l = lts_[li];
    for (; next < l.alloc_index; ++next) {
      const uint32_t mi = dead_at[next];
      if (mi != kNoIndex) stack_for(lts_[mi].device, lts_[mi].bytes, true)->push_back(mi);
    }
    DeviceAnalysis& d = devs_[static_cast<size_t>(slot_of_[l.device])].out;
    if (l.bytes == 0 || !d.has_uses) continue;
    std::vector<uint32_t>* stack = stack_for(l.device, l.bytes, false);
    if (stack == nullptr) continue;
    while (!stack->empty() && lts_[stack->back()].free_index <= l.alloc_index) stack->pop_back();
    if (stack->empty()) continue;
    const uint32_t mi = stack->back();
    stack->pop_back();
    const Lifetime& m = lts_[mi];
    const uint32_t act_peak = d.peak_activation_index;
    const bool at_peak = d.peak_activation_bytes > 0 && live_at(l, act_peak) && live_at(m, act_peak);
    ++d.handoff_count;
    d.handoff_bytes += l.bytes;
    if (at_peak) d.handoff_bytes_at_activation_peak += l.bytes;
    if (d.handoffs.size() < opt_.handoff_limit) {
      Handoff h;
      h.alloc_lifetime = li;
      h.dead_lifetime = mi;
      h.bytes = l.bytes;
      h.alloc_name = run.str(l.name_id);
      h.alloc_scope = run.str(l.scope_id);
      h.dead_name = run.str(m.name_id);
      h.dead_scope = run.str(m.scope_id);
      h.at_activation_peak = at_peak;
      d.handoffs.push_back(std::move(h));
    }
  }
}

void Replayer::finish(RunAnalysis* run, uint32_t num_events) {
  // One pass over the lifetimes for every device: live sets at the peaks, never-freed counts.
  std::vector<std::vector<uint64_t>> scope_at_peak(devs_.size(), std::vector<uint64_t>(scopes_.num_nodes(), 0));
  for (const Lifetime& l : lts_) {
    const size_t s = static_cast<size_t>(slot_of_[l.device]);
    DeviceAnalysis& d = devs_[s].out;
    if (l.free_index == kNoIndex) {
      ++an_.never_freed;
      an_.never_freed_bytes += l.bytes;
    }
    if (d.peak_total_bytes > 0 && live_at(l, d.peak_total_index)) d.live_at_total_peak[l.category] += l.bytes;
    const uint32_t pa = d.peak_activation_index;
    if (d.peak_activation_bytes > 0 && live_at(l, pa)) {
      d.live_at_activation_peak[l.category] += l.bytes;
      if (counts_as_activation(l.category)) {
        d.live_set_at_activation_peak.push_back(make_entry(l, *run, pa));
        if (l.uses > 0 && l.last_use_index < pa) d.held_after_last_use_bytes += l.bytes;
        if (l.uses == 0) d.never_used_at_peak_bytes += l.bytes;
        auto [cb, ce] = scopes_.chain(l.scope_id);
        for (uint32_t k = cb; k < ce; ++k) scope_at_peak[s][scopes_.chain_nodes()[k]] += l.bytes;
      }
    }
  }
  find_handoffs(*run, num_events);

  for (size_t s = 0; s < devs_.size(); ++s) {
    DeviceState& ds = devs_[s];
    DeviceAnalysis& d = ds.out;
    if (!d.has_uses) d.never_used_at_peak_bytes = 0;
    std::stable_sort(d.live_set_at_activation_peak.begin(), d.live_set_at_activation_peak.end(),
                     [](const LiveEntry& a, const LiveEntry& b) {
                       if (a.bytes != b.bytes) return a.bytes > b.bytes;
                       return a.t_alloc < b.t_alloc;
                     });
    if (opt_.live_set_limit > 0 && d.live_set_at_activation_peak.size() > opt_.live_set_limit) {
      d.live_set_at_activation_peak.resize(opt_.live_set_limit);
    }
    for (uint32_t n = 0; n < ds.scope_allocs.size(); ++n) {
      if (ds.scope_allocs[n] == 0) continue;
      ScopeStat st;
      st.scope = scopes_.name(n);
      st.depth = scope_depth(st.scope);
      st.high_water_bytes = ds.scope_hw[n];
      st.activation_high_water_bytes = ds.scope_act_hw[n];
      st.live_at_activation_peak_bytes = scope_at_peak[s][n];
      st.allocated_bytes = ds.scope_alloc_bytes[n];
      st.allocations = ds.scope_allocs[n];
      d.scopes.push_back(std::move(st));
    }
    std::sort(d.scopes.begin(), d.scopes.end(), [](const ScopeStat& a, const ScopeStat& b) { return a.scope < b.scope; });
    d.timeline_total = ds.tl_total.points();
    d.timeline_activation = ds.tl_act.points();
  }

  std::sort(devs_.begin(), devs_.end(), [](const DeviceState& a, const DeviceState& b) { return a.out.device < b.out.device; });
  for (auto& ds : devs_) {
    const DeviceAnalysis& d = ds.out;
    if (run->devices.empty() || d.peak_activation_bytes > run->peak_activation_bytes) run->peak_device = run->devices.size();
    run->peak_activation_bytes = std::max(run->peak_activation_bytes, d.peak_activation_bytes);
    run->peak_total_bytes = std::max(run->peak_total_bytes, d.peak_total_bytes);
    run->churn_bytes = std::max(run->churn_bytes, d.churn_bytes);
    run->allocations = std::max(run->allocations, d.allocations);
    run->devices.push_back(std::move(ds.out));
  }
  run->anomalies = an_;

  groups_.for_each([&](std::pair<uint64_t, uint64_t> k, uint32_t count) {
    run->alloc_groups.push_back(AllocGroup{run->str(static_cast<StrId>(k.first >> 32)),
                                           run->str(static_cast<StrId>(k.first & 0xffffffffu)), k.second, count});
  });
  std::sort(run->alloc_groups.begin(), run->alloc_groups.end(), [](const AllocGroup& a, const AllocGroup& b) {
    return std::tie(a.scope, a.name, a.bytes) < std::tie(b.scope, b.name, b.bytes);
  });
  if (opt_.keep_lifetimes) run->lifetimes = std::move(lts_);
}

}  // namespace

RunAnalysis analyze(const Trace& trace, const AnalyzeOptions& opt) {
  RunAnalysis run;
  run.meta = trace.meta;
  run.dropped_records = trace.dropped_records;
  run.truncated = trace.truncated;
  run.truncation_note = trace.truncation_note;
  run.strings.reserve(trace.strings.size());
  run.strings = trace.strings.all();

  const auto& recs = trace.records;
  const size_t n = recs.size();
  // Time range of the replayed events (exact when the input is in order; recomputed otherwise).
  size_t first = 0, last = n;
  while (first < n && !is_replayed(recs[first].kind)) ++first;
  while (last > first && !is_replayed(recs[last - 1].kind)) --last;
  const uint64_t t0 = first < n ? recs[first].timestamp_ns : 0;
  const uint64_t t1 = last > first ? recs[last - 1].timestamp_ns : 0;

  // Optimistic pass: most traces are already in replay order. Replay directly and fall back to
  // sorting at the first record out of order.
  {
    auto rp = std::make_unique<Replayer>(trace, opt, t0, t1);
    uint32_t pos = 0;
    const TraceRecord* prev = nullptr;
    bool in_order = true;
    for (size_t i = 0; i < n; ++i) {
      const TraceRecord& r = recs[i];
      if (!is_replayed(r.kind)) continue;
      if (prev != nullptr &&
          (r.timestamp_ns < prev->timestamp_ns || (r.timestamp_ns == prev->timestamp_ns && r.seq < prev->seq))) {
        in_order = false;
        break;
      }
      if (rp->event(r, pos)) ++pos;
      prev = &r;
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
    if (!is_replayed(r.kind)) continue;
    keys.push_back(Key{r.timestamp_ns, r.seq, static_cast<uint32_t>(i)});
    lo = std::min(lo, r.timestamp_ns);
    hi = std::max(hi, r.timestamp_ns);
  }
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    if (a.ts != b.ts) return a.ts < b.ts;
    if (a.seq != b.seq) return a.seq < b.seq;
    return a.idx < b.idx;
  });
  Replayer rp(trace, opt, lo, hi);
  uint32_t pos = 0;
  for (const Key& k : keys) {
    if (rp.event(recs[k.idx], pos)) ++pos;
  }
  run.reordered = true;
  run.replayed_events = pos;
  rp.finish(&run, pos);
  return run;
}

Comparison compare(const RunAnalysis& baseline, const RunAnalysis& candidate) {
  Comparison c;
  c.baseline_name = baseline.meta.name;
  c.candidate_name = candidate.meta.name;
  c.baseline_peak_activation_bytes = baseline.peak_activation_bytes;
  c.candidate_peak_activation_bytes = candidate.peak_activation_bytes;
  c.baseline_peak_total_bytes = baseline.peak_total_bytes;
  c.candidate_peak_total_bytes = candidate.peak_total_bytes;
  auto delta = [](uint64_t b, uint64_t a) { return static_cast<int64_t>(a) - static_cast<int64_t>(b); };
  c.peak_activation_delta = delta(baseline.peak_activation_bytes, candidate.peak_activation_bytes);
  c.peak_total_delta = delta(baseline.peak_total_bytes, candidate.peak_total_bytes);
  c.churn_delta = delta(baseline.churn_bytes, candidate.churn_bytes);
  c.allocations_delta = delta(baseline.allocations, candidate.allocations);

  CategoryBytes cb, cc;
  if (!baseline.devices.empty()) cb = baseline.devices[baseline.peak_device].live_at_activation_peak;
  if (!candidate.devices.empty()) cc = candidate.devices[candidate.peak_device].live_at_activation_peak;
  for (size_t i = 0; i < static_cast<size_t>(kNumCategories); ++i) c.category_deltas[i] = delta(cb.bytes[i], cc.bytes[i]);

  std::map<std::string, std::pair<uint64_t, uint64_t>> scopes;
  for (const auto& d : baseline.devices) {
    for (const auto& s : d.scopes) scopes[s.scope].first = std::max(scopes[s.scope].first, s.high_water_bytes);
  }
  for (const auto& d : candidate.devices) {
    for (const auto& s : d.scopes) scopes[s.scope].second = std::max(scopes[s.scope].second, s.high_water_bytes);
  }
  for (const auto& [name, hw] : scopes) {
    c.scope_deltas.push_back(ScopeDelta{name, hw.first, hw.second, delta(hw.first, hw.second)});
  }
  std::stable_sort(c.scope_deltas.begin(), c.scope_deltas.end(), [](const ScopeDelta& a, const ScopeDelta& b) {
    const uint64_t ma = a.delta < 0 ? -static_cast<uint64_t>(a.delta) : static_cast<uint64_t>(a.delta);
    const uint64_t mb = b.delta < 0 ? -static_cast<uint64_t>(b.delta) : static_cast<uint64_t>(b.delta);
    return ma > mb;  // stable: equal magnitudes keep name order
  });

  // Multiset difference of (scope, name, bytes); both lists are sorted by that key.
  const auto& bg = baseline.alloc_groups;
  const auto& cg = candidate.alloc_groups;
  size_t i = 0, j = 0;
  auto key = [](const AllocGroup& g) { return std::tie(g.scope, g.name, g.bytes); };
  while (i < bg.size() || j < cg.size()) {
    if (j == cg.size() || (i < bg.size() && key(bg[i]) < key(cg[j]))) {
      c.only_in_baseline.push_back(AllocGroupDelta{bg[i].scope, bg[i].name, bg[i].bytes, bg[i].count});
      ++i;
    } else if (i == bg.size() || key(cg[j]) < key(bg[i])) {
      c.only_in_candidate.push_back(AllocGroupDelta{cg[j].scope, cg[j].name, cg[j].bytes, cg[j].count});
      ++j;
    } else {
      if (bg[i].count > cg[j].count) {
        c.only_in_baseline.push_back(AllocGroupDelta{bg[i].scope, bg[i].name, bg[i].bytes, bg[i].count - cg[j].count});
      } else if (cg[j].count > bg[i].count) {
        c.only_in_candidate.push_back(AllocGroupDelta{cg[j].scope, cg[j].name, cg[j].bytes, cg[j].count - bg[i].count});
      }
      ++i;
      ++j;
    }
  }
  return c;
}

}  // namespace moeprof::planner
