// Internals of the arena solver (arena_solver.h): one independent component of an instance in
// compressed time, the greedy placements and the exact search over it. Not a public API: the
// solver, its tests and its benchmark use it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string_view>
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
  // Buffers whose offset is given (the search places them there and around them): fixed[i] is
  // the offset, or kFree. Empty: none. A window of a larger plan (make_window_problem) has them.
  std::vector<uint64_t> fixed;

  static constexpr uint64_t kFree = UINT64_MAX;
  size_t n() const { return size.size(); }
  bool is_fixed(size_t i) const { return !fixed.empty() && fixed[i] != kFree; }
};

// Builds a Problem from buffers (all with size > 0 and lower < upper) given as indices into
// `all`. Sizes are rounded to `alignment`; offsets must be multiples of offset_alignment().
// `order` permutes the buffers inside the problem (the search's static priority); empty keeps
// the given order. Adjacency is built when the overlapping pairs number at most max_adjacency.
Problem make_problem(const std::vector<Buffer>& all, const std::vector<uint32_t>& members, uint64_t alignment,
                     size_t max_adjacency);

// A window of a plan of `p`: the buffers `inner` (free) and `outer` (fixed at off[j]), their
// lifetimes cut to the sections [a, b) of `p`. orig[k] of the result is the buffer's index in
// `p`. The overlap graph is built when it has at most max_adjacency pairs.
Problem make_window_problem(const Problem& p, const std::vector<uint32_t>& inner, const std::vector<uint32_t>& outer,
                            const std::vector<uint64_t>& off, uint32_t a, uint32_t b, size_t max_adjacency = SIZE_MAX);

// Returns a copy of `p` with its buffers permuted: new buffer k is old buffer perm[k].
Problem permute_problem(const Problem& p, const std::vector<uint32_t>& perm);

// Overlapping pairs of a problem (counted by a sweep, without building the graph).
uint64_t count_overlaps(const Problem& p);

// Which buffers overlap a time range, without the pair list. Two segment trees over the
// sections: the "cover" tree holds each buffer at the O(log S) nodes that cover its lifetime
// exactly (a stabbing query at the range's first section finds the buffers live there, each
// once); the "start" tree holds it at the ancestors of its first section's leaf (the canonical
// nodes of the rest of the range find those that start inside it, each once). Buffers are added
// one by one (a greedy placement adds each as it is placed) or all at once. O(n log S) memory; a
// query costs O(log S + its answers).
class TimeIndex {
 public:
  // `p` must outlive the index. all: every buffer is added now.
  TimeIndex(const Problem& p, bool all);

  void add(uint32_t i);  // once per buffer
  bool has(uint32_t i) const { return added_[i] != 0; }

  // f(j) for every added buffer j live in some section of [lo, hi), each once.
  template <typename F>
  void for_each_in(uint32_t lo, uint32_t hi, F&& f) const {
    if (lo >= hi || lo >= sections_) return;
    for (uint32_t node = leaves_ + lo; node >= 1; node >>= 1)
      for (uint32_t k = cover_off_[node], e = k + cover_fill_[node]; k < e; ++k) f(cover_items_[k]);
    for (uint32_t l = lo + 1 + leaves_, r = std::min(hi, sections_) + leaves_; l < r; l >>= 1, r >>= 1) {
      if (l & 1) {
        for (uint32_t k = start_off_[l], e = k + start_fill_[l]; k < e; ++k) f(start_items_[k]);
        ++l;
      }
      if (r & 1) {
        --r;
        for (uint32_t k = start_off_[r], e = k + start_fill_[r]; k < e; ++k) f(start_items_[k]);
      }
    }
  }
  // f(j) for every added buffer j != i that overlaps buffer i in time, each once.
  template <typename F>
  void for_each_overlap(uint32_t i, F&& f) const {
    for_each_in(lo_[i], hi_[i], [&](uint32_t j) {
      if (j != i) f(j);
    });
  }

 private:
  template <typename G>
  void cover(uint32_t l, uint32_t r, G&& g) const {  // the canonical nodes of [l, r)
    for (l += leaves_, r += leaves_; l < r; l >>= 1, r >>= 1) {
      if (l & 1) g(l++);
      if (r & 1) g(--r);
    }
  }

  const uint32_t* lo_ = nullptr;
  const uint32_t* hi_ = nullptr;
  uint32_t sections_ = 0, leaves_ = 1;
  // CSR over the nodes (1-based heap order) with room for every buffer; fill = added so far.
  std::vector<uint32_t> cover_off_, cover_fill_, cover_items_;
  std::vector<uint32_t> start_off_, start_fill_, start_items_;
  std::vector<char> added_;
};

// Greedy placement orders (the keys sort descending unless said otherwise; ties: size
// descending, then lower ascending). kPressure: the most bytes live at once during the buffer's
// lifetime (the heaviest clique it is part of); kConflict: the bytes of the buffers it overlaps.
// Two orders are largest first, greedy by size: kSize breaks ties by the longer lifetime, then
// the earlier start (the better first answer on traced programs, where long-lived buffers of a
// size go to the bottom), kSizeStart by the earlier start, then the longer (the textbook order:
// with one size alone, any fit in start order reaches LOAD).
enum class Key : uint8_t { kSize, kDuration, kArea, kLower, kPressure, kConflict, kSizeStart };
inline constexpr int kNumKeys = 7;
std::string_view key_name(Key k);
std::vector<uint32_t> placement_order(const Problem& p, Key key);

// Where a buffer goes among the gaps left by the placed buffers it overlaps: the smallest gap
// that fits (kBest, ties: lowest offset) or the lowest offset that fits (kFirst); with no gap,
// on top of them.
enum class Fit : uint8_t { kBest, kFirst };

// Places the buffers of `order` one by one. (*off)[j] of buffers outside `order` are fixed when
// (*placed)[j] is set (and j is in the index); buffers placed here get their flag set and are
// added to the index if they are not in it. Offsets above `cap` count as
// not fitting: a gap that fits below cap is preferred (kBest among those), else the lowest
// position. Returns the highest top among the buffers of `order`.
uint64_t place_greedy(const Problem& p, TimeIndex* idx, const std::vector<uint32_t>& order, Fit fit,
                      std::vector<uint64_t>* off, std::vector<char>* placed, uint64_t cap = UINT64_MAX);

// Greedy best-fit in one of the older orders (see ArenaOrder). Returns offsets (problem order)
// and sets *arena.
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

namespace moeprof::planner::detail {

// Large neighbourhood search on a plan (arena_lns.cpp; docs/planner.md, "Improvement at any
// size"). Target T below the best arena A: the buffers whose top exceeds T are violators. A move
// takes out a violator with a neighbourhood (the buffers above a band under T during its
// lifetime, or every buffer inside a time window around it whose ends are snapped to the
// boundaries that the fewest buffers cross), and puts them back greedily in a random rule with
// T as the cap. It is kept when no top exceeds A and the violators' excess over T did not grow.
// No violator left: a new best plan; T steps down. A target that resists its budget of moves
// halves the step and widens the neighbourhoods; the budgets follow the Luby sequence.
struct LnsStats {
  uint64_t moves = 0, accepted = 0, improvements = 0;
  uint64_t searches = 0, searches_found = 0, search_nodes = 0;  // window searches
};

class Lns {
 public:
  // `off` (problem order) is a valid plan of `p`; `lower` a lower bound of its arena.
  Lns(const Problem& p, uint64_t lower, uint64_t seed, std::vector<uint64_t> off);

  // Runs until the deadline, `max_moves` more moves (0: no limit), or the arena reaches the
  // lower bound. Returns true when it found a better plan during this call.
  bool run(Clock::time_point deadline, uint64_t max_moves = 0);

  uint64_t arena() const { return best_arena_; }
  const std::vector<uint64_t>& best() const { return best_; }
  const LnsStats& stats() const { return stats_; }

 private:
  void set_target(uint64_t t);
  bool move(uint32_t v, Clock::time_point deadline);
  bool search_window(Clock::time_point deadline);
  void collect_band(uint32_t v);
  bool collect_eject(uint32_t v);
  bool collect_window(uint32_t v);
  void set_over(uint32_t i, bool over);
  uint64_t excess(uint32_t i) const;

  const Problem& p_;
  TimeIndex idx_;
  uint64_t lower_, gran_;
  std::mt19937_64 rng_;
  std::vector<uint64_t> off_, best_, saved_;
  std::vector<char> placed_;
  uint64_t best_arena_ = 0, target_ = 0, step_ = 0;
  size_t hood_ = 32;                         // neighbourhood size (buffers)
  std::vector<uint32_t> over_, over_pos_;    // violators and their positions in over_
  std::vector<uint32_t> hood_members_, outer_;  // the neighbourhood; a window's fixed buffers
  uint32_t win_a_ = 0, win_b_ = 0;               // the window's sections
  struct Interval {
    uint64_t start, end;
    uint32_t id;
  };
  std::vector<Interval> strip_;                      // scratch of collect_eject()
  std::vector<std::pair<uint64_t, uint64_t>> ends_;  // (end, bytes), likewise
  uint64_t search_nodes_ = 1000;                 // node budget of a window search
  std::vector<uint32_t> starts_before_;      // buffers starting before each section
  std::vector<uint32_t> crossing_;           // buffers live across each section boundary
  uint64_t luby_index_ = 1, target_moves_ = 0;
  LnsStats stats_;
};

}  // namespace moeprof::planner::detail

namespace moeprof::planner::detail {

// Planning by windows (arena_decomp.cpp; docs/planner.md). The most loaded section not yet
// planned seeds a window of about `window_buffers` buffers, its ends snapped to boundaries that
// few buffers cross. Every unplaced buffer that overlaps the window is planned at once, around
// the buffers already placed (fixed), with `cap` as the target: greedy orders first, then the
// exact search on the window's problem; a window that cannot fit under cap keeps its best
// greedy plan. Windows follow until every buffer is placed, so the plan grows outward from the
// peaks, where the room is scarcest.
struct WindowStats {
  uint64_t windows = 0, searched = 0, search_found = 0, over_cap = 0, search_nodes = 0;
};

struct WindowOptions {
  uint64_t cap = 0;
  size_t window_buffers = 1500;
  Clock::time_point deadline = Clock::time_point::max();
  double search_s = 2;            // exact search time of all windows together
  uint64_t search_nodes = 0;      // and their nodes (0: no limit); each window may take half of what is left
  bool contiguous = false;        // after the first window, grow one block outward
  uint64_t seed = 1;
  // Not 0: stop at the first window whose top reaches it. The plan is then incomplete: the
  // caller throws away a plan that cannot beat the one it would replace.
  uint64_t give_up = 0;
};

// Writes a complete plan to *off (problem order) and returns the highest top among the buffers it
// planned; with give_up, as soon as that reaches give_up, a partial plan and a top >= give_up.
// Fixed buffers of `p` (a region of a larger plan) are placed from the start.
uint64_t plan_by_windows(const Problem& p, const WindowOptions& opt, std::vector<uint64_t>* off, WindowStats* stats);

// Plans the buffers `free` of `p` around the buffers `fixed` (at off[j]) under `cap`, as
// plan_by_windows() does for one window (the exact search for search_s seconds and, when not 0,
// search_nodes nodes after the greedy orders, never past the deadline); writes their offsets to
// *off. Returns the highest top among
// them (<= cap when it fit).
uint64_t plan_window(const Problem& p, const std::vector<uint32_t>& free, const std::vector<uint32_t>& fixed, uint64_t cap,
                     double search_s, uint64_t search_nodes, Clock::time_point deadline, std::vector<uint64_t>* off,
                     WindowStats* stats);

}  // namespace moeprof::planner::detail

namespace moeprof::planner::detail {

// Greedy restarts (arena_restart.cpp; docs/planner.md, "Region re-plans"). The free buffers of
// `p` are placed around its fixed ones (at p.fixed) again and again until the deadline or
// `max_passes` passes (0: no limit; the first pass always runs): first largest first with best
// fit, then in orders by size perturbed by a random factor of up to 1.05-2x, best or first fit
// at random, with `cap` as the target of place_greedy. Writes the best pass's plan to *off
// (problem order, the fixed buffers at their offsets) and returns its highest top among the
// free buffers.
struct RestartStats {
  uint64_t passes = 0, improved = 0;
};
uint64_t plan_restarts(const Problem& p, uint64_t cap, Clock::time_point deadline, uint64_t seed, uint64_t max_passes,
                       std::vector<uint64_t>* off, RestartStats* stats);

// Core plans (arena_core.cpp; docs/planner.md, "Core plans"). The core is every buffer live in a
// section whose load is at least LOAD minus `eps` x LOAD. It is planned first, as a problem of its
// own, by `solve_core` (the solver itself, on the smaller instance), under `cap`; the other buffers
// are then placed around it by greedy restarts (plan_restarts, `passes` passes) with `cap` as the
// target. Where they go above cap, the buffers above it join the core and both steps run again,
// until the plan fits, the core would exceed `max_core` buffers, `max_steps` steps, or the
// deadline. Writes the lowest plan of the steps to *off (problem order) and returns its arena
// (UINT64_MAX when no step completed a plan).
struct CoreOptions {
  uint64_t cap = 0;
  double eps = 0.05;
  size_t max_core = 6000;
  int max_steps = 16;
  uint64_t passes = 2;
  uint64_t seed = 1;
  Clock::time_point deadline = Clock::time_point::max();
};

struct CoreStats {
  uint64_t steps = 0, restart_passes = 0, search_nodes = 0;  // search nodes: the core solver's
  size_t core_buffers = 0;  // of the last step
};

// Plans `core` (no fixed buffers) under `cap` until the deadline; writes its offsets (core order),
// adds the exact-search nodes it spent to *nodes and returns its arena.
using CoreSolver = uint64_t (*)(const Problem& core, uint64_t cap, Clock::time_point deadline, uint64_t seed,
                                std::vector<uint64_t>* off, uint64_t* nodes);

uint64_t plan_by_core(const Problem& p, const CoreOptions& opt, CoreSolver solve_core, std::vector<uint64_t>* off,
                      CoreStats* stats);

}  // namespace moeprof::planner::detail
