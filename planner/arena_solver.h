// The arena solver: offsets for buffers with known sizes and lifetimes in one arena, as small as
// the time limit allows, with a lower bound and a proof of optimality when it has one.
//
//   1. The buffers are split into components that do not overlap in time (each is planned on its
//      own; the arena is the largest component arena).
//   2. First answer: greedy placements in a portfolio of orders (largest first, best fit and first
//      fit, always; then the heaviest clique, overlapping bytes, area, duration, start), each in
//      O(overlapping pairs) time without the pair list (arena_engine.h). The best is kept, so the
//      answer is never worse than greedy by size.
//   3. Improvement and proof, within the time limit, on the component that sets the arena:
//      - the exact canonical search (arena_search.cpp) decides "does a plan fit in C?" on
//        components of at most max_search_buffers, first at the lower bound, then below the best
//        plan; a search that exhausts its tree raises the lower bound above LOAD;
//      - plans by windows (arena_decomp.cpp): from the most loaded sections outward, every window
//        of buffers planned around the ones already placed, by greedy orders or the exact search;
//      - core plans (arena_core.cpp): the buffers live where the load is close to LOAD planned
//        first as an instance of their own, the rest around them;
//      - large neighbourhood search (arena_lns.cpp): the buffers above a target, with the
//        buffers around them, taken out and put back.
//      Window plans and neighbourhood search alternate under a restart schedule (window sizes,
//      targets); on components the exact search handles they get a quarter of the time.
// docs/planner.md describes the algorithm; the plans are checked by validate_plan().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "planner/arena.h"

namespace moeprof::planner {

struct ArenaSolveOptions {
  uint64_t alignment = 1;     // global: sizes and offsets rounded up to it (as ArenaOptions)
  uint64_t capacity = 0;      // 0: none; otherwise the plan must fit in it (fits_capacity says)
  double time_limit_s = 1.0;  // for the whole call; 0: greedy only
  uint64_t seed = 1;          // the random buffer orders of the portfolio
  size_t max_search_buffers = 4000;  // the exact search runs on components of at most this many
  bool stop_at_capacity = false;     // with a capacity: stop as soon as a plan fits it
};

// A new best plan found during the solve.
struct ArenaImprovement {
  double seconds = 0;        // since the call began
  uint64_t arena_bytes = 0;  // the arena (the largest component's) from then on
  std::string algorithm;     // what found it: "greedy:<order>", "search", "windows", "restarts", "core" or "lns"
};

struct ArenaSolution {
  std::vector<uint64_t> offsets;  // per input buffer; 0 for buffers that occupy nothing
  uint64_t arena_bytes = 0;
  uint64_t load_bytes = 0;         // LOAD (aligned sizes)
  uint64_t lower_bound_bytes = 0;  // >= LOAD: raised by searches that proved a size infeasible
  std::string algorithm;           // how the plan that sets the arena was found (ArenaImprovement)
  bool proven_optimal = false;     // arena_bytes == lower_bound_bytes
  bool fits_capacity = true;       // arena_bytes <= capacity (when one was given)
  double seconds = 0;              // the whole call
  double first_answer_seconds = 0;  // until the first complete plan (greedy)
  size_t buffers = 0;              // buffers that occupy memory (size > 0, lower < upper)
  size_t components = 0;
  uint64_t search_nodes = 0;       // exact search nodes (probes, windows, neighbourhoods, cores)
  uint64_t searches = 0;           // decision searches run (restarts included)
  uint64_t window_plans = 0;       // complete plans built window by window
  uint64_t core_plans = 0;         // core plans tried (the hottest sections' buffers first)
  uint64_t lns_moves = 0;          // large neighbourhood search moves
  // Greedy by size (largest first, best fit or first fit, the better; per component): the
  // classic planner's arena, which arena_bytes never exceeds.
  uint64_t greedy_by_size_bytes = 0;
  std::vector<ArenaImprovement> improvements;  // the first answer, then each better plan

  double gap_pct() const;          // 100 * (arena - LOAD) / LOAD
};

// Errors (bad_input): an offset alignment that overflows, sizes whose sum does not fit in 63 bits.
Result<ArenaSolution> solve_arena(const std::vector<Buffer>& buffers, const ArenaSolveOptions& opt = {});

// The solution as an ArenaPlan (for validate_plan and the older API's callers).
ArenaPlan to_arena_plan(const ArenaSolution& s);

}  // namespace moeprof::planner
