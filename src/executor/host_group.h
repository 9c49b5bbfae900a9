// Real ranks without a GPU (`moeprof run --backend cpu --gpus N`, tp_run.h): N CPU reference
// backends in threads of one process, whose collectives meet here, through host memory. The
// same calls as NCCL's, with the same meaning, so that the code paths of real tensor and expert
// parallelism (all-reduce, the all-to-all of token rows, the all-gather of row slices) run and are
// tested on any machine.
//
// Every collective is called by all ranks, in the same order, as with NCCL. Results are exact
// and identical on every rank: the all-reduce sums in f32 in rank order (0, 1, ..., N-1) and
// rounds once. A rank that fails stops the others with abort(): their waiting calls, and every
// later one, return kRunFailure instead of waiting forever.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace moeprof {

class HostRankGroup {
 public:
  explicit HostRankGroup(int size);
  int size() const { return size_; }

  // In-place sum of `count` elements of `dtype` (bf16 or f32) over the ranks.
  Status all_reduce(int rank, void* data, size_t count, DType dtype);
  // Grouped send/receive: the first send_bytes[0] bytes of `send` go to rank 0, the next
  // send_bytes[1] to rank 1, and so on; `recv` gets recv_bytes[0] bytes from rank 0, then
  // recv_bytes[1] from rank 1, ... What rank p sends to rank r must be what r expects from p
  // (kRunFailure naming both otherwise, on every rank).
  Status all_to_all(int rank, const void* send, const std::vector<size_t>& send_bytes, void* recv,
                    const std::vector<size_t>& recv_bytes);
  // In place: `data` holds bytes[0] bytes of rank 0, then bytes[1] of rank 1, ...; each rank
  // provides its own part and receives the others'. Every rank must give the same `bytes`.
  Status all_gather(int rank, void* data, const std::vector<size_t>& bytes);

  // Stops the group: waiting and later calls fail. Idempotent, from any thread.
  void abort();
  bool aborted() const;

 private:
  // Waits until all ranks arrive (kRunFailure once aborted).
  Status barrier(std::unique_lock<std::mutex>& lock);
  Status check_rank(int rank, const char* what) const;

  const int size_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  // What each rank posted for the collective in progress.
  struct Post {
    const void* send = nullptr;
    void* data = nullptr;
    const std::vector<size_t>* send_bytes = nullptr;
    const std::vector<size_t>* recv_bytes = nullptr;
    size_t count = 0;
    DType dtype = DType::kF32;
  };
  std::vector<Post> posts_;
};

}  // namespace moeprof
