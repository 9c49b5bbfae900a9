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

#include <cstddef>
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

class NcclCommunicators {
 public:
  // One communicator per device in `devices` (rank i on devices[i]), ncclCommInitAll.
  static Result<std::unique_ptr<NcclCommunicators>> create(const std::vector<int>& devices);
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

// In-place sum over the communicator's ranks of `count` elements of `dtype` (bf16 or f32) at
// `data`, enqueued on `stream` (a cudaStream_t). Fails once the communicator was aborted.
Status nccl_all_reduce(void* comm, void* data, size_t count, DType dtype, void* stream);

}  // namespace moeprof
