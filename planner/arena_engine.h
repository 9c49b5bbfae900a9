// Internals of the arena solver (arena_solver.h): one independent component of an instance in
// compressed time, the greedy placements and the exact search over it. Not a public API: the
// solver, its tests and its benchmark use it.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "core/checked.h"
#include "planner/arena.h"

namespace moeprof::planner::detail {

using Clock = std::chrono::steady_clock;

// Saturates instead of wrapping: a size that cannot be rounded up reads as UINT64_MAX, which every
// sum check then refuses (solve_arena: sizes must sum to less than 2^63).
inline uint64_t align_up(uint64_t v, uint64_t a) { return checked_align_up(v, a).value_or(UINT64_MAX); }

// Buffers of one component. Sizes are already rounded to the global alignment; `align` is the
// offset alignment of each buffer. Time is compressed to sections: the elementary intervals
// between consecutive distinct lower/upper values; buffer i covers sections [lo[i], hi[i]).
struct Problem {
  std::vector<uint64_t> size, align;
  std::vector<uint64_t> tlo, thi;  // original times (orders and tie breaks)
  std::vector<uint32_t> lo, hi;
  std::vector<uint32_t> orig;      // index in the caller's buffer vector
  uint32_t sections = 0;
  uint64_t load = 0;               // max over sections of the summed sizes
  // Time-overlap graph (CSR): neighbours of i are adj[adj_off[i] .. adj_off[i+1]). Built only
  // when it has at most a budget of entries (has_adjacency); the greedy orders other than the
  // sweep and the search need it.
  std::vector<uint64_t> adj_off;
  std::vector<uint32_t> adj;
  bool has_adjacency = false;

  size_t n() const { return size.size(); }
};

// Builds a Problem from buffers (all with size > 0 and lower < upper) given as indices into
// `all`. Sizes are rounded to `alignment`; offsets must be multiples of offset_alignment().
// `order` permutes the buffers inside the problem (the search's static priority); empty keeps
// the given order. Adjacency is built when the overlapping pairs number at most max_adjacency.
Problem make_problem(const std::vector<Buffer>& all, const std::vector<uint32_t>& members, uint64_t alignment,
                     size_t max_adjacency);

// Returns a copy of `p` with its buffers permuted: new buffer k is old buffer perm[k].
Problem permute_problem(const Problem& p, const std::vector<uint32_t>& perm);

// Overlapping pairs of a problem (counted by a sweep, without building the graph).
uint64_t count_overlaps(const Problem& p);

// Greedy best-fit in one order (see ArenaOrder): each buffer goes into the smallest gap among the
// already placed, time-overlapping buffers that fits it (ties: lowest offset), else on top.
// Needs p.has_adjacency. Returns offsets (problem order) and sets *arena.
std::vector<uint64_t> greedy_best_fit(const Problem& p, ArenaOrder order, uint64_t* arena);

// The same rule in lower-ascending order as a sweep over time with a free-gap index: O(n log n),
// no adjacency needed (the fallback for instances whose overlap graph is too large).
std::vector<uint64_t> sweep_best_fit(const Problem& p, uint64_t* arena);

// Exact search for a plan with arena <= capacity (see docs/planner.md, "Exact search").
enum class SearchOutcome { kFound, kInfeasible, kAborted };

struct SearchLimits {
  Clock::time_point deadline = Clock::time_point::max();
  uint64_t max_nodes = 0;  // 0: no limit
};

struct SearchConfig {
  bool section_inference = true;  // the section-floor test (stronger pruning, costlier nodes)
  bool dominance = true;          // prune nodes where a waiting buffer fits below the next offset
  bool fit = true;                // skyline-fit candidate order (else the problem's index order)
  bool symmetry = true;           // touching buffers with the same lifetime only in index order
  // Which section a node branches on, among those that must be covered (else among all): the
  // one with the fewest candidates, or the leftmost unless one has a single candidate.
  enum class Pick : uint8_t { kFewest, kForcedThenLeftmost };
  Pick pick = Pick::kFewest;
};

struct SearchStats {
  uint64_t nodes = 0;
  size_t max_depth = 0;  // most buffers placed at once (how far the search got)
};

// Needs p.has_adjacency. On kFound, *offsets holds a plan (problem order) with every buffer
// inside [0, capacity).
SearchOutcome search_fit(const Problem& p, uint64_t capacity, const SearchLimits& limits, const SearchConfig& cfg,
                         std::vector<uint64_t>* offsets, SearchStats* stats);

}  // namespace moeprof::planner::detail
