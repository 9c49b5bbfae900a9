// Libraries the CUDA backend loads with dlopen when it first needs them (libnccl.so.2 for tensor
// parallelism, libcublasLt for the bf16 GEMMs), so that a binary that never runs on a GPU does not
// map them (internal to the executor).
#pragma once

#include <dlfcn.h>

#include <string>

namespace moeprof::cuda_detail {

// Resolves `name` in `lib` into `*fn`; false with `*missing` naming the symbol (and dlerror's text).
template <typename F>
bool resolve(void* lib, const char* name, F* fn, std::string* missing) {
  dlerror();
  void* p = dlsym(lib, name);
  if (p == nullptr) {
    const char* e = dlerror();
    *missing = std::string(name) + (e ? std::string(": ") + e : std::string());
    return false;
  }
  *fn = reinterpret_cast<F>(p);
  return true;
}

}  // namespace moeprof::cuda_detail
