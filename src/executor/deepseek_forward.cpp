// The DeepSeek-V2-family prefill forward, written once against the Backend op contract, in the
// two memory modes (baseline / reuse); see executor/deepseek_model.h.
#include <chrono>
#include <cmath>
#include <cstring>
#include <algorithm>

#include "executor/deepseek_weights.h"
#include "kernels/common/random.h"

namespace moeprof {

std::string_view memory_mode_name(MemoryMode m) {
  switch (m) {
    case MemoryMode::kBaseline: return "baseline";
    case MemoryMode::kReuse: return "reuse";
    case MemoryMode::kFixes: return "fixes";
  }
  return "baseline";
}

// ---------------------------------------------------------------------------------------------
// Output-buffer scope (per thread).

namespace {
thread_local const Tensor* t_moe_output_buffer = nullptr;
}

MoeOutputBufferScope::MoeOutputBufferScope(const Tensor* buffer) : previous_(t_moe_output_buffer) {
  t_moe_output_buffer = buffer;
}
MoeOutputBufferScope::~MoeOutputBufferScope() { t_moe_output_buffer = previous_; }
const Tensor* MoeOutputBufferScope::current() { return t_moe_output_buffer; }

// ---------------------------------------------------------------------------------------------
// Forward

Result<ForwardOutput> DeepseekModel::forward() {
  const int64_t T = shape_.tokens, H = cfg_.hidden_size;
  const auto t0 = std::chrono::steady_clock::now();
  ForwardOutput out;
  if (opt_.paged_kv) return Status::bad_input("forward: this model was built for serving (paged KV pool): run step()");
  tokens_ = T;
  be_.marker("prefill", true);
  MOEPROF_ASSIGN_OR_RETURN(Tensor ids, act(DType::kI32, 1, T, "input_ids", "model/input"));
  const int64_t id_lo = opt_.real_collectives ? 0 : shape_.vocab_start;
  const int64_t id_hi = opt_.real_collectives
                            ? cfg_.vocab_size
                            : shape_.vocab_start + std::min<int64_t>(shape_.vocab, cfg_.vocab_size - shape_.vocab_start);
  if (shape_.token_offset == 0) {
    MOEPROF_RETURN_IF_ERROR(be_.init_ints(ids, opt_.seed ^ 0x1D5ull, static_cast<int32_t>(id_lo), static_cast<int32_t>(id_hi)));
  } else {  // DP attention: this rank's tokens of the batch's prompt (init_ints' values at their index)
    std::vector<int32_t> host(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t)
      host[static_cast<size_t>(t)] = kern::hash_int(opt_.seed ^ 0x1D5ull, static_cast<uint64_t>(shape_.token_offset + t),
                                                    static_cast<int32_t>(id_lo), static_cast<int32_t>(id_hi));
    MOEPROF_RETURN_IF_ERROR(be_.copy_from_host(ids, host.data()));
  }
  out.input_ids.resize(T);
  MOEPROF_RETURN_IF_ERROR(be_.copy_to_host(ids, out.input_ids.data()));
  MOEPROF_ASSIGN_OR_RETURN(Tensor positions, act(DType::kI32, 1, T, "positions", "model/input"));
  MOEPROF_RETURN_IF_ERROR(be_.iota(positions, 0));
  positions_ = positions;

  MOEPROF_ASSIGN_OR_RETURN(Tensor hidden, act(DType::kBF16, T, H, "embed_out", "model/embed"));
  MOEPROF_RETURN_IF_ERROR(op("embedding", be_.embedding(ids, w_->embed, shape_.vocab_start, hidden), {&ids}, {&hidden}));
  // Vocab-parallel embedding: each rank holds its shard's rows; the all-reduce sums them.
  if (shape_.tp_size > 1)
    MOEPROF_RETURN_IF_ERROR(op("embed_all_reduce", tp_all_reduce(hidden), {&hidden}, {&hidden}));
  ids.reset();
  Tensor residual;
  for (int64_t l = 0; l < shape_.layers; ++l) {
    if (opt_.progress) opt_.progress("forward", l, shape_.layers);
    MOEPROF_RETURN_IF_ERROR(layer_forward(l, hidden, residual, &out.moe).with_context("layer " + std::to_string(l)));
  }
  attn_inputs_ = {};
  // Final norm (fused add of the last residual) and the LM head on the last token only.
  MOEPROF_RETURN_IF_ERROR(op("final_norm", be_.fused_add_rmsnorm(hidden, residual, w_->final_norm, float(cfg_.rms_norm_eps)),
                             {&hidden, &residual}, {&hidden, &residual}));
  residual.reset();
  Tensor last = hidden.rows_view(T - 1, 1);
  MOEPROF_ASSIGN_OR_RETURN(Tensor logits, act(DType::kF32, 1, shape_.vocab, "logits", "model/lm_head"));
  MOEPROF_RETURN_IF_ERROR(op("lm_head", be_.linear(last, w_->lm_head, logits, w_->workspace), {&hidden}, {&logits}));
  out.logits.resize(shape_.vocab);
  MOEPROF_RETURN_IF_ERROR(be_.copy_to_host(logits, out.logits.data()));
  out.prefill_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // What follows checks the outputs; op timing (--op-times) leaves it out like the prefill time.
  Backend::OpProfilePause pause(be_);
  {
    uint64_t lh = 1469598103934665603ull;
    for (float v : out.logits) {
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      lh ^= bits;
      lh *= 1099511628211ull;
    }
    out.logits_hash = lh;
  }
  if (be_.name() == "meta") {
    // Nothing computed: no hash of T x H zeros (a host copy of the whole hidden state, which grew
    // with the tokens a meta run takes in seconds).
    out.hidden_hash = 0;
    out.hidden_tail.assign(static_cast<size_t>(H), 0);
  } else {
    std::vector<uint16_t> host(static_cast<size_t>(T * H));
    MOEPROF_RETURN_IF_ERROR(be_.copy_to_host(hidden, host.data()));
    uint64_t hsh = 1469598103934665603ull;
    for (uint16_t v : host) {
      hsh ^= v;
      hsh *= 1099511628211ull;
    }
    out.hidden_hash = hsh;
    out.hidden_tail.assign(host.end() - H, host.end());
  }
  positions_.reset();
  be_.marker("prefill", false);
  MOEPROF_RETURN_IF_ERROR(be_.synchronize());
  return out;
}

Status DeepseekModel::layer_forward(int64_t l, Tensor& hidden, Tensor& residual, MoeRunnerStats* stats) {
  const LayerPlan& plan = plans_[l];
  const LayerWeights& L = w_->layers[l];
  const int64_t T = tokens_, H = cfg_.hidden_size;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  be_.marker(plan.scope, true);
  // The layer's input ("hidden_states_orig"): referenced by this frame until the layer returns.
  const Tensor x = hidden;

  // 1. prepare_attn: residual add and out-of-place input RMSNorm. Replacing attn_inputs_ drops
  //    the previous layer's post-norm hidden and latent (baseline: they lived until here).
  {
    MOEPROF_ASSIGN_OR_RETURN(Tensor post_norm, act(DType::kBF16, T, H, "post_norm", plan.scope + "/attn"));
    if (!residual.defined()) {
      residual = x;
      MOEPROF_RETURN_IF_ERROR(op("input_layernorm", be_.rmsnorm(x, L.input_norm, eps, post_norm), {&x}, {&post_norm}));
    } else {
      // residual += x, then the norm of the sum, in one pass (x, the layer's input, is only read).
      MOEPROF_RETURN_IF_ERROR(op("input_layernorm", be_.add_rmsnorm(x, residual, L.input_norm, eps, post_norm),
                                 {&x, &residual}, {&residual, &post_norm}));
    }
    attn_inputs_.latent.reset();
    attn_inputs_.post_norm = std::move(post_norm);
  }

  // 2. self-attention
  MOEPROF_ASSIGN_OR_RETURN(Tensor attn_out, attention(l));
  if (plan.clear_attn_inputs) attn_inputs_ = {};  // clear_attn_inputs()

  // 3. post-attention RMSNorm, fused add into the residual; in place: attn_out becomes the MoE input.
  MOEPROF_RETURN_IF_ERROR(op("post_attention_layernorm", be_.fused_add_rmsnorm(attn_out, residual, L.post_attn_norm, eps),
                             {&attn_out, &residual}, {&attn_out, &residual}));

  // 4. MLP
  Tensor mlp_out;
  if (plan.moe) {
    if (plan.provide_output_buffer) {
      MoeOutputBufferScope scope(&x);
      MOEPROF_ASSIGN_OR_RETURN(mlp_out, moe(l, attn_out, stats));
    } else {
      MOEPROF_ASSIGN_OR_RETURN(mlp_out, moe(l, attn_out, stats));
    }
  } else {
    MOEPROF_ASSIGN_OR_RETURN(mlp_out, dense_mlp(l, attn_out, L.mlp_gate_up, L.mlp_down, plan.scope + "/mlp"));
  }
  attn_out.reset();
  hidden = std::move(mlp_out);
  be_.marker(plan.scope, false);
  return Status::ok();
}

Result<Tensor> DeepseekModel::attention(int64_t l) {
  const LayerWeights& L = w_->layers[l];
  const std::string scope = plans_[l].scope + "/attn";
  const int64_t T = tokens_, H = cfg_.hidden_size, h = shape_.heads, qk = cfg_.qk_head_dim(),
                nope = cfg_.qk_nope_head_dim, vd = cfg_.v_head_dim, kvl = cfg_.kv_lora_rank,
                rope = cfg_.qk_rope_head_dim, ql = cfg_.q_lora_rank;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const Tensor& ws = w_->workspace;
  const Tensor& post_norm = attn_inputs_.post_norm;

  Tensor q, kv_a, k_pe;
  if (ql > 0) {
    MOEPROF_ASSIGN_OR_RETURN(Tensor latent, act(DType::kBF16, T, cfg_.latent_dim(), "qkv_a_latent", scope));
    MOEPROF_RETURN_IF_ERROR(op("fused_qkv_a_proj", be_.linear(post_norm, L.qkv_a, latent, ws), {&post_norm}, {&latent}));
    attn_inputs_.latent = latent;
    Tensor q_a = latent.cols_view(0, ql);
    MOEPROF_ASSIGN_OR_RETURN(Tensor q_a_n, act(DType::kBF16, T, ql, "q_a_normed", scope));
    MOEPROF_RETURN_IF_ERROR(op("q_a_layernorm", be_.rmsnorm(q_a, L.q_a_norm, eps, q_a_n), {&latent}, {&q_a_n}));
    MOEPROF_ASSIGN_OR_RETURN(q, act(DType::kBF16, T, h * qk, "q", scope));
    MOEPROF_RETURN_IF_ERROR(op("q_b_proj", be_.linear(q_a_n, L.q_b, q, ws), {&q_a_n}, {&q}));
    kv_a = latent.cols_view(ql, kvl);
    k_pe = latent.cols_view(ql + kvl, rope);
  } else {
    MOEPROF_ASSIGN_OR_RETURN(q, act(DType::kBF16, T, h * qk, "q", scope));
    MOEPROF_RETURN_IF_ERROR(op("q_proj", be_.linear(post_norm, L.q_proj, q, ws), {&post_norm}, {&q}));
    MOEPROF_ASSIGN_OR_RETURN(Tensor latent, act(DType::kBF16, T, kvl + rope, "kv_a_latent", scope));
    MOEPROF_RETURN_IF_ERROR(op("kv_a_proj_with_mqa", be_.linear(post_norm, L.kv_a, latent, ws), {&post_norm}, {&latent}));
    attn_inputs_.latent = latent;
    kv_a = latent.cols_view(0, kvl);
    k_pe = latent.cols_view(kvl, rope);
  }
  const Tensor& latent = attn_inputs_.latent;
  MOEPROF_ASSIGN_OR_RETURN(Tensor kv_a_n, act(DType::kBF16, T, kvl, "kv_a_normed", scope));
  MOEPROF_RETURN_IF_ERROR(op("kv_a_layernorm", be_.rmsnorm(kv_a, L.kv_a_norm, eps, kv_a_n), {&latent}, {&kv_a_n}));
  MOEPROF_RETURN_IF_ERROR(op("rope_q", be_.rope(q, h, qk, nope, rope, positions_, w_->cos_sin), {&q}, {&q}));
  MOEPROF_RETURN_IF_ERROR(op("rope_k", be_.rope(k_pe, 1, rope, 0, rope, positions_, w_->cos_sin), {&latent}, {&latent}));
  Tensor attn;
  if (step_ != nullptr) {
    MOEPROF_ASSIGN_OR_RETURN(attn, paged_attention(l, scope, q, kv_a_n, k_pe));
  } else {
    Tensor& cache = w_->layers[l].kv_cache;
    MOEPROF_RETURN_IF_ERROR(op("kv_cache_write", be_.kv_cache_write(kv_a_n, k_pe, cache, 0), {&kv_a_n, &latent}, {&cache}));
    MOEPROF_ASSIGN_OR_RETURN(Tensor kv, act(DType::kBF16, T, h * (nope + vd), "kv", scope));
    MOEPROF_RETURN_IF_ERROR(op("kv_b_proj", be_.linear(kv_a_n, L.kv_b, kv, ws), {&kv_a_n}, {&kv}));
    kv_a_n.reset();
    MOEPROF_ASSIGN_OR_RETURN(Tensor k, act(DType::kBF16, T, h * qk, "k", scope));
    MOEPROF_RETURN_IF_ERROR(op("build_k", be_.mla_build_k(kv, h, nope + vd, nope, k_pe, k), {&kv, &latent}, {&k}));
    MOEPROF_ASSIGN_OR_RETURN(attn, act(DType::kBF16, T, h * vd, "attn_out", scope));
    MOEPROF_RETURN_IF_ERROR(op("causal_attention",
                               be_.causal_attention(q, k, kv, h, qk, vd, nope, nope + vd, softmax_scale_, attn),
                               {&q, &k, &kv}, {&attn}));
    q.reset();
    k.reset();
    kv.reset();
  }
  kv_a.reset();
  k_pe.reset();
  MOEPROF_ASSIGN_OR_RETURN(Tensor o, reduced_act(l, T, H, "o_proj_out", scope));
  MOEPROF_RETURN_IF_ERROR(op("o_proj", be_.linear(attn, L.o_proj, o, ws), {&attn}, {&o}));
  attn.reset();
  MOEPROF_RETURN_IF_ERROR(op("attn_all_reduce", tp_all_reduce(o), {&o}, {&o}));
  return o;
}

Result<Tensor> DeepseekModel::dense_mlp(int64_t l, Tensor& x, const Tensor& gate_up_w, const Tensor& down_w,
                                        const std::string& scope) {
  const int64_t T = x.rows(), H = cfg_.hidden_size, I = gate_up_w.rows() / 2;
  const Tensor& ws = w_->workspace;
  MOEPROF_ASSIGN_OR_RETURN(Tensor gate_up, act(DType::kBF16, T, 2 * I, "gate_up", scope));
  MOEPROF_RETURN_IF_ERROR(op("gate_up_proj", be_.linear(x, gate_up_w, gate_up, ws), {&x}, {&gate_up}));
  if (plans_[l].free_mlp_input_after_use) x.reset();  // its last use
  MOEPROF_ASSIGN_OR_RETURN(Tensor a, act(DType::kBF16, T, I, "act", scope));
  MOEPROF_RETURN_IF_ERROR(op("silu_and_mul", be_.silu_and_mul(gate_up, a), {&gate_up}, {&a}));
  gate_up.reset();
  MOEPROF_ASSIGN_OR_RETURN(Tensor out, reduced_act(l, T, H, "mlp_out", scope));
  MOEPROF_RETURN_IF_ERROR(op("down_proj", be_.linear(a, down_w, out, ws), {&a}, {&out}));
  a.reset();
  MOEPROF_RETURN_IF_ERROR(op("mlp_all_reduce", tp_all_reduce(out), {&out}, {&out}));
  return out;
}

Result<Tensor> DeepseekModel::moe(int64_t l, Tensor& moe_in, MoeRunnerStats* stats) {
  const LayerWeights& L = w_->layers[l];
  const std::string scope = plans_[l].scope + "/moe";
  const int64_t T = tokens_, E = cfg_.n_routed_experts, k = cfg_.num_experts_per_tok;
  Tensor shared_out;
  if (shape_.shared_inter > 0) {
    // The shared expert's own output is reduced together with the routed output (no all-reduce here).
    const int64_t I = shape_.shared_inter, H = cfg_.hidden_size;
    const Tensor& ws = w_->workspace;
    const std::string ss = scope + "/shared";
    MOEPROF_ASSIGN_OR_RETURN(Tensor gate_up, act(DType::kBF16, T, 2 * I, "gate_up", ss));
    MOEPROF_RETURN_IF_ERROR(op("shared_gate_up_proj", be_.linear(moe_in, L.shared_gate_up, gate_up, ws), {&moe_in}, {&gate_up}));
    MOEPROF_ASSIGN_OR_RETURN(Tensor a, act(DType::kBF16, T, I, "act", ss));
    MOEPROF_RETURN_IF_ERROR(op("shared_silu_and_mul", be_.silu_and_mul(gate_up, a), {&gate_up}, {&a}));
    gate_up.reset();
    MOEPROF_ASSIGN_OR_RETURN(shared_out, act(DType::kBF16, T, H, "shared_output", ss));
    MOEPROF_RETURN_IF_ERROR(op("shared_down_proj", be_.linear(a, L.shared_down, shared_out, ws), {&a}, {&shared_out}));
  }
  MOEPROF_ASSIGN_OR_RETURN(Tensor logits, act(DType::kF32, T, E, "router_logits", scope + "/router"));
  MOEPROF_RETURN_IF_ERROR(op("router_gate", be_.linear(moe_in, L.gate, logits, w_->workspace), {&moe_in}, {&logits}));
  MOEPROF_ASSIGN_OR_RETURN(Tensor topk_ids, act(DType::kI32, T, k, "topk_ids", scope + "/router"));
  MOEPROF_ASSIGN_OR_RETURN(Tensor topk_w, act(DType::kF32, T, k, "topk_weights", scope + "/router"));
  RouterParams rp;
  rp.top_k = static_cast<int>(k);
  rp.n_group = static_cast<int>(cfg_.n_group);
  rp.topk_group = static_cast<int>(cfg_.topk_group);
  rp.method = cfg_.topk_method;
  rp.scoring = cfg_.scoring_func;
  rp.norm_topk_prob = cfg_.norm_topk_prob;
  rp.routed_scaling_factor = static_cast<float>(cfg_.routed_scaling_factor);
  MOEPROF_RETURN_IF_ERROR(op("router_topk", be_.router_topk(logits, L.gate_bias, rp, topk_ids, topk_w), {&logits},
                             {&topk_ids, &topk_w}));
  if (plans_[l].free_router_logits_after_topk) logits.reset();
  // A drawn routing (--routing) replaces the router's ids; its weights stay the router's, slot by
  // slot. In a CUDA graph's step the ids come from the graph's static input (the replay fills
  // it); otherwise they are drawn here and copied in.
  std::vector<int32_t> host_ids;
  if (draw_) {
    if (step_ != nullptr && step_->routed_ids.defined()) {
      Tensor drawn = step_->routed_ids.rows_view(moe_ordinal_[static_cast<size_t>(l)] * step_->routed_ids_stride, T);
      // Router logits, top-k and the shared output stay referenced until the MoE call returns.
      return routed_experts(l, moe_in, drawn, topk_w, shared_out, stats);
    }
    std::vector<uint64_t> keys;
    if (step_ != nullptr && !step_->route_keys.empty()) {
      keys = step_->route_keys;
    } else {
      keys.resize(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t) keys[static_cast<size_t>(t)] = routing_key(0, static_cast<uint64_t>(shape_.token_offset + t));
    }
    if (static_cast<int64_t>(keys.size()) != T) return Status::bad_input("moe: the step's routing keys must be one per row");
    host_ids.resize(static_cast<size_t>(T * k));
    draw_->draw(l, keys, host_ids.data());
    MOEPROF_RETURN_IF_ERROR(op("routing_draw", be_.copy_from_host(topk_ids, host_ids.data()), {}, {&topk_ids}));
  }
  if (shape_.ep_size > 1) {
    // Expert parallelism (deepseek_ep.cpp) dispatches by the routing on the host: the router's
    // own ids are read back (a synchronizing copy, as the all-to-all's counts need them there).
    if (host_ids.empty()) {
      if (!be_.computes())
        return Status::bad_input("--ep on the " + be_.name() +
                                 " backend needs a drawn routing (--routing uniform, zipf:S, hot:N or worst): it computes no router");
      host_ids.resize(static_cast<size_t>(T * k));
      MOEPROF_RETURN_IF_ERROR(be_.copy_to_host(topk_ids, host_ids.data()));
    }
    if (shape_.dp_attention) {
      // DP attention: every rank routes its own request's tokens, and the dispatch needs the whole
      // batch's routing. A drawn routing is drawn for every token of the batch (the rank's own
      // rows get the draws they had above); the router's ids are all-gathered from the ranks.
      const int64_t B = shape_.batch_tokens;
      std::vector<int32_t> all(static_cast<size_t>(B * k));
      if (draw_) {
        std::vector<uint64_t> keys(static_cast<size_t>(B));
        for (int64_t t = 0; t < B; ++t) keys[static_cast<size_t>(t)] = routing_key(0, static_cast<uint64_t>(t));
        draw_->draw(l, keys, all.data());
      } else if (be_.collectives_real()) {
        MOEPROF_ASSIGN_OR_RETURN(Tensor ids_all, act(DType::kI32, B, k, "topk_ids_all", scope + "/router", Category::kCommunication));
        Tensor own = ids_all.rows_view(shape_.token_offset, T);
        MOEPROF_RETURN_IF_ERROR(be_.copy_from_host(own, host_ids.data()));
        std::vector<int64_t> slices(static_cast<size_t>(shape_.ep_size));
        for (int s = 0; s < shape_.ep_size; ++s) slices[static_cast<size_t>(s)] = ep_token_slice(B, shape_.ep_size, s).size();
        MOEPROF_RETURN_IF_ERROR(op("router_all_gather", be_.all_gather_rows(ids_all, slices), {&ids_all}, {&ids_all}));
        MOEPROF_RETURN_IF_ERROR(be_.copy_to_host(ids_all, all.data()));
      } else {
        return Status::bad_input("--dp on one device needs a drawn routing (--routing uniform, zipf:S, hot:N or worst): the other "
                                 "ranks' routers run on their own requests");
      }
      host_ids = std::move(all);
    }
    return ep_routed_experts(l, moe_in, topk_w, shared_out, stats, host_ids);
  }
  // Router logits, top-k and the shared output stay referenced until the MoE call returns.
  return routed_experts(l, moe_in, topk_ids, topk_w, shared_out, stats, std::move(host_ids));
}

Result<int64_t> DeepseekModel::padded_rows(const Tensor& topk_ids, std::vector<int32_t>& host_ids, int64_t tile,
                                           MoeRunnerStats* stats) {
  const int64_t T = topk_ids.rows(), E = cfg_.n_routed_experts, k = cfg_.num_experts_per_tok;
  const int64_t bound = moe_bound_rows(T, k, E, tile);
  const int64_t worst = opt_.moe_rows == MoeRows::kRouted ? moe_worst_rows(T, k, E, tile) : bound;
  const bool static_shapes = step_ != nullptr && step_->static_shapes;
  int64_t rows = bound;
  if (opt_.moe_rows == MoeRows::kRouted && static_shapes) {
    rows = worst;  // a graph cannot size by its data
  } else if (opt_.moe_rows == MoeRows::kRouted && host_ids.empty()) {
    // The router's own ids: the counts reach the host (a synchronizing copy, as a runner sized by
    // the counts needs them there). The meta backend computes no router to count.
    if (!be_.computes())
      return Status::bad_input("--moe-rows routed on the " + be_.name() +
                               " backend needs a drawn routing (--routing uniform, zipf:S, hot:N or worst): it computes no router");
    host_ids.resize(static_cast<size_t>(T * k));
    MOEPROF_RETURN_IF_ERROR(be_.copy_to_host(topk_ids, host_ids.data()));
  }
  if (!host_ids.empty()) {
    for (int32_t e : host_ids)
      if (e < 0 || e >= E) return Status::bad_input("moe: expert id " + std::to_string(e) + " outside [0, " + std::to_string(E) + ")");
    const std::vector<int64_t> counts = expert_counts(host_ids.data(), T * k, E);
    if (opt_.moe_rows == MoeRows::kRouted && !static_shapes) rows = moe_routed_rows(counts, tile);
    const int64_t top = *std::max_element(counts.begin(), counts.end());
    // The largest share of an expert's capacity seen.
    if (stats != nullptr && (stats->max_expert_tokens < 0 || top * stats->max_expert_capacity > stats->max_expert_tokens * T)) {
      stats->max_expert_tokens = top;
      stats->max_expert_capacity = T;
    }
  }
  if (stats != nullptr) {
    ++stats->calls;
    stats->rows_allocated += rows;
    stats->rows_bound += bound;
    stats->rows_worst += worst;
  }
  return rows;
}

Result<Tensor> DeepseekModel::routed_experts(int64_t l, Tensor& moe_in, const Tensor& topk_ids,
                                             const Tensor& topk_w, const Tensor& shared_out, MoeRunnerStats* stats,
                                             std::vector<int32_t> host_ids) {
  const LayerWeights& L = w_->layers[l];
  const std::string scope = plans_[l].scope + "/moe/experts";
  const int64_t T = moe_in.rows(), H = cfg_.hidden_size, E = cfg_.n_routed_experts, k = cfg_.num_experts_per_tok,
                I = shape_.moe_inter;
  const int64_t tile = moe_tile_rows(T, k, E);
  // The padded rows: T*k + E*(tile-1) (--moe-rows bound), or the routed counts' (routed).
  MOEPROF_ASSIGN_OR_RETURN(const int64_t P, padded_rows(topk_ids, host_ids, tile, stats));
  // Their size under the worst routing of the router's capacity (AllocTag::worst_bytes).
  const int64_t Pw = opt_.moe_rows == MoeRows::kRouted ? moe_worst_rows(T, k, E, tile) : P;
  auto worst_bytes = [&](DType dt, int64_t cols) {
    return Pw == P ? uint64_t{0} : static_cast<uint64_t>(Pw) * static_cast<uint64_t>(cols) * dtype_size(dt);
  };
  const bool dd = sized_by_routing(opt_.moe_rows == MoeRows::kRouted);

  MOEPROF_ASSIGN_OR_RETURN(Tensor out, moe_output_buffer(l, T, scope, stats));

  MOEPROF_ASSIGN_OR_RETURN(Tensor hs_fp4, act(DType::kFP4x2, T, H / 2, "hs_fp4", scope));
  MOEPROF_ASSIGN_OR_RETURN(Tensor hs_sf, act(DType::kE4M3, T, H / 16, "hs_scales", scope));
  MOEPROF_RETURN_IF_ERROR(op("fp4_quantize", be_.fp4_quantize(moe_in, L.a_gs, hs_fp4, hs_sf), {&moe_in}, {&hs_fp4, &hs_sf}));
  if (plans_[l].free_mlp_input_after_use) moe_in.reset();  // its last use
  MOEPROF_ASSIGN_OR_RETURN(Tensor offsets, act(DType::kI32, 1, E + 1, "expert_offsets", scope));
  MOEPROF_ASSIGN_OR_RETURN(Tensor p2t, routed_act(DType::kI32, 1, P, worst_bytes(DType::kI32, 1), dd, "permuted_to_token", scope));
  MOEPROF_ASSIGN_OR_RETURN(Tensor e2p, act(DType::kI32, 1, T * k, "expanded_to_permuted", scope));
  Tensor perm_ws;
  if (size_t b = be_.moe_permute_workspace_bytes(T, k, E); b > 0) {
    MOEPROF_ASSIGN_OR_RETURN(perm_ws, act(DType::kU8, 1, static_cast<int64_t>(b), "permute_workspace", scope,
                                          Category::kWorkspace));
  }
  MOEPROF_RETURN_IF_ERROR(op("moe_permute", be_.moe_permute(topk_ids, E, tile, offsets, p2t, e2p, perm_ws), {&topk_ids},
                             {&offsets, &p2t, &e2p}));
  perm_ws.reset();
  MOEPROF_ASSIGN_OR_RETURN(Tensor g1, routed_act(DType::kFP4x2, P, I / 2, worst_bytes(DType::kFP4x2, I / 2), dd, "gemm1_out_fp4", scope));
  MOEPROF_ASSIGN_OR_RETURN(Tensor g1_sf, routed_act(DType::kE4M3, P, I / 16, worst_bytes(DType::kE4M3, I / 16), dd, "gemm1_out_scales", scope));
  MOEPROF_RETURN_IF_ERROR(op("moe_gemm1_fp4",
                             be_.moe_gemm1_fp4(hs_fp4, hs_sf, L.a_gs, L.w13, L.w13_scales, L.w13_gs, offsets, p2t,
                                               L.h_gs, g1, g1_sf),
                             {&hs_fp4, &hs_sf, &offsets, &p2t}, {&g1, &g1_sf}));
  if (plans_[l].free_quantized_input_after_gemm1) {
    hs_fp4.reset();
    hs_sf.reset();
  }
  MOEPROF_ASSIGN_OR_RETURN(Tensor g2, routed_act(DType::kBF16, P, H, worst_bytes(DType::kBF16, H), dd, "gemm2_out", scope));
  MOEPROF_RETURN_IF_ERROR(op("moe_gemm2_fp4",
                             be_.moe_gemm2_fp4(g1, g1_sf, L.h_gs, L.w2, L.w2_scales, L.w2_gs, offsets, p2t, g2),
                             {&g1, &g1_sf, &offsets, &p2t}, {&g2}));
  MOEPROF_RETURN_IF_ERROR(op("moe_combine", be_.moe_combine(g2, e2p, topk_w, shared_out, out),
                             {&g2, &e2p, &topk_w, &shared_out}, {&out}));
  MOEPROF_RETURN_IF_ERROR(op("moe_all_reduce", tp_all_reduce(out), {&out}, {&out}));
  // The runner's buffers are released when it returns (one fused kernel call in trtllm).
  return out;
}

Result<Tensor> DeepseekModel::run_routed_experts_for_test(int64_t layer, const Tensor& moe_in, const Tensor& topk_ids,
                                                          const Tensor& topk_weights, const Tensor& shared_out,
                                                          MoeRunnerStats* stats) {
  if (layer < 0 || layer >= shape_.layers || !plans_[layer].moe) return Status::bad_input("not a MoE layer");
  Tensor in = moe_in;  // the runner may release its reference (fixes mode)
  return routed_experts(layer, in, topk_ids, topk_weights, shared_out, stats);
}


Result<Tensor> DeepseekModel::moe_output_buffer(int64_t l, int64_t T, const std::string& scope, MoeRunnerStats* stats) {
  const int64_t H = cfg_.hidden_size;
  if (const Tensor* buf = MoeOutputBufferScope::current()) {
    const bool match = buf->defined() && buf->rows() == T && buf->cols() == H && buf->contiguous() &&
                       buf->dtype() == DType::kBF16 && buf->storage()->backend() == &be_ &&
                       (!opt_.require_symmetric_output || buf->storage()->mem_kind() == MemKind::kSymmetric);
    if (match) {
      ++stats->reused;
      return *buf;
    }
    ++stats->fallback;
    stats->fallback_layers.push_back(l);
  } else {
    ++stats->fresh;
  }
  return reduced_act(l, T, H, "moe_output", scope);
}

}  // namespace moeprof
