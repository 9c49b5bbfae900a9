// CudaBackend: the paged MLA ops of serving (kernels/mla_decode.cu) and CUDA-graph capture and
// replay of the decode step (executor/graph_runner.h). Arguments were checked by Backend
// (backend_checks.cpp).
#include <memory>

#include "executor/cuda_backend.h"
#include "executor/cuda_check.h"
#include "kernels/mla_decode.cuh"

namespace moeprof {

using cuda_detail::bf16p;
using cuda_detail::i32p;

Status CudaBackend::do_kv_cache_store(const Tensor& latent, const Tensor& k_pe, Tensor& cache, const Tensor& slots) {
  MOEPROF_CUDA_CHECK("kv_cache_store", kern::launch_kv_cache_store(bf16p(latent), latent.ld(), latent.cols(), bf16p(k_pe), k_pe.ld(),
                                                                   k_pe.cols(), latent.rows(), i32p(slots), bf16p(cache), cache.ld(),
                                                                   stream_));
  return Status::ok();
}

Status CudaBackend::do_mla_q_absorb(const Tensor& q, const Tensor& kv_b, int64_t n_heads, int64_t nope, int64_t rope, int64_t v_dim,
                                    Tensor& q_abs) {
  MOEPROF_CUDA_CHECK("mla_q_absorb", kern::launch_mla_q_absorb(bf16p(q), q.ld(), bf16p(kv_b), kv_b.ld(), kv_b.cols(), q.rows(), n_heads,
                                                               nope, rope, v_dim, bf16p(q_abs), q_abs.ld(), stream_));
  return Status::ok();
}

Status CudaBackend::do_mla_paged_attention(const Tensor& q_abs, const Tensor& cache, const Tensor& req_to_token,
                                           const Tensor& row_req, const Tensor& row_pos, int64_t n_heads, float scale, Tensor& out,
                                           const Tensor& workspace) {
  MOEPROF_CUDA_CHECK("mla_paged_attention",
                     kern::launch_mla_paged_attention(bf16p(q_abs), q_abs.ld(), bf16p(cache), cache.cols(), i32p(req_to_token),
                                                      req_to_token.cols(), i32p(row_req), i32p(row_pos), q_abs.rows(), n_heads,
                                                      out.cols() / n_heads, scale, bf16p(out), out.ld(),
                                                      workspace.defined() ? static_cast<float*>(workspace.raw()) : nullptr, stream_));
  return Status::ok();
}

Status CudaBackend::do_mla_v_up(const Tensor& lat, const Tensor& kv_b, int64_t n_heads, int64_t nope, int64_t v_dim, Tensor& out) {
  MOEPROF_CUDA_CHECK("mla_v_up", kern::launch_mla_v_up(bf16p(lat), lat.ld(), bf16p(kv_b), kv_b.ld(), kv_b.cols(), lat.rows(), n_heads,
                                                       nope, v_dim, bf16p(out), out.ld(), stream_));
  return Status::ok();
}

// ---- CUDA graphs ----------------------------------------------------------------------------
// Relaxed capture: the graph pool's segments are allocated with cudaMalloc while a capture is
// open (the first capture of a size that needs more room), which the stricter modes forbid.

Status CudaBackend::begin_capture() {
  MOEPROF_CUDA_CHECK("begin_capture", cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  return Status::ok();
}

Result<std::shared_ptr<void>> CudaBackend::end_capture() {
  cudaGraph_t graph = nullptr;
  MOEPROF_CUDA_CHECK("end_capture", cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  MOEPROF_CUDA_CHECK("end_capture", e);
  return std::shared_ptr<void>(exec, [](void* p) { cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(p)); });
}

Status CudaBackend::replay_graph(const std::shared_ptr<void>& graph) {
  if (!graph) return Status::bad_input("replay_graph: no captured graph");
  MOEPROF_CUDA_CHECK("replay_graph", cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph.get()), stream_));
  return Status::ok();
}

}  // namespace moeprof
