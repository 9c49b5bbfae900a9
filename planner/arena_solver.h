// The arena solver: offsets for buffers with known sizes and lifetimes in one arena, as small as
// the time limit allows, with a lower bound and a proof of optimality when it has one.
//
//   1. The buffers are split into components that do not overlap in time (each is planned on its
//      own; the arena is the largest component arena).
//   2. First answer: greedy best-fit in several orders (arena_engine.h), milliseconds.
//   3. Improvement and proof, within the time limit: the exact canonical search (arena_search.cpp)
//      decides "does a plan fit in C?" for the component that sets the arena, first at its
//      lower bound, then below the best plan found; a portfolio of buffer orders with restarts
//      and growing node limits. A search that exhausts its tree proves that C does not fit, which
//      raises the lower bound above LOAD.
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
  size_t max_search_buffers = 4000;  // components larger than this get the greedy only
};

struct ArenaSolution {
  std::vector<uint64_t> offsets;  // per input buffer; 0 for buffers that occupy nothing
  uint64_t arena_bytes = 0;
  uint64_t load_bytes = 0;         // LOAD (aligned sizes)
  uint64_t lower_bound_bytes = 0;  // >= LOAD: raised by searches that proved a size infeasible
  std::string algorithm;           // "greedy:<order>" or "search"
  bool proven_optimal = false;     // arena_bytes == lower_bound_bytes
  bool fits_capacity = true;       // arena_bytes <= capacity (when one was given)
  double seconds = 0;              // the whole call
  double first_answer_seconds = 0;  // until the first complete plan (greedy)
  size_t buffers = 0;              // buffers that occupy memory (size > 0, lower < upper)
  size_t components = 0;
  uint64_t search_nodes = 0;
  uint64_t searches = 0;           // decision searches run (restarts included)

  double gap_pct() const;          // 100 * (arena - LOAD) / LOAD
};

// Errors (bad_input): an offset alignment that overflows, sizes whose sum does not fit in 63 bits.
Result<ArenaSolution> solve_arena(const std::vector<Buffer>& buffers, const ArenaSolveOptions& opt = {});

// The solution as an ArenaPlan (for validate_plan and the older API's callers).
ArenaPlan to_arena_plan(const ArenaSolution& s);

}  // namespace moeprof::planner
