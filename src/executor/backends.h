// Backend factories.
#pragma once

#include <memory>

#include "core/status.h"
#include "executor/backend.h"

namespace moeprof {

std::unique_ptr<Backend> make_cpu_backend();
// Shapes and allocations only, no memory and no compute (executor/meta_backend.h).
std::unique_ptr<Backend> make_meta_backend();
// The meta backend as a device of `device_bytes` (`moeprof run --gpu-memory`): memory_info reports
// the size less what is allocated, and an allocation that would take the bytes live past it fails
// with the out-of-memory error (kRunFailure). 0: no size. enforce = false: the size is reported,
// never enforced (executor/meta_backend.h).
std::unique_ptr<Backend> make_meta_backend_of(uint64_t device_bytes, bool enforce = true);

// True when this binary has the CUDA backend compiled in.
bool cuda_backend_compiled();
// Creates the CUDA backend on `device`; kRunFailure with a one-line reason when no usable GPU
// (no driver, no device, unsupported compute capability) or when CUDA was not compiled in.
Result<std::unique_ptr<Backend>> make_cuda_backend(int device);

}  // namespace moeprof
