// Greedy restarts on a problem with fixed buffers (arena_engine.h, plan_restarts): the free
// buffers are placed again and again around the fixed ones, each pass in a perturbed order.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "planner/arena_engine.h"

namespace moeprof::planner::detail {

uint64_t plan_restarts(const Problem& p, uint64_t cap, Clock::time_point deadline, uint64_t seed, uint64_t max_passes,
                       std::vector<uint64_t>* off, RestartStats* stats) {
  const size_t n = p.n();
  std::vector<uint32_t> free;
  for (uint32_t i = 0; i < n; ++i)
    if (!p.is_fixed(i)) free.push_back(i);
  off->assign(n, 0);
  for (size_t i = 0; i < n; ++i)
    if (p.is_fixed(i)) (*off)[i] = p.fixed[i];
  if (free.empty()) return 0;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  // Pass 0 is largest first, best fit (the classic order); later passes perturb the sizes by a
  // random factor up to 1 + blur and pick the fit at random. The blur cycles so that both small
  // perturbations (a few swaps of near-equal sizes) and large ones are tried.
  static constexpr double kBlur[] = {0.05, 0.15, 0.4, 1.0};
  std::vector<double> key(n, 0);
  std::vector<uint32_t> order = free;
  std::vector<uint64_t> o(n);
  std::vector<char> placed(n);
  uint64_t best = UINT64_MAX;
  for (uint64_t pass = 0; (max_passes == 0 || pass < max_passes) && (pass == 0 || Clock::now() < deadline); ++pass) {
    if (pass == 0) {
      order.clear();
      for (uint32_t i : placement_order(p, Key::kSize))
        if (!p.is_fixed(i)) order.push_back(i);
    } else {
      const double blur = kBlur[pass % std::size(kBlur)];
      for (uint32_t i : free) key[i] = static_cast<double>(p.size[i]) * (1.0 + blur * unit(rng));
      std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
        return key[a] != key[b] ? key[a] > key[b] : p.tlo[a] < p.tlo[b];
      });
    }
    const Fit fit = pass == 0 || rng() % 2 == 0 ? Fit::kBest : Fit::kFirst;
    TimeIndex idx(p, false);
    for (uint32_t i = 0; i < n; ++i) {
      placed[i] = p.is_fixed(i) ? 1 : 0;
      o[i] = p.is_fixed(i) ? p.fixed[i] : 0;
      if (placed[i]) idx.add(i);
    }
    const uint64_t top = place_greedy(p, &idx, order, fit, &o, &placed, cap);
    ++stats->passes;
    if (top < best) {
      best = top;
      *off = o;
      ++stats->improved;
    }
  }
  return best;
}

}  // namespace moeprof::planner::detail
