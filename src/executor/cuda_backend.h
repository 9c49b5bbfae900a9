// CudaBackend: the Backend op interface on one NVIDIA GPU (sm_90+), adapting Tensors to the
// framework-free launchers in kernels/. Compiled only with MOEPROF_ENABLE_CUDA.
//
// Memory: weights and KV cache with cudaMalloc (MemKind::kDevice); activations and workspaces
// from the device's default stream-ordered pool (cudaMallocAsync/cudaFreeAsync on the backend's
// stream), the pool's release threshold raised to UINT64_MAX so freed blocks stay cached like a
// framework's caching allocator. Every allocating driver call sits inside an NVTX range
// "moeprof.tensor:<scope>/<name>|<category>" so an outside CUPTI tracer can attribute it.
// All ops are asynchronous on the backend's stream; copy_to_host/copy_from_host synchronize.
//
// Files: cuda_backend.cpp (construction, memory, copies, init and the small dense ops, all-reduce),
// cuda_linear.cpp (cuBLASLt linear), cuda_moe.cpp (router, FP4 quantization, permutation, FP4
// expert GEMMs, combine), cuda_mla.cpp (the paged MLA ops of serving, CUDA-graph capture);
// cuda_check.h holds the CUDA/cuBLAS/NCCL status macros. Arguments are checked once by Backend
// (backend_checks.cpp); the do_<op>s keep only what is CUDA-specific (the 256-byte alignment of
// the permutation workspace, for CUB).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "executor/backend.h"

namespace moeprof {

class SymmetricPool;  // cuda_nccl.h

class CudaBackend : public Backend {
 public:
  // Use make_cuda_backend(); `device` must already be validated.
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  Status init();  // stream, pool, cuBLASLt

  // Real tensor parallelism (`moeprof run --gpus N`, src/executor/tp_run.cpp): with a
  // communicator attached, all_reduce is an in-place NCCL sum (cuda_nccl.h) over `size` ranks on
  // this backend's stream. `comm` is this device's ncclComm_t, owned by the caller, which keeps
  // it alive while attached; nullptr detaches (all_reduce is a no-op again, as for one rank or
  // emulated TP).
  Status attach_nccl(void* comm, int rank, int size);
  // NCCL symmetric memory (`--symm-mem on`): tensors of MemKind::kSymmetric come from `pool`
  // (owned by the caller, alive while attached; nullptr detaches). Without a pool, kSymmetric
  // tensors come from the stream-ordered pool like activations (symmetric memory emulated: one
  // device, emulated TP), still tagged symmetric in the trace.
  void attach_symmetric_pool(SymmetricPool* pool) { symm_pool_ = pool; }
  SymmetricPool* symmetric_pool() const { return symm_pool_; }
  void announce_pools() override;
  std::vector<std::pair<std::string, std::string>> run_extras() override;
  bool collectives_real() const override { return nccl_comm_ != nullptr && nccl_size_ > 1; }
  int nccl_rank() const { return nccl_rank_; }
  int nccl_size() const { return nccl_size_; }
  int collective_rank() const override { return nccl_comm_ ? nccl_rank_ : 0; }
  int collective_size() const override { return nccl_comm_ ? nccl_size_ : 1; }

  std::string name() const override { return "cuda"; }
  std::string device_name() const override { return device_name_; }
  uint16_t device_index() const override { return static_cast<uint16_t>(device_); }
  cudaStream_t stream() const { return stream_; }
  MemKind default_mem_kind(Category c) const override;
  // Free device memory (cudaMemGetInfo) plus what the activation pool reserves but does not use.
  bool memory_info(size_t* free_bytes, size_t* total_bytes) const override;

  Status synchronize() override;

  // CUDA graphs of the serving decode (cuda_mla.cpp): stream capture on the backend's stream
  // (relaxed mode), instantiated graphs replayed with cudaGraphLaunch.
  bool captures_graphs() const override { return true; }
  Status begin_capture() override;
  Result<std::shared_ptr<void>> end_capture() override;
  Status replay_graph(const std::shared_ptr<void>& graph) override;

 protected:
  Result<void*> do_allocate(size_t bytes, MemKind kind, const AllocTag& tag) override;
  // CUDA events recorded on the backend's stream (op times are GPU times, in stream order).
  std::unique_ptr<OpClock> make_op_clock() override;
  void do_free(void* ptr, size_t bytes, MemKind kind) override;

  // cuda_backend.cpp
  Status do_copy_from_host(Tensor& dst, const void* src) override;
  Status do_copy_to_host(const Tensor& src, void* dst) override;
  Status do_init_uniform(Tensor& t, uint64_t seed, float scale) override;
  Status do_init_e4m3(Tensor& t, uint64_t seed, float lo, float hi) override;
  Status do_init_bytes(Tensor& t, uint64_t seed) override;
  Status do_init_ints(Tensor& t, uint64_t seed, int32_t lo, int32_t hi) override;
  // The tiled layouts (kernels/common/fp4_tiled.h) where kern::gemm1_tiled_supported /
  // kern::gemm2_tiled_supported, else row-major.
  Status do_init_moe_w13(Tensor& w13, Tensor& w13_scales, int64_t num_experts, uint64_t seed_codes,
                         uint64_t seed_scales, float lo, float hi) override;
  Status do_init_moe_w2(Tensor& w2, Tensor& w2_scales, int64_t num_experts, uint64_t seed_codes,
                        uint64_t seed_scales, float lo, float hi) override;
  Status do_iota(Tensor& t, int32_t start) override;
  Status do_embedding(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) override;
  Status do_rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override;
  Status do_fused_add_rmsnorm(Tensor& x, Tensor& residual, const Tensor& w, float eps) override;
  Status do_add_rmsnorm(const Tensor& x, Tensor& residual, const Tensor& w, float eps, Tensor& out) override;
  Status do_rope(Tensor& x, int64_t n_heads, int64_t head_stride, int64_t rot_offset, int64_t rot_dim,
                 const Tensor& positions, const Tensor& cos_sin) override;
  Status do_mla_build_k(const Tensor& kv, int64_t n_heads, int64_t kv_head_stride, int64_t nope, const Tensor& k_pe,
                        Tensor& k) override;
  Status do_kv_cache_write(const Tensor& latent, const Tensor& k_pe, Tensor& cache, int64_t slot0) override;
  Status do_causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t n_heads, int64_t qk_dim,
                             int64_t v_dim, int64_t v_offset, int64_t v_head_stride, float scale, Tensor& out) override;
  Status do_silu_and_mul(const Tensor& x, Tensor& out) override;
  Status do_add_inplace(Tensor& dst, const Tensor& src) override;
  Status do_all_reduce(Tensor& t) override;
  Status do_all_to_all_bytes(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                             const std::vector<size_t>& recv_bytes) override;
  Status do_all_gather_bytes(void* data, const std::vector<size_t>& bytes) override;

  // cuda_mla.cpp (kernels/mla_decode.cu)
  Status do_kv_cache_store(const Tensor& latent, const Tensor& k_pe, Tensor& cache, const Tensor& slots) override;
  Status do_mla_q_absorb(const Tensor& q, const Tensor& kv_b, int64_t n_heads, int64_t nope, int64_t rope, int64_t v_dim,
                         Tensor& q_abs) override;
  Status do_mla_paged_attention(const Tensor& q_abs, const Tensor& cache, const Tensor& req_to_token, const Tensor& row_req,
                                const Tensor& row_pos, int64_t n_heads, float scale, Tensor& out, const Tensor& workspace) override;
  Status do_mla_v_up(const Tensor& lat, const Tensor& kv_b, int64_t n_heads, int64_t nope, int64_t v_dim, Tensor& out) override;

  // cuda_linear.cpp
  size_t do_linear_workspace_bytes(int64_t T, int64_t N, int64_t K) const override;
  Status do_linear(const Tensor& x, const Tensor& w, Tensor& out, const Tensor& workspace) override;
  // Times up to kLinearTuneCandidates of cuBLASLt's heuristic algorithms for the shape (each
  // kLinearTuneRepeats times after one warm-up run) on scratch operands and keeps the fastest.
  Status do_prepare_linear(int64_t T, int64_t N, int64_t K, DType out_dtype, size_t ws_bytes) override;
  static constexpr int kLinearTuneCandidates = 16;
  static constexpr int kLinearTuneRepeats = 3;

  // cuda_moe.cpp
  Status do_router_topk(const Tensor& logits, const Tensor& bias, const RouterParams& p, Tensor& topk_ids,
                        Tensor& topk_weights) override;
  Status do_fp4_quantize(const Tensor& x, float global_scale, Tensor& out, Tensor& scales) override;
  size_t do_moe_permute_workspace_bytes(int64_t T, int64_t k, int64_t E) const override;
  Status do_moe_permute(const Tensor& topk_ids, int64_t num_experts, int64_t tile, Tensor& offsets,
                        Tensor& permuted_to_token, Tensor& expanded_to_permuted, const Tensor& workspace) override;
  Status do_moe_gemm1_fp4(const Tensor& a, const Tensor& a_scales, float a_gs, const Tensor& w13,
                          const Tensor& w13_scales, const Tensor& w13_gs, const Tensor& offsets,
                          const Tensor& permuted_to_token, float out_gs, Tensor& out, Tensor& out_scales) override;
  Status do_moe_gemm2_fp4(const Tensor& h, const Tensor& h_scales, float h_gs, const Tensor& w2,
                          const Tensor& w2_scales, const Tensor& w2_gs, const Tensor& offsets,
                          const Tensor& permuted_to_token, Tensor& out) override;
  Status do_moe_combine(const Tensor& gemm2_out, const Tensor& expanded_to_permuted, const Tensor& topk_weights,
                        const Tensor& shared, Tensor& out) override;

 private:
  // cuBLASLt (cuda_linear.cpp): the handle, and descriptors + algorithm cached per shape.
  struct LinearPlan;
  struct LinearPlanDeleter {
    void operator()(LinearPlan* p) const;
  };
  Status init_cublaslt();
  void destroy_cublaslt();  // the plans, then the handle
  // The cached plan of the call; with `candidates`, a fresh plan (replacing the cached one) and
  // every algorithm cuBLASLt's heuristic offers for it, the best first.
  Result<LinearPlan*> linear_plan(const Tensor& x, const Tensor& w, const Tensor& out, size_t ws_bytes,
                                  std::vector<cublasLtMatmulAlgo_t>* candidates = nullptr);

  int device_;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  void* lt_handle_ = nullptr;  // cublasLtHandle_t
  std::map<std::string, std::unique_ptr<LinearPlan, LinearPlanDeleter>> linear_plans_;
  std::map<std::string, cublasLtMatmulAlgo_t> tuned_algos_;  // by T, N, K, output dtype, workspace
  void* nccl_comm_ = nullptr;  // ncclComm_t when attached (real TP)
  int nccl_rank_ = 0;
  int nccl_size_ = 1;
  SymmetricPool* symm_pool_ = nullptr;
  int64_t pool_trims_ = 0;  // the activation pool given back to the device to retry an allocation (do_allocate)
  int64_t pool_settles_ = 0;  // tensors placed again after the pool grew for them (do_allocate)
  std::array<uint64_t, kNumCategories> settle_bytes_{};  // their bytes per category (a CUPTI trace sees both placements)
  // Bytes allocated outside the trace (Backend::unrecorded: an emulated rank's copies of the rows
  // other ranks would send) per category: a CUPTI trace sees them, the executor's records do not.
  std::array<uint64_t, kNumCategories> unrecorded_bytes_{};
  bool free_failure_reported_ = false;
  // Expert weights stored tiled by do_init_moe_w13 (gemm 1) / do_init_moe_w2 (gemm 2), by code
  // address (erased when freed): their scales' address and the codes' rows, so moe_gemm1_fp4 /
  // moe_gemm2_fp4 pass the layout only for that pair.
  struct TiledWeights {
    const void* scales;
    int64_t rows;
    int gemm;
  };
  std::map<const void*, TiledWeights> tiled_weights_;
  // Whether moe_gemm<gemm>_fp4 (op) reads weights `w` with scales `w_scales` in that GEMM's tiled
  // layout (stored so by init_moe_w13 / init_moe_w2), or a one-line bad_input where they hold the
  // other GEMM's tiled layout or come without their own scales or all their rows.
  Result<bool> weights_tiled(const char* op, int gemm, const Tensor& w, const Tensor& w_scales) const;
  // do_init_moe_w13 (gemm 1) / do_init_moe_w2 (gemm 2): tiled where that GEMM's kernel reads the
  // layout (and remembered in tiled_weights_), else row-major.
  Status init_moe_weights(const char* op, int gemm, Tensor& w, Tensor& w_scales, int64_t num_experts,
                          uint64_t seed_codes, uint64_t seed_scales, float lo, float hi);
  size_t pool_reserved_unused() const;
  // Tells the observers the default (activation) pool's reserve when it changed (kPoolReserve).
  void note_activation_pool();
  uint64_t announced_pool_reserve_ = UINT64_MAX;
  // The device memory in use beyond this backend's own allocations (the CUDA context, kernel
  // modules loaded lazily, libraries' state, the driver's rounding): (total - free) - the bytes of
  // live cudaMalloc/cudaMallocManaged allocations - the activation pool's reserve, sampled after
  // every allocation and at synchronize(); its first and largest value since announce_pools().
  void sample_untraced();
  uint64_t device_live_bytes_ = 0;
  uint64_t untraced_start_ = 0, untraced_peak_ = 0, untraced_samples_ = 0;
};

// Helpers shared by the cuda_*.cpp files (not part of the public interface).
namespace cuda_detail {

// Typed device pointers of a tensor's first element (bf16 as uint16_t, e4m3/fp4x2 as uint8_t).
inline const uint16_t* bf16p(const Tensor& t) { return static_cast<const uint16_t*>(t.raw()); }
inline uint16_t* bf16p(Tensor& t) { return static_cast<uint16_t*>(t.raw()); }
inline const uint8_t* u8p(const Tensor& t) { return static_cast<const uint8_t*>(t.raw()); }
inline uint8_t* u8p(Tensor& t) { return static_cast<uint8_t*>(t.raw()); }
inline const int32_t* i32p(const Tensor& t) { return static_cast<const int32_t*>(t.raw()); }
inline int32_t* i32p(Tensor& t) { return static_cast<int32_t*>(t.raw()); }
inline const float* f32p(const Tensor& t) { return static_cast<const float*>(t.raw()); }
inline float* f32p(Tensor& t) { return static_cast<float*>(t.raw()); }

// "bf16[37x272]"
inline std::string shape(const Tensor& t) { return std::string(dtype_name(t.dtype())) + "[" + t.shape_string() + "]"; }

// Largest power of two (<= 256) dividing the address.
inline uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

}  // namespace cuda_detail
}  // namespace moeprof
