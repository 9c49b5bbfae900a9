// The arena solver (arena_solver.h): components, greedy first answer, then a portfolio of exact
// decision searches that lowers the arena and raises the lower bound within the time limit.
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

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

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
  uint64_t arena = 0;  // best plan found
  uint64_t lower = 0;  // proven lower bound
  uint64_t gran = 1;
  std::string algorithm;
  bool searchable = false;
};

uint64_t component_arena(const Problem& p, const std::vector<uint64_t>& off) {
  uint64_t top = 0;
  for (size_t k = 0; k < p.n(); ++k) top = std::max(top, off[p.orig[k]] + p.size[k]);
  return top;
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
  const Clock::time_point deadline =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::min(limit_s, 1e7)));
  const uint64_t al = std::max<uint64_t>(opt.alignment, 1);

  ArenaSolution sol;
  sol.offsets.assign(buffers.size(), 0);
  std::vector<uint32_t> live;
  unsigned __int128 total = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const Buffer& b = buffers[i];
    if (b.size == 0 || b.lower >= b.upper) continue;
    if (offset_alignment(b, al) == 0) {
      return Status::bad_input("buffer " + std::to_string(i) + ": the offset alignment lcm(" + std::to_string(al) + ", " +
                               std::to_string(b.alignment) + ") overflows 64 bits");
    }
    total += static_cast<unsigned __int128>(align_up(b.size, al)) + offset_alignment(b, al);  // in 128 bits: no wrap
    live.push_back(static_cast<uint32_t>(i));
  }
  if (total >= (static_cast<unsigned __int128>(1) << 63)) return Status::bad_input("the buffer sizes sum to more than 2^63 bytes");
  sol.buffers = live.size();

  // Components: buffers sorted by lower, cut where no earlier buffer is still live.
  std::stable_sort(live.begin(), live.end(), [&](uint32_t a, uint32_t b) { return buffers[a].lower < buffers[b].lower; });
  std::vector<Component> comps;
  for (size_t k = 0; k < live.size();) {
    uint64_t reach = buffers[live[k]].upper;
    size_t e = k + 1;
    while (e < live.size() && buffers[live[e]].lower < reach) reach = std::max(reach, buffers[live[e++]].upper);
    Component c;
    c.problem = make_problem(buffers, std::vector<uint32_t>(live.begin() + static_cast<std::ptrdiff_t>(k),
                                                            live.begin() + static_cast<std::ptrdiff_t>(e)),
                             al, kMaxAdjacency);
    c.gran = granule(c.problem);
    c.lower = c.problem.load;
    c.searchable = c.problem.has_adjacency && c.problem.n() <= opt.max_search_buffers;
    comps.push_back(std::move(c));
    k = e;
  }
  sol.components = comps.size();

  // Greedy: the first order gives the first answer; the others may improve it.
  std::vector<uint64_t> off;
  for (int o = 0; o < kNumArenaOrders; ++o) {
    const ArenaOrder order = static_cast<ArenaOrder>(o);
    for (Component& c : comps) {
      if (o > 0 && c.arena == c.lower) continue;
      if (o > 0 && !c.problem.has_adjacency) continue;  // the sweep below was the only order
      uint64_t arena = 0;
      off = c.problem.has_adjacency ? greedy_best_fit(c.problem, order, &arena) : sweep_best_fit(c.problem, &arena);
      if (o == 0 || arena < c.arena) {
        c.arena = arena;
        c.algorithm = c.problem.has_adjacency ? "greedy:" + std::string(arena_order_name(order)) : "greedy:lower_asc_sweep";
        for (size_t k = 0; k < c.problem.n(); ++k) sol.offsets[c.problem.orig[k]] = off[k];
      }
    }
    if (o == 0) sol.first_answer_seconds = seconds_between(t0, Clock::now());
  }

  auto best_comp = [&]() {
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

  // Improvement: the component that sets the arena is searched below its best plan.
  if (limit_s > 0 && !comps.empty()) {
    std::vector<std::unique_ptr<Portfolio>> portfolios(comps.size());
    // Per component: the budgets of the two kinds of probe, the descent step, the time spent.
    struct Schedule {
      double low_s = 0, step_s = 0, low_spent = 0, step_spent = 0;
      uint64_t step = 0;
      bool tried_low = false;
    };
    std::vector<Schedule> sched(comps.size());
    for (Schedule& sc : sched) {
      sc.low_s = std::max(0.01, limit_s / 32);
      sc.step_s = std::max(0.005, limit_s / 512);
    }
    std::vector<uint64_t> trial(buffers.size(), 0);
    while (Clock::now() < deadline) {
      const size_t ci = best_comp();
      Component& c = comps[ci];
      if (c.arena <= global_lower() || !c.searchable) break;  // optimal, or nothing more to try
      if (!portfolios[ci]) portfolios[ci] = std::make_unique<Portfolio>(c.problem, opt.seed + ci);
      Schedule& sc = sched[ci];
      if (sc.step == 0) sc.step = c.gran;
      // Two kinds of probe. "Low": at the lower bound, where a plan is optimal; first, then
      // whenever the low probes have had less than half the time of the step probes, with a
      // budget that doubles each time. "Step": below the best plan by `step`, which doubles
      // after a success and shrinks after a miss; at one granule, a miss doubles its budget.
      const bool low = !sc.tried_low || sc.low_spent < sc.step_spent / 2;
      sc.tried_low = true;
      uint64_t cap = low ? c.lower : std::max(c.lower, c.arena - std::min(sc.step, c.arena - c.lower));
      if (opt.capacity != 0 && c.arena > opt.capacity && c.lower <= opt.capacity) cap = std::min(cap, opt.capacity);
      const double probe_s = low ? sc.low_s : sc.step_s;
      const Clock::time_point start = Clock::now();
      const Clock::time_point probe_deadline =
          std::min(deadline, start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(probe_s)));
      const SearchOutcome out = portfolios[ci]->decide(cap, probe_deadline, &trial);
      (low ? sc.low_spent : sc.step_spent) += seconds_between(start, Clock::now());
      if (out == SearchOutcome::kFound) {
        const uint64_t a = component_arena(c.problem, trial);
        if (a < c.arena) {
          c.arena = a;
          c.algorithm = "search";
          for (uint32_t i : c.problem.orig) sol.offsets[i] = trial[i];
        }
        if (!low) sc.step *= 2;
      } else if (out == SearchOutcome::kInfeasible) {
        c.lower = std::max(c.lower, round_up(cap + 1, c.gran));
        sc.step = std::max(c.gran, sc.step / 2 / c.gran * c.gran);
      } else if (low) {
        sc.low_s *= 2;
      } else if (sc.step > c.gran) {
        sc.step = std::max(c.gran, sc.step / 4 / c.gran * c.gran);
      } else {
        sc.step_s *= 2;
      }
    }
    for (const auto& p : portfolios) {
      if (!p) continue;
      sol.search_nodes += p->nodes;
      sol.searches += p->searches;
    }
  }

  sol.load_bytes = 0;
  for (const Component& c : comps) sol.load_bytes = std::max(sol.load_bytes, c.problem.load);
  if (!comps.empty()) {
    const Component& top = comps[best_comp()];
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
