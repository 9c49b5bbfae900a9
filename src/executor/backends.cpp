#include "executor/backends.h"

namespace moeprof {

#ifndef MOEPROF_HAVE_CUDA
bool cuda_backend_compiled() { return false; }
Result<std::unique_ptr<Backend>> make_cuda_backend(int /*device*/) {
  return Status::run_failure("this moeprof was built without the CUDA backend (MOEPROF_ENABLE_CUDA=OFF)");
}
#endif

}  // namespace moeprof
