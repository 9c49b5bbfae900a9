// The DeepSeek-V2-family decoder (MLA attention + MoE with shared and NVFP4 routed experts),
// written once against the Backend op interface. Its allocations mirror SGLang's prefill path
// (see docs/executor.md and ../shared/docs/seed-model.md), in two memory modes:
//  * baseline: attention inputs (post-norm hidden + qkv_a latent) stay referenced until the next
//    layer's attention preparation; every MoE layer allocates a fresh output buffer;
//  * reuse: the layer's input hidden-states buffer is handed to the MoE runner as its output
//    buffer through MoeOutputBufferScope, and attention inputs are cleared right after attention.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "executor/backend.h"
#include "model/config.h"
#include "model/expert_parallel.h"
#include "model/routing.h"

namespace moeprof {

// baseline: SGLang before PR 25379; reuse: after it; fixes: reuse plus the ranked fixes the
// planner finds beyond it (examples/what-if/beyond-seed.rules; docs/executor.md, "Memory modes").
enum class MemoryMode { kBaseline, kReuse, kFixes };
enum class WeightsMode { kAuto, kPerLayer, kShared };
// The --weights option's value: "shared", "per-layer", else auto.
inline WeightsMode weights_mode_from_name(std::string_view name) {
  return name == "shared" ? WeightsMode::kShared : name == "per-layer" ? WeightsMode::kPerLayer : WeightsMode::kAuto;
}
std::string_view memory_mode_name(MemoryMode m);

// The C++ analogue of SGLang's `_moe_output_buf` ContextVar + `moe_output_buffer_ctx`: sets the
// calling thread's provided MoE output buffer for the lifetime of the scope and restores the
// previous one on exit (also when an error unwinds the stack).
class MoeOutputBufferScope {
 public:
  explicit MoeOutputBufferScope(const Tensor* buffer);
  ~MoeOutputBufferScope();
  MoeOutputBufferScope(const MoeOutputBufferScope&) = delete;
  MoeOutputBufferScope& operator=(const MoeOutputBufferScope&) = delete;
  static const Tensor* current();

 private:
  const Tensor* previous_;
};

struct ModelOptions {
  WeightsMode weights = WeightsMode::kAuto;
  uint64_t seed = 0x5EEDull;
  // When set, a provided MoE output buffer must come from the symmetric-memory pool
  // (MemKind::kSymmetric), as with SGLang's symmetric all-reduce.
  bool require_symmetric_output = false;
  // SGLang's symmetric memory (--symm-mem on): the tensors it all-reduces (o_proj and dense MLP
  // outputs, fresh MoE outputs) are allocated with MemKind::kSymmetric, and the reuse mode takes a
  // provided MoE output buffer only when it is symmetric (require_symmetric_output).
  bool symm_mem = false;
  // Testing: these layers' outputs are allocated outside the pool, so the next MoE layer's
  // provided buffer is not symmetric and the runner falls back (docs/executor.md).
  std::vector<int64_t> symm_outside_layers;
  // Collectives are real (one rank of a multi-GPU TP run): the prompt is drawn from the whole
  // vocabulary, as every rank sees the same tokens. With emulated TP the prompt stays inside the
  // rank's vocabulary shard, so the one rank that runs does real work on every token.
  bool real_collectives = false;
  // Called at the start of each layer's weight generation ("weights") and forward ("forward"):
  // (phase, layer index, layer count).
  std::function<void(const char*, int64_t, int64_t)> progress;
  // Serving (executor/serving.h): no per-layer KV cache (the run's paged KV pool holds it, passed
  // to step()), and a rope table of `rope_positions` rows (0: shape.tokens), the context length.
  bool paged_kv = false;
  int64_t rope_positions = 0;
  // Routing skew (model/routing.h, `moeprof run --routing`): the router's own top-k, or a routing
  // drawn on the host (from `seed`) that replaces its ids; and how the expert runner sizes its
  // padded rows (`--moe-rows`): the bound, or the routed counts.
  RoutingSpec routing;
  MoeRows moe_rows = MoeRows::kBound;
  // Expert parallelism (RankShape::ep_size > 1, docs/executor.md "Expert parallelism"): how the
  // rank sizes its dispatch buffers, and whether the other ranks' expert work is computed too,
  // unrecorded (the CPU reference: the outputs are then the model's, as with one rank; its
  // recorded tensors are rank ep_rank's alone).
  EpBuffers ep_buffers = EpBuffers::kExact;
  bool ep_compute_all = false;
  // The rank's experts hold the whole model's values of experts [ep_rank*E/N, ...) (generated for
  // all E, unrecorded, and the slice kept); otherwise ranks other than 0 hold experts 0..E/N-1's
  // values (emulated outputs are not the model's). Set for real ranks on the CPU reference.
  bool ep_model_values = false;
};

// One serving step's batch (executor/serving.h builds it): N token rows, one per token, and the
// paged KV pool it reads and writes.
struct StepInputs {
  // [1, N] i32 each: token ids, positions, the request's row of the request-to-token table, the
  // KV pool slot the row's latent is stored in.
  Tensor ids, positions, row_req, slots;
  // An extend (prefill) step whose requests have no cached prefix: attention is the prefill's
  // (MHA, causal) within each request's rows [begin, begin + len). Empty: every row attends in
  // the absorbed form over the paged cache (decode; chunks with a cached prefix).
  std::vector<std::pair<int64_t, int64_t>> mha_segments;
  // Rows whose logits the step computes, in order (a prefill's last prompt token of each request
  // it completes); all_logits: every row (decode), with one projection.
  std::vector<int64_t> logit_rows;
  bool all_logits = false;
  // Prefixes every allocation's scope ("step.7/decode" -> "step.7/decode/layer.3/attn").
  std::string scope;
  // A drawn routing (ModelOptions::routing): each row's token, routing_key(request, position)
  // (kPaddingRoutingKey for a padded row). Empty: row r is position r of request 0.
  std::vector<uint64_t> route_keys;
  // A CUDA graph's step (capture or replay): its shapes are static, so the MoE runner's routed
  // rows take their worst case (moe_worst_rows), and a drawn routing is read from `routed_ids`,
  // a static input [moe layers x routed_ids_stride, top_k] i32 the replay fills (MoE layer m's
  // rows start at m x routed_ids_stride), not copied from the host inside the graph.
  bool static_shapes = false;
  Tensor routed_ids;
  int64_t routed_ids_stride = 0;
};
// The pool: per layer [slots, kv_lora + rope] bf16, and the request-to-token table.
struct PagedKv {
  std::vector<Tensor>* layers = nullptr;
  const Tensor* req_to_token = nullptr;
};
struct StepOutputs {
  Tensor logits;  // [rows, vocab] f32: logit_rows in order, or every row with all_logits
  Tensor hidden;  // the final normed hidden states [N, H]
};

// Decisions made once per layer at construction (never on the forward's hot path).
struct LayerPlan {
  bool moe = false;
  bool provide_output_buffer = false;  // reuse mode, MoE layer whose input is not the residual
  bool clear_attn_inputs = false;      // reuse and fixes modes
  // fixes mode: the MLP/MoE input freed after its last use (the routed experts' quantization, the
  // dense MLP's gate_up projection), the router logits after top-k, the quantized MoE input
  // (codes and scales) after gemm1.
  bool free_mlp_input_after_use = false;
  bool free_router_logits_after_topk = false;
  bool free_quantized_input_after_gemm1 = false;
  std::string scope;                   // "layer.N"
};

struct MoeRunnerStats {
  int64_t reused = 0;          // provided buffer used as the output
  int64_t fallback = 0;        // buffer provided but rejected (shape/dtype/device/pool mismatch)
  int64_t fresh = 0;           // no buffer provided (baseline, layer 0)
  std::vector<int64_t> fallback_layers;  // the layers whose provided buffer was rejected
  // The routed experts' padded rows over the MoE calls made (a graph replay makes none): as
  // allocated, at the bound T*k + E*(tile-1), and at the worst routing (model/routing.h).
  int64_t calls = 0, rows_allocated = 0, rows_bound = 0, rows_worst = 0;
  // The most tokens one expert received in one call, where the routing was known on the host,
  // and that call's tokens (an expert's capacity); -1 when it never was.
  int64_t max_expert_tokens = -1, max_expert_capacity = 0;
  // Expert parallelism: the rows this rank received over the MoE calls, the rows its dispatch
  // buffers held (= received with exact buffers), the worst case ep_worst_rows summed, and the
  // most rows received in one call.
  int64_t ep_rows_received = 0, ep_rows_buffered = 0, ep_rows_worst = 0, ep_max_rows_received = 0;
};

struct ForwardOutput {
  std::vector<float> logits;           // last token's logits over the rank's vocab shard
  uint64_t logits_hash = 0;            // FNV-1a of the logits' bits (compared across processes)
  uint64_t hidden_hash = 0;            // FNV-1a of the final normed hidden states' bf16 bits
  std::vector<uint16_t> hidden_tail;   // the last token's final hidden states (bf16 bits)
  std::vector<int32_t> input_ids;      // the prompt (deterministic from the seed)
  MoeRunnerStats moe;
  // Wall time from the start of forward() to the logits on the host (synchronized): the prefill.
  // The hashing of the outputs that follows (a check, about 0.25 s for 16K x 7168) is excluded.
  double prefill_seconds = 0;
};

// One dense projection the forward runs: x [rows, k] @ w [n, k]^T -> [rows, n] of `out`.
// The bytes a decode step must read from device memory at least (the floor a memory-bound step is
// measured against): every weight it uses, once per layer that uses it (the routed experts only
// where a row is drawn to them), and the KV cache rows its attention reads. Counted per layer also
// where layers alias one layer's expert weights (--weights shared): each layer's kernels read them
// again, and a layer's experts (GBs at full size) do not stay in L2.
struct StepReads {
  uint64_t weight_bytes = 0;   // all weights read, the routed experts included
  uint64_t expert_bytes = 0;   // of which the routed experts (FP4 codes, block scales, global scales)
  uint64_t kv_bytes = 0;       // latent + rope cache rows read by the attention
  int64_t experts_hit = 0;     // distinct routed experts summed over the MoE layers
};

struct LinearShape {
  std::string name;  // the weight's name in the trace
  int64_t rows = 0, n = 0, k = 0;
  DType out = DType::kBF16;
};
// Every distinct linear shape of one rank's forward (the weights init_weights allocates), and the
// one workspace size they share (the largest Backend::linear_workspace_bytes among them).
std::vector<LinearShape> model_linear_shapes(const ModelConfig& cfg, const RankShape& shape);
size_t model_linear_workspace_bytes(const Backend& backend, const ModelConfig& cfg, const RankShape& shape);
// Backend::prepare_linear for each of them (the CUDA backend times its cuBLASLt candidates once per
// shape). The run drivers call it before a mode's trace opens, so no mode's trace or prefill time
// holds the tuning, and every mode runs the same algorithms.
Status prepare_model_linears(Backend& backend, const ModelConfig& cfg, const RankShape& shape);

class DeepseekModel {
 public:
  // Allocates the weights (deterministic from opt.seed) and the KV cache.
  static Result<std::unique_ptr<DeepseekModel>> create(Backend& backend, const ModelConfig& cfg,
                                                        const RankShape& shape, MemoryMode mode,
                                                        const ModelOptions& opt);
  ~DeepseekModel();
  // One prefill over shape.tokens tokens (ids drawn deterministically from the seed).
  Result<ForwardOutput> forward();
  // One serving step (prefill chunk(s) or decode batch) over the paged KV pool `kv`: the same
  // layers, allocations and memory modes as forward(), with in.ids.numel() rows.
  Result<StepOutputs> step(const StepInputs& in, const PagedKv& kv, MoeRunnerStats* stats);
  const RankShape& shape() const { return shape_; }
  const ModelConfig& config() const { return cfg_; }

  const std::vector<LayerPlan>& plans() const { return plans_; }
  bool weights_shared() const { return weights_shared_; }
  const std::string& weights_note() const { return weights_note_; }
  // The drawn routing (null with the router's own top-k) and the MoE layers' indices, in order.
  const RoutingDraw* routing_draw() const { return draw_ ? &*draw_ : nullptr; }
  const std::vector<int64_t>& moe_layers() const { return moe_layers_; }
  // What a decode step of these rows reads at least (StepReads): needs the drawn routing
  // (routing_draw() non-null), since the router's own top-k is known only on the device.
  // route_keys: one per row (padded rows of a graph batch included); context: each row's
  // positions attended (its position + 1).
  Result<StepReads> decode_reads(const std::vector<uint64_t>& route_keys, const std::vector<int64_t>& context) const;
  // Runs only the routed-expert runner on `moe_in` (for tests of the output-buffer protocol).
  Result<Tensor> run_routed_experts_for_test(int64_t layer, const Tensor& moe_in, const Tensor& topk_ids,
                                             const Tensor& topk_weights, const Tensor& shared_out,
                                             MoeRunnerStats* stats);

  // Read-only access for tests and tools: every weight tensor under its HF-style name, e.g.
  // "model.layers.1.self_attn.q_b_proj.weight" (see deepseek.cpp for the list).
  std::vector<std::pair<std::string, Tensor>> named_weights() const;
  // NVFP4 per-tensor activation scales of a MoE layer: {input_scale of gemm1, of gemm2}.
  std::pair<float, float> moe_activation_scales(int64_t layer) const;
  float softmax_scale() const { return softmax_scale_; }

  struct Weights;  // defined in deepseek.cpp

 private:
  DeepseekModel(Backend& backend, const ModelConfig& cfg, const RankShape& shape, MemoryMode mode,
                const ModelOptions& opt);
  Status init_weights();
  Status layer_forward(int64_t layer, Tensor& hidden, Tensor& residual, MoeRunnerStats* stats);
  Result<Tensor> attention(int64_t layer);
  // moe_in / x are released early when the layer plan says so (fixes mode).
  Result<Tensor> moe(int64_t layer, Tensor& moe_in, MoeRunnerStats* stats);
  // host_ids: the routing on the host when it is known there (drawn), else empty.
  Result<Tensor> routed_experts(int64_t layer, Tensor& moe_in, const Tensor& topk_ids,
                                const Tensor& topk_weights, const Tensor& shared_out, MoeRunnerStats* stats,
                                std::vector<int32_t> host_ids = {});
  // The padded rows of one call (ModelOptions::moe_rows), and the stats.
  // The routed experts under expert parallelism (deepseek_ep.cpp): dispatch, this rank's experts
  // over the rows it receives, combine; host_ids: the routing (T*k expert ids) on the host.
  Result<Tensor> ep_routed_experts(int64_t layer, Tensor& moe_in, const Tensor& topk_w, const Tensor& shared_out,
                                   MoeRunnerStats* stats, const std::vector<int32_t>& host_ids);
  struct EpStage;
  // counts[s][d]: the pairs slice s sends rank d; send: this rank's send buffer (released once
  // sent), nullptr for another rank's stage; pack (this rank's stage): fills send once the receive
  // buffers are placed, just before the all-to-all (it may release moe_in: read no more after).
  Status ep_expert_stage(int64_t layer, int rank, const Tensor& moe_in, const std::vector<int32_t>& host_ids,
                         const std::vector<std::vector<int64_t>>& counts, Tensor* send, const std::function<Status()>* pack,
                         MoeRunnerStats* stats, EpStage* out);
  Result<int64_t> padded_rows(const Tensor& topk_ids, std::vector<int32_t>& host_ids, int64_t tile,
                              MoeRunnerStats* stats);
  Result<Tensor> dense_mlp(int64_t layer, Tensor& x, const Tensor& gate_up, const Tensor& down, const std::string& scope);
  Status op(const std::string& what, Status st, std::initializer_list<const Tensor*> reads,
            std::initializer_list<const Tensor*> writes);
  // The tensor-parallel all-reduce: over the backend's ranks when TP > 1; nothing with TP 1, also
  // where the backend's ranks are EP ranks (their collectives are the dispatch and combine).
  Status tp_all_reduce(Tensor& t) { return shape_.tp_size > 1 ? be_.all_reduce(t) : Status::ok(); }
  Result<Tensor> act(DType dt, int64_t rows, int64_t cols, const std::string& name, const std::string& scope,
                     Category cat = Category::kActivation);
  // An activation whose size follows the routing: worst_bytes is its size under the worst one
  // (AllocTag::worst_bytes; 0: it cannot change); data_dependent as AllocTag's (sized_by_routing()).
  Result<Tensor> routed_act(DType dt, int64_t rows, int64_t cols, uint64_t worst_bytes, bool data_dependent,
                            const std::string& name, const std::string& scope);
  // Whether a tensor sized by the routing's counts takes its size from this run's data: routed
  // rows (`--moe-rows routed`, or EP's exact buffers: `by_counts`), outside a CUDA graph's static
  // shapes, under a routing other than the deterministic worst one.
  bool sized_by_routing(bool by_counts) const;
  // Serving attention: the new latents into the pool, then MHA per request segment or the
  // absorbed form over the pool (deepseek_step.cpp).
  Result<Tensor> paged_attention(int64_t l, const std::string& scope, Tensor& q, Tensor& kv_a_n, const Tensor& k_pe);
  // A tensor the layer all-reduces: symmetric with --symm-mem on (unless the layer is in
  // symm_outside_layers), else an ordinary activation.
  Result<Tensor> reduced_act(int64_t layer, int64_t rows, int64_t cols, const std::string& name, const std::string& scope);
  // The MoE output [T, H] of layer l: the buffer MoeOutputBufferScope provides when it
  // matches exactly (bf16, contiguous, this backend, symmetric where required), else a fresh one
  // (reduced_act, "moe_output" in `scope`); counts reused / fallback / fresh in stats.
  Result<Tensor> moe_output_buffer(int64_t l, int64_t T, const std::string& scope, MoeRunnerStats* stats);

  Backend& be_;
  ModelConfig cfg_;
  RankShape shape_;
  MemoryMode mode_;
  ModelOptions opt_;
  std::vector<LayerPlan> plans_;
  std::unique_ptr<Weights> w_;
  bool weights_shared_ = false;
  std::string weights_note_;
  float softmax_scale_ = 1.0f;
  // attn_tp_context.attn_inputs_: the post-norm hidden and the qkv_a latent of the current layer.
  Tensor positions_;  // [1, T] i32, alive during forward()
  int64_t tokens_ = 0;          // rows of the running forward (shape.tokens) or step
  std::string scope_prefix_;    // "" (forward) or "step.N/kind/" (step)
  const StepInputs* step_ = nullptr;  // the running step, if any
  PagedKv kv_;
  std::optional<RoutingDraw> draw_;
  bool ep_quiet_ = false;  // another EP rank's work (deepseek_ep.cpp): op() records no use
  std::vector<int64_t> moe_layers_;       // indices of the MoE layers
  std::vector<int64_t> moe_ordinal_;      // layer -> its index among the MoE layers (-1: dense)
  struct AttnInputs {
    Tensor post_norm;
    Tensor latent;
  } attn_inputs_;
};

// Bytes of weights one rank holds (per-layer experts vs shared), for the --weights auto choice.
struct WeightBytes {
  uint64_t per_layer = 0;
  uint64_t shared = 0;
};
WeightBytes estimate_weight_bytes(const ModelConfig& cfg, const RankShape& shape);

}  // namespace moeprof
