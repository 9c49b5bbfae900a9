// NCCL for real tensor parallelism (`moeprof run --gpus N`), loaded at run time with
// dlopen("libnccl.so.2") so that the moeprof binary never needs libnccl to start: CPU machines
// and single-GPU runs do not depend on it. Compiled only with MOEPROF_ENABLE_CUDA.
//
// One process drives all ranks (one thread per GPU): NcclCommunicators::create makes one
// communicator per device with ncclCommInitAll; each rank thread then enqueues its own
// collectives (nccl_all_reduce) on its backend's stream.
//
// NVLink SHARP / multicast (NVLS) is never used: create() sets NCCL_NVLS_ENABLE=0 before NCCL
// reads its environment.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace moeprof {

// Loads libnccl.so.2 and resolves the entry points moeprof uses (once per process; thread-safe).
// kRunFailure naming the dlopen/dlsym error when it cannot.
Status nccl_load();
// "2.28.3" (the loaded library's ncclGetVersion), or "" before a successful nccl_load().
std::string nccl_version();

// ncclUniqueId's bytes (NCCL_UNIQUE_ID_BYTES), as rank 0 writes them to the --nccl-id file.
using NcclUniqueId = std::array<char, 128>;
Result<NcclUniqueId> nccl_unique_id();

class NcclCommunicators {
 public:
  // One communicator per device in `devices` (rank i on devices[i]), ncclCommInitAll.
  static Result<std::unique_ptr<NcclCommunicators>> create(const std::vector<int>& devices);
  // This process's one rank of `world` (ncclCommInitRank on the current CUDA device): ranks in
  // separate processes (`moeprof run --rank R --world N --nccl-id FILE`). comm(0) is this rank's.
  static Result<std::unique_ptr<NcclCommunicators>> create_rank(const NcclUniqueId& id, int world, int rank);
  ~NcclCommunicators();  // ncclCommDestroy each (all work must have completed), unless aborted
  NcclCommunicators(const NcclCommunicators&) = delete;
  NcclCommunicators& operator=(const NcclCommunicators&) = delete;

  int size() const { return static_cast<int>(comms_.size()); }
  void* comm(int rank) const { return comms_.at(static_cast<size_t>(rank)); }  // ncclComm_t
  // ncclCommAbort on every communicator (from any thread), e.g. when one rank failed and the
  // others wait in a collective for it: their kernels stop, and every later nccl_all_reduce on
  // these communicators fails instead of touching them. Idempotent.
  void abort();
  bool aborted() const { return aborted_; }

 private:
  NcclCommunicators() = default;
  std::vector<void*> comms_;
  bool aborted_ = false;
};

// NCCL symmetric memory (`moeprof run --symm-mem on`): one window of `bytes` from ncclMemAlloc,
// registered on `comm` with NCCL_WIN_COLL_SYMMETRIC (a collective call: every rank creates its
// pool at the same point, with the same size), from which tensors of MemKind::kSymmetric are
// sub-allocated first-fit. Ranks make the same allocations in the same order, so a tensor lies at
// the same offset in every rank's window, as NCCL's symmetric kernels require; an all-reduce on
// such a tensor runs on the window. Every NCCL call is inside an NVTX range
// "moeprof.tensor:nccl/<what>|communication", so a CUPTI trace of the process attributes what NCCL
// itself allocates to the communication category.
class SymmetricPool {
 public:
  static Result<std::unique_ptr<SymmetricPool>> create(void* comm, size_t bytes);
  ~SymmetricPool();  // deregisters the window (collective) and frees the memory
  SymmetricPool(const SymmetricPool&) = delete;
  SymmetricPool& operator=(const SymmetricPool&) = delete;

  // `bytes` rounded up to kAlign; kRunFailure when the pool has no free range that large.
  Result<void*> allocate(size_t bytes);
  // false when `p` is not a live allocation of this pool.
  bool free(void* p);
  bool contains(const void* p) const;
  uintptr_t base() const { return reinterpret_cast<uintptr_t>(base_); }
  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t high_water() const { return high_water_; }
  static constexpr size_t kAlign = 4096;

 private:
  SymmetricPool() = default;
  void* comm_ = nullptr;
  void* base_ = nullptr;
  void* window_ = nullptr;
  size_t capacity_ = 0, used_ = 0, high_water_ = 0;
  std::map<size_t, size_t> free_;  // offset -> length, coalesced
  std::map<size_t, size_t> live_;  // offset -> length
};

// In-place sum over the communicator's ranks of `count` elements of `dtype` (bf16 or f32) at
// `data`, enqueued on `stream` (a cudaStream_t). Fails once the communicator was aborted.
Status nccl_all_reduce(void* comm, void* data, size_t count, DType dtype, void* stream);

// Expert parallelism (HostRankGroup's meaning, host_group.h), enqueued on `stream` as one group of
// ncclSend/ncclRecv of bytes: the first send_bytes[0] bytes of `send` to rank 0, ..., recv_bytes[p]
// bytes from rank p into `recv` in rank order.
Status nccl_all_to_all_bytes(void* comm, const void* send, const std::vector<size_t>& send_bytes, void* recv,
                             const std::vector<size_t>& recv_bytes, void* stream);
// In place: `data` holds bytes[p] bytes of each rank p in rank order; this rank (`rank`) sends its
// part to every other rank and receives theirs.
Status nccl_all_gather_bytes(void* comm, int rank, void* data, const std::vector<size_t>& bytes, void* stream);

}  // namespace moeprof
