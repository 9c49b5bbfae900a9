// The EP dispatch's all-to-all over N GPUs of this host, one thread per rank: the executor's path
// (nccl_all_to_all_bytes: one group of ncclSend/ncclRecv, what `moeprof run --ep N --gpus N` runs)
// against NCCL's own ncclAlltoAll (NCCL >= 2.28) of the same bytes, side by side. Each rank sends
// its token slice's T/N x top_k rows of H bf16, an equal share to every rank (uniform routing).
// Bandwidth as nccl-tests defines it for all-to-all: algbw = bytes a rank sends / time, busbw =
// algbw * (N - 1) / N.
//   bench_alltoall [--gpus N] [--tokens T] [--hidden H] [--topk K] [--iters I]
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "executor/cuda_nccl.h"

constexpr const char* kBench = "bench_alltoall";
#include "nccl_bench_util.h"

using namespace moeprof;

namespace {

// ncclAlltoAll(sendbuff, recvbuff, count per peer, datatype, comm, stream), when the loaded NCCL has it.
using AlltoAllFn = int (*)(const void*, void*, size_t, int, void*, void*);
constexpr int kNcclUint8 = 1;

}  // namespace

int main(int argc, char** argv) {
  int gpus = 2, iters = 20;
  long long tokens = 16384, hidden = 7168, topk = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--gpus") gpus = std::atoi(argv[i + 1]);
    else if (a == "--tokens") tokens = std::atoll(argv[i + 1]);
    else if (a == "--hidden") hidden = std::atoll(argv[i + 1]);
    else if (a == "--topk") topk = std::atoll(argv[i + 1]);
    else if (a == "--iters") iters = std::atoi(argv[i + 1]);
  }
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (gpus < 2 || n < gpus) {
    std::fprintf(stderr, "bench_alltoall: needs %d GPUs (at least 2), found %d\n", gpus, n);
    return 2;
  }
  std::vector<int> devs(gpus);
  for (int r = 0; r < gpus; ++r) devs[r] = r;
  auto comms = NcclCommunicators::create(devs);
  check(comms.status(), "communicators");
  AlltoAllFn alltoall = nullptr;
  if (void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD)) alltoall = reinterpret_cast<AlltoAllFn>(dlsym(lib, "ncclAlltoAll"));
  const size_t rows_per_peer = static_cast<size_t>(tokens / gpus * topk / gpus);
  const size_t peer_bytes = rows_per_peer * static_cast<size_t>(hidden) * 2, bytes = peer_bytes * static_cast<size_t>(gpus);
  std::vector<void*> send(gpus), recv(gpus);
  std::vector<cudaStream_t> streams(gpus);
  for (int r = 0; r < gpus; ++r) {
    CK(cudaSetDevice(r));
    CK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    CK(cudaMalloc(&send[r], bytes));
    CK(cudaMalloc(&recv[r], bytes));
    CK(cudaMemset(send[r], r + 1, bytes));
  }
  std::printf("all-to-all of %zu rows x %lld bf16 per peer (%.1f MB sent by each rank) over %d GPUs, NCCL %s\n", rows_per_peer,
              hidden, bytes / 1e6, gpus, nccl_version().c_str());
  const std::vector<size_t> counts(static_cast<size_t>(gpus), peer_bytes);
  for (int which = 0; which < 2; ++which) {
    if (which == 1 && alltoall == nullptr) {
      std::printf("%-34s not in this NCCL (ncclAlltoAll came with 2.28)\n", "ncclAlltoAll");
      break;
    }
    std::vector<double> ms(gpus);
    std::vector<int> bad(gpus, 0);
    std::vector<std::thread> ts;
    for (int r = 0; r < gpus; ++r)
      ts.emplace_back([&, r] {
        CK(cudaSetDevice(r));
        void* comm = (*comms)->comm(r);
        std::function<void()> once = [&] {
          if (which == 0) check(nccl_all_to_all_bytes(comm, send[r], counts, recv[r], counts, streams[r]), "all_to_all");
          else if (alltoall(send[r], recv[r], peer_bytes, kNcclUint8, comm, streams[r]) != 0) bad[r] = 1;
        };
        for (int w = 0; w < 3; ++w) once();
        CK(cudaStreamSynchronize(streams[r]));
        cudaEvent_t a, b;
        CK(cudaEventCreate(&a));
        CK(cudaEventCreate(&b));
        CK(cudaEventRecord(a, streams[r]));
        for (int i = 0; i < iters; ++i) once();
        CK(cudaEventRecord(b, streams[r]));
        CK(cudaEventSynchronize(b));
        float t = 0;
        CK(cudaEventElapsedTime(&t, a, b));
        ms[r] = t / iters;
        // Each rank's part from rank p holds p + 1 in every byte.
        std::vector<unsigned char> host(bytes);
        CK(cudaMemcpy(host.data(), recv[r], bytes, cudaMemcpyDeviceToHost));
        for (int p = 0; p < gpus; ++p)
          for (size_t i = 0; i < peer_bytes; i += 4093)
            if (host[static_cast<size_t>(p) * peer_bytes + i] != static_cast<unsigned char>(p + 1)) bad[r] = 2;
      });
    for (auto& t : ts) t.join();
    double worst = 0;
    for (double m : ms) worst = std::max(worst, m);
    for (int r = 0; r < gpus; ++r)
      if (bad[r]) {
        std::fprintf(stderr, "bench_alltoall: rank %d: %s\n", r, bad[r] == 1 ? "ncclAlltoAll failed" : "wrong bytes received");
        return 1;
      }
    const double algbw = bytes / (worst * 1e-3) / 1e9, busbw = algbw * (gpus - 1) / gpus;
    std::printf("%-34s %8.3f ms  algbw %7.1f GB/s  busbw %7.1f GB/s\n",
                which == 0 ? "grouped ncclSend/ncclRecv (moeprof)" : "ncclAlltoAll", worst, algbw, busbw);
  }
  for (int r = 0; r < gpus; ++r) {
    CK(cudaSetDevice(r));
    cudaFree(send[r]);
    cudaFree(recv[r]);
  }
  return 0;
}
