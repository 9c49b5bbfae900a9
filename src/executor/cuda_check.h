// Status checks for CUDA runtime, cuBLASLt and NCCL calls, shared by the CUDA backend
// (cuda_backend.cpp, cuda_linear.cpp, cuda_moe.cpp), cuda_nccl.cpp and tp_run.cpp.
// Compiled only with MOEPROF_ENABLE_CUDA.
//
//   MOEPROF_CUDA_CHECK(op, expr)    expr is a cudaError_t
//   MOEPROF_CUBLAS_CHECK(op, expr)  expr is a cublasStatus_t (include <cublasLt.h> first)
//   MOEPROF_NCCL_CHECK(op, expr)    expr is an ncclResult_t (as int)
//
// Each evaluates `expr` once; on failure it returns Status::run_failure (from a function returning
// Status or Result<T>) whose one line names the library, the op, the statement as written, the
// error and file:line: "cuda rmsnorm: kern::launch_rmsnorm(...) failed: cudaErrorInvalidValue
// (invalid argument) at .../cuda_backend.cpp:123". They never abort: a profiler must still flush
// its trace. Argument checks are not done here: Backend checks them once (backend_checks.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "core/status.h"

namespace moeprof {

// Kernel faults surface at the next CUDA call, which may belong to a later op: say so.
inline std::string async_error_hint(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress: case cudaErrorLaunchFailure: case cudaErrorMisalignedAddress:
    case cudaErrorIllegalInstruction: case cudaErrorHardwareStackError: case cudaErrorAssert:
      return "; an asynchronous kernel fault may come from an earlier op (CUDA_LAUNCH_BLOCKING=1 pins it down)";
    default:
      return "";
  }
}

inline Status cuda_failure(const std::string& op, const char* expr, cudaError_t e, const char* file, int line) {
  // Clear a non-sticky error so that a later launch check does not report it again.
  (void)cudaGetLastError();
  return Status::run_failure("cuda " + op + ": " + expr + " failed: " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ") at " + file + ":" + std::to_string(line) +
                             async_error_hint(e));
}

inline Status cublas_failure(const std::string& op, const char* expr, int status, const char* file, int line) {
  return Status::run_failure("cuda " + op + ": " + expr + " failed: cublas status " + std::to_string(status) + " at " +
                             file + ":" + std::to_string(line));
}

// "ncclResult 2 (unhandled system error)"; defined in cuda_nccl.cpp (the error strings come from
// the dlopen'ed library).
std::string nccl_result_string(int result);

inline Status nccl_failure(const std::string& op, const char* expr, int result, const char* file, int line) {
  return Status::run_failure("nccl " + op + ": " + expr + " failed: " + nccl_result_string(result) + " at " + file +
                             ":" + std::to_string(line));
}

}  // namespace moeprof

#define MOEPROF_CUDA_CHECK(op, expr)                                                           \
  do {                                                                                         \
    const cudaError_t _moeprof_ce = (expr);                                                    \
    if (_moeprof_ce != cudaSuccess)                                                            \
      return ::moeprof::cuda_failure((op), #expr, _moeprof_ce, __FILE__, __LINE__);            \
  } while (0)

#define MOEPROF_CUBLAS_CHECK(op, expr)                                                         \
  do {                                                                                         \
    const cublasStatus_t _moeprof_bs = (expr);                                                 \
    if (_moeprof_bs != CUBLAS_STATUS_SUCCESS)                                                  \
      return ::moeprof::cublas_failure((op), #expr, static_cast<int>(_moeprof_bs), __FILE__, __LINE__); \
  } while (0)

#define MOEPROF_NCCL_CHECK(op, expr)                                                           \
  do {                                                                                         \
    const int _moeprof_nr = static_cast<int>(expr);                                            \
    if (_moeprof_nr != 0)                                                                      \
      return ::moeprof::nccl_failure((op), #expr, _moeprof_nr, __FILE__, __LINE__);            \
  } while (0)
