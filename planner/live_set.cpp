// The end of a replay: live sets at the activation peaks, scope tables, totals per run.
#include <algorithm>
#include <cstddef>
#include <map>
#include <tuple>
#include <vector>

#include "planner/handoff_stream.h"
#include "planner/replayer.h"
#include "planner/stacks.h"

namespace moeprof::planner {

namespace {

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
  e.stack_id = l.stack_id;
  e.alloc_index = l.alloc_index;
  return e;
}

}  // namespace

void Replayer::build_live_sets(RunAnalysis* run) {
  // Scope bytes at each device's activation peak, per scope slot.
  std::vector<uint64_t> slot_at_peak(scope_stats_.size(), 0);
  // The live set is ordered by reference first (32 B each, no strings), then its entries are made
  // in that order: sorting the entries themselves moved three strings per swap, and a live set of
  // 262,144 entries took a tenth of a second to build and sort.
  struct LiveRef {
    uint64_t bytes, t_alloc;
    uint32_t alloc_index;
    const Lifetime* l;
  };
  std::vector<std::vector<LiveRef>> refs(devs_.size());
  auto add_live = [&](const Lifetime& l) {
    const size_t s = static_cast<size_t>(slot_of_[l.device]);
    DeviceAnalysis& d = devs_[s].out;
    const uint32_t pa = d.peak_activation_index;
    if (d.peak_activation_bytes == 0 || !live_at(l, pa) || !counts_as_activation(l.category)) return;
    reserve_huge(refs[s], refs[s].size() + 1);
    refs[s].push_back(LiveRef{l.bytes, l.t_alloc, l.alloc_index, &l});
    if (l.uses > 0 && l.last_use_index < pa) d.held_after_last_use_bytes += l.bytes;
    if (l.uses == 0) d.never_used_at_peak_bytes += l.bytes;
    auto [sb, se] = scope_slots(l.device, l.scope_id);
    for (uint32_t k = sb; k < se; ++k) slot_at_peak[chain_slots_[k]] += l.bytes;
  };
  for (const Lifetime& l : lts_) {
    if (l.free_index == kNoIndex) {
      ++an_.never_freed;
      an_.never_freed_bytes += l.bytes;
    }
    // Every lifetime when all are kept; otherwise the open ones (the slab's freed slots have a
    // free index) and, below, the copies of those freed after the peak.
    if (keep_all_ || l.free_index == kNoIndex) add_live(l);
  }
  if (!keep_all_)
    for (const DeviceState& ds : devs_)
      for (const Lifetime& l : ds.kept) add_live(l);

  for (size_t s = 0; s < devs_.size(); ++s) {
    DeviceAnalysis& d = devs_[s].out;
    if (!d.has_uses) d.never_used_at_peak_bytes = 0;
    std::vector<LiveRef>& r = refs[s];
    // Largest first, then the earliest allocation (alloc_index is unique: a total order).
    auto before = [](const LiveRef& a, const LiveRef& b) {
      if (a.bytes != b.bytes) return a.bytes > b.bytes;
      return std::tie(a.t_alloc, a.alloc_index) < std::tie(b.t_alloc, b.alloc_index);
    };
    d.live_set_entries = r.size();
    const size_t n = opt_.live_set_limit > 0 ? std::min(r.size(), opt_.live_set_limit) : r.size();
    if (n < r.size()) std::partial_sort(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(n), r.end(), before);
    else std::sort(r.begin(), r.end(), before);
    reserve_huge(d.live_set_at_activation_peak, n);
    for (size_t i = 0; i < n; ++i) d.live_set_at_activation_peak.push_back(make_entry(*r[i].l, *run, d.peak_activation_index));
    std::vector<LiveRef>().swap(r);
  }
  for (size_t k = 0; k < scope_stats_.size(); ++k) {
    const ScopeSlot& sl = scope_stats_[k];
    if (sl.allocs == 0) continue;
    DeviceAnalysis& d = devs_[static_cast<size_t>(slot_of_[sl.device])].out;
    ScopeStat st;
    st.scope = scopes_.name(sl.node);
    st.depth = scope_depth(st.scope);
    st.high_water_bytes = sl.hw;
    st.activation_high_water_bytes = sl.act_hw;
    st.live_at_activation_peak_bytes = slot_at_peak[k];
    st.allocated_bytes = sl.alloc_bytes;
    st.allocations = sl.allocs;
    d.scopes.push_back(std::move(st));
  }
}

void Replayer::finish(RunAnalysis* run, uint32_t num_events) {
  build_live_sets(run);
  if (handoffs_) {
    handoffs_->finish([&](uint16_t device) -> DeviceAnalysis& { return devs_[static_cast<size_t>(slot_of_[device])].out; }, strings_);
    if (handoffs_->stopped()) {
      for (DeviceState& ds : devs_) {
        ds.out.handoff_count = ds.out.handoff_bytes = ds.out.handoff_bytes_at_activation_peak = 0;
        ds.out.handoffs.clear();
      }
      run->handoffs_note = "the hand-off search stopped: " + handoffs_->stop_reason();
    }
  } else if (opt_.findings) {
    find_handoffs(*run, num_events);
  }
  find_growth(run);
  run->handoffs_computed = opt_.findings && !(handoffs_ && handoffs_->stopped());
  if (!opt_.findings) run->handoffs_note = "the analysis was not asked for them";

  for (DeviceState& ds : devs_) {
    DeviceAnalysis& d = ds.out;
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
  run->limit_error = limit_error_;
  RunAnalysis::ReplayTables& t = run->tables;
  t.scope_nodes = scopes_.num_nodes();
  t.scope_counters = scope_stats_.size();
  t.scope_chains = chain_ranges_.size();
  t.growth_groups = growth_.size();
  t.alloc_groups = groups_.size();
  t.addresses = addrs_.size();
  t.lifetime_slots = lts_.size();
  t.handoff_held = handoffs_ ? handoffs_->max_waiting_seen() : 0;
  t.handoff_thread = handoffs_ && handoffs_->threaded();

  // Each label slot's strings; stacks that differ only in library or outer frames share their
  // innermost user frame, so two slots may get one label, and their groups merge below.
  std::map<uint32_t, std::string> frame_of;  // stack id -> innermost user frame
  std::vector<AllocLabel> slot_label(group_keys_.size());
  for (size_t k = 0; k < group_keys_.size(); ++k) {
    const uint64_t key = group_keys_[k];
    AllocLabel& l = slot_label[k];
    l.scope = run->str(static_cast<StrId>(key >> 32));
    const uint64_t who = key & 0xffffffffu;
    if (who & kGroupByStack) {
      const uint32_t sid = static_cast<uint32_t>(who & ~kGroupByStack);
      auto [it, fresh] = frame_of.emplace(sid, std::string());
      if (fresh) {
        const auto frames = user_frames(*run, static_cast<StackId>(sid), 1);
        if (!frames.empty()) it->second = frames.front();
      }
      l.frame = it->second;
    } else {
      l.name = run->str(static_cast<StrId>(who));
    }
  }
  auto label_key = [](const AllocLabel& l) { return std::tie(l.scope, l.name, l.frame); };
  std::vector<uint32_t> order(slot_label.size()), rank(slot_label.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<uint32_t>(k);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return label_key(slot_label[a]) < label_key(slot_label[b]); });
  AllocGroups& ag = run->alloc_groups;
  for (uint32_t k : order) {
    if (ag.labels.empty() || label_key(ag.labels.back()) != label_key(slot_label[k])) ag.labels.push_back(std::move(slot_label[k]));
    rank[k] = static_cast<uint32_t>(ag.labels.size() - 1);
  }
  std::vector<AllocGroupCount> g = groups_.take();
  for (AllocGroupCount& e : g) e.label = rank[e.label];
  std::sort(g.begin(), g.end(), [](const AllocGroupCount& a, const AllocGroupCount& b) {
    return a.label != b.label ? a.label < b.label : a.bytes < b.bytes;
  });
  size_t n = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (n > 0 && g[n - 1].label == g[i].label && g[n - 1].bytes == g[i].bytes) {
      g[n - 1].count += g[i].count;
      continue;
    }
    g[n++] = g[i];
  }
  g.resize(n);
  ag.groups = std::move(g);
  if (opt_.keep_lifetimes) run->lifetimes = std::move(lts_);
  if (opt_.keep_event_index) {
    run->position_ts = std::move(position_ts_);
    run->op_uses = std::move(op_uses_);
    run->marker_ends = std::move(marker_ends_);
  }
}

}  // namespace moeprof::planner
