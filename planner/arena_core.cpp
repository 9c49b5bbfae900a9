// Core plans (arena_engine.h, plan_by_core): the buffers live at the most loaded sections are
// planned first as an instance of their own, then the rest around them; the rest's buffers that
// end above the target join the core.
#include <algorithm>

#include "planner/arena_engine.h"

namespace moeprof::planner::detail {

uint64_t plan_by_core(const Problem& p, const CoreOptions& opt, CoreSolver solve_core, std::vector<uint64_t>* off,
                      CoreStats* stats) {
  const size_t n = p.n();
  const uint32_t S = p.sections;
  // The hot sections (load >= LOAD - eps x LOAD) and the buffers live in one of them.
  std::vector<uint64_t> delta(S + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    delta[p.lo[i]] += p.size[i];
    delta[p.hi[i]] -= p.size[i];  // unsigned: wraps back when added
  }
  const double eps = std::clamp(opt.eps, 0.0, 1.0);
  const uint64_t hot = p.load - static_cast<uint64_t>(eps * static_cast<double>(p.load));
  std::vector<uint32_t> hot_before(S + 1, 0);  // hot sections before each section
  uint64_t cur = 0;
  for (uint32_t s = 0; s < S; ++s) {
    cur += delta[s];
    hot_before[s + 1] = hot_before[s] + (cur >= hot ? 1 : 0);
  }
  std::vector<char> in_core(n, 0);
  for (size_t i = 0; i < n; ++i) in_core[i] = hot_before[p.hi[i]] > hot_before[p.lo[i]] ? 1 : 0;

  uint64_t best = UINT64_MAX;
  std::vector<uint32_t> core, rest;
  std::vector<uint64_t> o(n, 0), co, ro;
  for (int step = 0; step < opt.max_steps && Clock::now() < opt.deadline; ++step) {
    core.clear();
    rest.clear();
    for (uint32_t i = 0; i < n; ++i) (in_core[i] ? core : rest).push_back(i);
    if (core.size() > opt.max_core || rest.empty()) break;
    stats->core_buffers = core.size();
    ++stats->steps;
    const Problem cp = make_window_problem(p, core, {}, o, 0, S, 0);  // the core solver builds what it needs
    const uint64_t core_top = solve_core(cp, opt.cap, opt.deadline, opt.seed + static_cast<uint64_t>(step), &co, &stats->search_nodes);
    if (core_top > opt.cap || Clock::now() >= opt.deadline) break;  // the rest cannot help
    for (size_t k = 0; k < cp.n(); ++k) o[cp.orig[k]] = co[k];
    const Problem rp = make_window_problem(p, rest, core, o, 0, S, 0);
    RestartStats rs;
    const uint64_t rest_top = plan_restarts(rp, opt.cap, opt.deadline, opt.seed * 31 + static_cast<uint64_t>(step), opt.passes, &ro, &rs);
    stats->restart_passes += rs.passes;
    for (size_t k = 0; k < rest.size(); ++k) o[rp.orig[k]] = ro[k];
    const uint64_t arena = std::max(core_top, rest_top);
    if (arena < best) {
      best = arena;
      *off = o;
    }
    if (arena <= opt.cap) break;
    // The buffers that went above the target join the core.
    for (size_t k = 0; k < rest.size(); ++k)
      if (ro[k] + rp.size[k] > opt.cap) in_core[rp.orig[k]] = 1;
  }
  return best;
}

}  // namespace moeprof::planner::detail
