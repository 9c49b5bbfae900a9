// Ranked fixes: greedy, at the current peak, the one change (a rule over one tensor family: the
// same name and scope pattern across layers) that lowers the run's activation peak most; apply
// it; repeat. Candidates are evaluated on per-device segment trees over compressed replay
// positions (range add, maximum), so one evaluation costs the blocks it changes times log n.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "planner/stacks.h"
#include "planner/whatif_state.h"

namespace moeprof::planner {

namespace {

// Range add, maximum with its leftmost leaf.
class MaxTree {
 public:
  explicit MaxTree(size_t n) : n_(std::max<size_t>(n, 1)) {
    size_ = 1;
    while (size_ < n_) size_ <<= 1;
    mx_.assign(2 * size_, 0);
    lazy_.assign(2 * size_, 0);
    cnt_.assign(2 * size_, 1);
    for (size_t i = n_; i < size_; ++i) mx_[size_ + i] = INT64_MIN / 4;  // padding never wins
    for (size_t i = size_ - 1; i >= 1; --i) pull(i);
  }
  uint64_t count_at_max() const { return cnt_[1]; }  // leaves holding the maximum
  // Up to `limit` leaves holding the maximum, left to right.
  void max_leaves(size_t limit, std::vector<size_t>* out) const { collect(1, 0, mx_[1], limit, out); }
  void add(size_t l, size_t r, int64_t v) {
    if (l < r) add(1, 0, size_, l, r, v);
  }
  int64_t max() const { return mx_[1]; }
  size_t argmax() const {  // leftmost leaf holding the maximum
    const int64_t v = mx_[1];
    size_t node = 1;
    int64_t acc = 0;  // lazies of the ancestors of node's children, node's own included
    while (node < size_) {
      acc += lazy_[node];
      node = mx_[2 * node] + acc == v ? 2 * node : 2 * node + 1;
    }
    return node - size_;
  }

 private:
  void add(size_t node, size_t nl, size_t nr, size_t l, size_t r, int64_t v) {
    if (r <= nl || nr <= l) return;
    if (l <= nl && nr <= r) {
      mx_[node] += v;
      lazy_[node] += v;
      return;
    }
    const size_t mid = (nl + nr) / 2;
    add(2 * node, nl, mid, l, r, v);
    add(2 * node + 1, mid, nr, l, r, v);
    pull(node);
  }
  void collect(size_t node, int64_t acc, int64_t v, size_t limit, std::vector<size_t>* out) const {
    if (out->size() >= limit || mx_[node] + acc != v) return;
    if (node >= size_) {
      out->push_back(node - size_);
      return;
    }
    acc += lazy_[node];
    collect(2 * node, acc, v, limit, out);
    collect(2 * node + 1, acc, v, limit, out);
  }
  void pull(size_t node) {
    const int64_t a = mx_[2 * node], b = mx_[2 * node + 1];
    mx_[node] = std::max(a, b) + lazy_[node];
    cnt_[node] = (a > b ? cnt_[2 * node] : 0) + (b > a ? cnt_[2 * node + 1] : 0) + (a == b ? cnt_[2 * node] + cnt_[2 * node + 1] : 0);
  }
  size_t n_, size_;
  std::vector<int64_t> mx_, lazy_;  // mx_[node] includes lazy_[node]
  std::vector<uint64_t> cnt_;
};

struct DeviceTree {
  uint16_t device = 0;
  std::vector<uint32_t> coords;  // sorted change points; leaf k covers [coords[k], coords[k+1])
  MaxTree tree{1};
  size_t idx(uint32_t pos) const { return static_cast<size_t>(std::lower_bound(coords.begin(), coords.end(), pos) - coords.begin()); }
  void add(uint32_t from, uint32_t to, int64_t v) {
    if (from < to) tree.add(idx(from), idx(to), v);
  }
};

struct Trees {
  std::vector<DeviceTree> devs;
  std::unordered_map<uint16_t, size_t> slot;

  explicit Trees(const WhatIfState& s) {
    std::map<uint16_t, std::vector<uint32_t>> coords;
    for (const Block& b : s.blocks) {
      auto& c = coords[b.device];
      c.push_back(b.start);
      c.push_back(b.end);
      if (b.uses > 0) c.push_back(b.last_use + 1);
    }
    for (auto& [d, c] : coords) {
      std::sort(c.begin(), c.end());
      c.erase(std::unique(c.begin(), c.end()), c.end());
      DeviceTree t;
      t.device = d;
      t.tree = MaxTree(c.size());
      t.coords = std::move(c);
      slot[d] = devs.size();
      devs.push_back(std::move(t));
    }
    for (const Block& b : s.blocks) add_block(b, +1);
  }
  void add_block(const Block& b, int sign) {
    if (!b.act || b.bytes == 0 || b.merged_into != kNoBlock || b.end <= b.start) return;
    devs[slot.at(b.device)].add(b.start, b.end, sign * static_cast<int64_t>(b.bytes));
  }
  // Run peak: (bytes, device slot).
  std::pair<int64_t, size_t> peak() const {
    std::pair<int64_t, size_t> best{0, 0};
    for (size_t i = 0; i < devs.size(); ++i)
      if (devs[i].tree.max() > best.first) best = {devs[i].tree.max(), i};
    return best;
  }
  // (run peak, change points holding it over all devices): a step that cannot lower the peak can
  // still take it off some layers, which a second change then completes.
  std::pair<int64_t, uint64_t> peak_and_count() const {
    const int64_t p = peak().first;
    uint64_t n = 0;
    for (const DeviceTree& d : devs)
      if (d.tree.max() == p) n += d.tree.count_at_max();
    return {p, n};
  }
};

// Applies changes (the blocks' states before) to the trees: old out, new in.
void retree(Trees& t, const WhatIfState& s, const std::vector<Change>& changes, bool undo) {
  for (const Change& c : changes) {
    const Block& now = s.blocks[c.block];
    if (undo) {
      t.add_block(now, -1);
      t.add_block(c.before, +1);
    } else {
      t.add_block(c.before, -1);
      t.add_block(now, +1);
    }
  }
}

std::string family_name(const RunAnalysis& run, const Lifetime& l) {
  return run.str(l.name_id);
}

}  // namespace

std::vector<Fix> rank_fixes(WhatIfState& s, const WhatIfOptions& opt) {
  const RunAnalysis& run = *s.run;
  std::vector<Fix> out;
  Trees trees(s);
  for (size_t step = 0; step < opt.fixes; ++step) {
    const int64_t peak = trees.peak().first;
    if (peak <= 0) break;
    // Candidate rules from the blocks live where the peak is reached (up to 64 places, on every
    // device that reaches it): one family per (name, scope pattern), or for unnamed allocations
    // (innermost user frame or size, scope pattern); each as free-at-last-use when dead there, and
    // as hand-off (the allocation could have taken over a dead buffer).
    std::vector<std::pair<uint16_t, uint32_t>> places;  // (device, position)
    for (const DeviceTree& dt : trees.devs) {
      if (dt.tree.max() != peak) continue;
      std::vector<size_t> leaves;
      dt.tree.max_leaves(64, &leaves);
      for (size_t k : leaves) places.emplace_back(dt.device, dt.coords[k]);
    }
    // Each candidate carries an upper bound of what it can take off the peak: the bytes it could
    // remove at the first place of the peak (which stays at the peak unless they go).
    struct Cand {
      Rule rule;
      uint64_t bound = 0;
    };
    std::map<std::string, Cand> cands;
    // Not a structured binding: clang 14 (the sanitizer build) cannot capture one in a lambda.
    const uint16_t dev0 = places.front().first;
    const uint32_t at0 = places.front().second;
    auto add_candidates = [&](uint32_t i, uint32_t at) {
      const Block& b = s.blocks[i];
      uint32_t who = i;  // the occupant at the peak names the family
      for (uint32_t o : b.occupants)
        if (s.blocks[o].start <= at) who = o;
      const Lifetime& l = run.lifetimes[who];
      Selector sel;
      sel.name = family_name(run, l);
      sel.scope = family_scope(run.str(l.scope_id));
      if (sel.name.empty()) {
        for (uint32_t fid : run.stacks.stack(l.stack_id)) {
          const StackFrame& x = run.stacks.frame(fid);
          if (!is_library_frame(run.str(x.function), run.str(x.file), x.kind)) {
            sel.stack = run.str(x.file) + ":" + std::to_string(x.line);
            break;
          }
        }
        if (sel.stack.empty()) sel.min_bytes = sel.max_bytes = l.bytes;
      }
      Rule free_rule;
      free_rule.kind = RuleKind::kFreeAtLastUse;
      free_rule.target = sel;
      const bool first_place = b.device == dev0 && at == at0;
      if (b.uses > 0 && b.last_use < at) {
        Cand& c = cands.emplace(free_rule.text(), Cand{free_rule, 0}).first->second;
        if (first_place) c.bound += b.bytes;
      }
      Rule hand = free_rule;
      hand.kind = RuleKind::kHandOff;
      Cand& h = cands.emplace(hand.text(), Cand{hand, 0}).first->second;
      if (first_place) h.bound += b.bytes;
    };
    std::map<uint16_t, std::vector<uint32_t>> at_of;  // device -> sorted peak positions
    for (auto [dev, at] : places) at_of[dev].push_back(at);
    for (auto& [dev, v] : at_of) std::sort(v.begin(), v.end());
    for (uint32_t i = 0; i < s.blocks.size(); ++i) {
      const Block& b = s.blocks[i];
      if (!b.act || b.bytes == 0 || b.merged_into != kNoBlock) continue;
      auto it = at_of.find(b.device);
      if (it == at_of.end()) continue;
      for (auto p = std::lower_bound(it->second.begin(), it->second.end(), b.start); p != it->second.end() && *p < b.end; ++p)
        add_candidates(i, *p);
    }
    // Evaluates a set of rules applied together: (new peak, change points at it, churn saved).
    struct Eval {
      int64_t peak = INT64_MAX;
      uint64_t count = 0, churn = 0, applied = 0;
    };
    auto evaluate = [&](const std::vector<const Rule*>& set) {
      Eval e;
      std::vector<Change> changes;
      for (const Rule* rule : set) {
        RuleEffect eff;
        s.apply(*rule, &eff, &changes);
        e.churn += eff.bytes_removed;
        e.applied += eff.applied;
      }
      retree(trees, s, changes, false);
      std::tie(e.peak, e.count) = trees.peak_and_count();
      retree(trees, s, changes, true);
      s.revert(changes);
      return e;
    };
    auto better = [](const Eval& a, bool a_handoff, const std::string& a_text, const Eval& b, bool b_handoff,
                     const std::string& b_text) {
      return std::make_tuple(a.peak, a.count, !a_handoff, ~a.churn, a_text) <
             std::make_tuple(b.peak, b.count, !b_handoff, ~b.churn, b_text);
    };
    // Singles, largest bound first; a candidate whose bound is below the best gain found cannot win.
    std::vector<const Cand*> order;
    for (auto& [text, c] : cands) order.push_back(&c);
    std::stable_sort(order.begin(), order.end(), [](const Cand* a, const Cand* b) { return a->bound > b->bound; });
    std::vector<std::pair<Eval, const Rule*>> singles;
    int64_t best_gain = 0;
    for (const Cand* c : order) {
      if (c->bound == 0 || static_cast<int64_t>(c->bound) < best_gain) break;
      Eval e = evaluate({&c->rule});
      if (e.applied == 0) continue;
      best_gain = std::max(best_gain, peak - e.peak);
      singles.emplace_back(e, &c->rule);
    }
    auto sort_singles = [&] {
      std::sort(singles.begin(), singles.end(), [&](const auto& x, const auto& y) {
        return better(x.first, x.second->kind == RuleKind::kHandOff, x.second->text(), y.first,
                      y.second->kind == RuleKind::kHandOff, y.second->text());
      });
    };
    sort_singles();
    std::vector<const Rule*> chosen;
    Eval best;
    if (!singles.empty() && singles.front().first.peak < peak) {
      chosen = {singles.front().second};
      best = singles.front().first;
    } else {
      // Every candidate, evaluated, ranks the pairs by the places they take the peak off.
      singles.clear();
      for (const Cand* c : order) {
        Eval e = evaluate({&c->rule});
        if (e.applied > 0) singles.emplace_back(e, &c->rule);
      }
      sort_singles();
      // No single change lowers the peak (it is reached in places no one family covers, e.g. a
      // layer input named differently in the first layer): try pairs of the changes that take the
      // peak off the most places.
      const size_t k = std::min<size_t>(singles.size(), 10);
      for (size_t a = 0; a < k; ++a)
        for (size_t b = a + 1; b < k; ++b) {
          Eval e = evaluate({singles[a].second, singles[b].second});
          if (e.peak < peak && (chosen.empty() || std::make_tuple(e.peak, e.count, ~e.churn) < std::make_tuple(best.peak, best.count, ~best.churn))) {
            chosen = {singles[a].second, singles[b].second};
            best = e;
          }
        }
    }
    if (chosen.empty() || best.peak >= peak) break;
    if (static_cast<double>(peak - best.peak) < opt.min_fix_gain * static_cast<double>(peak)) break;
    Fix f;
    std::vector<Change> changes;
    uint64_t churn = 0;
    std::vector<Rule> applied_rules;
    for (const Rule* r : chosen) {
      Rule rule = *r;
      rule.origin = "fix " + std::to_string(step + 1);
      RuleEffect eff;
      s.apply(rule, &eff, &changes);
      churn += eff.bytes_removed;
      f.rules.push_back(rule.text());
      applied_rules.push_back(rule);
    }
    retree(trees, s, changes, false);
    f.rule = f.rules.front();
    for (size_t i = 1; i < f.rules.size(); ++i) f.rule += "\n" + f.rules[i];
    f.bytes_saved_at_peak = static_cast<uint64_t>(peak - best.peak);
    f.cumulative_peak_activation_bytes = static_cast<uint64_t>(trees.peak().first);
    f.churn_saved_bytes = churn;
    // The tensors it touches: the rules' allocations grouped by (role, name, scope pattern, shape, bytes).
    std::map<std::tuple<std::string, std::string, std::string, uint64_t>, FixTensor> groups;
    std::set<uint32_t> changed;
    for (const Change& c : changes) changed.insert(c.block);
    for (const Rule& rule : applied_rules) {
      const bool handoff = rule.kind == RuleKind::kHandOff;
      std::vector<std::pair<uint32_t, std::string>> touched;  // (lifetime, role)
      std::set<uint32_t> targets;
      for (uint32_t i : s.select(rule.target)) {
        if (!changed.count(i) && !changed.count(s.holder(i))) continue;
        targets.insert(i);
        touched.emplace_back(i, handoff ? "handed off" : "freed at last use");
      }
      if (handoff)
        for (uint32_t i : changed)
          if (!targets.count(i) && s.blocks[i].merged_into == kNoBlock && !s.blocks[i].occupants.empty())
            touched.emplace_back(i, "taken over");
      for (const auto& [i, role] : touched) {
        const Lifetime& l = run.lifetimes[i];
        auto key = std::make_tuple(role + "\n" + run.str(l.name_id), family_scope(run.str(l.scope_id)), run.str(l.shape_id), l.bytes);
        FixTensor& t = groups[key];
        if (t.count == 0) {
          t.role = role;
          t.name = run.str(l.name_id);
          t.scope = family_scope(run.str(l.scope_id));
          t.shape = run.str(l.shape_id);
          t.bytes = l.bytes;
          t.stack = user_frames(run, l.stack_id, 3);
          if (l.stack_id == StackId::kNone) t.stack.clear();
        }
        ++t.count;
      }
    }
    for (auto& [k, t] : groups)
      if (t.role != "taken over") f.tensors.push_back(t);
    for (auto& [k, t] : groups)
      if (t.role == "taken over") f.tensors.push_back(std::move(t));
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace moeprof::planner
