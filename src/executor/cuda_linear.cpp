// CudaBackend::do_linear: out[T, N] = x[T, K] @ w[N, K]^T with cuBLASLt (bf16 inputs, fp32 compute,
// bf16 or f32 output). The matmul descriptors, layouts and the heuristic's algorithm are cached
// per shape, strides, output dtype, pointer alignments and workspace size (linear_plans_).
#include <cublasLt.h>

#include <cstdint>
#include <string>

#include "executor/cuda_backend.h"
#include "executor/cuda_check.h"

namespace moeprof {

using cuda_detail::alignment_of;
using cuda_detail::shape;

struct CudaBackend::LinearPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~LinearPlan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

void CudaBackend::LinearPlanDeleter::operator()(LinearPlan* p) const { delete p; }

Status CudaBackend::init_cublaslt() {
  cublasLtHandle_t h = nullptr;
  MOEPROF_CUBLAS_CHECK("init", cublasLtCreate(&h));
  lt_handle_ = h;
  return Status::ok();
}

void CudaBackend::destroy_cublaslt() {
  linear_plans_.clear();
  if (lt_handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(lt_handle_));
  lt_handle_ = nullptr;
}

size_t CudaBackend::do_linear_workspace_bytes(int64_t, int64_t, int64_t) const { return 32u << 20; }

Result<CudaBackend::LinearPlan*> CudaBackend::linear_plan(const Tensor& x, const Tensor& w, const Tensor& out,
                                                          size_t ws_bytes) {
  const char* op = "linear";
  const int64_t T = x.rows(), K = x.cols(), N = w.rows();
  const uint32_t al_a = alignment_of(w.raw()), al_b = alignment_of(x.raw()), al_c = alignment_of(out.raw());
  const bool f32_out = out.dtype() == DType::kF32;
  const std::string key = std::to_string(T) + "," + std::to_string(N) + "," + std::to_string(K) + "," +
                          std::to_string(x.ld()) + "," + std::to_string(w.ld()) + "," + std::to_string(out.ld()) + "," +
                          (f32_out ? "f" : "b") + "," + std::to_string(al_a) + "," + std::to_string(al_b) + "," +
                          std::to_string(al_c) + "," + std::to_string(ws_bytes);
  auto it = linear_plans_.find(key);
  if (it != linear_plans_.end()) return it->second.get();

  std::unique_ptr<LinearPlan, LinearPlanDeleter> plan(new LinearPlan());
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  // Column-major view: out^T [N, T] = (w [K, N] col-major)^T * (x [K, T] col-major).
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16BF, K, N, w.ld()));
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_16BF, K, T, x.ld()));
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatrixLayoutCreate(&plan->c, f32_out ? CUDA_R_32F : CUDA_R_16BF, N, T, out.ld()));
  cublasLtMatmulPreference_t pref = nullptr;
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmulPreferenceCreate(&pref));
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } pref_guard{pref};
  uint64_t ws = ws_bytes;
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(lt_handle_), plan->desc,
                                                           plan->a, plan->b, plan->c, plan->c, pref, 1, &result, &found);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0)
    return Status::run_failure("cuda linear: no cuBLASLt algorithm for x " + shape(x) + " w " + shape(w) + " out " +
                               shape(out) + " (status " + std::to_string(int(hs)) + ")");
  plan->algo = result.algo;
  LinearPlan* raw = plan.get();
  linear_plans_.emplace(key, std::move(plan));
  return raw;
}

Status CudaBackend::do_linear(const Tensor& x, const Tensor& w, Tensor& out, const Tensor& workspace) {
  const char* op = "linear";
  if (x.rows() == 0 || w.rows() == 0) return Status::ok();  // an empty output: nothing to compute
  const size_t ws_bytes = workspace.defined() ? workspace.bytes() : 0;
  MOEPROF_ASSIGN_OR_RETURN(LinearPlan * plan, linear_plan(x, w, out, ws_bytes));
  const float alpha = 1.0f, beta = 0.0f;
  MOEPROF_CUBLAS_CHECK(op, cublasLtMatmul(static_cast<cublasLtHandle_t>(lt_handle_), plan->desc, &alpha, w.raw(),
                                          plan->a, x.raw(), plan->b, &beta, out.raw(), plan->c, out.raw(), plan->c,
                                          &plan->algo, ws_bytes ? workspace.raw() : nullptr, ws_bytes, stream_));
  return Status::ok();
}

}  // namespace moeprof
