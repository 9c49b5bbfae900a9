// bench_replay: times planner::analyze() on a synthetic trace built in memory (default 10M
// events): several devices (TP ranks), many layers per forward pass, per-layer tensors allocated,
// used and freed in a sliding window, addresses recycled per size like a caching allocator.
// Optionally times the .mtrace write + read round trip.
//
//   bench_replay [--events N] [--devices D] [--repeat R] [--roundtrip PATH]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "core/trace.h"
#include "core/trace_io.h"
#include "bench/common/synthetic_trace.h"
#include "planner/analysis.h"

using namespace moeprof;
using moeprof::bench::make_trace;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  size_t events = 10'000'000;
  int devices = 4, repeat = 3;
  std::string roundtrip;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_replay: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--events") {
      events = std::strtoull(next(), nullptr, 10);
    } else if (a == "--devices") {
      devices = std::atoi(next());
    } else if (a == "--repeat") {
      repeat = std::max(1, std::atoi(next()));
    } else if (a == "--roundtrip") {
      roundtrip = next();
    } else {
      std::fprintf(stderr, "usage: bench_replay [--events N] [--devices D] [--repeat R] [--roundtrip PATH]\n");
      return 2;
    }
  }
  if (devices < 1 || devices > 64 || events == 0) {
    std::fprintf(stderr, "bench_replay: --devices must be 1..64 and --events > 0\n");
    return 2;
  }

  auto t0 = std::chrono::steady_clock::now();
  Trace tr = make_trace(events, devices);
  std::printf("generated %zu events (%d devices) in %.2f s\n", tr.records.size(), devices, seconds_since(t0));

  auto bench = [&](const char* label, const Trace& t, const planner::AnalyzeOptions& opt) {
    // Wall time and process CPU time (the latter is less disturbed by other jobs on a shared host).
    double best = 1e30, best_cpu = 1e30;
    planner::RunAnalysis r;
    for (int k = 0; k < repeat; ++k) {
      r = planner::RunAnalysis();
      auto s = std::chrono::steady_clock::now();
      const std::clock_t c0 = std::clock();
      r = planner::analyze(t, opt);
      best_cpu = std::min(best_cpu, static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
      best = std::min(best, seconds_since(s));
    }
    std::printf("%-32s best of %d: %.3f s wall (%.3f s cpu)  %.1f M events/s  (peak act %.1f MB, allocs/dev %llu, handoffs %llu, reordered %d)\n",
                label, repeat, best, best_cpu, static_cast<double>(t.records.size()) / best / 1e6,
                static_cast<double>(r.peak_activation_bytes) / 1e6, static_cast<unsigned long long>(r.allocations),
                static_cast<unsigned long long>(r.devices.empty() ? 0 : r.devices[0].handoff_count), r.reordered ? 1 : 0);
  };
  planner::AnalyzeOptions def;
  bench("analyze (default options)", tr, def);
  planner::AnalyzeOptions lean;
  lean.keep_lifetimes = false;
  bench("analyze (keep_lifetimes=false)", tr, lean);
  {
    // Unordered input: swap every 7th record with its successor, forcing the sort.
    Trace un = tr;
    for (size_t i = 0; i + 1 < un.records.size(); i += 7) std::swap(un.records[i], un.records[i + 1]);
    bench("analyze (unordered input)", un, def);
  }

  if (!roundtrip.empty()) {
    auto s = std::chrono::steady_clock::now();
    Status st = write_trace(roundtrip, tr);
    const double w = seconds_since(s);
    if (!st.is_ok()) {
      std::fprintf(stderr, "bench_replay: write failed: %s\n", st.message().c_str());
      return 3;
    }
    s = std::chrono::steady_clock::now();
    Result<Trace> back = read_trace(roundtrip);
    const double rd = seconds_since(s);
    if (!back.is_ok()) {
      std::fprintf(stderr, "bench_replay: read failed: %s\n", back.status().message().c_str());
      return 3;
    }
    const double mb = static_cast<double>(tr.records.size()) * sizeof(TraceRecord) / 1e6;
    std::printf("mtrace write: %.3f s (%.1f M events/s, %.0f MB/s); read: %.3f s (%.1f M events/s, %.0f MB/s); records back %zu\n",
                w, static_cast<double>(tr.records.size()) / w / 1e6, mb / w, rd,
                static_cast<double>(back->records.size()) / rd / 1e6, mb / rd, back->records.size());
    std::remove(roundtrip.c_str());
  }
  return 0;
}
