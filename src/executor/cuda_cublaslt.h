// cuBLASLt, loaded with dlopen on the CUDA backend's first GEMM set-up (internal to the executor).
// Linked, its 540 MB library cost every moeprof command about 210 MB of resident memory and 0.1 to
// 0.2 s of relocations at start, `plan` and `gate` included, which never run a GEMM.
#pragma once

#include <cublasLt.h>

#include "core/status.h"

namespace moeprof::cuda_detail {

struct CublasLtApi {
  decltype(&::cublasLtCreate) create = nullptr;
  decltype(&::cublasLtDestroy) destroy = nullptr;
  decltype(&::cublasLtMatmul) matmul = nullptr;
  decltype(&::cublasLtMatmulAlgoCheck) algo_check = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic = nullptr;
  decltype(&::cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) desc_set_attribute = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) pref_set_attribute = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
};

// Loads libcublasLt.so.<the headers' major version> once (the loader's search path: RUNPATH,
// LD_LIBRARY_PATH, ld.so.cache), else the toolkit's library directory the build was configured
// with. Thread-safe; a failure is remembered and names the library and dlerror's text.
Status cublaslt_load();
// The functions; valid after cublaslt_load() succeeded.
const CublasLtApi& cublaslt();

}  // namespace moeprof::cuda_detail
