// The what-if engine: rules applied in order to the lifetimes of a run, then replayed by a sweep
// over replay positions to predict the peaks (planner/whatif.h; docs/planner.md, "What-if").
#include "planner/whatif.h"

#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <tuple>
#include <unordered_map>

#include "planner/address_map.h"
#include "planner/timeline.h"
#include "planner/whatif_state.h"

namespace moeprof::planner {

std::vector<Fix> rank_fixes(WhatIfState& state, const WhatIfOptions& opt);  // fixes.cpp

WhatIfState::WhatIfState(const RunAnalysis& r) : run(&r), num_events(static_cast<uint32_t>(r.replayed_events)) {
  blocks.resize(r.lifetimes.size());
  for (uint32_t i = 0; i < r.lifetimes.size(); ++i) {
    const Lifetime& l = r.lifetimes[i];
    Block& b = blocks[i];
    b.lifetime = i;
    b.device = l.device;
    b.act = counts_as_activation(l.category);
    b.bytes = l.bytes;
    b.start = l.alloc_index;
    b.end = l.free_index == UINT32_MAX ? std::max(num_events, l.alloc_index + 1) : l.free_index;
    b.uses = l.uses;
    b.last_use = l.last_use_index;
  }
}

const std::vector<uint32_t>& WhatIfState::select(const Selector& sel) const {
  const std::string key = sel.text();
  auto cached = select_cache.find(key);
  if (cached != select_cache.end()) return cached->second;
  // The string terms (globs, stack substring) are evaluated once per distinct (name, scope,
  // stack); the numeric ones per allocation.
  std::vector<uint32_t>& out = select_cache[key];
  PairMap cache;  // (name << 32 | scope, stack) -> 1 match, 2 no match
  Selector strings_only = sel;
  strings_only.categories = 0;
  strings_only.min_bytes = 0;
  strings_only.max_bytes = UINT64_MAX;
  strings_only.device = -1;
  for (uint32_t i = 0; i < blocks.size(); ++i) {
    const Lifetime& l = run->lifetimes[i];
    if (sel.device >= 0 && l.device != sel.device) continue;
    if (l.bytes < sel.min_bytes || l.bytes > sel.max_bytes) continue;
    if (sel.categories != 0 && (sel.categories & category_bit(l.category)) == 0) continue;
    uint32_t& c = cache[{uint64_t{index_of(l.name_id)} << 32 | index_of(l.scope_id), index_of(l.stack_id)}];
    if (c == 0) c = strings_only.matches(l, *run) ? 1 : 2;
    if (c == 1) out.push_back(i);
  }
  return out;
}

void WhatIfState::revert(const std::vector<Change>& changes) {
  for (auto it = changes.rbegin(); it != changes.rend(); ++it) blocks[it->block] = it->before;
}

namespace {

// Positions of uses by ops (or of marker ends) whose name matches a glob, per device, sorted.
std::unordered_map<uint16_t, std::vector<uint32_t>> anchor_positions(const RunAnalysis& run, const std::vector<OpEvent>& events,
                                                                     const std::string& glob) {
  std::unordered_map<uint32_t, bool> match;  // by name id
  std::unordered_map<uint16_t, std::vector<uint32_t>> out;
  for (const OpEvent& e : events) {
    auto it = match.find(index_of(e.name));
    if (it == match.end()) it = match.emplace(index_of(e.name), glob_match(glob, run.str(e.name))).first;
    if (it->second) out[e.device].push_back(e.pos);
  }
  for (auto& [d, v] : out) std::sort(v.begin(), v.end());
  return out;
}

}  // namespace

void WhatIfState::apply(const Rule& rule, RuleEffect* eff, std::vector<Change>* changes) {
  const RunAnalysis& r = *run;
  auto touch = [&](uint32_t b) {
    if (changes) changes->push_back(Change{b, blocks[b]});
  };
  std::vector<uint32_t> targets = select(rule.target);  // a copy: the hand-off sorts it
  eff->matched += targets.size();

  switch (rule.kind) {
    case RuleKind::kFreeAtLastUse:
      for (uint32_t i : targets) {
        const uint32_t h = holder(i);
        Block& b = blocks[h];
        if (b.bytes == 0) continue;
        if (b.uses == 0) {
          ++eff->no_uses;
          continue;
        }
        if (b.last_use + 1 < b.end) {
          touch(h);
          b.end = b.last_use + 1;
          ++eff->applied;
        }
      }
      break;
    case RuleKind::kDrop:
      for (uint32_t i : targets) {
        Block& b = blocks[i];
        if (b.merged_into != kNoBlock || b.bytes == 0) continue;
        touch(i);
        eff->bytes_removed += b.bytes;
        b.bytes = 0;
        ++eff->applied;
      }
      break;
    case RuleKind::kFreeAfterOp:
    case RuleKind::kFreeAfterScope: {
      const bool op = rule.kind == RuleKind::kFreeAfterOp;
      auto anchors = anchor_positions(r, op ? r.op_uses : r.marker_ends, rule.anchor);
      for (uint32_t i : targets) {
        const uint32_t h = holder(i);
        Block& b = blocks[h];
        if (b.bytes == 0) continue;
        const Block& own = blocks[i];
        auto it = anchors.find(own.device);
        uint32_t end = UINT32_MAX;
        if (it != anchors.end()) {
          // An op use at q: free after it (live through q). A marker end at q: between events q-1
          // and q, so not live at q.
          auto q = std::upper_bound(it->second.begin(), it->second.end(), own.start);
          if (q != it->second.end()) end = op ? *q + 1 : *q;
        }
        if (end == UINT32_MAX) {
          ++eff->no_anchor;
          continue;
        }
        if (end < b.end) {
          touch(h);
          if (b.uses > 0 && b.last_use >= end) ++eff->unsafe;
          b.end = std::max(end, b.start + 1);
          ++eff->applied;
        }
      }
      break;
    }
    case RuleKind::kHandOff: {
      // Sweep over the targets in allocation order. Blocks enter the pool of dead buffers at
      // their last use + 1; the pool is ordered by (bytes, dead since, block): the smallest that
      // fits, then the one dead longest. Entries are checked lazily (still owned, still allocated,
      // still dead since then).
      std::sort(targets.begin(), targets.end(), [&](uint32_t a, uint32_t b) { return blocks[a].start < blocks[b].start; });
      // Only buffers at least as large as the smallest target, on the targets' devices, can be
      // taken over: the others never enter the sweep.
      uint64_t min_bytes = UINT64_MAX;
      std::set<uint16_t> devices;
      for (uint32_t t : targets)
        if (blocks[t].merged_into == kNoBlock && blocks[t].bytes > 0) {
          min_bytes = std::min(min_bytes, blocks[t].bytes);
          devices.insert(blocks[t].device);
        }
      using Dead = std::tuple<uint32_t, uint32_t>;  // (dead since, block)
      std::priority_queue<Dead, std::vector<Dead>, std::greater<>> becoming;
      std::vector<char> donor_ok;
      if (rule.from) {
        donor_ok.assign(blocks.size(), 0);
        for (uint32_t i : select(*rule.from)) donor_ok[i] = 1;
      }
      std::vector<Dead> initial;
      for (uint32_t i = 0; i < blocks.size() && min_bytes != UINT64_MAX; ++i) {
        const Block& b = blocks[i];
        if (b.bytes < min_bytes || b.merged_into != kNoBlock || b.uses == 0 || b.last_use + 1 >= b.end) continue;
        // Only activation memory is taken over: weights and the KV cache outlive what the trace
        // shows (later requests, decode steps), even when the trace records no further use.
        if (!b.act || (rule.from && !donor_ok[i]) || !devices.count(b.device)) continue;
        initial.emplace_back(b.last_use + 1, i);
      }
      std::sort(initial.begin(), initial.end());
      size_t next_initial = 0;
      std::set<std::tuple<uint16_t, uint64_t, uint32_t, uint32_t>> pool;  // (device, bytes, dead since, block)
      for (uint32_t t : targets) {
        Block& L = blocks[t];
        if (L.merged_into != kNoBlock || L.bytes == 0) continue;
        while ((next_initial < initial.size() && std::get<0>(initial[next_initial]) <= L.start) ||
               (!becoming.empty() && std::get<0>(becoming.top()) <= L.start)) {
          Dead d;
          if (next_initial < initial.size() && std::get<0>(initial[next_initial]) <= L.start) {
            d = initial[next_initial++];
          } else {
            d = becoming.top();
            becoming.pop();
          }
          auto [since, b] = d;
          const Block& m = blocks[b];
          if (m.merged_into == kNoBlock && m.bytes > 0 && m.uses > 0 && m.last_use + 1 == since) pool.emplace(m.device, m.bytes, since, b);
        }
        uint32_t donor = kNoBlock;
        for (auto it = pool.lower_bound({L.device, L.bytes, 0, 0}); it != pool.end() && std::get<0>(*it) == L.device;) {
          const uint32_t b = std::get<3>(*it);
          const Block& m = blocks[b];
          const bool valid = b != t && m.merged_into == kNoBlock && m.bytes == std::get<1>(*it) && m.end > L.start &&
                             m.uses > 0 && m.last_use + 1 == std::get<2>(*it) && m.last_use < L.start;
          if (!valid) {
            it = pool.erase(it);
            continue;
          }
          donor = b;
          pool.erase(it);
          break;
        }
        if (donor == kNoBlock) {
          ++eff->no_donor;
          continue;
        }
        Block& M = blocks[donor];
        touch(t);
        touch(donor);
        M.end = std::max(M.end, L.end);
        if (L.uses > 0) {
          M.last_use = L.last_use;
          M.uses += L.uses;
          if (M.last_use + 1 < M.end) becoming.emplace(M.last_use + 1, donor);
        } else {
          M.uses = 0;  // the new occupant's uses are unknown: never dead again
        }
        M.occupants.push_back(t);
        L.merged_into = donor;
        eff->bytes_removed += L.bytes;
        L.bytes = 0;
        ++eff->applied;
      }
      break;
    }
  }
}

namespace {

struct SweepResult {
  PeakAt act, total;
  std::vector<std::pair<uint32_t, uint64_t>> act_steps;  // (position, activation bytes from there on)
};

// Live bytes of one device's blocks over replay positions, by a sweep over block ends.
SweepResult sweep(const std::vector<Block>& blocks, uint16_t device, bool want_steps,
                  const std::vector<uint32_t>* ends_override = nullptr) {
  struct Ev {
    uint32_t pos;
    int64_t act, total;
  };
  std::vector<Ev> ev;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Block& b = blocks[i];
    if (b.device != device || b.bytes == 0 || b.merged_into != kNoBlock) continue;
    const uint32_t end = ends_override ? (*ends_override)[i] : b.end;
    if (end <= b.start) continue;
    const auto v = static_cast<int64_t>(b.bytes);
    ev.push_back(Ev{b.start, b.act ? v : 0, v});
    ev.push_back(Ev{end, b.act ? -v : 0, -v});
  }
  std::sort(ev.begin(), ev.end(), [](const Ev& a, const Ev& b) { return a.pos < b.pos; });
  SweepResult out;
  int64_t act = 0, total = 0;
  for (size_t i = 0; i < ev.size();) {
    const uint32_t pos = ev[i].pos;
    for (; i < ev.size() && ev[i].pos == pos; ++i) {
      act += ev[i].act;
      total += ev[i].total;
    }
    if (static_cast<uint64_t>(act) > out.act.bytes) out.act = {static_cast<uint64_t>(act), pos};
    if (static_cast<uint64_t>(total) > out.total.bytes) out.total = {static_cast<uint64_t>(total), pos};
    if (want_steps) out.act_steps.emplace_back(pos, static_cast<uint64_t>(act));
  }
  return out;
}

LiveEntry entry_for(const RunAnalysis& run, const WhatIfState& s, uint32_t block, uint32_t pos) {
  // The occupant at `pos`: the block's own allocation, or the latest that took it over by then.
  uint32_t who = block;
  for (uint32_t o : s.blocks[block].occupants)
    if (s.blocks[o].start <= pos) who = o;
  const Lifetime& l = run.lifetimes[who];
  LiveEntry e;
  e.name = run.str(l.name_id);
  e.scope = run.str(l.scope_id);
  e.shape = run.str(l.shape_id);
  e.category = l.category;
  e.dtype = l.dtype;
  e.bytes = s.blocks[block].bytes;
  e.address = run.lifetimes[block].address;
  e.t_alloc = l.t_alloc;
  e.uses = l.uses;
  e.last_use = l.uses ? l.last_use : 0;
  e.held_after_last_use = l.uses > 0 && l.last_use_index < pos;
  e.stack_id = l.stack_id;
  e.alloc_index = l.alloc_index;
  return e;
}

}  // namespace

PeakAt device_peak(const WhatIfState& s, uint16_t device, bool act) {
  SweepResult r = sweep(s.blocks, device, false);
  return act ? r.act : r.total;
}

// The liveness bound: every block freed right after its last use; a block without a recorded use
// counts only at its allocation.
uint64_t liveness_bound(const WhatIfState& s, uint16_t device) {
  std::vector<uint32_t> ends(s.blocks.size());
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    const Block& b = s.blocks[i];
    ends[i] = b.uses > 0 ? std::min(b.end, b.last_use + 1) : b.start + 1;
    if (ends[i] <= b.start) ends[i] = b.start + 1;
  }
  return sweep(s.blocks, device, false, &ends).act.bytes;
}

Result<WhatIfResult> what_if(const RunAnalysis& run, const std::vector<Rule>& rules, const WhatIfOptions& opt) {
  if (run.lifetimes.size() < run.allocations || (run.allocations > 0 && run.position_ts.size() != run.replayed_events))
    return Status::bad_input("what-if needs an analysis with every lifetime and the event index (keep_lifetimes, keep_event_index)");
  WhatIfResult res;
  for (const auto& d : run.devices) res.has_uses = res.has_uses || d.has_uses;
  if (!res.has_uses)
    res.note = "the trace records no uses (moeprof run records them; moeprof trace --uses scans kernel arguments): "
               "free-at-last-use, hand-off and the liveness bound need them and predict nothing here";
  WhatIfState base(run);
  WhatIfState state(run);
  for (const Rule& rule : rules) {
    RuleEffect eff;
    eff.rule = rule.text();
    eff.origin = rule.origin;
    state.apply(rule, &eff, nullptr);
    if (eff.matched == 0) eff.unmatched = explain_no_match(rule.target, run);
    res.rules.push_back(std::move(eff));
  }
  const uint64_t t0 = run.position_ts.empty() ? 0 : run.position_ts.front();
  const uint64_t t1 = run.position_ts.empty() ? 0 : run.position_ts.back();
  for (const DeviceAnalysis& d : run.devices) {
    DevicePrediction p;
    p.device = d.device;
    p.measured_peak_activation_bytes = d.peak_activation_bytes;
    p.measured_peak_total_bytes = d.peak_total_bytes;
    SweepResult sw = sweep(state.blocks, d.device, opt.timeline_points > 0);
    p.predicted_peak_activation_bytes = sw.act.bytes;
    p.predicted_peak_total_bytes = sw.total.bytes;
    p.predicted_peak_index = sw.act.pos;
    p.predicted_peak_ts = sw.act.pos < run.position_ts.size() ? run.position_ts[sw.act.pos] : 0;
    p.liveness_bound_bytes = res.has_uses ? liveness_bound(base, d.device) : d.peak_activation_bytes;
    if (opt.timeline_points > 0) {
      Timeline tl;
      tl.init(opt.timeline_points, t0, t1);
      for (auto [pos, v] : sw.act_steps) tl.sample(pos < run.position_ts.size() ? run.position_ts[pos] : t1, v);
      p.timeline_activation = tl.points();
    }
    if (sw.act.bytes > 0) {
      for (uint32_t i = 0; i < state.blocks.size(); ++i) {
        const Block& b = state.blocks[i];
        if (b.device != d.device || !b.act || b.bytes == 0 || b.merged_into != kNoBlock) continue;
        if (b.start <= sw.act.pos && sw.act.pos < b.end) p.live_set_at_predicted_peak.push_back(entry_for(run, state, i, sw.act.pos));
      }
      std::sort(p.live_set_at_predicted_peak.begin(), p.live_set_at_predicted_peak.end(), [](const LiveEntry& a, const LiveEntry& b) {
        if (a.bytes != b.bytes) return a.bytes > b.bytes;
        return std::tie(a.t_alloc, a.alloc_index) < std::tie(b.t_alloc, b.alloc_index);
      });
      if (opt.live_set_limit > 0 && p.live_set_at_predicted_peak.size() > opt.live_set_limit)
        p.live_set_at_predicted_peak.resize(opt.live_set_limit);
    }
    res.measured_peak_activation_bytes = std::max(res.measured_peak_activation_bytes, p.measured_peak_activation_bytes);
    res.measured_peak_total_bytes = std::max(res.measured_peak_total_bytes, p.measured_peak_total_bytes);
    res.predicted_peak_activation_bytes = std::max(res.predicted_peak_activation_bytes, p.predicted_peak_activation_bytes);
    res.predicted_peak_total_bytes = std::max(res.predicted_peak_total_bytes, p.predicted_peak_total_bytes);
    res.liveness_bound_bytes = std::max(res.liveness_bound_bytes, p.liveness_bound_bytes);
    res.devices.push_back(std::move(p));
  }
  if (opt.fixes > 0 && res.has_uses) res.fixes = rank_fixes(state, opt);
  return res;
}

}  // namespace moeprof::planner
