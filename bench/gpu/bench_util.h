// Small helpers shared by the GPU benchmarks: error exit, event timing (median of repeats).
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#define BENCH_CHECK(expr)                                                                            \
  do {                                                                                               \
    const cudaError_t _e = (expr);                                                                   \
    if (_e != cudaSuccess) {                                                                         \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(_e)); \
      std::exit(3);                                                                                  \
    }                                                                                                \
  } while (0)

// Median milliseconds of `repeats` timed runs after `warmup` untimed ones.
inline double time_ms(cudaStream_t s, int warmup, int repeats, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  BENCH_CHECK(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  BENCH_CHECK(cudaEventCreate(&a));
  BENCH_CHECK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    BENCH_CHECK(cudaEventRecord(a, s));
    fn();
    BENCH_CHECK(cudaEventRecord(b, s));
    BENCH_CHECK(cudaEventSynchronize(b));
    float t = 0;
    BENCH_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  BENCH_CHECK(cudaGetLastError());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

inline bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("no CUDA device: skipping benchmark\n");
    return false;
  }
  cudaDeviceProp p{};
  BENCH_CHECK(cudaGetDeviceProperties(&p, 0));
  std::printf("device: %s (sm_%d%d, %d SMs)\n", p.name, p.major, p.minor, p.multiProcessorCount);
  return true;
}
