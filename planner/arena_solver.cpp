// The arena solver (arena_solver.h): components, the greedy portfolio for a first answer, then
// improvement until the time limit: the exact search's probes, window plans and large
// neighbourhood search, on the component that sets the arena.
#include "planner/arena_solver.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>

#include "planner/arena_engine.h"

namespace moeprof::planner {

namespace detail {
namespace {

constexpr size_t kMaxAdjacency = size_t{1} << 23;  // overlapping pairs (64 MiB of neighbour lists)
constexpr double kGreedyShare = 0.25;  // of the time limit, at most, for the orders after the first
constexpr size_t kWindowSizes[] = {1500, 600, 3000, 1000, 2000, 400};  // buffers per window, by round
constexpr size_t kRegionBuffers = 6000;  // a region re-plan; components above twice this get them
constexpr uint32_t kRegionSnap = 64;     // how far a region end may move to a boundary fewer cross
constexpr size_t kRegionWindows[] = {3000, 2000, 1500};  // buffers per window in a region
constexpr double kRestartShare = 0.125;  // of a round, for greedy restarts on a region the windows left as it was
// Core plans: the load margin that makes a section hot, by attempt; the core's share of what is left.
constexpr double kCoreEps[] = {0.05, 0.1, 0.02, 0.15, 0.03, 0.07, 0.01, 0.2};
constexpr double kCoreSolveShare = 0.25;
constexpr uint64_t kCorePasses = 4;  // greedy restarts of the rest per step

struct Rule {
  Key key;
  Fit fit;
};
// Largest first comes first (the classic planner, and the structural guarantee), both fits.
constexpr Rule kRules[] = {{Key::kSize, Fit::kBest},       {Key::kSizeStart, Fit::kBest}, {Key::kSizeStart, Fit::kFirst},
                           {Key::kSize, Fit::kFirst},      {Key::kPressure, Fit::kBest},  {Key::kPressure, Fit::kFirst},
                           {Key::kConflict, Fit::kBest},  {Key::kConflict, Fit::kFirst}, {Key::kArea, Fit::kBest},
                           {Key::kArea, Fit::kFirst},     {Key::kDuration, Fit::kBest},  {Key::kDuration, Fit::kFirst},
                           {Key::kLower, Fit::kBest},     {Key::kLower, Fit::kFirst}};
constexpr size_t kSizeRules = 4;  // the largest-first orders: greedy by size is the best of those that ran

std::string rule_name(const Rule& r) {
  return "greedy:" + std::string(key_name(r.key)) + (r.fit == Fit::kFirst ? "/first_fit" : "");
}

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

Clock::time_point after(Clock::time_point t, double s) {
  return t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Every offset of a canonical plan of `p` is a multiple of this.
uint64_t granule(const Problem& p) {
  uint64_t g = 0;
  for (size_t i = 0; i < p.n(); ++i) {
    g = std::gcd(g, p.size[i]);
    if (p.align[i] > 1) g = std::gcd(g, p.align[i]);
  }
  return std::max<uint64_t>(g, 1);
}

uint64_t round_up(uint64_t v, uint64_t g) { return (v + g - 1) / g * g; }

// One component's decision searches: "is there a plan with arena <= C?", answered by a portfolio
// of buffer orders (the search's static priority) run round robin with growing node limits,
// plus random orders with a small node limit (restarts).
class Portfolio {
 public:
  Portfolio(const Problem& base, uint64_t seed) : base_(base), rng_(seed) {
    const size_t n = base.n();
    std::vector<uint64_t> sec_load(base.sections, 0), total(n, 0);
    for (size_t i = 0; i < n; ++i)
      for (uint32_t s = base.lo[i]; s < base.hi[i]; ++s) sec_load[s] += base.size[i];
    for (size_t i = 0; i < n; ++i)
      for (uint32_t s = base.lo[i]; s < base.hi[i]; ++s) total[i] = std::max(total[i], sec_load[s]);
    auto dur = [&](uint32_t i) { return base.thi[i] - base.tlo[i]; };
    auto area = [&](uint32_t i) { return static_cast<unsigned __int128>(base.size[i]) * dur(i); };
    auto order = [&](auto less) {
      std::vector<uint32_t> perm(n);
      std::iota(perm.begin(), perm.end(), 0u);
      std::stable_sort(perm.begin(), perm.end(), less);
      return perm;
    };
    // Longest first (skyline fit; and without it, branching left to right); largest first
    // (without the skyline fit); fullest section first, then area; area.
    const auto longest = permute_problem(base, order([&](uint32_t a, uint32_t b) {
      return dur(a) != dur(b) ? dur(a) > dur(b) : base.size[a] > base.size[b];
    }));
    fixed_.push_back({longest, {}});
    SearchConfig left_to_right;
    left_to_right.fit = false;
    left_to_right.pick = SearchConfig::Pick::kForcedThenLeftmost;
    fixed_.push_back({longest, left_to_right});
    SearchConfig no_fit;
    no_fit.fit = false;
    fixed_.push_back({permute_problem(base, order([&](uint32_t a, uint32_t b) {
                        return base.size[a] != base.size[b] ? base.size[a] > base.size[b] : dur(a) > dur(b);
                      })),
                      no_fit});
    fixed_.push_back({permute_problem(base, order([&](uint32_t a, uint32_t b) {
                        return total[a] != total[b] ? total[a] > total[b] : area(a) > area(b);
                      })),
                      {}});
    fixed_.push_back({permute_problem(base, order([&](uint32_t a, uint32_t b) { return area(a) > area(b); })), {}});
  }

  // kFound: *offsets (caller order, only this component's entries written) holds a plan.
  SearchOutcome decide(uint64_t capacity, Clock::time_point deadline, std::vector<uint64_t>* offsets) {
    const uint64_t base_limit = std::max<uint64_t>(2 * base_.n(), 1000);
    for (int round = 0;; ++round) {
      for (const auto& f : fixed_) {
        const SearchOutcome out = run(f.problem, f.cfg, capacity, deadline, base_limit << std::min(round, 40), offsets);
        if (out != SearchOutcome::kAborted || Clock::now() >= deadline) return out;
      }
      // Random orders: 12 x 2^round of them, alternating the two section choices.
      for (int k = 0; k < (12 << std::min(round, 12)); ++k) {
        std::vector<uint32_t> perm(base_.n());
        std::iota(perm.begin(), perm.end(), 0u);
        std::shuffle(perm.begin(), perm.end(), rng_);
        SearchConfig cfg;
        cfg.pick = k % 2 ? SearchConfig::Pick::kForcedThenLeftmost : SearchConfig::Pick::kFewest;
        const SearchOutcome out = run(permute_problem(base_, perm), cfg, capacity, deadline, base_limit, offsets);
        if (out != SearchOutcome::kAborted || Clock::now() >= deadline) return out;
      }
    }
  }

  uint64_t nodes = 0, searches = 0;

 private:
  struct Fixed {
    Problem problem;
    SearchConfig cfg;
  };

  SearchOutcome run(const Problem& p, const SearchConfig& cfg, uint64_t capacity, Clock::time_point deadline,
                    uint64_t node_limit, std::vector<uint64_t>* offsets) {
    SearchLimits lim;
    lim.deadline = deadline;
    lim.max_nodes = node_limit;
    SearchStats st;
    std::vector<uint64_t> off;
    const SearchOutcome out = search_fit(p, capacity, lim, cfg, &off, &st);
    nodes += st.nodes;
    ++searches;
    if (out == SearchOutcome::kFound)
      for (size_t k = 0; k < p.n(); ++k) (*offsets)[p.orig[k]] = off[k];
    return out;
  }

  const Problem& base_;
  std::mt19937_64 rng_;
  std::vector<Fixed> fixed_;
};

struct Component {
  Problem problem;
  std::vector<uint64_t> off;  // the best plan (problem order)
  uint64_t arena = 0;         // its arena
  uint64_t lower = 0;         // proven lower bound
  uint64_t gran = 1;
  uint64_t by_size = UINT64_MAX;  // greedy by size
  std::string algorithm;
  bool searchable = false;
  // The exact search's probes: the budgets of the two kinds, the descent step, the time spent.
  std::unique_ptr<Portfolio> portfolio;
  double low_s = 0, step_s = 0, low_spent = 0, step_spent = 0;
  uint64_t step = 0;
  bool tried_low = false;
  // Window plans and neighbourhood search: rounds alternate between them.
  std::unique_ptr<Lns> lns;
  uint64_t rounds = 0;
  double other_spent = 0;
  std::vector<uint32_t> starts_before, crossing;  // per section boundary (region re-plans)
  std::unique_ptr<TimeIndex> index;               // every buffer (region re-plans)
  std::mt19937_64 rng{1};
  uint64_t core_attempts = 0;                     // core plans tried (their margins cycle)

  void keep(uint64_t a, const std::vector<uint64_t>& o, std::string how) {
    arena = a;
    off = o;
    algorithm = std::move(how);
  }
};

struct Totals {
  uint64_t window_plans = 0, region_plans = 0, window_nodes = 0, lns_moves = 0, lns_nodes = 0, core_plans = 0;
};

// The core of a core plan is solved by the solver itself, as an instance of its own that stops
// once it fits the target (its components, greedy portfolio, search or windows).
uint64_t solve_core(const Problem& core, uint64_t cap, Clock::time_point deadline, uint64_t seed, std::vector<uint64_t>* off,
                    uint64_t* nodes) {
  std::vector<Buffer> bs(core.n());
  for (size_t k = 0; k < core.n(); ++k) {
    bs[k].id = k;
    bs[k].size = core.size[k];
    bs[k].lower = core.lo[k];
    bs[k].upper = core.hi[k];
    bs[k].alignment = core.align[k];
  }
  ArenaSolveOptions o;
  o.capacity = cap;
  o.stop_at_capacity = true;
  o.seed = seed;
  o.time_limit_s = std::max(1e-3, kCoreSolveShare * seconds_between(Clock::now(), deadline));
  auto sol = solve_arena(bs, o);
  if (!sol.is_ok()) return UINT64_MAX;
  *nodes += sol->search_nodes;
  *off = std::move(sol->offsets);
  return sol->arena_bytes;
}

// Core plans for the rest of the slice (docs/planner.md, "Core plans"): one margin after the
// other, each grown from the hottest sections until the plan fits the target. The target is the
// lower bound, and every third attempt halfway to the best plan.
void core_round(Component& c, Clock::time_point end, uint64_t seed, Totals* t) {
  while (Clock::now() < end && c.arena > c.lower) {
    const uint64_t k = c.core_attempts++;
    CoreOptions co;
    co.eps = kCoreEps[k % std::size(kCoreEps)];
    co.cap = k % 3 == 2 ? c.lower + (c.arena - c.lower) / 2 / c.gran * c.gran : c.lower;
    co.seed = seed + k;
    co.passes = kCorePasses;
    co.deadline = end;
    CoreStats cs;
    std::vector<uint64_t> o;
    const uint64_t a = plan_by_core(c.problem, co, solve_core, &o, &cs);
    ++t->core_plans;
    t->window_nodes += cs.search_nodes;
    if (a < c.arena) {
      c.keep(a, o, "core");
      if (c.lns) t->lns_moves += c.lns->stats().moves, t->lns_nodes += c.lns->stats().search_nodes;
      c.lns.reset();
    }
  }
}

// One probe of the exact search below the component's best plan (or at its lower bound).
void search_probe(Component& c, Clock::time_point deadline, uint64_t seed, const ArenaSolveOptions& opt,
                  std::vector<uint64_t>* trial) {
  if (!c.portfolio) c.portfolio = std::make_unique<Portfolio>(c.problem, seed);
  if (c.step == 0) c.step = c.gran;
  // Two kinds of probe. "Low": at the lower bound, where a plan is optimal; first, then whenever
  // the low probes have had less than half the time of the step probes, with a budget that
  // doubles each time. "Step": below the best plan by `step`, which doubles after a success and
  // shrinks after a miss; at one granule, a miss doubles its budget.
  const bool low = !c.tried_low || c.low_spent < c.step_spent / 2;
  c.tried_low = true;
  uint64_t cap = low ? c.lower : std::max(c.lower, c.arena - std::min(c.step, c.arena - c.lower));
  if (opt.capacity != 0 && c.arena > opt.capacity && c.lower <= opt.capacity) cap = std::min(cap, opt.capacity);
  const Clock::time_point start = Clock::now();
  const SearchOutcome out = c.portfolio->decide(cap, std::min(deadline, after(start, low ? c.low_s : c.step_s)), trial);
  (low ? c.low_spent : c.step_spent) += seconds_between(start, Clock::now());
  if (out == SearchOutcome::kFound) {
    uint64_t a = 0;
    for (size_t k = 0; k < c.problem.n(); ++k) a = std::max(a, (*trial)[c.problem.orig[k]] + c.problem.size[k]);
    if (a < c.arena) {
      std::vector<uint64_t> o(c.problem.n());
      for (size_t k = 0; k < c.problem.n(); ++k) o[k] = (*trial)[c.problem.orig[k]];
      c.keep(a, o, "search");
    }
    if (!low) c.step *= 2;
  } else if (out == SearchOutcome::kInfeasible) {
    c.lower = std::max(c.lower, round_up(cap + 1, c.gran));
    c.step = std::max(c.gran, c.step / 2 / c.gran * c.gran);
  } else if (low) {
    c.low_s *= 2;
  } else if (c.step > c.gran) {
    c.step = std::max(c.gran, c.step / 4 / c.gran * c.gran);
  } else {
    c.step_s *= 2;
  }
}

// Region re-plans for about slice_s seconds: a buffer at the top of the plan, the sections
// around its lifetime (about kRegionBuffers buffers inside, ends moved to boundaries few buffers
// cross), every buffer inside planned anew by windows around the ones that cross. Kept when the
// region's highest top went down: the arena falls once every region at the top has.
void region_round(Component& c, Clock::time_point end, double slice_s, uint64_t seed, Totals* t) {
  const Problem& p = c.problem;
  const size_t n = p.n();
  const uint32_t S = p.sections;
  if (c.starts_before.empty()) {
    c.starts_before.assign(S + 1, 0);
    std::vector<int64_t> d(S + 2, 0);
    for (size_t i = 0; i < n; ++i) {
      ++c.starts_before[p.lo[i] + 1];
      ++d[p.lo[i] + 1];
      --d[p.hi[i]];
    }
    c.crossing.assign(S + 1, 0);
    int64_t cur = 0;
    for (uint32_t s = 1; s <= S; ++s) c.starts_before[s] += c.starts_before[s - 1];
    for (uint32_t s = 0; s <= S; ++s) c.crossing[s] = static_cast<uint32_t>(cur += d[s]);
    c.rng.seed(seed);
    c.index = std::make_unique<TimeIndex>(p, true);
  }
  // Each region has at most half the slice; none starts in its last quarter (a cut-off region
  // plan ends greedily, a waste).
  while (seconds_between(Clock::now(), end) > slice_s / 4 && c.arena > c.lower) {
    // A buffer at the top, at random; the region holds about twice as many buffers as start
    // during its lifetime, at least kRegionBuffers (or twice that, at random), at most half the
    // component. A few tries find one that fits.
    std::vector<uint32_t> tops;
    for (uint32_t i = 0; i < n; ++i)
      if (c.off[i] + p.size[i] == c.arena) tops.push_back(i);
    uint32_t v = UINT32_MAX, inner = 0, size = 0;
    for (int tries = 0; tries < 8 && v == UINT32_MAX && !tops.empty(); ++tries) {
      const uint32_t i = tops[c.rng() % tops.size()];
      inner = c.starts_before[p.hi[i]] - c.starts_before[p.lo[i]];
      size = std::max<uint32_t>(static_cast<uint32_t>(kRegionBuffers << (c.rng() % 2)), 2 * inner);
      if (size <= n / 2) v = i;
    }
    if (v == UINT32_MAX) return;
    const uint32_t extra = size - inner, left = static_cast<uint32_t>(c.rng() % (extra + 1));
    auto a = static_cast<uint32_t>(std::upper_bound(c.starts_before.begin(), c.starts_before.begin() + p.lo[v] + 1,
                                                    c.starts_before[p.lo[v]] > left ? c.starts_before[p.lo[v]] - left : 0) -
                                   c.starts_before.begin());
    a = a > 0 ? a - 1 : 0;
    auto b = static_cast<uint32_t>(std::lower_bound(c.starts_before.begin() + p.hi[v], c.starts_before.end(),
                                                    c.starts_before[p.hi[v]] + (extra - left)) - c.starts_before.begin());
    b = std::min(b, S);
    for (uint32_t s = a, k = 0; s > 0 && k < kRegionSnap; --s, ++k)
      if (c.crossing[s - 1] < c.crossing[a]) a = s - 1;
    for (uint32_t s = b, k = 0; s < S && k < kRegionSnap; ++s, ++k)
      if (c.crossing[s + 1] < c.crossing[b]) b = s + 1;
    // The region as a problem of its own: the buffers inside free, those crossing its ends fixed.
    std::vector<uint32_t> inside, crossing;
    uint64_t before = 0;
    c.index->for_each_in(a, b, [&](uint32_t j) {
      if (p.lo[j] >= a && p.hi[j] <= b) {
        inside.push_back(j);
        before = std::max(before, c.off[j] + p.size[j]);
      } else {
        crossing.push_back(j);
      }
    });
    const Problem region = make_window_problem(p, inside, crossing, c.off, a, b, 0);
    WindowOptions w;
    w.cap = c.lower;
    w.window_buffers = kRegionWindows[c.rng() % std::size(kRegionWindows)];
    w.deadline = std::min(end, after(Clock::now(), slice_s / 2));
    w.search_s = slice_s / 4;
    w.give_up = before;  // a region plan as high as the one it replaces is thrown away: stop there
    WindowStats ws;
    std::vector<uint64_t> o;
    uint64_t region_top = plan_by_windows(region, w, &o, &ws);
    const char* how = "windows";
    // When the windows did not lower the region, greedy restarts around the same fixed buffers
    // get a share of what is left (docs/planner.md, "Region re-plans").
    RestartStats rs;
    if (region_top >= before) {
      std::vector<uint64_t> ro;
      const uint64_t r = plan_restarts(region, c.arena - std::min(c.arena - c.lower, c.gran),
                                       std::min(end, after(Clock::now(), slice_s * kRestartShare)), seed + t->region_plans, 0, &ro, &rs);
      if (r < region_top) {
        region_top = r;
        o = std::move(ro);
        how = "restarts";
      }
    }
    ++t->region_plans;
    t->window_nodes += ws.search_nodes;
    if (region_top >= before) continue;
    std::vector<uint64_t> next = c.off;
    for (size_t k = 0; k < inside.size(); ++k) next[region.orig[k]] = o[k];
    uint64_t arena = 0;
    for (size_t i = 0; i < n; ++i) arena = std::max(arena, next[i] + p.size[i]);
    c.keep(arena, next, how);
    if (c.lns) t->lns_moves += c.lns->stats().moves, t->lns_nodes += c.lns->stats().search_nodes;
    c.lns.reset();
  }
}

// One round of window plans or neighbourhood search, for about slice_s seconds. Window rounds
// cycle through window sizes, contiguous growth and two targets (the lower bound, and halfway
// to the best plan); the search continues from the best plan, anew after a window plan won.
void improve_round(Component& c, Clock::time_point deadline, double slice_s, uint64_t seed, Totals* t) {
  const Clock::time_point start = Clock::now(), end = std::min(deadline, after(start, slice_s));
  const size_t n = c.problem.n();
  // Components the exact search does not take start with core plans, and have them again every
  // fourth round. Small ones: window plans and neighbourhood search in turn otherwise. Large ones,
  // in rounds of eight: core plans (rounds 0 and 4), a window plan (1), neighbourhood search (2
  // and 6), region re-plans (3, 5 and 7).
  const bool large = n > 2 * kRegionBuffers;
  const bool core = !c.searchable && c.rounds % 4 == 0;
  const bool windows = !core && (large ? c.rounds % 8 == 1 : c.rounds % 2 == 0);
  if (core) {
    core_round(c, end, seed, t);
  } else if (large && !windows && c.rounds % 4 != 2) {
    region_round(c, end, slice_s, seed, t);
  } else if (windows) {
    const uint64_t k = large ? c.rounds / 8 : c.rounds / 2;
    WindowOptions w;
    w.cap = k % 4 == 3 ? c.lower + (c.arena - c.lower) / 2 : c.lower;
    w.window_buffers = std::min(kWindowSizes[k % std::size(kWindowSizes)], std::max<size_t>(n / 2, 16));
    w.contiguous = k % 2 == 1;
    w.deadline = end;
    w.search_s = slice_s / 2;  // for the searches of all windows together
    w.seed = seed + k;
    w.give_up = c.arena;  // a plan at the best arena or above is thrown away: stop there
    WindowStats ws;
    std::vector<uint64_t> o;
    const uint64_t a = plan_by_windows(c.problem, w, &o, &ws);
    ++t->window_plans;
    t->window_nodes += ws.search_nodes;
    if (a < c.arena) {
      c.keep(a, o, "windows");
      if (c.lns) t->lns_moves += c.lns->stats().moves, t->lns_nodes += c.lns->stats().search_nodes;
      c.lns.reset();
    }
  } else {
    if (!c.lns) c.lns = std::make_unique<Lns>(c.problem, c.lower, seed + c.rounds, c.off);
    c.lns->run(end);
    if (c.lns->arena() < c.arena) c.keep(c.lns->arena(), c.lns->best(), "lns");
  }
  ++c.rounds;
  c.other_spent += seconds_between(start, Clock::now());
}

}  // namespace
}  // namespace detail

double ArenaSolution::gap_pct() const {
  return load_bytes == 0 ? 0.0 : 100.0 * static_cast<double>(arena_bytes - load_bytes) / static_cast<double>(load_bytes);
}

ArenaPlan to_arena_plan(const ArenaSolution& s) {
  ArenaPlan p;
  p.offsets = s.offsets;
  p.arena_size = s.arena_bytes;
  p.load = s.load_bytes;
  p.fragmentation_bytes = s.arena_bytes - s.load_bytes;
  p.gap_pct = s.gap_pct();
  return p;
}

Result<ArenaSolution> solve_arena(const std::vector<Buffer>& buffers, const ArenaSolveOptions& opt) {
  using namespace detail;
  const Clock::time_point t0 = Clock::now();
  const double limit_s = std::max(0.0, opt.time_limit_s);
  const Clock::time_point deadline = after(t0, std::min(limit_s, 1e7));
  const uint64_t al = std::max<uint64_t>(opt.alignment, 1);

  ArenaSolution sol;
  sol.offsets.assign(buffers.size(), 0);
  std::vector<uint32_t> live;
  unsigned __int128 total = 0, sizes = 0;
  size_t widest = 0;  // the buffer of the largest offset alignment
  for (size_t i = 0; i < buffers.size(); ++i) {
    const Buffer& b = buffers[i];
    if (b.size == 0 || b.lower >= b.upper) continue;
    if (offset_alignment(b, al) == 0) {
      return Status::bad_input("buffer " + std::to_string(i) + ": the offset alignment lcm(" + std::to_string(al) + ", " +
                               std::to_string(b.alignment) + ") overflows 64 bits");
    }
    // A buffer needs at most its aligned size plus offset_alignment - 1 of padding below it (in 128
    // bits: no wrap).
    total += static_cast<unsigned __int128>(align_up(b.size, al)) + offset_alignment(b, al) - 1;
    sizes += b.size;
    if (live.empty() || offset_alignment(b, al) > offset_alignment(buffers[widest], al)) widest = i;
    live.push_back(static_cast<uint32_t>(i));
  }
  // Offsets stay below 2^63 (placements add sizes and alignment padding in 64 bits).
  // Offsets and ends stay at most 2^63-1, the byte limit of every figure (src/core/checked.h).
  if (sizes >= (static_cast<unsigned __int128>(1) << 63) ||
      (total >= (static_cast<unsigned __int128>(1) << 63) && (live.empty() || offset_alignment(buffers[widest], al) <= 1)))
    return Status::bad_input("the buffer sizes sum to more than 2^63-1 bytes");
  if (total >= (static_cast<unsigned __int128>(1) << 63))
    return Status::bad_input("buffer " + std::to_string(widest) + ": its offset alignment " + std::to_string(offset_alignment(buffers[widest], al)) +
                             " is too large: the sizes with their alignment padding sum to more than 2^63-1 bytes");
  sol.buffers = live.size();

  // Components: buffers sorted by lower, cut where no earlier buffer is still live. The overlap
  // graph (for the exact search) only for components it may run on.
  std::stable_sort(live.begin(), live.end(), [&](uint32_t a, uint32_t b) { return buffers[a].lower < buffers[b].lower; });
  std::vector<Component> comps;
  for (size_t k = 0; k < live.size();) {
    uint64_t reach = buffers[live[k]].upper;
    size_t e = k + 1;
    while (e < live.size() && buffers[live[e]].lower < reach) reach = std::max(reach, buffers[live[e++]].upper);
    Component c;
    c.problem = make_problem(buffers, std::vector<uint32_t>(live.begin() + static_cast<std::ptrdiff_t>(k),
                                                            live.begin() + static_cast<std::ptrdiff_t>(e)),
                             al, e - k <= opt.max_search_buffers ? kMaxAdjacency : 0);
    c.gran = granule(c.problem);
    c.lower = c.problem.load;
    c.searchable = c.problem.has_adjacency && c.problem.n() <= opt.max_search_buffers;
    comps.push_back(std::move(c));
    k = e;
  }
  sol.components = comps.size();

  auto top_comp = [&]() {
    size_t b = 0;
    for (size_t i = 1; i < comps.size(); ++i)
      if (comps[i].arena > comps[b].arena) b = i;
    return b;
  };
  auto global_lower = [&]() {
    uint64_t lb = 0;
    for (const Component& c : comps) lb = std::max(lb, c.lower);
    return lb;
  };
  auto note = [&](const std::string& how) {  // a new best arena, if it is one
    if (comps.empty()) return;
    const uint64_t a = comps[top_comp()].arena;
    if (sol.improvements.empty() || a < sol.improvements.back().arena_bytes)
      sol.improvements.push_back({seconds_between(t0, Clock::now()), a, how});
  };

  auto fits = [&]() {  // stop_at_capacity: the plan fits, nothing more to do
    return opt.stop_at_capacity && opt.capacity != 0 && !comps.empty() && comps[top_comp()].arena <= opt.capacity;
  };

  // Greedy: largest first, best fit, always (the first answer, whatever the time limit); then the
  // other largest-first orders (greedy by size is the best of those that ran) and the other orders,
  // while they have used less than kGreedyShare of the time (all of them with no time limit). An order is started only when
  // the time left holds one more as long as the first took: on a 40,000-buffer clique (800 M
  // overlapping pairs) one order takes seconds, and the limit covers the whole call.
  for (size_t r = 0; r < std::size(kRules); ++r) {
    const double spent = seconds_between(t0, Clock::now());
    if (r >= 1 && limit_s > 0 && (spent + sol.first_answer_seconds > limit_s || spent > kGreedyShare * limit_s)) break;
    if (r >= kSizeRules && fits()) break;
    for (Component& c : comps) {
      if (r >= 1 && c.arena == c.lower) continue;  // at its lower bound: optimal
      TimeIndex idx(c.problem, false);
      std::vector<uint64_t> o(c.problem.n(), 0);
      std::vector<char> placed(c.problem.n(), 0);
      const uint64_t a = place_greedy(c.problem, &idx, placement_order(c.problem, kRules[r].key), kRules[r].fit, &o, &placed);
      if (r < kSizeRules) c.by_size = std::min(c.by_size, a);
      if (r == 0 || a < c.arena) c.keep(a, o, rule_name(kRules[r]));
    }
    if (r == 0) sol.first_answer_seconds = seconds_between(t0, Clock::now());
    note(rule_name(kRules[r]));  // the order that lowered the arena (the top component may be another's now)
  }

  // Improvement, on the component that sets the arena until it is optimal or time is up.
  Totals totals;
  if (limit_s > 0) {
    std::vector<uint64_t> trial(buffers.size(), 0);
    for (Component& c : comps) {
      c.low_s = std::max(0.01, limit_s / 32);
      c.step_s = std::max(0.005, limit_s / 512);
    }
    while (!comps.empty() && Clock::now() < deadline) {
      const size_t ci = top_comp();
      Component& c = comps[ci];
      if (c.arena <= global_lower() || fits()) break;  // optimal, or good enough
      // Where the exact search runs, it has the first quarter of the time limit to itself, then
      // three quarters of the time.
      const double search_spent = c.low_spent + c.step_spent;
      if (c.searchable && (search_spent < limit_s / 4 || c.other_spent * 3 >= search_spent)) {
        search_probe(c, deadline, opt.seed + ci, opt, &trial);
      } else {
        improve_round(c, deadline, std::max(0.01, limit_s / (c.searchable ? 64 : 16)), opt.seed + ci, &totals);
      }
      note(c.algorithm);
    }
  }

  for (const Component& c : comps) {
    for (size_t k = 0; k < c.problem.n(); ++k) sol.offsets[c.problem.orig[k]] = c.off[k];
    if (c.portfolio) {
      sol.search_nodes += c.portfolio->nodes;
      sol.searches += c.portfolio->searches;
    }
    if (c.lns) {
      totals.lns_moves += c.lns->stats().moves;
      totals.lns_nodes += c.lns->stats().search_nodes;
    }
    sol.load_bytes = std::max(sol.load_bytes, c.problem.load);
    sol.greedy_by_size_bytes = std::max(sol.greedy_by_size_bytes, c.by_size);
  }
  sol.search_nodes += totals.window_nodes + totals.lns_nodes;
  sol.window_plans = totals.window_plans + totals.region_plans;
  sol.core_plans = totals.core_plans;
  sol.lns_moves = totals.lns_moves;
  if (!comps.empty()) {
    const Component& top = comps[top_comp()];
    sol.arena_bytes = top.arena;
    sol.algorithm = top.algorithm;
  } else {
    sol.algorithm = "none";
  }
  sol.lower_bound_bytes = std::max(global_lower(), sol.load_bytes);
  sol.proven_optimal = sol.arena_bytes <= sol.lower_bound_bytes;
  sol.fits_capacity = opt.capacity == 0 || sol.arena_bytes <= opt.capacity;
  sol.seconds = seconds_between(t0, Clock::now());
  return sol;
}

}  // namespace moeprof::planner
