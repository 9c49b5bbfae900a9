// Large neighbourhood search on an arena plan (arena_engine.h, class Lns).
#include <algorithm>
#include <numeric>

#include "planner/arena_engine.h"

namespace moeprof::planner::detail {

namespace {

constexpr size_t kMinHood = 16, kMaxHood = 2048;
constexpr uint64_t kBaseMoves = 48;  // moves per target, times the Luby sequence
constexpr uint32_t kSnap = 24;       // how far a window end may move to a boundary crossed by fewer

// The Luby sequence 1 1 2 1 1 2 4 1 1 2 1 1 2 4 8 ... (i >= 1).
uint64_t luby(uint64_t i) {
  for (;;) {
    uint64_t k = 1;
    while ((uint64_t{1} << k) - 1 < i) ++k;
    if ((uint64_t{1} << k) - 1 == i) return uint64_t{1} << (k - 1);
    i -= (uint64_t{1} << (k - 1)) - 1;
  }
}

}  // namespace

Lns::Lns(const Problem& p, uint64_t lower, uint64_t seed, std::vector<uint64_t> off)
    : p_(p), idx_(p, true), lower_(lower), gran_(0), rng_(seed), off_(std::move(off)) {
  const size_t n = p.n();
  for (size_t i = 0; i < n; ++i) {
    gran_ = std::gcd(gran_, p.size[i]);
    if (p.align[i] > 1) gran_ = std::gcd(gran_, p.align[i]);
  }
  gran_ = std::max<uint64_t>(gran_, 1);
  placed_.assign(n, 1);
  over_pos_.assign(n, UINT32_MAX);
  best_ = off_;
  for (size_t i = 0; i < n; ++i) best_arena_ = std::max(best_arena_, off_[i] + p.size[i]);
  const uint32_t S = p.sections;
  starts_before_.assign(S + 1, 0);
  std::vector<int64_t> diff(S + 2, 0);
  for (size_t i = 0; i < n; ++i) {
    ++starts_before_[p.lo[i] + 1 <= S ? p.lo[i] + 1 : S];
    ++diff[p.lo[i] + 1];  // live across boundaries lo+1 .. hi-1
    --diff[p.hi[i]];
  }
  for (uint32_t s = 1; s <= S; ++s) starts_before_[s] += starts_before_[s - 1];
  crossing_.assign(S + 1, 0);
  int64_t cur = 0;
  for (uint32_t s = 0; s <= S; ++s) crossing_[s] = static_cast<uint32_t>(cur += diff[s]);
  const uint64_t gap = best_arena_ > lower_ ? best_arena_ - lower_ : 0;
  step_ = std::max(gran_, gap / 2 / gran_ * gran_);
}

uint64_t Lns::excess(uint32_t i) const {
  const uint64_t top = off_[i] + p_.size[i];
  return top > target_ ? top - target_ : 0;
}

void Lns::set_over(uint32_t i, bool over) {
  const bool is = over_pos_[i] != UINT32_MAX;
  if (over == is) return;
  if (over) {
    over_pos_[i] = static_cast<uint32_t>(over_.size());
    over_.push_back(i);
  } else {
    const uint32_t at = over_pos_[i];
    over_[at] = over_.back();
    over_pos_[over_[at]] = at;
    over_.pop_back();
    over_pos_[i] = UINT32_MAX;
  }
}

void Lns::set_target(uint64_t t) {
  target_ = std::max(t, lower_);
  for (uint32_t i : over_) over_pos_[i] = UINT32_MAX;
  over_.clear();
  for (uint32_t i = 0; i < p_.n(); ++i)
    if (off_[i] + p_.size[i] > target_) set_over(i, true);
  target_moves_ = 0;
}

void Lns::collect_band(uint32_t v) {
  // The buffers of v's lifetime that reach above a band under the target: the room v needs.
  const uint64_t h = p_.size[v] << (rng_() % 4);
  const uint64_t bottom = target_ > h ? target_ - h : 0;
  std::vector<uint32_t>& d = hood_members_;
  d.push_back(v);
  idx_.for_each_overlap(v, [&](uint32_t j) {
    if (off_[j] + p_.size[j] > bottom) d.push_back(j);
  });
  if (d.size() > hood_) {  // a random subset, v kept
    for (size_t k = 1; k < hood_; ++k) std::swap(d[k], d[k + rng_() % (d.size() - k)]);
    d.resize(hood_);
  }
}

bool Lns::collect_eject(uint32_t v) {
  // A strip of v's height across its lifetime, below the target, that the fewest bytes cross:
  // v goes first (into the strip or lower), then the buffers that were in it.
  const uint64_t sz = p_.size[v];
  if (sz > target_) return false;
  auto& nb = strip_;
  nb.clear();
  idx_.for_each_overlap(v, [&](uint32_t j) { nb.push_back({off_[j], off_[j] + p_.size[j], j}); });
  std::sort(nb.begin(), nb.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  ends_.clear();
  for (const Interval& x : nb) ends_.emplace_back(x.end, p_.size[x.id]);
  std::sort(ends_.begin(), ends_.end());
  // Candidates: 0 and the neighbours' tops (aligned), strip [o, o + sz) within the target. The
  // bytes crossing it: those starting below o + sz minus those ending at or below o.
  uint64_t best_cost = UINT64_MAX, best_o = 0;
  size_t si = 0, ei = 0;
  uint64_t started = 0, ended = 0;
  auto consider = [&](uint64_t o) {
    o = align_up(o, p_.align[v]);
    if (o > target_ - sz) return;
    while (si < nb.size() && nb[si].start < o + sz) started += p_.size[nb[si++].id];
    while (ei < ends_.size() && ends_[ei].first <= o) ended += ends_[ei++].second;
    const uint64_t cost = started - ended;
    if (cost < best_cost || (cost == best_cost && rng_() % 4 == 0)) {
      best_cost = cost;
      best_o = o;
    }
  };
  consider(0);
  for (const auto& [e, bytes] : ends_) consider(e);  // ascending: the two cursors only move forward
  if (best_cost == UINT64_MAX) return false;
  hood_members_.push_back(v);
  for (const Interval& x : nb)
    if (x.start < best_o + sz && x.end > best_o) hood_members_.push_back(x.id);
  return hood_members_.size() <= 4 * kMaxHood;
}

bool Lns::collect_window(uint32_t v) {
  // Every buffer inside a time window around v's lifetime, the window's ends snapped to nearby
  // boundaries that the fewest buffers cross (those stay where they are).
  const uint32_t lo = p_.lo[v], hi = p_.hi[v], S = p_.sections;
  if (starts_before_[hi] - starts_before_[lo] > 2 * hood_) return false;
  const uint32_t left = static_cast<uint32_t>(rng_() % (hood_ / 2 + 1)), right = static_cast<uint32_t>(hood_ / 2 - left / 2);
  // a: the latest boundary with at least `left` starts in [a, lo); b likewise after hi.
  const uint32_t want_a = starts_before_[lo] > left ? starts_before_[lo] - left : 0;
  uint32_t a = static_cast<uint32_t>(std::upper_bound(starts_before_.begin(), starts_before_.begin() + lo + 1, want_a) -
                                     starts_before_.begin());
  a = a > 0 ? a - 1 : 0;
  const uint32_t want_b = starts_before_[hi] + right;
  uint32_t b = static_cast<uint32_t>(std::lower_bound(starts_before_.begin() + hi, starts_before_.end(), want_b) -
                                     starts_before_.begin());
  b = std::min(b, S);
  uint32_t best_a = a;
  for (uint32_t s = a; s + kSnap > a && s-- > 0;)
    if (crossing_[s] < crossing_[best_a]) best_a = s;
  uint32_t best_b = b;
  for (uint32_t s = b + 1; s <= S && s <= b + kSnap; ++s)
    if (crossing_[s] < crossing_[best_b]) best_b = s;
  a = std::min(best_a, lo);
  b = std::max(best_b, hi);
  std::vector<uint32_t>& d = hood_members_;
  outer_.clear();
  idx_.for_each_in(a, b, [&](uint32_t j) { (p_.lo[j] >= a && p_.hi[j] <= b ? d : outer_).push_back(j); });
  if (d.size() > 4 * hood_) {
    d.clear();
    return false;
  }
  win_a_ = a;
  win_b_ = b;
  return true;
}

bool Lns::search_window(Clock::time_point deadline) {
  // The window as a problem of its own: its inner buffers free, the buffers that cross its ends
  // fixed; the exact search looks for a plan within the target (a few hundred buffers at most).
  if (hood_members_.size() > 512 || hood_members_.size() + outer_.size() > 6000) return false;  // stack: ~500 B a buffer
  Problem w = make_window_problem(p_, hood_members_, outer_, off_, win_a_, win_b_);
  std::vector<uint32_t> perm(w.n());
  std::iota(perm.begin(), perm.end(), 0u);
  std::stable_sort(perm.begin(), perm.end(), [&](uint32_t a, uint32_t b) {
    const uint64_t da = w.thi[a] - w.tlo[a], db = w.thi[b] - w.tlo[b];
    return da != db ? da > db : w.size[a] > w.size[b];
  });
  w = permute_problem(w, perm);
  SearchLimits lim;
  lim.deadline = deadline;
  lim.max_nodes = search_nodes_;
  SearchStats st;
  std::vector<uint64_t> o;
  ++stats_.searches;
  const SearchOutcome out = search_fit(w, target_, lim, SearchConfig{}, &o, &st);
  stats_.search_nodes += st.nodes;
  if (out != SearchOutcome::kFound) return false;
  ++stats_.searches_found;
  for (size_t k = 0; k < w.n(); ++k)
    if (!w.is_fixed(k)) {
      off_[w.orig[k]] = o[k];
      set_over(w.orig[k], false);
    }
  return true;
}

bool Lns::move(uint32_t v, Clock::time_point deadline) {
  hood_members_.clear();
  const uint64_t kind = rng_() % 8;
  // 0-3: eject a strip, 4: band, 5: window by the exact search, 6-7: window (greedy).
  const bool v_first = kind < 4 && collect_eject(v);
  if (!v_first) {
    hood_members_.clear();
    if (kind <= 4 || !collect_window(v)) {
      hood_members_.clear();
      collect_band(v);
    } else if (kind == 5) {
      return search_window(deadline);
    }
  }
  std::vector<uint32_t>& d = hood_members_;
  uint64_t before = 0;
  saved_.resize(d.size());
  for (size_t k = 0; k < d.size(); ++k) {
    before += excess(d[k]);
    saved_[k] = off_[d[k]];
    placed_[d[k]] = 0;
  }
  // The rule that puts them back.
  const size_t n_saved = d.size();
  std::vector<uint32_t> order(d);
  switch (rng_() % 4) {
    case 0:  // largest first
      std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
        return p_.size[a] != p_.size[b] ? p_.size[a] > p_.size[b] : a < b;
      });
      break;
    case 1: {  // largest first, sizes blurred by up to 2x
      std::vector<std::pair<double, uint32_t>> key;
      for (uint32_t i : order)
        key.emplace_back(static_cast<double>(p_.size[i]) * (1.0 + static_cast<double>(rng_() % 1024) / 1024.0), i);
      std::sort(key.begin(), key.end(), std::greater<>());
      for (size_t k = 0; k < key.size(); ++k) order[k] = key[k].second;
      break;
    }
    case 2:  // longest first
      std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
        const uint32_t da = p_.hi[a] - p_.lo[a], db = p_.hi[b] - p_.lo[b];
        return da != db ? da > db : p_.size[a] > p_.size[b];
      });
      break;
    default:
      std::shuffle(order.begin(), order.end(), rng_);
      break;
  }
  if (v_first) std::rotate(order.begin(), std::find(order.begin(), order.end(), v), std::find(order.begin(), order.end(), v) + 1);
  const Fit fit = rng_() % 3 == 0 ? Fit::kFirst : Fit::kBest;
  const uint64_t top = place_greedy(p_, &idx_, order, fit, &off_, &placed_, target_);
  uint64_t after = 0;
  for (uint32_t i : d) after += excess(i);
  if (top > best_arena_ || after > before) {
    for (size_t k = 0; k < n_saved; ++k) off_[d[k]] = saved_[k];
    return false;
  }
  for (uint32_t i : d) set_over(i, off_[i] + p_.size[i] > target_);
  return true;
}

bool Lns::run(Clock::time_point deadline, uint64_t max_moves) {
  bool improved = false;
  if (best_arena_ <= lower_ || p_.n() == 0) return false;
  if (target_ == 0) set_target(best_arena_ - std::min(step_, best_arena_ - lower_));
  for (uint64_t moves = 0;;) {
    if (over_.empty()) {  // every top within the target: a better plan
      best_arena_ = 0;
      for (size_t i = 0; i < p_.n(); ++i) best_arena_ = std::max(best_arena_, off_[i] + p_.size[i]);
      best_ = off_;
      improved = true;
      ++stats_.improvements;
      luby_index_ = 1;
      hood_ = std::max(kMinHood, hood_ / 2);
      if (best_arena_ <= lower_) break;
      set_target(best_arena_ - std::min(step_, best_arena_ - lower_));
      continue;
    }
    if (target_moves_ >= kBaseMoves * luby(luby_index_)) {
      // The target resisted: a smaller step, wider neighbourhoods, a longer budget.
      step_ = std::max(gran_, step_ / 2 / gran_ * gran_);
      hood_ = std::min(kMaxHood, hood_ * 2);
      if (hood_ == kMaxHood) hood_ = kMinHood;
      ++luby_index_;
      set_target(best_arena_ - std::min(step_, best_arena_ - lower_));
      if (over_.empty()) continue;  // the current plan already fits it
    }
    if (max_moves != 0 && moves >= max_moves) break;
    if ((moves & 7) == 0 && Clock::now() >= deadline) break;
    const uint32_t v = over_[rng_() % over_.size()];
    ++moves;
    ++stats_.moves;
    ++target_moves_;
    if (move(v, deadline)) ++stats_.accepted;
  }
  return improved;
}

}  // namespace moeprof::planner::detail
