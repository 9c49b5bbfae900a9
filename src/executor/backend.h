// The op interface the model forward is written against, once. Two implementations:
// CpuBackend (plain C++ reference, src/executor/cpu_backend.*) and CudaBackend (kernels/*.cu,
// src/executor/cuda_backend.*). Every CUDA op is tested against the CPU op. The public ops check
// their arguments once for every backend (backend_checks.cpp), then call the backend's do_<op>.
//
// Numeric conventions shared by both backends (so results can be compared tightly):
//  * bf16 <-> f32 conversion: round to nearest even (kernels/common/fp_formats.h).
//  * Every op computes in fp32 and rounds once, when it stores its output dtype.
//  * Products and sums that must match bit for bit (combine, quantize) are written without
//    fused multiply-add (explicit round-to-nearest multiply, then add).
//  * NVFP4: x ~= e2m1 * e4m3_block_scale * global_scale, blocks of 16 along the row (K).
//    Block scale s = e4m3_rne(amax / (6 * gs)) (saturating at 448); codes q = e2m1_rne(x / (s * gs)),
//    both divisions as a single fp32 division by the fp32 product; an all-zero block has s = 0 and
//    codes 0. Element 2i is the low nibble of byte i. Magnitude-zero codes are stored as +0.
//  * Weights come from init_* ops with a counter-based hash (kernels/common/random.h), so both
//    backends generate bit-identical weights from the same seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "executor/op_profile.h"
#include "executor/tensor.h"
#include "model/router.h"

namespace moeprof {

// Receives every allocation and release a backend makes (CPU recorder, accounting, CUDA NVTX
// side channel). Called synchronously from allocate()/~Storage.
class AllocationObserver {
 public:
  virtual ~AllocationObserver() = default;
  virtual void on_alloc(const Storage& s, const AllocTag& tag, DType dtype, const std::string& shape) = 0;
  virtual void on_free(const Storage& s) = 0;
  // Phase markers ("layer.3", "prefill"): begin=true/false.
  virtual void on_marker(const std::string& /*name*/, bool /*begin*/) {}
  // An op read (write=false) or wrote (write=true) the storage.
  virtual void on_use(const Storage& /*s*/, const std::string& /*op*/, bool /*write*/) {}
  // A memory pool the backend reserved outside the tensors it hands out (the NCCL symmetric
  // pool's backing): `reserved_bytes` now reserved at `pool` (0 = released).
  virtual void on_pool(uint64_t /*pool*/, uint64_t /*reserved_bytes*/, MemKind /*kind*/, const std::string& /*name*/) {}
  // A counter took a new value (a serving run's KV pool occupancy, requests running and
  // waiting): `step` is the scheduler step it belongs to.
  virtual void on_counter(const std::string& /*name*/, uint64_t /*value*/, uint64_t /*step*/) {}
  // Whether it is told of AllocTag::worst_only allocations (the worst-routing accounting).
  virtual bool wants_worst_only() const { return false; }
};

class GraphPool;  // executor/graph_pool.h

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;         // "cpu" | "cuda"
  virtual std::string device_name() const = 0;  // "CPU reference" | "NVIDIA H200"
  virtual uint16_t device_index() const { return 0; }
  // True when all_reduce really communicates (real TP over NCCL); false where it is a no-op (one
  // rank, emulated TP, the CPU reference): op timing then charges it no bytes.
  virtual bool collectives_real() const { return false; }
  // False where ops compute nothing (the meta backend): values read back are not the model's.
  virtual bool computes() const { return true; }

  // ---- memory ------------------------------------------------------------------------------
  // Allocates rows x cols of dtype, tagged. `mem_kind` lets weights/KV cache use plain device
  // allocations and activations the stream-ordered pool (CUDA); the CPU backend ignores it.
  Result<Tensor> empty(DType dtype, int64_t rows, int64_t cols, const AllocTag& tag);
  Result<Tensor> empty(DType dtype, int64_t rows, int64_t cols, const AllocTag& tag, MemKind mem_kind);
  void add_observer(AllocationObserver* o) { observers_.push_back(o); }
  void remove_observer(AllocationObserver* o);
  void marker(const std::string& name, bool begin);
  // Tells the observers a counter's new value (AllocationObserver::on_counter).
  void counter(const std::string& name, uint64_t value, uint64_t step);
  // Records that `op` read/wrote the tensors (use events let the planner find memory held
  // after its last use). Cheap: observers only.
  void note_use(const std::string& op, std::initializer_list<const Tensor*> reads,
                std::initializer_list<const Tensor*> writes);
  // Free and total memory of the device (host RAM for the CPU backend); false if unknown.
  virtual bool memory_info(size_t* free_bytes, size_t* total_bytes) const;
  // Called by ~Storage.
  void release(Storage& s);
  virtual MemKind default_mem_kind(Category c) const = 0;
  uint64_t allocation_count() const { return next_id_ - 1; }
  // Tells the observers attached now which pools the backend holds (on_pool), e.g. right after a
  // trace is opened. Default: none.
  virtual void announce_pools() {}
  // Figures of the device the run's trace cannot hold, as trace metadata keys, measured since the
  // last announce_pools() (the CUDA backend: the device memory in use beyond its own allocations,
  // "cuda.untraced_*"; docs/budget.md). Default: none.
  virtual std::vector<std::pair<std::string, std::string>> run_extras() { return {}; }

  // ---- CUDA graphs (serving decode: executor/graph_runner.h) -------------------------------
  // While a pool is set, the activation-category tensors empty() hands out (activation,
  // workspace, communication, unknown) are carved from `pool` (graph_pool.h): the pool's segments
  // are ordinary, recorded allocations of category graph; the tensors inside them are not
  // recorded, as the memory a captured graph writes belongs to its pool. nullptr: back to normal.
  void set_graph_pool(GraphPool* pool) { graph_pool_ = pool; }
  GraphPool* graph_pool() const { return graph_pool_; }
  // While set, empty() allocates as usual but tells no observer, and neither does the release:
  // the CPU and meta backends replay a "captured" decode by running it again, and a graph replay
  // allocates nothing.
  void set_unrecorded(bool on) { unrecorded_ = on; }
  bool unrecorded() const { return unrecorded_; }
  // Stream capture: true when the backend records the ops between begin_capture() and
  // end_capture() into a graph that replay_graph() runs again (CUDA); otherwise ops run as they are
  // called and a replay must call them again (the CPU reference, the meta backend).
  virtual bool captures_graphs() const { return false; }
  virtual Status begin_capture() { return Status::ok(); }
  // The captured graph (an opaque handle, null where captures_graphs() is false).
  virtual Result<std::shared_ptr<void>> end_capture() { return std::shared_ptr<void>(); }
  virtual Status replay_graph(const std::shared_ptr<void>& /*graph*/) { return Status::ok(); }

  // ---- op timing (op_profile.h, `moeprof run --op-times`) ------------------------------------
  // From start_op_profile() on, every public op below is bracketed by two marks of the backend's
  // OpClock and charged to its family with its FLOPs and compulsory bytes. take_op_profile()
  // synchronizes, stops profiling and returns the per-family sums.
  void start_op_profile() { op_profiler_ = std::make_unique<OpProfiler>(make_op_clock()); }
  Result<OpProfile> take_op_profile();
  bool op_profiling() const { return op_profiler_ != nullptr; }
  // While one lives, ops are not charged (work that checks results rather than computes them).
  class OpProfilePause {
   public:
    explicit OpProfilePause(Backend& b) : b_(b), was_(b.op_paused_) { b_.op_paused_ = true; }
    ~OpProfilePause() { b_.op_paused_ = was_; }
    OpProfilePause(const OpProfilePause&) = delete;
    OpProfilePause& operator=(const OpProfilePause&) = delete;

   private:
    Backend& b_;
    bool was_;
  };

  // ---- the ops ------------------------------------------------------------------------------
  // Every op below is a public, non-virtual entry that checks its arguments once, with the same
  // rules and messages for every backend (backend_checks.cpp): defined tensors, dtypes, exact
  // shapes, contiguity where some backend needs it, NVFP4 widths, limits (top-k <= 32, at most
  // 64 expert groups) and index ranges known on the host. A violation is Status::bad_input with
  // one line "<op>: <arg> must be ...", and the implementation is not called. Otherwise the op
  // calls the backend's protected do_<op>, which only computes (the CPU reference still checks
  // the index tensors it reads on the host, with messages of the same form: see cpu_backend.h).

  // ---- data movement ------------------------------------------------------------------------
  // Row-major rows x cols host buffer <-> dst/src (views with a row stride are copied row by row).
  Status copy_from_host(Tensor& dst, const void* src);
  Status copy_to_host(const Tensor& src, void* dst);
  virtual Status synchronize() = 0;

  // ---- deterministic initialization (bit-identical across backends) -------------------------
  // bf16/f32: v = scale * (2u - 1), u = (hash(seed, i) >> 40) * 2^-24, i = row * cols + col.
  Status init_uniform(Tensor& t, uint64_t seed, float scale);
  // e4m3: v = e4m3_rne(lo + (hi - lo) * u) with u as above.
  Status init_e4m3(Tensor& t, uint64_t seed, float lo, float hi);
  // u8 / fp4x2: byte = hash(seed, i) & 0xFF.
  Status init_bytes(Tensor& t, uint64_t seed);
  // i32: v = lo + hash(seed, i) % (hi - lo), hi > lo.
  Status init_ints(Tensor& t, uint64_t seed, int32_t lo, int32_t hi);
  // gemm1's expert weights with the values init_bytes(w13, seed_codes) and init_e4m3(w13_scales,
  // seed_scales, lo, hi) give, stored in the layout this backend's moe_gemm1_fp4 reads fastest:
  // row-major on the CPU; on the CUDA backend, where its kernel can read it, the tiled layout of
  // kernels/common/fp4_tiled.h (the same bytes in another order; copy_to_host returns them as
  // stored), remembered for these two tensors until they are freed. w13 [E*2I, H/2] fp4x2 and
  // w13_scales [E*2I, H/16] e4m3, both contiguous, num_experts = E >= 1.
  Status init_moe_w13(Tensor& w13, Tensor& w13_scales, int64_t num_experts, uint64_t seed_codes, uint64_t seed_scales,
                      float lo, float hi);
  // gemm2's expert weights the same way (moe_gemm2_fp4's layout): w2 [E*H, I/2] fp4x2 and
  // w2_scales [E*H, I/16] e4m3, both contiguous, num_experts = E >= 1.
  Status init_moe_w2(Tensor& w2, Tensor& w2_scales, int64_t num_experts, uint64_t seed_codes, uint64_t seed_scales,
                     float lo, float hi);
  // i32: v = start + i.
  Status iota(Tensor& t, int32_t start);

  // ---- dense ops (bf16 activations unless noted) ---------------------------------------------
  // out[t, :] = table[ids[t] - vocab_start, :] if vocab_start <= ids[t] < vocab_start + rows(table), else 0.
  // ids: contiguous i32 with T elements; out [T, cols(table)].
  Status embedding(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out);
  // out = x * rsqrt(mean(x^2) + eps) * w  (per row; out may alias x). w: contiguous, cols(x) elements.
  Status rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& out);
  // residual = bf16(x + residual); x = rmsnorm(residual) (both in place).
  Status fused_add_rmsnorm(Tensor& x, Tensor& residual, const Tensor& w, float eps);
  // residual = bf16(x + residual); out = rmsnorm(residual); x is only read. Each element as
  // add_inplace(residual, x) followed by rmsnorm(residual, w, eps, out), in one pass. out must not
  // overlap x or residual.
  Status add_rmsnorm(const Tensor& x, Tensor& residual, const Tensor& w, float eps, Tensor& out);
  // out[T, N] = x[T, K] @ w[N, K]^T, fp32 accumulation; out dtype bf16 or f32. `workspace` may be
  // undefined when linear_workspace_bytes() is 0.
  size_t linear_workspace_bytes(int64_t T, int64_t N, int64_t K) const { return do_linear_workspace_bytes(T, N, K); }
  Status linear(const Tensor& x, const Tensor& w, Tensor& out, const Tensor& workspace);
  // Before the first linear of a shape (x [rows, k] contiguous, w [n, k], out [rows, n] of
  // out_dtype, a workspace of workspace_bytes): lets the backend choose its algorithm ahead of
  // time, e.g. by timing candidates on scratch operands that it frees before returning (the CUDA
  // backend: straight from its pool, not Backend allocations, so no observer sees them). Computes
  // nothing the caller sees; a no-op on the CPU reference and the meta backend.
  Status prepare_linear(int64_t rows, int64_t n, int64_t k, DType out_dtype, size_t workspace_bytes);
  // Interleaved rotary embedding on `rot_dim` columns starting at `rot_offset` inside each of
  // `n_heads` heads of `head_stride` columns: (x[2i], x[2i+1]) rotated by angle of pair i at
  // position pos[t]; cos_sin [max_pos, rot_dim] f32 holds cos (first rot_dim/2) then sin.
  // positions: contiguous i32, one per row of x, each in [0, max_pos).
  Status rope(Tensor& x, int64_t n_heads, int64_t head_stride, int64_t rot_offset, int64_t rot_dim,
              const Tensor& positions, const Tensor& cos_sin);
  // k[t, h, :] = concat(kv[t, h*kv_head_stride : +nope], k_pe[t, :rope]) for h < n_heads.
  Status mla_build_k(const Tensor& kv, int64_t n_heads, int64_t kv_head_stride, int64_t nope, const Tensor& k_pe,
                     Tensor& k);
  // cache[slot0 + t, :] = concat(latent[t, :], k_pe[t, :]).
  Status kv_cache_write(const Tensor& latent, const Tensor& k_pe, Tensor& cache, int64_t slot0);
  // Causal prefill attention per head: out[t, h*v_dim : +v_dim] = sum_{s<=t} softmax_s(scale * q_t . k_s) v_s
  // with q/k heads at stride qk_head_stride (dim qk_dim) and v heads at column v_offset + h*v_head_stride.
  Status causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t n_heads, int64_t qk_dim,
                          int64_t v_dim, int64_t v_offset, int64_t v_head_stride, float scale, Tensor& out);
  // out[T, I] = silu(x[:, :I]) * x[:, I:2I].
  Status silu_and_mul(const Tensor& x, Tensor& out);
  // dst += src (bf16, elementwise, same shape).
  Status add_inplace(Tensor& dst, const Tensor& src);
  // Tensor-parallel sum over ranks (contiguous bf16 or f32); a no-op for one rank or emulated TP.
  Status all_reduce(Tensor& t);
  // Expert parallelism over real ranks (collectives_real()): a grouped send/receive of rows; with
  // one rank, a copy of the rows to itself.
  // The first send_rows[0] rows of `send` go to rank 0, the next send_rows[1] to rank 1, ...;
  // `recv` gets recv_rows[0] rows from rank 0 first, then recv_rows[1] from rank 1, ... One entry
  // per rank (collective_size()); send and recv contiguous, of one dtype and width; either may be
  // undefined when its counts are all 0. What rank p sends to rank q must be what q expects from p.
  Status all_to_all_rows(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                         const std::vector<int64_t>& recv_rows);
  // In place over real ranks: t's rows are the ranks' slices in rank order (rows[p] rows of rank
  // p, summing to at most rows(t)); each rank provides its own slice and receives the others'.
  Status all_gather_rows(Tensor& t, const std::vector<int64_t>& rows);
  // This backend's place among real ranks (0 of 1 without them).
  virtual int collective_rank() const { return 0; }
  virtual int collective_size() const { return 1; }

  // ---- paged MLA (serving: docs/executor.md, "Serving") -------------------------------------
  // cache[slots[n], :] = concat(latent[n, :], k_pe[n, :]) for each row n < N; slots: contiguous i32
  // with N elements, each in [0, rows(cache)).
  Status kv_cache_store(const Tensor& latent, const Tensor& k_pe, Tensor& cache, const Tensor& slots);
  // W_UK folded into the query. kv_b [n_heads*(nope+v_dim), kvl] holds, per head h, W_UK's nope
  // rows then W_UV's v_dim rows (the kv_b_proj weight); q [N, >= n_heads*(nope+rope)] holds per
  // head nope then rope columns; q_abs [N, n_heads*(kvl+rope)]:
  //   q_abs[n, h*(kvl+rope) + c] = bf16(sum_{i<nope} q[n, h*(nope+rope) + i] * kv_b[h*(nope+v_dim) + i, c]), c < kvl
  //   q_abs[n, h*(kvl+rope) + kvl + j] = q[n, h*(nope+rope) + nope + j], j < rope (copied).
  Status mla_q_absorb(const Tensor& q, const Tensor& kv_b, int64_t n_heads, int64_t nope, int64_t rope, int64_t v_dim,
                      Tensor& q_abs);
  // Attention over the paged latent cache (absorbed MLA: one shared key head of kvl + rope columns,
  // the latent as the value). Query row n belongs to request r = row_req[n] at position
  // p = row_pos[n] and attends to that request's positions 0..p, held in cache rows
  // slot_j = req_to_token[r, j]:
  //   s_j = scale * q_abs[n, h*(kvl+rope) : +kvl+rope] . cache[slot_j, :]
  //   out[n, h*kvl : +kvl] = bf16(sum_j softmax_j(s) * cache[slot_j, :kvl])
  // kvl = cols(out) / n_heads, rope = cols(cache) - kvl; row_req and row_pos contiguous i32 with N
  // elements, r in [0, rows(req_to_token)), p in [0, cols(req_to_token)), slots in [0, rows(cache)).
  // Decode is one row per request (p = its last position); a prefill chunk attends to the
  // request's cached prefix and, causally, to its own tokens, already stored by kv_cache_store.
  // workspace: undefined (one pass over each row's positions), or a contiguous f32 tensor of at
  // least mla_paged_attention_workspace_bytes(N, n_heads, cols(cache), kvl) bytes: the positions
  // are then split into mla_decode_splits(...) ranges (kernels/common/mla_split.h), each range's
  // partial softmax sums are kept there and merged (flash-decoding; the same on every backend).
  size_t mla_paged_attention_workspace_bytes(int64_t N, int64_t n_heads, int64_t D, int64_t kvl) const;
  Status mla_paged_attention(const Tensor& q_abs, const Tensor& cache, const Tensor& req_to_token, const Tensor& row_req,
                             const Tensor& row_pos, int64_t n_heads, float scale, Tensor& out, const Tensor& workspace = Tensor());
  // W_UV after attention: out[n, h*v_dim + j] = bf16(sum_{c<kvl} lat[n, h*kvl + c] * kv_b[h*(nope+v_dim) + nope + j, c]),
  // with kvl = cols(kv_b), lat [N, n_heads*kvl], out [N, n_heads*v_dim].
  Status mla_v_up(const Tensor& lat, const Tensor& kv_b, int64_t n_heads, int64_t nope, int64_t v_dim, Tensor& out);

  // ---- MoE ----------------------------------------------------------------------------------
  // logits [T, E] f32 (+ bias [E] contiguous f32 for noaux_tc, else ignored and may be undefined) -> ids [T, k] i32 and
  // weights [T, k] f32 (normalized when norm_topk_prob, then times routed_scaling_factor).
  // Ties go to the lower expert index. 1 <= k <= min(32, E); 1 <= n_group <= 64 divides E;
  // 1 <= topk_group <= n_group; grouped methods: k <= topk_group * E / n_group.
  Status router_topk(const Tensor& logits, const Tensor& bias, const RouterParams& p, Tensor& topk_ids,
                     Tensor& topk_weights);
  // NVFP4 quantization of x [T, K] bf16 (K % 16 == 0): out [T, K/2] fp4x2, scales [T, K/16] e4m3.
  Status fp4_quantize(const Tensor& x, float global_scale, Tensor& out, Tensor& scales);
  // Expert-contiguous permutation with rows padded to multiples of `tile` per expert, stable in
  // the flat index i = t*k + j: offsets [E+1] i32 (padded row starts), permuted_to_token [P] i32
  // (-1 for padding and for rows past offsets[E]), expanded_to_permuted [T*k] i32. All four index
  // tensors contiguous; P >= T*k + E*(tile-1) (the bound, any routing), or P a multiple of tile
  // >= T*k that holds this routing's padded rows, sum_e ceil(count_e/tile)*tile (a runner sized by
  // the routed counts: the CPU reference checks it on the host; the CUDA kernel gives rows past P
  // to no token, expanded_to_permuted = -1); expert ids in [0, E); `workspace` holds at least
  // moe_permute_workspace_bytes(T, k, E) bytes (may be undefined when that is 0).
  size_t moe_permute_workspace_bytes(int64_t T, int64_t k, int64_t E) const {
    return do_moe_permute_workspace_bytes(T, k, E);
  }
  Status moe_permute(const Tensor& topk_ids, int64_t num_experts, int64_t tile, Tensor& offsets,
                     Tensor& permuted_to_token, Tensor& expanded_to_permuted, const Tensor& workspace);
  // gemm1: for padded row r of expert e with token t = permuted_to_token[r]:
  //   acc[n] = sum_k (e2m1*e4m3)(a[t,k]) * (e2m1*e4m3)(w13[e*2I + n, k])   (fp32 accumulation)
  //   gate = acc[n] * (a_gs * w13_gs[e]), up = acc[I+n] * (a_gs * w13_gs[e]),
  //   h = bf16(silu(gate) * up), then NVFP4-quantized with global scale out_gs into
  //   out [P, I/2] fp4x2 + out_scales [P, I/16]. Rows with t = -1 get codes 0 and scales 0.
  //   w13 [E*2I, H/2] fp4x2 (rows 0..I-1 gate, I..2I-1 up per expert), w13_scales [E*2I, H/16],
  //   w13_gs [E] f32. E = numel(offsets) - 1; offsets, permuted_to_token, w13_gs contiguous; the
  //   code rows of a and w13 (gemm2: h and w2) 8-byte aligned (address and row stride).
  Status moe_gemm1_fp4(const Tensor& a, const Tensor& a_scales, float a_gs, const Tensor& w13,
                       const Tensor& w13_scales, const Tensor& w13_gs, const Tensor& offsets,
                       const Tensor& permuted_to_token, float out_gs, Tensor& out, Tensor& out_scales);
  // gemm2: out[r, n] = bf16(sum_k deq(h[r,k]) * deq(w2[e*H + n, k]) * (h_gs * w2_gs[e])) for rows
  // r < offsets[E] whose permuted_to_token is >= 0; every other row is written as zeros.
  Status moe_gemm2_fp4(const Tensor& h, const Tensor& h_scales, float h_gs, const Tensor& w2, const Tensor& w2_scales,
                       const Tensor& w2_gs, const Tensor& offsets, const Tensor& permuted_to_token, Tensor& out);
  // out[t, n] = bf16(acc + shared[t, n]) with acc = sum over j = 0..k-1 in order of
  // (w[t,j] * g2[expanded_to_permuted[t*k+j], n]) (no FMA); `shared` may be undefined (adds 0).
  // 1 <= k <= 32; expanded_to_permuted contiguous.
  Status moe_combine(const Tensor& gemm2_out, const Tensor& expanded_to_permuted, const Tensor& topk_weights,
                     const Tensor& shared, Tensor& out);

 protected:
  // `tag` lets a backend name the allocation to an outside tracer (the CUDA backend wraps the
  // driver call in an NVTX range "moeprof.tensor:<scope>/<name>|<category>").
  virtual Result<void*> do_allocate(size_t bytes, MemKind kind, const AllocTag& tag) = 0;
  // The clock of start_op_profile(): host steady_clock unless the backend computes asynchronously
  // (the CUDA backend records events on its stream).
  virtual std::unique_ptr<OpClock> make_op_clock() { return make_host_op_clock(); }
  virtual void do_free(void* ptr, size_t bytes, MemKind kind) = 0;

  // The implementations behind the public ops, called only with arguments that passed the
  // checks above (so they need not repeat them). Same parameters and numeric contract.
  virtual Status do_copy_from_host(Tensor& dst, const void* src) = 0;
  virtual Status do_copy_to_host(const Tensor& src, void* dst) = 0;
  virtual Status do_init_uniform(Tensor& t, uint64_t seed, float scale) = 0;
  virtual Status do_init_e4m3(Tensor& t, uint64_t seed, float lo, float hi) = 0;
  virtual Status do_init_bytes(Tensor& t, uint64_t seed) = 0;
  virtual Status do_init_ints(Tensor& t, uint64_t seed, int32_t lo, int32_t hi) = 0;
  virtual Status do_init_moe_w13(Tensor& w13, Tensor& w13_scales, int64_t /*num_experts*/, uint64_t seed_codes,
                                 uint64_t seed_scales, float lo, float hi) {
    MOEPROF_RETURN_IF_ERROR(do_init_bytes(w13, seed_codes));
    return do_init_e4m3(w13_scales, seed_scales, lo, hi);
  }
  virtual Status do_init_moe_w2(Tensor& w2, Tensor& w2_scales, int64_t /*num_experts*/, uint64_t seed_codes,
                                uint64_t seed_scales, float lo, float hi) {
    MOEPROF_RETURN_IF_ERROR(do_init_bytes(w2, seed_codes));
    return do_init_e4m3(w2_scales, seed_scales, lo, hi);
  }
  virtual Status do_iota(Tensor& t, int32_t start) = 0;
  virtual Status do_embedding(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) = 0;
  virtual Status do_rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& out) = 0;
  virtual Status do_fused_add_rmsnorm(Tensor& x, Tensor& residual, const Tensor& w, float eps) = 0;
  virtual Status do_add_rmsnorm(const Tensor& x, Tensor& residual, const Tensor& w, float eps, Tensor& out) = 0;
  virtual size_t do_linear_workspace_bytes(int64_t /*T*/, int64_t /*N*/, int64_t /*K*/) const { return 0; }
  virtual Status do_linear(const Tensor& x, const Tensor& w, Tensor& out, const Tensor& workspace) = 0;
  virtual Status do_prepare_linear(int64_t /*rows*/, int64_t /*n*/, int64_t /*k*/, DType /*out_dtype*/,
                                   size_t /*workspace_bytes*/) {
    return Status::ok();
  }
  virtual Status do_rope(Tensor& x, int64_t n_heads, int64_t head_stride, int64_t rot_offset, int64_t rot_dim,
                         const Tensor& positions, const Tensor& cos_sin) = 0;
  virtual Status do_mla_build_k(const Tensor& kv, int64_t n_heads, int64_t kv_head_stride, int64_t nope,
                                const Tensor& k_pe, Tensor& k) = 0;
  virtual Status do_kv_cache_write(const Tensor& latent, const Tensor& k_pe, Tensor& cache, int64_t slot0) = 0;
  virtual Status do_causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t n_heads,
                                     int64_t qk_dim, int64_t v_dim, int64_t v_offset, int64_t v_head_stride,
                                     float scale, Tensor& out) = 0;
  virtual Status do_silu_and_mul(const Tensor& x, Tensor& out) = 0;
  virtual Status do_add_inplace(Tensor& dst, const Tensor& src) = 0;
  virtual Status do_all_reduce(Tensor& t) = 0;
  // The row collectives in bytes (Backend has checked the counts and turned rows into bytes; a
  // pointer is null where its tensor is undefined). With one rank (no real ranks) all_to_all
  // copies send_bytes[0] bytes to recv and all_gather has nothing to do; these defaults are for
  // backends that cannot do even that.
  virtual Status do_all_to_all_bytes(const void* /*send*/, const std::vector<size_t>& /*send_bytes*/, void* /*recv*/,
                                     const std::vector<size_t>& /*recv_bytes*/) {
    return Status::run_failure("all_to_all_rows: the " + name() + " backend has no real ranks");
  }
  virtual Status do_all_gather_bytes(void* /*data*/, const std::vector<size_t>& /*bytes*/) {
    return Status::run_failure("all_gather_rows: the " + name() + " backend has no real ranks");
  }
  virtual Status do_kv_cache_store(const Tensor& latent, const Tensor& k_pe, Tensor& cache, const Tensor& slots) = 0;
  virtual Status do_mla_q_absorb(const Tensor& q, const Tensor& kv_b, int64_t n_heads, int64_t nope, int64_t rope,
                                 int64_t v_dim, Tensor& q_abs) = 0;
  virtual Status do_mla_paged_attention(const Tensor& q_abs, const Tensor& cache, const Tensor& req_to_token,
                                        const Tensor& row_req, const Tensor& row_pos, int64_t n_heads, float scale,
                                        Tensor& out, const Tensor& workspace) = 0;
  virtual Status do_mla_v_up(const Tensor& lat, const Tensor& kv_b, int64_t n_heads, int64_t nope, int64_t v_dim,
                             Tensor& out) = 0;
  virtual Status do_router_topk(const Tensor& logits, const Tensor& bias, const RouterParams& p, Tensor& topk_ids,
                                Tensor& topk_weights) = 0;
  virtual Status do_fp4_quantize(const Tensor& x, float global_scale, Tensor& out, Tensor& scales) = 0;
  virtual size_t do_moe_permute_workspace_bytes(int64_t /*T*/, int64_t /*k*/, int64_t /*E*/) const { return 0; }
  virtual Status do_moe_permute(const Tensor& topk_ids, int64_t num_experts, int64_t tile, Tensor& offsets,
                                Tensor& permuted_to_token, Tensor& expanded_to_permuted, const Tensor& workspace) = 0;
  virtual Status do_moe_gemm1_fp4(const Tensor& a, const Tensor& a_scales, float a_gs, const Tensor& w13,
                                  const Tensor& w13_scales, const Tensor& w13_gs, const Tensor& offsets,
                                  const Tensor& permuted_to_token, float out_gs, Tensor& out, Tensor& out_scales) = 0;
  virtual Status do_moe_gemm2_fp4(const Tensor& h, const Tensor& h_scales, float h_gs, const Tensor& w2,
                                  const Tensor& w2_scales, const Tensor& w2_gs, const Tensor& offsets,
                                  const Tensor& permuted_to_token, Tensor& out) = 0;
  virtual Status do_moe_combine(const Tensor& gemm2_out, const Tensor& expanded_to_permuted,
                                const Tensor& topk_weights, const Tensor& shared, Tensor& out) = 0;

 private:
  std::vector<AllocationObserver*> observers_;
  GraphPool* graph_pool_ = nullptr;
  bool unrecorded_ = false;
  std::unique_ptr<OpProfiler> op_profiler_;
  bool op_paused_ = false;
  OpProfiler* op_timer_target() const { return op_paused_ ? nullptr : op_profiler_.get(); }
  // The routed rows (T * top_k) of the latest moe_permute: the useful rows of the expert GEMMs
  // that follow it (their tensors hold the padded rows). 0 before any permutation.
  int64_t moe_rows_ = 0;
  // Of the latest moe_permute while op times are on: the experts its ids route at least one row
  // to, and all the experts (the expert GEMMs read only the hit experts' weights). 0: not counted.
  int64_t moe_hit_experts_ = 0, moe_experts_ = 0;
  // Brackets one public op while profiling (backend_checks.cpp).
  class OpTimer {
   public:
    OpTimer(OpProfiler* p, const char* op, const OpCost& cost) : p_(p), op_(op), cost_(cost) {
      if (p_) p_->begin();
    }
    ~OpTimer() {
      if (p_) p_->end(op_, cost_);
    }
    OpTimer(const OpTimer&) = delete;
    OpTimer& operator=(const OpTimer&) = delete;

   private:
    OpProfiler* p_;
    const char* op_;
    OpCost cost_;
  };

 protected:
  void notify_pool(uint64_t pool, uint64_t reserved_bytes, MemKind kind, const std::string& name) {
    for (AllocationObserver* o : observers_) o->on_pool(pool, reserved_bytes, kind, name);
  }
  uint64_t next_id_ = 1;
};

}  // namespace moeprof
