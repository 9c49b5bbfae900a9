// All-reduce bandwidth of the MoE output's all-reduce (T x hidden bf16, in place, sum) over N
// GPUs of this host, one thread per rank: on a buffer inside an NCCL symmetric window
// (ncclMemAlloc + ncclCommWindowRegister NCCL_WIN_COLL_SYMMETRIC, as `moeprof run --symm-mem on`
// allocates it) and on an ordinary cudaMalloc buffer (NCCL's default path), side by side.
// Bus bandwidth as nccl-tests defines it for all-reduce: bytes / time * 2 (N - 1) / N.
//   bench_allreduce [--gpus N] [--tokens T] [--hidden H] [--iters K]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "executor/cuda_nccl.h"

constexpr const char* kBench = "bench_allreduce";
#include "nccl_bench_util.h"

using namespace moeprof;

int main(int argc, char** argv) {
  int gpus = 2, iters = 20;
  long long tokens = 16384, hidden = 7168;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--gpus") gpus = std::atoi(argv[i + 1]);
    else if (a == "--tokens") tokens = std::atoll(argv[i + 1]);
    else if (a == "--hidden") hidden = std::atoll(argv[i + 1]);
    else if (a == "--iters") iters = std::atoi(argv[i + 1]);
  }
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n < gpus) {
    std::fprintf(stderr, "bench_allreduce: needs %d GPUs, found %d\n", gpus, n);
    return 2;
  }
  std::vector<int> devs(gpus);
  for (int r = 0; r < gpus; ++r) devs[r] = r;
  auto comms = NcclCommunicators::create(devs);
  check(comms.status(), "communicators");
  const size_t count = static_cast<size_t>(tokens * hidden), bytes = count * 2;
  std::vector<std::unique_ptr<SymmetricPool>> pools(gpus);
  std::vector<void*> plain(gpus);
  std::vector<cudaStream_t> streams(gpus);
  {
    std::vector<std::thread> ts;
    std::vector<Status> st(gpus);
    for (int r = 0; r < gpus; ++r)
      ts.emplace_back([&, r] {
        CK(cudaSetDevice(r));
        CK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
        CK(cudaMalloc(&plain[r], bytes));
        CK(cudaMemset(plain[r], 0, bytes));
        auto p = SymmetricPool::create((*comms)->comm(r), bytes);
        if (p.is_ok()) pools[r] = std::move(p).value();
        else st[r] = p.status();
      });
    for (auto& t : ts) t.join();
    for (int r = 0; r < gpus; ++r) check(st[r], "symmetric pool");
  }
  std::printf("all-reduce (sum, in place) of %lld x %lld bf16 = %.1f MB over %d GPUs, NCCL %s, NCCL_NVLS_ENABLE=%s\n", tokens,
              hidden, bytes / 1e6, gpus, nccl_version().c_str(), std::getenv("NCCL_NVLS_ENABLE") ? std::getenv("NCCL_NVLS_ENABLE") : "(unset)");
  for (int which = 0; which < 2; ++which) {
    std::vector<double> ms(gpus);
    std::vector<std::thread> ts;
    for (int r = 0; r < gpus; ++r)
      ts.emplace_back([&, r] {
        CK(cudaSetDevice(r));
        void* buf = plain[r];
        if (which == 0) {
          auto p = pools[r]->allocate(bytes);
          check(p.status(), "pool allocate");
          buf = *p;
          CK(cudaMemset(buf, 0, bytes));
        }
        for (int w = 0; w < 3; ++w) check(nccl_all_reduce((*comms)->comm(r), buf, count, DType::kBF16, streams[r]), "warm-up");
        CK(cudaStreamSynchronize(streams[r]));
        cudaEvent_t a, b;
        CK(cudaEventCreate(&a));
        CK(cudaEventCreate(&b));
        CK(cudaEventRecord(a, streams[r]));
        for (int i = 0; i < iters; ++i) check(nccl_all_reduce((*comms)->comm(r), buf, count, DType::kBF16, streams[r]), "all_reduce");
        CK(cudaEventRecord(b, streams[r]));
        CK(cudaEventSynchronize(b));
        float t = 0;
        CK(cudaEventElapsedTime(&t, a, b));
        ms[r] = t / iters;
        if (which == 0) pools[r]->free(buf);
      });
    for (auto& t : ts) t.join();
    double worst = 0;
    for (double m : ms) worst = std::max(worst, m);
    const double algbw = bytes / (worst * 1e-3) / 1e9, busbw = algbw * 2.0 * (gpus - 1) / gpus;
    std::printf("%-28s %8.3f ms  algbw %7.1f GB/s  busbw %7.1f GB/s\n",
                which == 0 ? "symmetric window" : "ordinary buffer (cudaMalloc)", worst, algbw, busbw);
  }
  std::vector<std::thread> ts;
  for (int r = 0; r < gpus; ++r)
    ts.emplace_back([&, r] {
      CK(cudaSetDevice(r));
      pools[r].reset();
      cudaFree(plain[r]);
    });
  for (auto& t : ts) t.join();
  return 0;
}
