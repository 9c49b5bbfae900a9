#include "executor/backends.h"
#include "executor/meta_backend.h"

namespace moeprof {

#ifndef MOEPROF_HAVE_CUDA
bool cuda_backend_compiled() { return false; }
Result<std::unique_ptr<Backend>> make_cuda_backend(int /*device*/) {
  return Status::run_failure("this moeprof was built without the CUDA backend (MOEPROF_ENABLE_CUDA=OFF)");
}
#endif

std::unique_ptr<Backend> make_meta_backend() { return std::make_unique<MetaBackend>(); }
std::unique_ptr<Backend> make_meta_backend_of(uint64_t device_bytes, bool enforce) {
  return std::make_unique<MetaBackend>(device_bytes, enforce);
}

}  // namespace moeprof
