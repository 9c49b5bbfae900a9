// Reuse findings (hand-offs) from the lifetimes of a replay.
#include <algorithm>
#include <map>
#include <string_view>
#include <tuple>
#include <vector>

#include "planner/replayer.h"

namespace moeprof::planner {

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

// Growth: transient lifetimes (freed) grouped by (name, or innermost frame when unnamed; scope with
// digit runs as '*'), in the order they are freed, counted as they are freed (so a streaming replay
// needs no lifetime kept); a group of at least three whose bytes never shrink and end larger than
// they started is a finding.
void Replayer::note_growth(const Lifetime& l) {
  if (l.bytes == 0 || !counts_as_activation(l.category)) return;
  uint64_t label = index_of(l.name_id);
  if (label == 0) {
    if (l.stack_id == StackId::kNone || strings_stacks_ == nullptr) return;
    const auto& frames = strings_stacks_->stack(l.stack_id);
    if (frames.empty()) return;
    label = (uint64_t{1} << 40) | frames.front();
  }
  const uint32_t sid = index_of(l.scope_id);
  if (sid >= scope_family_.size()) scope_family_.resize(sid + 1, UINT32_MAX);
  uint32_t& fam = scope_family_[sid];
  if (fam == UINT32_MAX) {
    std::string pattern;
    bool digits = false;
    // A reference, not a string_view of the conditional: that would view a temporary copy that
    // dies before the loop runs (found by the sanitizer build).
    static const std::string kNoScope;
    const std::string& scope = sid < strings_.size() ? strings_[sid] : kNoScope;
    for (char c : scope) {
      const bool d = c >= '0' && c <= '9';
      if (!d) pattern.push_back(c);
      else if (!digits) pattern.push_back('*');
      digits = d;
    }
    auto [it, fresh] = family_ids_.emplace(pattern, static_cast<uint32_t>(family_names_.size()));
    if (fresh) family_names_.push_back(pattern);
    fam = it->second;
  }
  uint32_t& slot = growth_index_[{label, fam}];
  if (slot == 0) {
    growth_.push_back(GrowthGroup{});
    growth_.back().key = {label, fam};
    slot = static_cast<uint32_t>(growth_.size());
  }
  GrowthGroup& g = growth_[slot - 1];
  if (g.n == 0) g.first = l.bytes;
  else if (l.bytes < g.last) g.monotone = false;
  g.last = l.bytes;
  ++g.n;
}

void Replayer::find_growth(RunAnalysis* run) {
  for (const GrowthGroup& g : growth_) {
    const auto& key = g.key;
    if (g.n < 3 || !g.monotone || g.last <= g.first) continue;
    std::string label;
    if (key.first >> 40) {
      const StackFrame& f = run->stacks.frame(static_cast<uint32_t>(key.first & 0xffffffffu));
      label = run->str(f.file) + ":" + std::to_string(f.line);
    } else {
      label = run->str(static_cast<StrId>(key.first));
    }
    run->growth.push_back(RunAnalysis::Growth{label, family_names_[key.second], g.n, g.first, g.last});
  }
  std::sort(run->growth.begin(), run->growth.end(), [](const auto& a, const auto& b) {
    if (a.last_bytes - a.first_bytes != b.last_bytes - b.first_bytes) return a.last_bytes - a.first_bytes > b.last_bytes - b.first_bytes;
    return std::tie(a.label, a.scope, a.occurrences, a.first_bytes) < std::tie(b.label, b.scope, b.occurrences, b.first_bytes);
  });
}

}  // namespace moeprof::planner
