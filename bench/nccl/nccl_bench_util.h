// What the NCCL benchmarks share: exit with one line naming the benchmark when a CUDA call or a
// moeprof call fails. Each benchmark defines kBench (its name) before including this.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#include "core/status.h"

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s: %s: %s\n", kBench, #x, cudaGetErrorString(e_));           \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

inline void check(const moeprof::Status& st, const char* what) {
  if (!st.is_ok()) {
    std::fprintf(stderr, "%s: %s: %s\n", kBench, what, st.message().c_str());
    std::exit(1);
  }
}
