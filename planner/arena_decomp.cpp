// Planning by windows (arena_engine.h, plan_by_windows): the plan grows from the most loaded
// sections outward, one window of buffers at a time, each window solved around the buffers
// already placed by greedy orders and, when they miss the target, by the exact search.
#include <algorithm>
#include <numeric>

#include "planner/arena_engine.h"

namespace moeprof::planner::detail {

namespace {

constexpr size_t kWindowAdjacency = size_t{1} << 22;  // overlapping pairs of a window's problem
constexpr size_t kMaxWindowSearch = 6000;  // buffers of a window the search takes (stack: ~500 B each)
constexpr uint32_t kSnap = 32;  // how far a window end may move to a boundary fewer buffers cross

struct Rule {
  Key key;
  Fit fit;
};
constexpr Rule kWindowRules[] = {{Key::kSize, Fit::kBest},     {Key::kSize, Fit::kFirst},   {Key::kPressure, Fit::kBest},
                                 {Key::kConflict, Fit::kBest}, {Key::kDuration, Fit::kBest}, {Key::kArea, Fit::kFirst}};

}  // namespace

uint64_t plan_window(const Problem& p, const std::vector<uint32_t>& free, const std::vector<uint32_t>& fixed, uint64_t cap,
                     double search_s, uint64_t search_nodes, Clock::time_point deadline, std::vector<uint64_t>* off,
                     WindowStats* stats) {
  if (free.empty()) return 0;
  uint32_t a = UINT32_MAX, b = 0;
  for (uint32_t j : free) {
    a = std::min(a, p.lo[j]);
    b = std::max(b, p.hi[j]);
  }
  const Problem w = make_window_problem(p, free, fixed, *off, a, b, kWindowAdjacency);
  const size_t n = w.n();
  TimeIndex idx(w, true);
  std::vector<uint64_t> o(n), best_o;
  std::vector<char> pl(n);
  uint64_t best = UINT64_MAX;
  for (const Rule& r : kWindowRules) {
    for (size_t k = 0; k < n; ++k) {
      pl[k] = w.is_fixed(k) ? 1 : 0;
      o[k] = w.is_fixed(k) ? w.fixed[k] : 0;
    }
    std::vector<uint32_t> order = placement_order(w, r.key);
    order.erase(std::remove_if(order.begin(), order.end(), [&](uint32_t k) { return w.is_fixed(k); }), order.end());
    const uint64_t top = place_greedy(w, &idx, order, r.fit, &o, &pl, cap);
    if (top < best) {
      best = top;
      best_o = o;
    }
    if (best <= cap) break;
  }
  // (window index, offset) of the plan kept; from the search, mapped through its permutation.
  std::vector<std::pair<uint32_t, uint64_t>> result;
  for (size_t k = 0; k < free.size(); ++k) result.emplace_back(w.orig[k], best_o[k]);
  const Clock::time_point search_deadline =
      std::min(deadline, Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(search_s)));
  if (best > cap && w.has_adjacency && n <= kMaxWindowSearch && Clock::now() < search_deadline) {
    ++stats->searched;
    auto by = [&](auto less) {
      std::vector<uint32_t> perm(n);
      std::iota(perm.begin(), perm.end(), 0u);
      std::stable_sort(perm.begin(), perm.end(), less);
      return permute_problem(w, perm);
    };
    auto dur = [&](uint32_t i) { return w.thi[i] - w.tlo[i]; };
    const Problem longest = by([&](uint32_t x, uint32_t y) { return dur(x) != dur(y) ? dur(x) > dur(y) : w.size[x] > w.size[y]; });
    const Problem largest = by([&](uint32_t x, uint32_t y) { return w.size[x] != w.size[y] ? w.size[x] > w.size[y] : dur(x) > dur(y); });
    SearchConfig left_to_right, no_fit;
    left_to_right.fit = false;
    left_to_right.pick = SearchConfig::Pick::kForcedThenLeftmost;
    no_fit.fit = false;
    const std::pair<const Problem*, SearchConfig> strategies[] = {{&longest, {}}, {&longest, left_to_right}, {&largest, no_fit}};
    uint64_t gran = 0;  // every offset of a canonical plan of w is a multiple of it
    for (size_t k = 0; k < n; ++k) {
      gran = std::gcd(gran, w.size[k]);
      if (w.align[k] > 1) gran = std::gcd(gran, w.align[k]);
      if (w.is_fixed(k)) gran = std::gcd(gran, w.fixed[k]);
    }
    gran = std::max<uint64_t>(gran, 1);
    uint64_t used = 0;
    // One decision "a plan within c?", the strategies in turn with growing node limits.
    auto probe = [&](uint64_t c, Clock::time_point until, uint64_t nodes) {
      const uint64_t start = used;
      for (uint64_t limit = std::max<uint64_t>(2 * n, 1000);; limit *= 2)
        for (const auto& [q, cfg] : strategies) {
          if (Clock::now() >= until || (nodes != 0 && used - start >= nodes)) return SearchOutcome::kAborted;
          SearchLimits lim;
          lim.deadline = until;
          lim.max_nodes = nodes != 0 ? std::min(limit, nodes - (used - start)) : limit;
          SearchStats st;
          std::vector<uint64_t> so;
          const SearchOutcome out = search_fit(*q, c, lim, cfg, &so, &st);
          stats->search_nodes += st.nodes;
          used += st.nodes;
          if (out == SearchOutcome::kFound) {
            ++stats->search_found;
            result.clear();
            best = 0;
            for (size_t k = 0; k < n; ++k)
              if (!q->is_fixed(k)) {
                result.emplace_back(q->orig[k], so[k]);
                best = std::max(best, so[k] + q->size[k]);
              }
          }
          if (out != SearchOutcome::kAborted) return out;
        }
    };
    // At the target first, then halfway between the highest cap that failed and the best plan,
    // each probe with half of what is left.
    uint64_t c = cap, failed = cap;
    while (c < best && Clock::now() < search_deadline && (search_nodes == 0 || used < search_nodes)) {
      const Clock::time_point now = Clock::now();
      const SearchOutcome out = probe(c, now + (search_deadline - now) / 2, search_nodes == 0 ? 0 : std::max<uint64_t>(1, (search_nodes - used) / 2));
      if (out != SearchOutcome::kFound) failed = c;
      if (best <= failed) break;
      c = failed + (best - failed) / 2 / gran * gran;
      if (c <= failed) break;
    }
  }
  for (const auto& [j, at] : result) (*off)[j] = at;
  return best;
}

uint64_t plan_by_windows(const Problem& p, const WindowOptions& opt, std::vector<uint64_t>* off, WindowStats* stats) {
  const size_t n = p.n();
  const uint32_t S = p.sections;
  if (n == 0) return 0;
  std::vector<char> placed(n, 0), covered(S, 0);
  size_t left = n;
  off->assign(n, 0);
  for (size_t i = 0; i < n; ++i)
    if (p.is_fixed(i)) {  // a region of a larger plan: the buffers that cross its ends stay
      (*off)[i] = p.fixed[i];
      placed[i] = 1;
      --left;
    }
  TimeIndex idx(p, true);
  std::vector<uint64_t> load(S + 1, 0);
  std::vector<uint32_t> starts_before(S + 1, 0);
  std::vector<int64_t> cross(S + 2, 0);
  for (size_t i = 0; i < n; ++i) {
    load[p.lo[i]] += p.size[i];
    load[p.hi[i]] -= p.size[i];  // wraps; the running sum comes back
    ++starts_before[p.lo[i] + 1];
    ++cross[p.lo[i] + 1];
    --cross[p.hi[i]];
  }
  for (uint32_t s = 1; s <= S; ++s) {
    load[s] += load[s - 1];
    starts_before[s] += starts_before[s - 1];
    cross[s] += cross[s - 1];
  }
  const uint32_t half = static_cast<uint32_t>(std::max<size_t>(opt.window_buffers / 2, 1));
  uint64_t arena = 0;
  uint32_t cov_lo = 0, cov_hi = 0;  // the covered block (contiguous growth)
  double searched_s = 0;  // time of the windows that needed the search
  const uint64_t nodes0 = stats->search_nodes;
  std::vector<uint32_t> free, fixed;
  while (left > 0) {
    uint32_t seed_s = UINT32_MAX;
    if (opt.contiguous && cov_lo < cov_hi) {
      // Grow the covered block on the side whose next stretch is more loaded.
      uint64_t left_max = 0, right_max = 0;
      uint32_t left_s = UINT32_MAX, right_s = UINT32_MAX;
      for (uint32_t s = cov_lo, k = 0; s > 0 && k < 4 * half; --s, ++k)
        if (load[s - 1] >= left_max) { left_max = load[s - 1]; left_s = s - 1; }
      for (uint32_t s = cov_hi, k = 0; s < S && k < 4 * half; ++s, ++k)
        if (load[s] >= right_max) { right_max = load[s]; right_s = s; }
      seed_s = left_s == UINT32_MAX || (right_s != UINT32_MAX && right_max > left_max) ? right_s : left_s;
    } else {
      for (uint32_t s = 0; s < S; ++s)
        if (!covered[s] && (seed_s == UINT32_MAX || load[s] > load[seed_s])) seed_s = s;
    }
    if (seed_s == UINT32_MAX || Clock::now() >= opt.deadline) {
      // Out of time: the rest greedily, largest first, around everything placed.
      std::vector<uint32_t> rest;
      for (uint32_t i = 0; i < n; ++i)
        if (!placed[i]) rest.push_back(i);
      std::stable_sort(rest.begin(), rest.end(), [&](uint32_t x, uint32_t y) { return p.size[x] > p.size[y]; });
      arena = std::max(arena, place_greedy(p, &idx, rest, Fit::kBest, off, &placed, opt.cap));
      break;
    }
    // The window: uncovered sections around the seed, about half the buffers on each side.
    uint32_t a = seed_s, b = seed_s + 1;
    if (opt.contiguous && cov_lo < cov_hi) {
      // Anchored at the block's edge, about a whole window of buffers outward.
      if (seed_s >= cov_hi) {
        a = b = cov_hi;
        while (b < S && starts_before[b] - starts_before[a] < 2 * half) ++b;
      } else {
        a = b = cov_lo;
        while (a > 0 && starts_before[b] - starts_before[a] < 2 * half) --a;
      }
      if (a == b) (a > 0 ? --a : ++b);
    } else {
      while (a > 0 && !covered[a - 1] && starts_before[seed_s] - starts_before[a] < half) --a;
      while (b < S && !covered[b] && starts_before[b] - starts_before[seed_s + 1] < half) ++b;
    }
    for (uint32_t s = a, k = 0; s > 0 && !covered[s - 1] && k < kSnap; --s, ++k)
      if (cross[s - 1] < cross[a]) a = s - 1;
    for (uint32_t s = b, k = 0; s < S && !covered[s] && k < kSnap; ++s, ++k)
      if (cross[s + 1] < cross[b]) b = s + 1;
    free.clear();
    fixed.clear();
    uint32_t lo = UINT32_MAX, hi = 0;
    idx.for_each_in(a, b, [&](uint32_t j) {
      if (placed[j]) return;
      free.push_back(j);
      lo = std::min(lo, p.lo[j]);
      hi = std::max(hi, p.hi[j]);
    });
    idx.for_each_in(lo, hi, [&](uint32_t j) {
      if (placed[j]) fixed.push_back(j);
    });
    // Each window that needs the search may take half of the search time left: the first
    // windows hold the peaks. A window that missed the target raised the arena: the later ones
    // need not beat that.
    const double search_s = std::max(0.0, opt.search_s - searched_s) / 2;
    const uint64_t search_nodes = opt.search_nodes == 0 ? 0 : std::max<uint64_t>(1, (opt.search_nodes - std::min(opt.search_nodes, stats->search_nodes - nodes0)) / 2);
    const uint64_t cap = std::max(opt.cap, arena);
    const Clock::time_point before = Clock::now();
    const uint64_t searched = stats->searched;
    const uint64_t top = plan_window(p, free, fixed, cap, search_s, search_nodes, opt.deadline, off, stats);
    if (stats->searched != searched) searched_s += std::chrono::duration<double>(Clock::now() - before).count();
    ++stats->windows;
    if (top > cap) ++stats->over_cap;
    arena = std::max(arena, top);
    if (opt.give_up != 0 && arena >= opt.give_up) break;
    for (uint32_t j : free) placed[j] = 1;
    left -= free.size();
    std::fill(covered.begin() + a, covered.begin() + b, 1);
    if (opt.contiguous) {
      // The block is contiguous: the window touched it (or is the first).
      if (cov_lo == cov_hi) {
        cov_lo = a;
        cov_hi = b;
      } else {
        cov_lo = std::min(cov_lo, a);
        cov_hi = std::max(cov_hi, b);
      }
    }
  }
  return arena;
}

}  // namespace moeprof::planner::detail
