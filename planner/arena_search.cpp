// Exact search for an arena plan that fits a capacity (arena_engine.h; docs/planner.md has the
// full description and the arguments for each rule).
//
// Canonical plans: every buffer sits at offset 0 or on top of a buffer it overlaps in time
// (pushing every buffer down as far as it goes keeps a plan valid and never grows it). Sorted by
// offset, such a plan is built by placing buffers one at a time, each at its current "key": the
// highest top among the placed buffers it overlaps (rounded up to its alignment), with the
// offsets of successive placements never decreasing. The search enumerates these sequences:
//  * x is the water level: the offset of the last placement; later ones are >= x.
//  * At a node, m is the smallest key >= x among the unplaced buffers that may still go there,
//    and the candidates are the buffers whose key is m. The node picks one section (an
//    elementary time interval), preferring one that must be covered at m (its unplaced bytes
//    leave no room for even one granule of waste above m), and branches on which candidate live
//    in it goes at m, plus, when the section can afford waste, a last branch that bans all of
//    them at m. Each set of buffers placed at m is reached along exactly one path.
//  * Pruning, valid for every completion of the node:
//    - water level: every unplaced buffer ends up at >= m, so m + (unplaced bytes live in any
//      section) <= capacity;
//    - section floors: in each section the lowest unplaced buffer sits at >= its key (a granule
//      above m for one that waits), so that key + the section's unplaced bytes <= capacity;
//    - a buffer whose key fell below x (or that is banned at its key) waits for a neighbour to
//      be placed under it; with no unplaced neighbour left, the node is dead;
//    - dominance: a waiting buffer that fits between its key and m could be moved down;
//    - a section that must be covered at m but has no candidate kills the node;
//    - symmetry: touching buffers with the same lifetime only with the lower index below.
//  * Decomposition: after each placement the unplaced buffers of the group are split into
//    groups that do not overlap in time; each is solved on its own (one group failing fails the
//    branch without retrying the others), which removes the thrashing between independent parts.
// Exhausting the tree proves that no plan fits the capacity.
#include <algorithm>
#include <numeric>

#include "planner/arena_engine.h"

namespace moeprof::planner::detail {

namespace {

constexpr uint64_t kInf = UINT64_MAX;

enum class R { kFound, kFail, kAbort };

class Searcher {
 public:
  Searcher(const Problem& p, uint64_t capacity, const SearchLimits& limits, const SearchConfig& cfg)
      : p_(p), cap_(capacity), limits_(limits), cfg_(cfg) {
    const size_t n = p.n();
    level_.assign(n, 0);
    offset_.assign(n, 0);
    placed_.assign(n, 0);
    ban_.assign(n, kInf);
    free_nbrs_.resize(n);
    for (size_t i = 0; i < n; ++i) free_nbrs_[i] = static_cast<uint32_t>(p.adj_off[i + 1] - p.adj_off[i]);
    rem_.assign(p.sections + 1, 0);
    for (size_t i = 0; i < n; ++i) {
      rem_[p.lo[i]] += p.size[i];
      rem_[p.hi[i]] -= p.size[i];  // wraps; the running sum comes back
    }
    uint64_t cur = 0;
    for (uint32_t s = 0; s < p.sections; ++s) rem_[s] = cur += rem_[s];
    rem_.pop_back();
    sec_min_.assign(p.sections, kInf);
    cand_count_.assign(p.sections, 0);
    floor_.assign(p.sections, 0);
    gran_ = 0;
    for (size_t i = 0; i < n; ++i) {
      gran_ = std::gcd(gran_, p.size[i]);
      if (p.align[i] > 1) gran_ = std::gcd(gran_, p.align[i]);
      if (p.is_fixed(i)) gran_ = std::gcd(gran_, p.fixed[i]);  // free buffers may sit on fixed ones
    }
    gran_ = std::max<uint64_t>(gran_, 1);
    // The buffers of each section (CSR), when they are not too many.
    uint64_t spans = 0;
    for (size_t i = 0; i < n; ++i) spans += p.hi[i] - p.lo[i];
    if (spans <= (uint64_t{1} << 24)) {
      sec_off_.assign(p.sections + 1, 0);
      for (size_t i = 0; i < n; ++i)
        for (uint32_t s = p.lo[i]; s < p.hi[i]; ++s) ++sec_off_[s + 1];
      for (uint32_t s = 0; s < p.sections; ++s) sec_off_[s + 1] += sec_off_[s];
      sec_members_.resize(spans);
      std::vector<uint64_t> fill(sec_off_.begin(), sec_off_.end() - 1);
      for (uint32_t i = 0; i < n; ++i)
        for (uint32_t s = p.lo[i]; s < p.hi[i]; ++s) sec_members_[fill[s]++] = i;
      support_.assign(p.sections, UINT32_MAX);
    }
    // Twins: buffers with the same lifetime (sections), grouped by sorting.
    std::vector<uint32_t> by_life(n);
    std::iota(by_life.begin(), by_life.end(), 0u);
    std::sort(by_life.begin(), by_life.end(), [&](uint32_t a, uint32_t b) {
      return p.lo[a] != p.lo[b] ? p.lo[a] < p.lo[b] : p.hi[a] != p.hi[b] ? p.hi[a] < p.hi[b] : a < b;
    });
    twin_off_.assign(n + 1, 0);
    std::vector<std::vector<uint32_t>> tw(n);
    for (size_t k = 0; k < n;) {
      size_t e = k + 1;
      while (e < n && p.lo[by_life[e]] == p.lo[by_life[k]] && p.hi[by_life[e]] == p.hi[by_life[k]]) ++e;
      // Swapping two touching buffers keeps both aligned only if they share an alignment that
      // divides both sizes.
      for (size_t a = k; a < e; ++a)
        for (size_t b = k; b < e; ++b) {
          const uint32_t x = by_life[a], y = by_life[b];
          if (x != y && !p.is_fixed(x) && !p.is_fixed(y) && p.align[x] == p.align[y] && p.size[x] % p.align[x] == 0 &&
              p.size[y] % p.align[y] == 0)
            tw[x].push_back(y);
        }
      k = e;
    }
    for (size_t i = 0; i < n; ++i) twin_off_[i + 1] = twin_off_[i] + static_cast<uint32_t>(tw[i].size());
    for (size_t i = 0; i < n; ++i) twins_.insert(twins_.end(), tw[i].begin(), tw[i].end());
  }

  SearchOutcome run(std::vector<uint64_t>* offsets, SearchStats* stats) {
    // The root group: every buffer, by lower section (the problem order breaks ties).
    std::vector<uint32_t> all(p_.n());
    std::iota(all.begin(), all.end(), 0u);
    std::stable_sort(all.begin(), all.end(), [&](uint32_t a, uint32_t b) { return p_.lo[a] < p_.lo[b]; });
    pool_ = all;
    R r = R::kFound;
    for (size_t i = 0; i < p_.n() && r == R::kFound; ++i)
      if (p_.is_fixed(i) && p_.fixed[i] + p_.size[i] > cap_) r = R::kFail;
    if (r == R::kFound) r = solve_groups(0, pool_.size(), 0);
    stats->nodes += nodes_;
    stats->max_depth = max_depth_;
    if (r == R::kFound) {
      *offsets = offset_;
      return SearchOutcome::kFound;
    }
    return r == R::kAbort ? SearchOutcome::kAborted : SearchOutcome::kInfeasible;
  }

 private:
  uint64_t key(uint32_t i) const { return align_up(level_[i], p_.align[i]); }
  // A buffer waits when it cannot go at its key now: the key is below the water level, or the
  // buffer is banned at that offset. Only a neighbour placed under it can raise its key.
  bool waits(uint32_t i, uint64_t k, uint64_t x) const { return k < x || ban_[i] == k; }

  bool out_of_budget() {
    ++nodes_;
    if (limits_.max_nodes != 0 && nodes_ >= limits_.max_nodes) return true;
    return (nodes_ & 255) == 0 && Clock::now() >= limits_.deadline;
  }

  void place(uint32_t i, uint64_t m) {
    log_.emplace_back(i, trail_.size());
    max_depth_ = std::max(max_depth_, log_.size());
    placed_[i] = 1;
    offset_[i] = m;
    const uint64_t top = m + p_.size[i];
    for (uint64_t e = p_.adj_off[i]; e < p_.adj_off[i + 1]; ++e) {
      const uint32_t j = p_.adj[e];
      if (placed_[j]) continue;
      --free_nbrs_[j];
      if (level_[j] < top) {
        trail_.emplace_back(j, level_[j]);
        level_[j] = top;
      }
    }
    for (uint32_t s = p_.lo[i]; s < p_.hi[i]; ++s) {
      rem_[s] -= p_.size[i];
      floor_trail_.push_back(floor_[s]);
      floor_[s] = top;
    }
  }

  // Undoes the last placement.
  void undo_last() {
    const auto [i, mark] = log_.back();
    log_.pop_back();
    placed_[i] = 0;
    for (uint64_t e = p_.adj_off[i]; e < p_.adj_off[i + 1]; ++e) {
      const uint32_t j = p_.adj[e];
      if (!placed_[j]) ++free_nbrs_[j];
    }
    while (trail_.size() > mark) {
      level_[trail_.back().first] = trail_.back().second;
      trail_.pop_back();
    }
    for (uint32_t s = p_.hi[i]; s-- > p_.lo[i];) {
      rem_[s] += p_.size[i];
      floor_[s] = floor_trail_.back();
      floor_trail_.pop_back();
    }
  }

  void unban(size_t mark) {
    while (ban_trail_.size() > mark) {
      ban_[ban_trail_.back().first] = ban_trail_.back().second;
      ban_trail_.pop_back();
    }
  }

  // Splits the group pool_[beg, end) (sorted by lower section) into runs that do not overlap in
  // time and solves each. A group that does not split goes on with water level x; the parts of
  // one that splits each start a canonical sequence of their own (water level 0), so a part can
  // use room below x instead of failing back to an unrelated choice made before the split. On
  // failure the parts solved so far are undone.
  R solve_groups(size_t beg, size_t end, uint64_t x) {
    const size_t log_mark = log_.size(), ban_mark = ban_trail_.size();
    cuts_.clear();
    uint32_t reach = 0;
    for (size_t k = beg; k < end; ++k) {
      if (k > beg && p_.lo[pool_[k]] >= reach) cuts_.push_back(k);
      reach = std::max(reach, p_.hi[pool_[k]]);
    }
    if (cuts_.empty()) return beg == end ? R::kFound : solve(beg, end, x);
    const size_t pool_mark = pool_.size();
    pool_.insert(pool_.end(), cuts_.begin(), cuts_.end());  // the cuts, kept across recursion
    pool_.push_back(static_cast<uint32_t>(end));
    R r = R::kFound;
    size_t run = beg;
    for (size_t c = pool_mark; c < pool_.size() && r == R::kFound; ++c) {
      const size_t cut = pool_[c];
      r = solve(run, cut, 0);
      run = cut;
    }
    pool_.resize(pool_mark);
    if (r != R::kFound) {
      while (log_.size() > log_mark) undo_last();
      unban(ban_mark);
    }
    return r;
  }

  // One node: the group pool_[beg, end), all unplaced, water level x.
  R solve(size_t beg, size_t end, uint64_t x) {
    if (out_of_budget()) return R::kAbort;
    const size_t pool_mark = pool_.size();
    uint64_t m = kInf, wait_top = kInf, mf = kInf;
    uint32_t span_lo = UINT32_MAX, span_hi = 0, fi = UINT32_MAX;
    for (size_t k = beg; k < end; ++k) {
      const uint32_t i = pool_[k];
      span_lo = std::min(span_lo, p_.lo[i]);
      span_hi = std::max(span_hi, p_.hi[i]);
      if (p_.is_fixed(i)) {
        if (p_.fixed[i] < mf) {
          mf = p_.fixed[i];
          fi = i;
        }
        continue;
      }
      const uint64_t kk = key(i);
      if (waits(i, kk, x)) {
        if (free_nbrs_[i] == 0) return fail(pool_mark);  // waits for a neighbour that will never come
        wait_top = std::min(wait_top, kk + p_.size[i]);
        continue;
      }
      if (kk < m) {
        m = kk;
        pool_.resize(pool_mark);
      }
      if (kk == m) pool_.push_back(i);
    }
    if (fi != UINT32_MAX && mf <= m) return place_fixed(beg, end, x, fi, pool_mark);
    if (cfg_.symmetry && m != kInf) {
      // Symmetry: buffers with the same lifetime that touch (one directly on the other) can swap
      // places, so only plans with the lower index below are searched. A buffer left out this way
      // does not go at m, but it may still go higher: when every candidate is left out, the node
      // goes on without them at m (banned there), as the branch that places none at m does. (With
      // fixed buffers that branch can succeed: a fixed buffer above m may be the next to place.)
      size_t w = pool_mark;
      for (size_t k = pool_mark; k < pool_.size(); ++k) {
        const uint32_t i = pool_[k];
        bool ok = true;
        for (uint32_t t = twin_off_[i]; t < twin_off_[i + 1] && ok; ++t) {
          const uint32_t a = twins_[t];
          ok = !(a > i && placed_[a] && offset_[a] + p_.size[a] == m);
        }
        if (ok) pool_[w++] = i;
      }
      if (w == pool_mark) {
        const size_t ban_mark = ban_trail_.size();
        for (size_t k = pool_mark; k < pool_.size(); ++k) {
          ban_trail_.emplace_back(pool_[k], ban_[pool_[k]]);
          ban_[pool_[k]] = m;
        }
        pool_.resize(pool_mark);
        const R r = solve(beg, end, m);
        if (r != R::kFound) unban(ban_mark);
        return r;
      }
      pool_.resize(w);
    }
    if (m == kInf || m > cap_) return fail(pool_mark);
    // Dominance: a waiting buffer that fits between its key and m could go there: every
    // completion of this node is matched by one with that buffer lower (same arena), reached on
    // another path.
    if (cfg_.dominance && wait_top <= m) return fail(pool_mark);
    const uint64_t room = cap_ - m;
    for (uint32_t s = span_lo; s < span_hi; ++s)
      if (rem_[s] > room) return fail(pool_mark);  // water level
    if (cfg_.section_inference && !sections_fit(beg, end, x, m, span_lo, span_hi)) return fail(pool_mark);

    // The section to branch on, and whether it may be left uncovered at m.
    for (size_t k = pool_mark; k < pool_.size(); ++k)
      for (uint32_t s = p_.lo[pool_[k]]; s < p_.hi[pool_[k]]; ++s) ++cand_count_[s];
    uint32_t best = UINT32_MAX;
    bool best_must = false, dead = false;
    const uint64_t no_waste = room - std::min(room, gran_);
    for (uint32_t s = span_lo; s < span_hi && !dead; ++s) {
      if (rem_[s] == 0) continue;
      const bool must = rem_[s] > no_waste;
      if (must && cand_count_[s] == 0) dead = true;
      if (cand_count_[s] == 0) continue;
      bool better = false;
      if (best != UINT32_MAX) {
        better = cfg_.pick == SearchConfig::Pick::kFewest ? cand_count_[s] < cand_count_[best]
                                                          : cand_count_[s] == 1 && cand_count_[best] > 1;
      }
      if (best == UINT32_MAX || must > best_must || (must == best_must && better)) {
        best = s;
        best_must = must;
      }
    }
    for (size_t k = pool_mark; k < pool_.size(); ++k)
      for (uint32_t s = p_.lo[pool_[k]]; s < p_.hi[pool_[k]]; ++s) cand_count_[s] = 0;
    if (dead || best == UINT32_MAX) return fail(pool_mark);
    size_t w = pool_mark;
    for (size_t k = pool_mark; k < pool_.size(); ++k) {
      const uint32_t i = pool_[k];
      if (p_.lo[i] <= best && best < p_.hi[i] && p_.size[i] <= room) pool_[w++] = i;
    }
    pool_.resize(w);
    std::sort(pool_.begin() + static_cast<std::ptrdiff_t>(pool_mark), pool_.end());  // static priority: index order
    if (cfg_.fit) order_by_fit(pool_mark, pool_.size(), best, m);
    const size_t cand_end = w;

    auto try_place = [&](uint32_t i) {
      if (!p_.fixed.empty() && hits_fixed(i, m)) return R::kFail;
      place(i, m);
      // The rest of the group, in lower order, then solved in independent parts.
      const size_t rest = pool_.size();
      for (size_t k = beg; k < end; ++k)
        if (pool_[k] != i) pool_.push_back(pool_[k]);
      R r = solve_groups(rest, pool_.size(), m);
      pool_.resize(rest);
      if (r != R::kFound) undo_last();
      return r;
    };
    auto try_ban = [&]() {
      // None of the section's candidates goes at m.
      const size_t ban_mark = ban_trail_.size();
      for (size_t c = pool_mark; c < cand_end; ++c) {
        ban_trail_.emplace_back(pool_[c], ban_[pool_[c]]);
        ban_[pool_[c]] = m;
      }
      R r = solve(beg, end, m);
      if (r != R::kFound) unban(ban_mark);
      return r;
    };
    for (size_t c = pool_mark; c <= cand_end; ++c) {
      if (c == cand_end && best_must) break;
      const R r = c == cand_end ? try_ban() : try_place(pool_[c]);
      if (r != R::kFail) {
        pool_.resize(pool_mark);
        return r;
      }
    }
    return fail(pool_mark);
  }

  // Skyline fit: candidates that fill the run of sections at floor <= m around `best` edge to
  // edge, or whose top is flush with the floor beyond an edge they touch, come first.
  void order_by_fit(size_t b, size_t e, uint32_t best, uint64_t m) {
    uint32_t lo = best, hi = best + 1;
    while (lo > 0 && floor_[lo - 1] <= m && rem_[lo - 1] != 0) --lo;
    while (hi < p_.sections && floor_[hi] <= m && rem_[hi] != 0) ++hi;
    auto score = [&](uint32_t i) {
      const uint64_t top = m + p_.size[i];
      int sc = 0;
      if (p_.lo[i] == lo) sc += 1 + (lo == 0 || floor_[lo - 1] == top ? 2 : 0);
      if (p_.hi[i] == hi) sc += 1 + (hi == p_.sections || floor_[hi] == top ? 2 : 0);
      return sc;
    };
    std::stable_sort(pool_.begin() + static_cast<std::ptrdiff_t>(b), pool_.begin() + static_cast<std::ptrdiff_t>(e),
                     [&](uint32_t x, uint32_t y) { return score(x) > score(y); });
  }

  // A free buffer at m would overlap an unplaced fixed neighbour (those sit at >= m).
  bool hits_fixed(uint32_t i, uint64_t m) const {
    const uint64_t top = m + p_.size[i];
    for (uint64_t e = p_.adj_off[i]; e < p_.adj_off[i + 1]; ++e) {
      const uint32_t j = p_.adj[e];
      if (!placed_[j] && p_.is_fixed(j) && p_.fixed[j] < top) return true;
    }
    return false;
  }

  // The lowest unplaced fixed buffer comes no higher than every free candidate: it goes at its
  // offset now (one branch), unless a placed neighbour already reaches above it.
  R place_fixed(size_t beg, size_t end, uint64_t x, uint32_t f, size_t pool_mark) {
    pool_.resize(pool_mark);
    const uint64_t at = p_.fixed[f];
    if (at < x || key(f) > at || at + p_.size[f] > cap_) return R::kFail;
    place(f, at);
    const size_t rest = pool_.size();
    for (size_t k = beg; k < end; ++k)
      if (pool_[k] != f) pool_.push_back(pool_[k]);
    R r = solve_groups(rest, pool_.size(), at);
    pool_.resize(rest);
    if (r != R::kFound) undo_last();
    return r;
  }

  R fail(size_t pool_mark, R r = R::kFail) {
    pool_.resize(pool_mark);
    return r;
  }

  // Section floors: the lowest unplaced buffer of each section sits at >= max(its key, m), or
  // at least one granule above m for one that waits; so a section fails when none of its
  // unplaced buffers has such an effective key <= C - (its unplaced bytes). Each section keeps a
  // support (a buffer that passed there last time); only a section whose support no longer
  // passes scans its buffers.
  uint64_t effective_key(uint32_t i, uint64_t x, uint64_t m) const {
    if (p_.is_fixed(i)) return p_.fixed[i];
    const uint64_t kk = key(i);
    return kk < m || waits(i, kk, x) ? m + gran_ : kk;
  }

  bool sections_fit(size_t beg, size_t end, uint64_t x, uint64_t m, uint32_t span_lo, uint32_t span_hi) {
    if (sec_off_.empty()) return sections_fit_scan(beg, end, x, m);
    for (uint32_t s = span_lo; s < span_hi; ++s) {
      if (rem_[s] == 0) continue;
      const uint64_t limit = cap_ - rem_[s];  // rem_[s] <= cap_ - m: the water level passed
      const uint32_t sup = support_[s];
      if (sup != UINT32_MAX && !placed_[sup] && effective_key(sup, x, m) <= limit) continue;
      bool found = false;
      for (uint64_t e = sec_off_[s]; e < sec_off_[s + 1]; ++e) {
        const uint32_t i = sec_members_[e];
        if (!placed_[i] && effective_key(i, x, m) <= limit) {
          support_[s] = i;
          found = true;
          break;
        }
      }
      if (!found) return false;
    }
    return true;
  }

  // The same test by a scan over the group (when the section lists would be too large).
  bool sections_fit_scan(size_t beg, size_t end, uint64_t x, uint64_t m) {
    uint32_t span_lo = UINT32_MAX, span_hi = 0;
    for (size_t k = beg; k < end; ++k) {
      const uint32_t i = pool_[k];
      const uint64_t kk = effective_key(i, x, m);
      for (uint32_t s = p_.lo[i]; s < p_.hi[i]; ++s) sec_min_[s] = std::min(sec_min_[s], kk);
      span_lo = std::min(span_lo, p_.lo[i]);
      span_hi = std::max(span_hi, p_.hi[i]);
    }
    bool ok = true;
    for (uint32_t s = span_lo; s < span_hi; ++s) {
      if (rem_[s] != 0 && (sec_min_[s] > cap_ || rem_[s] > cap_ - sec_min_[s])) ok = false;
      sec_min_[s] = kInf;
    }
    return ok;
  }

  const Problem& p_;
  const uint64_t cap_;
  const SearchLimits limits_;
  const SearchConfig cfg_;
  std::vector<uint64_t> rem_;      // unplaced bytes live in each section
  std::vector<uint64_t> sec_min_;  // scratch of sections_fit()
  std::vector<uint32_t> cand_count_;
  std::vector<uint64_t> level_, offset_;
  std::vector<char> placed_;
  std::vector<uint32_t> free_nbrs_;  // unplaced neighbours in time
  std::vector<uint64_t> ban_;        // offset at which a buffer is banned (kInf: none)
  std::vector<std::pair<uint32_t, uint64_t>> trail_, ban_trail_;  // old levels / old bans
  std::vector<std::pair<uint32_t, size_t>> log_;                  // placements: buffer, trail mark
  std::vector<uint32_t> pool_;  // stack of groups, candidate lists and cut positions
  std::vector<uint32_t> cuts_;  // scratch of solve_groups()
  std::vector<uint32_t> twin_off_, twins_;  // buffers with the same lifetime (CSR)
  std::vector<uint64_t> sec_off_;           // buffers of each section (CSR) ...
  std::vector<uint32_t> sec_members_;
  std::vector<uint32_t> support_;           // ... and the one that passed the floor test last
  std::vector<uint64_t> floor_, floor_trail_;  // top of the placed buffers per section; old values
  uint64_t gran_ = 1;           // every offset of a canonical plan is a multiple of this
  uint64_t nodes_ = 0;
  size_t max_depth_ = 0;
};

}  // namespace

SearchOutcome search_fit(const Problem& p, uint64_t capacity, const SearchLimits& limits, const SearchConfig& cfg,
                         std::vector<uint64_t>* offsets, SearchStats* stats) {
  Searcher s(p, capacity, limits, cfg);
  return s.run(offsets, stats);
}

}  // namespace moeprof::planner::detail
