#include "executor/cuda_cublaslt.h"

#include <mutex>
#include <string>

#include "executor/cuda_dl.h"

namespace moeprof::cuda_detail {
namespace {

std::mutex g_mu;
CublasLtApi g_api;
bool g_loaded = false;
std::string g_error;

}  // namespace

Status cublaslt_load() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_loaded) return Status::ok();
  if (!g_error.empty()) return Status::run_failure(g_error);
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string why;
  if (lib == nullptr) {
    const char* e = dlerror();
    why = e ? e : "unknown dlopen error";
#ifdef MOEPROF_CUDA_LIBRARY_DIR
    const std::string path = std::string(MOEPROF_CUDA_LIBRARY_DIR) + "/" + soname;
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
  }
  if (lib == nullptr) {
    g_error = "cannot load " + soname + " for the CUDA backend's GEMMs (" + why + ")";
    return Status::run_failure(g_error);
  }
  CublasLtApi api;
  std::string missing;
  const bool ok = resolve(lib, "cublasLtCreate", &api.create, &missing) &&
                  resolve(lib, "cublasLtDestroy", &api.destroy, &missing) &&
                  resolve(lib, "cublasLtMatmul", &api.matmul, &missing) &&
                  resolve(lib, "cublasLtMatmulAlgoCheck", &api.algo_check, &missing) &&
                  resolve(lib, "cublasLtMatmulAlgoGetHeuristic", &api.algo_get_heuristic, &missing) &&
                  resolve(lib, "cublasLtMatmulDescCreate", &api.desc_create, &missing) &&
                  resolve(lib, "cublasLtMatmulDescDestroy", &api.desc_destroy, &missing) &&
                  resolve(lib, "cublasLtMatmulDescSetAttribute", &api.desc_set_attribute, &missing) &&
                  resolve(lib, "cublasLtMatmulPreferenceCreate", &api.pref_create, &missing) &&
                  resolve(lib, "cublasLtMatmulPreferenceDestroy", &api.pref_destroy, &missing) &&
                  resolve(lib, "cublasLtMatmulPreferenceSetAttribute", &api.pref_set_attribute, &missing) &&
                  resolve(lib, "cublasLtMatrixLayoutCreate", &api.layout_create, &missing) &&
                  resolve(lib, "cublasLtMatrixLayoutDestroy", &api.layout_destroy, &missing);
  if (!ok) {
    dlclose(lib);
    g_error = "cannot load " + soname + " (missing symbol " + missing + ")";
    return Status::run_failure(g_error);
  }
  g_api = api;
  g_loaded = true;  // the library stays loaded for the process's life
  return Status::ok();
}

const CublasLtApi& cublaslt() { return g_api; }

}  // namespace moeprof::cuda_detail
