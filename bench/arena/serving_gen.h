// Generated serving instances (bench_arena): forward steps of the executor's Kimi-K2.5 layer.
// Every step is freed when it ends (easy for any planner: greedy best-fit reaches LOAD); the
// pipelined variant keeps two steps in flight, so a whole run is one component.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/arena.h"

namespace moeprof::bench {

// Forward steps back to back, each with its own token count T (1k..16k, or fixed_tokens), one
// stream or two-batch overlap (two microbatches whose events alternate). Time = event index.
std::vector<planner::Buffer> generate_forward(size_t target, uint64_t seed, bool overlap, uint64_t fixed_tokens = 0);

// Two steps of different sizes always in flight, one op each in turn.
std::vector<planner::Buffer> generate_pipelined(size_t target, uint64_t seed);

}  // namespace moeprof::bench
