// bench_whatif: what-if predictions and ranked fixes on a large trace (default about 1M
// allocations: 3.3M events of the executor-shaped synthetic trace, one device). Times the analysis
// with lifetimes and the event index, a what-if with two rules, and the ranked fixes (10 steps).
//   bench_whatif [--events N] [--devices D] [--fixes N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench/common/synthetic_trace.h"
#include "planner/analysis.h"
#include "planner/whatif.h"

using namespace moeprof;

namespace {
double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

int main(int argc, char** argv) {
  size_t events = 3300000, fixes = 10;
  int devices = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--events")) events = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--devices")) devices = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--fixes")) fixes = std::strtoull(argv[i + 1], nullptr, 10);
  }
  const Trace t = bench::make_trace(events, devices);
  auto t0 = std::chrono::steady_clock::now();
  planner::AnalyzeOptions ao;
  ao.keep_lifetimes = true;
  ao.keep_event_index = true;
  const planner::RunAnalysis run = planner::analyze(t, ao);
  const double analyze_s = since(t0);
  auto rules = planner::parse_rules("free-at-last-use name=post_norm\nhand-off name=moe_out\n", "bench");
  if (!rules) return 2;
  t0 = std::chrono::steady_clock::now();
  auto w = planner::what_if(run, *rules, planner::WhatIfOptions{2000, 50, 0});
  const double whatif_s = since(t0);
  t0 = std::chrono::steady_clock::now();
  planner::WhatIfOptions fo;
  fo.fixes = fixes;
  auto wf = planner::what_if(run, *rules, fo);
  const double fixes_s = since(t0);
  if (!w || !wf) return 3;
  std::printf("events %zu, allocations %llu, devices %d\n", t.records.size(), static_cast<unsigned long long>(run.lifetimes.size()), devices);
  std::printf("analyze (lifetimes + event index): %.3f s\n", analyze_s);
  std::printf("what-if, 2 rules: %.3f s  (peak %llu -> %llu, bound %llu)\n", whatif_s,
              static_cast<unsigned long long>(w->measured_peak_activation_bytes),
              static_cast<unsigned long long>(w->predicted_peak_activation_bytes),
              static_cast<unsigned long long>(w->liveness_bound_bytes));
  std::printf("what-if + %zu ranked fixes: %.3f s (%zu found, last peak %llu)\n", fixes, fixes_s, wf->fixes.size(),
              wf->fixes.empty() ? 0ull : static_cast<unsigned long long>(wf->fixes.back().cumulative_peak_activation_bytes));
  std::printf("BENCH whatif total %.3f s (analyze + what-if + fixes)\n", analyze_s + fixes_s);
  return 0;
}
