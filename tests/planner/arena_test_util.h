// Helpers of the arena planner's tests: buffers, index lists, plans from a problem's offsets.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "planner/arena.h"
#include "planner/arena_engine.h"

namespace moeprof::planner::testing {

inline Buffer buf(uint64_t size, uint64_t lower, uint64_t upper, uint64_t alignment = 1) {
  Buffer b;
  b.size = size;
  b.lower = lower;
  b.upper = upper;
  b.alignment = alignment;
  return b;
}

// 0, 1, ..., n-1: every buffer of an instance.
inline std::vector<uint32_t> all_of(size_t n) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), 0u);
  return v;
}

// The engine's offsets (per problem index) as a plan of the input buffers, for validate_plan().
inline ArenaPlan plan_of(const std::vector<Buffer>& bs, const detail::Problem& p, const std::vector<uint64_t>& off) {
  ArenaPlan plan;
  plan.offsets.assign(bs.size(), 0);
  for (size_t k = 0; k < p.n(); ++k) {
    plan.offsets[p.orig[k]] = off[k];
    plan.arena_size = std::max(plan.arena_size, off[k] + p.size[k]);
  }
  return plan;
}

}  // namespace moeprof::planner::testing
