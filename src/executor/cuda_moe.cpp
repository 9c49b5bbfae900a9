// CudaBackend MoE ops: router top-k, NVFP4 quantization, expert permutation, the FP4 grouped
// GEMMs (gemm1 with fused SiLU-and-mul and FP4 re-quantization, gemm2) and the weighted combine.
// The arguments were checked by Backend (backend_checks.cpp); what stays here is CUDA-specific.
#include <cstdint>
#include <string>

#include "executor/cuda_backend.h"
#include "executor/cuda_check.h"
#include "kernels/fp4_quant.cuh"
#include "kernels/moe_combine.cuh"
#include "kernels/moe_gemm_fp4.cuh"
#include "kernels/moe_permute.cuh"
#include "kernels/moe_router.cuh"

namespace moeprof {

using cuda_detail::bf16p;
using cuda_detail::f32p;
using cuda_detail::i32p;
using cuda_detail::u8p;

Status CudaBackend::do_router_topk(const Tensor& logits, const Tensor& bias, const RouterParams& p, Tensor& topk_ids,
                                   Tensor& topk_weights) {
  const int64_t T = logits.rows(), E = logits.cols();
  const bool use_bias = p.method == TopkMethod::kNoauxTc;
  kern::RouterConfig c;
  c.top_k = p.top_k;
  c.n_group = p.n_group;
  c.topk_group = p.topk_group;
  c.method = p.method == TopkMethod::kGreedy ? 0 : (p.method == TopkMethod::kGroupLimitedGreedy ? 1 : 2);
  c.scoring = p.scoring == ScoringFunc::kSoftmax ? 0 : 1;
  c.norm_topk_prob = p.norm_topk_prob;
  c.routed_scaling_factor = p.routed_scaling_factor;
  MOEPROF_CUDA_CHECK("router_topk", kern::launch_router_topk(f32p(logits), logits.ld(), use_bias ? f32p(bias) : nullptr,
                                                             T, E, c, i32p(topk_ids), topk_ids.ld(), f32p(topk_weights),
                                                             topk_weights.ld(), stream_));
  return Status::ok();
}

Status CudaBackend::do_fp4_quantize(const Tensor& x, float global_scale, Tensor& out, Tensor& scales) {
  MOEPROF_CUDA_CHECK("fp4_quantize", kern::launch_fp4_quantize(bf16p(x), x.ld(), x.rows(), x.cols(), global_scale,
                                                               u8p(out), out.ld(), u8p(scales), scales.ld(), stream_));
  return Status::ok();
}

size_t CudaBackend::do_moe_permute_workspace_bytes(int64_t T, int64_t k, int64_t E) const {
  size_t bytes = 0;
  if (kern::moe_permute_workspace_bytes(T * k, E, &bytes) != cudaSuccess) {
    cudaGetLastError();
    return 0;  // do_moe_permute reports the failure
  }
  return bytes;
}

Status CudaBackend::do_moe_permute(const Tensor& topk_ids, int64_t num_experts, int64_t tile, Tensor& offsets,
                                   Tensor& permuted_to_token, Tensor& expanded_to_permuted, const Tensor& workspace) {
  const char* op = "moe_permute";
  const int64_t N = topk_ids.numel(), k = topk_ids.cols() > 0 ? topk_ids.cols() : 1;
  // Backend checked the workspace size against moe_permute_workspace_bytes(), which returns 0 when
  // the query fails: repeat the query here only to report such a failure.
  size_t need = 0;
  MOEPROF_CUDA_CHECK(op, kern::moe_permute_workspace_bytes(N, num_experts, &need));
  const size_t have = workspace.defined() ? workspace.bytes() : 0;
  // CUDA-specific: CUB's temporary storage inside the workspace needs 256-byte alignment (the
  // CPU backend uses no workspace).
  if (have && reinterpret_cast<uintptr_t>(workspace.raw()) % 256 != 0)
    return Status::bad_input("moe_permute: workspace must be 256-byte aligned on the CUDA backend (CUB temporary "
                             "storage)");
  // Expert ids outside [0, E) are not an error on the device: they get no row (e2p = -1).
  MOEPROF_CUDA_CHECK(op, kern::launch_moe_permute(i32p(topk_ids), N, k, num_experts, tile, i32p(offsets),
                                                  i32p(permuted_to_token), permuted_to_token.numel(),
                                                  i32p(expanded_to_permuted), have ? workspace.raw() : nullptr, have,
                                                  stream_));
  return Status::ok();
}

Status CudaBackend::do_moe_gemm1_fp4(const Tensor& a, const Tensor& a_scales, float a_gs, const Tensor& w13,
                                     const Tensor& w13_scales, const Tensor& w13_gs, const Tensor& offsets,
                                     const Tensor& permuted_to_token, float out_gs, Tensor& out, Tensor& out_scales) {
  const int64_t E = w13_gs.numel(), H = a.cols() * 2, I = out.cols() * 2, P = out.rows();
  MOEPROF_ASSIGN_OR_RETURN(const bool tiled, weights_tiled("moe_gemm1_fp4", 1, w13, w13_scales));
  const auto layout = tiled ? kern::Fp4WeightLayout::kGemm1Tiled : kern::Fp4WeightLayout::kRowMajor;
  // The kernel also needs 16-byte aligned A code rows: else (a view of an odd width) no path can
  // read the tiled weights, so the call is refused here with one line.
  if (tiled && (reinterpret_cast<uintptr_t>(a.raw()) % 16 != 0 || a.ld() % 16 != 0))
    return Status::bad_input("moe_gemm1_fp4: a must have 16-byte aligned rows with tiled w13 (got a " +
                             a.shape_string() + " with row stride " + std::to_string(a.ld()) + ")");
  MOEPROF_CUDA_CHECK("moe_gemm1_fp4",
                     kern::launch_moe_gemm1_fp4(u8p(a), a.ld(), u8p(a_scales), a_scales.ld(), a_gs, u8p(w13), w13.ld(),
                                                u8p(w13_scales), w13_scales.ld(), f32p(w13_gs), i32p(offsets),
                                                i32p(permuted_to_token), P, E, H, I, out_gs, u8p(out), out.ld(),
                                                u8p(out_scales), out_scales.ld(), stream_, kern::Fp4GemmPath::kAuto,
                                                layout));
  return Status::ok();
}

Status CudaBackend::do_moe_gemm2_fp4(const Tensor& h, const Tensor& h_scales, float h_gs, const Tensor& w2,
                                     const Tensor& w2_scales, const Tensor& w2_gs, const Tensor& offsets,
                                     const Tensor& permuted_to_token, Tensor& out) {
  const int64_t E = w2_gs.numel(), I = h.cols() * 2, H = out.cols(), P = out.rows();
  MOEPROF_ASSIGN_OR_RETURN(const bool tiled, weights_tiled("moe_gemm2_fp4", 2, w2, w2_scales));
  MOEPROF_CUDA_CHECK("moe_gemm2_fp4",
                     kern::launch_moe_gemm2_fp4(u8p(h), h.ld(), u8p(h_scales), h_scales.ld(), h_gs, u8p(w2), w2.ld(),
                                                u8p(w2_scales), w2_scales.ld(), f32p(w2_gs), i32p(offsets),
                                                i32p(permuted_to_token), P, E, I, H, bf16p(out), out.ld(), stream_,
                                                kern::Fp4GemmPath::kAuto,
                                                tiled ? kern::Fp4WeightLayout::kGemm2Tiled : kern::Fp4WeightLayout::kRowMajor));
  return Status::ok();
}

Result<bool> CudaBackend::weights_tiled(const char* op, int gemm, const Tensor& w, const Tensor& w_scales) const {
  const auto it = tiled_weights_.find(w.raw());
  if (it == tiled_weights_.end()) return false;
  const char* const name = gemm == 1 ? "w13" : "w2";
  const std::string owner = it->second.gemm == 1 ? "init_moe_w13" : "init_moe_w2";
  if (it->second.gemm != gemm)
    return Status::bad_input(std::string(op) + ": " + name + " holds the tiled layout of " + owner +
                             " (the other GEMM's weights)");
  if (it->second.scales != w_scales.raw() || it->second.rows != w.rows())
    return Status::bad_input(std::string(op) + ": " + name + " holds the tiled layout of " + owner +
                             " and must come with its own " + name + "_scales and all its " +
                             std::to_string(it->second.rows) + " rows");
  return true;
}

Status CudaBackend::do_moe_combine(const Tensor& gemm2_out, const Tensor& expanded_to_permuted,
                                   const Tensor& topk_weights, const Tensor& shared, Tensor& out) {
  const int64_t T = out.rows(), k = topk_weights.cols(), H = out.cols();
  // Rows of expanded_to_permuted below 0 are skipped by the kernel (not range-checked on the device).
  MOEPROF_CUDA_CHECK("moe_combine",
                     kern::launch_moe_combine(bf16p(gemm2_out), gemm2_out.ld(), i32p(expanded_to_permuted),
                                              f32p(topk_weights), topk_weights.ld(),
                                              shared.defined() ? bf16p(shared) : nullptr,
                                              shared.defined() ? shared.ld() : 0, T, k, H, bf16p(out), out.ld(),
                                              stream_));
  return Status::ok();
}

}  // namespace moeprof
