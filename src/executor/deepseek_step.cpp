// One serving step of the DeepSeek-V2-family model over the paged KV pool (executor/serving.h):
// the forward's layers, allocations and memory modes, with the step's rows instead of the
// prefill's tokens, and attention over the pool (docs/executor.md, "Serving").
#include <algorithm>

#include "executor/deepseek_weights.h"

namespace moeprof {

Result<StepOutputs> DeepseekModel::step(const StepInputs& in, const PagedKv& kv, MoeRunnerStats* stats) {
  if (!opt_.paged_kv) return Status::bad_input("step: this model was built for one prefill (no paged KV pool): run forward()");
  if (kv.layers == nullptr || kv.req_to_token == nullptr || static_cast<int64_t>(kv.layers->size()) != shape_.layers)
    return Status::bad_input("step: the KV pool must hold one cache per layer (" + std::to_string(shape_.layers) + ")");
  const int64_t T = in.ids.numel(), H = cfg_.hidden_size;
  if (T <= 0) return Status::bad_input("step: no rows");
  for (const Tensor* t : {&in.positions, &in.row_req, &in.slots})
    if (!t->defined() || t->numel() != T || t->dtype() != DType::kI32)
      return Status::bad_input("step: positions, row_req and slots must be i32 with one element per row (" + std::to_string(T) + ")");
  for (const auto& [b, n] : in.mha_segments)
    if (b < 0 || n <= 0 || b + n > T) return Status::bad_input("step: an MHA segment lies outside the rows");
  for (int64_t r : in.logit_rows)
    if (r < 0 || r >= T) return Status::bad_input("step: a logit row lies outside the rows");

  // The step's state, cleared whatever happens.
  struct Restore {
    DeepseekModel* m;
    ~Restore() {
      m->step_ = nullptr;
      m->kv_ = {};
      m->scope_prefix_.clear();
      m->positions_.reset();
      m->attn_inputs_ = {};
    }
  } restore{this};
  tokens_ = T;
  step_ = &in;
  kv_ = kv;
  scope_prefix_ = in.scope.empty() ? std::string() : in.scope + "/";
  positions_ = in.positions;

  StepOutputs out;
  MOEPROF_ASSIGN_OR_RETURN(Tensor hidden, act(DType::kBF16, T, H, "embed_out", "model/embed"));
  MOEPROF_RETURN_IF_ERROR(op("embedding", be_.embedding(in.ids, w_->embed, shape_.vocab_start, hidden), {&in.ids}, {&hidden}));
  if (shape_.tp_size > 1)
    MOEPROF_RETURN_IF_ERROR(op("embed_all_reduce", tp_all_reduce(hidden), {&hidden}, {&hidden}));
  Tensor residual;
  MoeRunnerStats local;
  for (int64_t l = 0; l < shape_.layers; ++l)
    MOEPROF_RETURN_IF_ERROR(layer_forward(l, hidden, residual, stats ? stats : &local).with_context("layer " + std::to_string(l)));
  attn_inputs_ = {};
  MOEPROF_RETURN_IF_ERROR(op("final_norm", be_.fused_add_rmsnorm(hidden, residual, w_->final_norm, float(cfg_.rms_norm_eps)),
                             {&hidden, &residual}, {&hidden, &residual}));
  residual.reset();
  const int64_t rows = in.all_logits ? T : static_cast<int64_t>(in.logit_rows.size());
  if (rows > 0) {
    MOEPROF_ASSIGN_OR_RETURN(out.logits, act(DType::kF32, rows, shape_.vocab, "logits", "model/lm_head"));
    if (in.all_logits) {
      MOEPROF_RETURN_IF_ERROR(op("lm_head", be_.linear(hidden, w_->lm_head, out.logits, w_->workspace), {&hidden}, {&out.logits}));
    } else {
      for (size_t i = 0; i < in.logit_rows.size(); ++i) {
        Tensor row = hidden.rows_view(in.logit_rows[i], 1);
        Tensor dst = out.logits.rows_view(static_cast<int64_t>(i), 1);
        MOEPROF_RETURN_IF_ERROR(op("lm_head", be_.linear(row, w_->lm_head, dst, w_->workspace), {&hidden}, {&out.logits}));
      }
    }
  }
  out.hidden = std::move(hidden);
  return out;
}

Result<Tensor> DeepseekModel::paged_attention(int64_t l, const std::string& scope, Tensor& q, Tensor& kv_a_n,
                                              const Tensor& k_pe) {
  const LayerWeights& L = w_->layers[l];
  const int64_t T = tokens_, h = shape_.heads, qk = cfg_.qk_head_dim(), nope = cfg_.qk_nope_head_dim,
                vd = cfg_.v_head_dim, kvl = cfg_.kv_lora_rank, rope = cfg_.qk_rope_head_dim;
  const Tensor& ws = w_->workspace;
  const Tensor& latent = attn_inputs_.latent;
  Tensor& cache = (*kv_.layers)[static_cast<size_t>(l)];
  MOEPROF_RETURN_IF_ERROR(op("kv_cache_store", be_.kv_cache_store(kv_a_n, k_pe, cache, step_->slots),
                             {&kv_a_n, &latent, &step_->slots}, {&cache}));
  Tensor attn;
  if (!step_->mha_segments.empty()) {
    // Extend without a cached prefix: the prefill's attention, causal within each request.
    MOEPROF_ASSIGN_OR_RETURN(Tensor kv, act(DType::kBF16, T, h * (nope + vd), "kv", scope));
    MOEPROF_RETURN_IF_ERROR(op("kv_b_proj", be_.linear(kv_a_n, L.kv_b, kv, ws), {&kv_a_n}, {&kv}));
    kv_a_n.reset();
    MOEPROF_ASSIGN_OR_RETURN(Tensor k, act(DType::kBF16, T, h * qk, "k", scope));
    MOEPROF_RETURN_IF_ERROR(op("build_k", be_.mla_build_k(kv, h, nope + vd, nope, k_pe, k), {&kv, &latent}, {&k}));
    MOEPROF_ASSIGN_OR_RETURN(attn, act(DType::kBF16, T, h * vd, "attn_out", scope));
    for (const auto& [b, n] : step_->mha_segments) {
      Tensor qs = q.rows_view(b, n), ks = k.rows_view(b, n), vs = kv.rows_view(b, n), os = attn.rows_view(b, n);
      MOEPROF_RETURN_IF_ERROR(op("causal_attention",
                                 be_.causal_attention(qs, ks, vs, h, qk, vd, nope, nope + vd, softmax_scale_, os),
                                 {&q, &k, &kv}, {&attn}));
    }
    q.reset();
    k.reset();
    kv.reset();
    return attn;
  }
  // Absorbed: W_UK into the query, attention over the latent + rope cache, W_UV after.
  kv_a_n.reset();
  MOEPROF_ASSIGN_OR_RETURN(Tensor q_abs, act(DType::kBF16, T, h * (kvl + rope), "q_absorbed", scope));
  MOEPROF_RETURN_IF_ERROR(op("mla_q_absorb", be_.mla_q_absorb(q, L.kv_b, h, nope, rope, vd, q_abs), {&q}, {&q_abs}));
  q.reset();
  MOEPROF_ASSIGN_OR_RETURN(Tensor lat, act(DType::kBF16, T, h * kvl, "attn_latent", scope));
  // Few rows (decode): each row's positions are split over blocks, their partial sums kept here.
  Tensor partials;
  if (size_t b = be_.mla_paged_attention_workspace_bytes(T, h, kvl + rope, kvl); b > 0) {
    MOEPROF_ASSIGN_OR_RETURN(partials, act(DType::kF32, 1, static_cast<int64_t>(b / sizeof(float)), "attention_partials", scope,
                                           Category::kWorkspace));
  }
  MOEPROF_RETURN_IF_ERROR(op("mla_paged_attention",
                             be_.mla_paged_attention(q_abs, cache, *kv_.req_to_token, step_->row_req, step_->positions, h,
                                                     softmax_scale_, lat, partials),
                             {&q_abs, &cache, kv_.req_to_token, &step_->row_req, &step_->positions}, {&lat, &partials}));
  partials.reset();
  q_abs.reset();
  MOEPROF_ASSIGN_OR_RETURN(attn, act(DType::kBF16, T, h * vd, "attn_out", scope));
  MOEPROF_RETURN_IF_ERROR(op("mla_v_up", be_.mla_v_up(lat, L.kv_b, h, nope, vd, attn), {&lat}, {&attn}));
  lat.reset();
  return attn;
}

Result<StepReads> DeepseekModel::decode_reads(const std::vector<uint64_t>& route_keys,
                                              const std::vector<int64_t>& context) const {
  if (!draw_) return Status::bad_input("decode_reads: the router's own routing is known only on the device (use --routing)");
  if (route_keys.size() != context.size()) return Status::bad_input("decode_reads: one context length per row");
  const int64_t rows = static_cast<int64_t>(route_keys.size()), E = cfg_.n_routed_experts, k = cfg_.num_experts_per_tok;
  StepReads r;
  auto sum = [](std::initializer_list<const Tensor*> ts) {
    uint64_t b = 0;
    for (const Tensor* t : ts)
      if (t->defined()) b += t->bytes();
    return b;
  };
  // The embedding rows looked up, the final norm and the LM head.
  r.weight_bytes = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cfg_.hidden_size) * 2 + sum({&w_->final_norm, &w_->lm_head});
  uint64_t ctx = 0;
  for (int64_t c : context) ctx += static_cast<uint64_t>(std::max<int64_t>(c, 0));
  const uint64_t kv_row = static_cast<uint64_t>(cfg_.kv_lora_rank + cfg_.qk_rope_head_dim) * 2;
  std::vector<int32_t> ids(static_cast<size_t>(rows * k));
  std::vector<char> hit(static_cast<size_t>(E));
  for (int64_t l = 0; l < shape_.layers; ++l) {
    const LayerWeights& L = w_->layers[static_cast<size_t>(l)];
    r.weight_bytes += sum({&L.input_norm, &L.post_attn_norm, &L.qkv_a, &L.q_proj, &L.kv_a, &L.q_a_norm, &L.kv_a_norm, &L.q_b,
                           &L.kv_b, &L.o_proj});
    r.kv_bytes += ctx * kv_row;
    if (!plans_[static_cast<size_t>(l)].moe) {
      r.weight_bytes += sum({&L.mlp_gate_up, &L.mlp_down});
      continue;
    }
    r.weight_bytes += sum({&L.gate, &L.gate_bias, &L.shared_gate_up, &L.shared_down});
    draw_->draw(l, route_keys, ids.data());
    std::fill(hit.begin(), hit.end(), 0);
    int64_t n = 0;
    for (int32_t e : ids)
      if (e >= 0 && e < E && !hit[static_cast<size_t>(e)]) hit[static_cast<size_t>(e)] = 1, ++n;
    // Each expert's slice of the stacked tensors (rows ordered by expert); the global scales are
    // one f32 per expert.
    const uint64_t per_expert = sum({&L.w13, &L.w13_scales, &L.w2, &L.w2_scales, &L.w13_gs, &L.w2_gs}) / static_cast<uint64_t>(E);
    r.expert_bytes += static_cast<uint64_t>(n) * per_expert;
    r.experts_hit += n;
  }
  r.weight_bytes += r.expert_bytes;
  return r;
}

}  // namespace moeprof
