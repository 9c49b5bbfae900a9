// bench_alloc_trace [--pairs N] [--bytes B] [--out DIR]
// Allocation-heavy worst case for the CUPTI tracer: N cudaMallocAsync + cudaFreeAsync pairs on one
// stream, (1) untraced, (2) traced with MEMORY2 records only, (3) traced with attribution (API +
// NVTX callbacks). Prints us per pair, records/s, us added per record, dropped records, and one
// "BENCH {json}" line.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <cuda_runtime.h>

#include "core/trace_io.h"
#include "profiler/cupti_tracer.h"

namespace {

#define CHECK(expr)                                                                          \
  do {                                                                                       \
    cudaError_t _e = (expr);                                                                 \
    if (_e != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s failed: %s\n", #expr, cudaGetErrorString(_e));                \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

double run_pairs(size_t pairs, size_t bytes, cudaStream_t s) {
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < pairs; ++i) {
    void* p = nullptr;
    CHECK(cudaMallocAsync(&p, bytes, s));
    CHECK(cudaFreeAsync(p, s));
  }
  CHECK(cudaStreamSynchronize(s));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Traced {
  double seconds = 0, stop_seconds = 0;
  uint64_t records = 0, dropped = 0, joined = 0;
  bool ok = false;
  std::string error;
};

Traced run_traced(size_t pairs, size_t bytes, cudaStream_t s, const std::string& path, bool attribution) {
  Traced r;
  moeprof::RunMeta meta;
  meta.name = attribution ? "bench_attribution" : "bench_memory2";
  moeprof::profiler::TracerOptions opt;
  opt.attribution = attribution;
  opt.graph_memory = false;
  auto t = moeprof::profiler::CuptiTracer::start(path, meta, opt);
  if (!t.is_ok()) {
    r.error = t.status().message();
    return r;
  }
  r.seconds = run_pairs(pairs, bytes, s);
  auto t0 = std::chrono::steady_clock::now();
  moeprof::Status st = (*t)->stop();
  r.stop_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!st.is_ok()) {
    r.error = st.message();
    return r;
  }
  auto stats = (*t)->stats();
  r.records = stats.allocs + stats.frees;
  r.dropped = stats.dropped_records;
  r.joined = stats.allocs_joined;
  r.ok = true;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  size_t pairs = 200000, bytes = 16384;
  std::string dir = "/tmp";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--pairs") && i + 1 < argc) pairs = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--bytes") && i + 1 < argc) bytes = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--out") && i + 1 < argc) dir = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--pairs N] [--bytes B] [--out DIR]\n", argv[0]);
      return 2;
    }
  }
  CHECK(cudaSetDevice(0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  run_pairs(1000, bytes, s);  // warm the pool

  double base = run_pairs(pairs, bytes, s);
  Traced m2 = run_traced(pairs, bytes, s, dir + "/bench_alloc_memory2.mtrace", false);
  Traced at = run_traced(pairs, bytes, s, dir + "/bench_alloc_attribution.mtrace", true);

  auto us_pair = [&](double sec) { return sec * 1e6 / static_cast<double>(pairs); };
  std::printf("pairs %zu x %zu bytes\n", pairs, bytes);
  std::printf("untraced             %8.3f us/pair\n", us_pair(base));
  const Traced* runs[] = {&m2, &at};
  const char* names[] = {"memory2", "memory2+attribution"};
  std::string json = "{\"pairs\":" + std::to_string(pairs) + ",\"bytes\":" + std::to_string(bytes) +
                     ",\"untraced_us_per_pair\":" + std::to_string(us_pair(base));
  for (int i = 0; i < 2; ++i) {
    const Traced& r = *runs[i];
    if (!r.ok) {
      std::printf("%-20s FAILED: %s\n", names[i], r.error.c_str());
      json += std::string(",\"") + names[i] + "\":{\"error\":\"failed\"}";
      continue;
    }
    double per_record = (r.seconds - base) * 1e6 / static_cast<double>(r.records ? r.records : 1);
    double rec_per_s = r.records / (r.seconds + r.stop_seconds);
    std::printf("%-20s %8.3f us/pair, %llu records (expected %zu), +%.3f us/record, %.0f records/s, "
                "stop %.3f s, dropped %llu, joined %llu\n",
                names[i], us_pair(r.seconds), (unsigned long long)r.records, 2 * pairs, per_record, rec_per_s,
                r.stop_seconds, (unsigned long long)r.dropped, (unsigned long long)r.joined);
    json += std::string(",\"") + names[i] + "\":{\"us_per_pair\":" + std::to_string(us_pair(r.seconds)) +
            ",\"records\":" + std::to_string(r.records) + ",\"us_added_per_record\":" +
            std::to_string(per_record) + ",\"records_per_s\":" + std::to_string(rec_per_s) +
            ",\"stop_s\":" + std::to_string(r.stop_seconds) + ",\"dropped\":" + std::to_string(r.dropped) +
            ",\"joined\":" + std::to_string(r.joined) + "}";
  }
  json += "}";
  std::printf("BENCH %s\n", json.c_str());
  CHECK(cudaStreamDestroy(s));
  return (m2.ok && at.ok) ? 0 : 1;
}
