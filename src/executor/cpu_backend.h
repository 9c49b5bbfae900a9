// CpuBackend: the plain C++ reference implementation of every Backend op (backend.h holds the
// exact numeric contract). Readable loops over fp32; the only parallelism is a row/column split
// over std::threads, which never changes results (every output element is computed by one
// thread in one fixed order). Memory is 64-byte aligned host memory, filled with 0xFF on
// allocation (NaN for bf16/f32) so that reads of memory no op wrote show up.
//
// Files: cpu_backend.cpp (memory, init, data movement, dense ops), cpu_moe.cpp (router,
// permutation, NVFP4 quantization and the FP4 expert GEMMs, combine), cpu_mla.cpp (the paged MLA
// ops of serving).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "executor/backend.h"
#include "executor/host_group.h"

namespace moeprof {

class CpuBackend final : public Backend {
 public:
  // num_threads <= 0: $MOEPROF_CPU_THREADS if set, else std::thread::hardware_concurrency().
  explicit CpuBackend(int num_threads = 0);
  ~CpuBackend() override = default;

  std::string name() const override { return "cpu"; }
  std::string device_name() const override { return "CPU reference"; }
  MemKind default_mem_kind(Category /*c*/) const override { return MemKind::kHost; }
  int num_threads() const { return num_threads_; }

  Status synchronize() override { return Status::ok(); }

  // Real ranks on the CPU (host_group.h): with a group of more than one rank attached, the
  // collectives meet the other ranks' backends there (all_reduce sums; all_to_all_rows and
  // all_gather_rows move rows). `group` is owned by the caller and outlives the attachment;
  // nullptr detaches (all_reduce is a no-op again).
  void attach_group(HostRankGroup* group, int rank) {
    group_ = group;
    group_rank_ = group ? rank : 0;
  }
  bool collectives_real() const override { return group_ != nullptr && group_->size() > 1; }
  int collective_rank() const override { return group_rank_; }
  int collective_size() const override { return group_ ? group_->size() : 1; }

 protected:
  Result<void*> do_allocate(size_t bytes, MemKind kind, const AllocTag& tag) override;
  void do_free(void* ptr, size_t bytes, MemKind kind) override;

  // The ops (Backend has checked the arguments). Where an op reads index tensors on the host
  // (positions, expert ids, offsets, permutation rows) it also checks their values, which the
  // contract cannot do without reading device memory; same message form "<op>: <arg> must ...".
  Status do_copy_from_host(Tensor& dst, const void* src) override;
  Status do_copy_to_host(const Tensor& src, void* dst) override;

  Status do_init_uniform(Tensor& t, uint64_t seed, float scale) override;
  Status do_init_e4m3(Tensor& t, uint64_t seed, float lo, float hi) override;
  Status do_init_bytes(Tensor& t, uint64_t seed) override;
  Status do_init_ints(Tensor& t, uint64_t seed, int32_t lo, int32_t hi) override;
  Status do_iota(Tensor& t, int32_t start) override;

  Status do_embedding(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) override;
  Status do_rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override;
  Status do_fused_add_rmsnorm(Tensor& x, Tensor& residual, const Tensor& w, float eps) override;
  Status do_add_rmsnorm(const Tensor& x, Tensor& residual, const Tensor& w, float eps, Tensor& out) override;
  Status do_linear(const Tensor& x, const Tensor& w, Tensor& out, const Tensor& workspace) override;
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
  // cpu_mla.cpp (paged MLA of serving); the index data (slots, request rows, positions, the
  // request-to-token table's slots) is checked where it is read.
  Status do_kv_cache_store(const Tensor& latent, const Tensor& k_pe, Tensor& cache, const Tensor& slots) override;
  Status do_mla_q_absorb(const Tensor& q, const Tensor& kv_b, int64_t n_heads, int64_t nope, int64_t rope, int64_t v_dim,
                         Tensor& q_abs) override;
  Status do_mla_paged_attention(const Tensor& q_abs, const Tensor& cache, const Tensor& req_to_token, const Tensor& row_req,
                                const Tensor& row_pos, int64_t n_heads, float scale, Tensor& out, const Tensor& workspace) override;
  Status do_mla_v_up(const Tensor& lat, const Tensor& kv_b, int64_t n_heads, int64_t nope, int64_t v_dim,
                     Tensor& out) override;

  Status do_router_topk(const Tensor& logits, const Tensor& bias, const RouterParams& p, Tensor& topk_ids,
                        Tensor& topk_weights) override;
  Status do_fp4_quantize(const Tensor& x, float global_scale, Tensor& out, Tensor& scales) override;
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
  int num_threads_ = 1;
  HostRankGroup* group_ = nullptr;
  int group_rank_ = 0;
};

// Helpers shared by the cpu_*.cpp files (not part of the public interface).
namespace cpu_detail {

// Runs fn(i) for every i in [0, n) exactly once, on up to `threads` threads (dynamic
// scheduling). Runs inline when threads <= 1 or n <= 1.
void parallel_for(int64_t n, int threads, const std::function<void(int64_t)>& fn);

// Storage index of logical (row-major) element i of a possibly strided view (vectors may be
// 1 x n or n x 1).
inline int64_t vec_index(const Tensor& t, int64_t i) { return (i / t.cols()) * t.ld() + i % t.cols(); }
template <typename T>
T* row_ptr(const Tensor& t, int64_t r) {
  return t.data<T>() + r * t.ld();
}

// Rows of an fp32 matrix packed for gemm_packed(): tiles of kRowTile rows stored [tile][k][row in
// tile], the last tile zero-padded.
inline constexpr int64_t kRowTile = 16;
struct PackedRows {
  int64_t rows = 0;
  int64_t K = 0;
  std::vector<float> data;
};
// fill(j, dst) writes the K values of row j to dst.
PackedRows pack_rows(int64_t rows, int64_t K, const std::function<void(int64_t, float*)>& fill);
// For n in [n0, n1): wrow(n, buf) writes the K values of weight row n; then for every packed row j
// acc = sum_k a[j][k] * w[n][k] accumulated in fp32 in increasing k, and store(j, n, acc).
void gemm_packed(const PackedRows& a, int64_t n0, int64_t n1, const std::function<void(int64_t, float*)>& wrow,
                 const std::function<void(int64_t, int64_t, float)>& store);

}  // namespace cpu_detail
}  // namespace moeprof
