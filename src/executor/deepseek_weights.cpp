// Weight generation and the model's set-up: deterministic weights from the seed (bit-identical on
// every backend), the KV cache, the rope table, the --weights auto decision.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/thousands.h"
#include "executor/deepseek_weights.h"
#include "kernels/common/fp_formats.h"
#include "kernels/common/random.h"

namespace moeprof {

namespace {

uint64_t mix_seed(uint64_t seed, uint64_t layer, uint64_t tensor) {
  return kern::hash64(seed, layer * 1000003ull + tensor);
}

double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// cos/sin table [positions, rot_dim]: cos in the first rot_dim/2 columns, sin in the rest, with
// DeepSeek's YaRN frequency correction and mscale when configured.
std::vector<float> rope_table(const ModelConfig& c, int64_t positions) {
  const int64_t dim = c.qk_rope_head_dim, half = dim / 2;
  const double base = c.rope_theta;
  std::vector<double> inv_freq(half);
  double mscale = 1.0;
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = 1.0 / std::pow(base, double(2 * i) / double(dim));
  if (c.rope_scaling.type == "yarn" && c.rope_scaling.factor > 1.0) {
    const auto& rs = c.rope_scaling;
    auto corr_dim = [&](double rot) {
      return (double(dim) * std::log(rs.original_max_position_embeddings / (rot * 2.0 * std::numbers::pi))) /
             (2.0 * std::log(base));
    };
    double low = std::max(0.0, std::floor(corr_dim(rs.beta_fast)));
    double high = std::min(double(dim - 1), std::ceil(corr_dim(rs.beta_slow)));
    if (high == low) high += 0.001;
    for (int64_t i = 0; i < half; ++i) {
      double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
      double extra_mask = 1.0 - ramp;
      double f_extra = inv_freq[i], f_inter = inv_freq[i] / rs.factor;
      inv_freq[i] = f_inter * (1.0 - extra_mask) + f_extra * extra_mask;
    }
    mscale = yarn_mscale(rs.factor, rs.mscale) / yarn_mscale(rs.factor, rs.mscale_all_dim);
  }
  std::vector<float> t(static_cast<size_t>(positions * dim));
  for (int64_t p = 0; p < positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      double a = double(p) * inv_freq[i];
      t[p * dim + i] = static_cast<float>(std::cos(a) * mscale);
      t[p * dim + half + i] = static_cast<float>(std::sin(a) * mscale);
    }
  }
  return t;
}

}  // namespace

WeightBytes estimate_weight_bytes(const ModelConfig& c, const RankShape& s) {
  // In 128 bits: a config at the fields' limits must not wrap into a small figure (saturated below).
  using U = unsigned __int128;
  const U H = static_cast<uint64_t>(c.hidden_size), h = static_cast<uint64_t>(s.heads), qk = static_cast<uint64_t>(c.qk_head_dim());
  U attn = 2 * H * 2;  // norms
  if (c.q_lora_rank > 0)
    attn += 2 * (H * c.latent_dim() + c.q_lora_rank + h * qk * c.q_lora_rank);
  else
    attn += 2 * (H * h * qk + H * (c.kv_lora_rank + c.qk_rope_head_dim));
  attn += 2 * (c.kv_lora_rank + h * (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank + H * h * c.v_head_dim);
  const U dense = 2 * (3 * H * s.dense_inter);
  const U E = static_cast<uint64_t>(c.n_routed_experts / s.ep_size), I = static_cast<uint64_t>(s.moe_inter);  // the rank's experts
  const U experts = E * (2 * I * H / 2 + 2 * I * H / 16 + H * I / 2 + H * I / 16) + 8 * E;
  // The router (every rank holds all experts' gate rows) and, with noaux_tc, its score bias (f32).
  const U Eall = static_cast<uint64_t>(c.n_routed_experts);
  const U moe_other = 2 * (Eall * H + 3 * H * s.shared_inter) + (c.topk_method == TopkMethod::kNoauxTc ? 4 * Eall : 0);
  WeightBytes b;
  U common = 2 * (2 * static_cast<U>(static_cast<uint64_t>(s.vocab)) * H + H);
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < s.layers; ++l) {
    common += attn;
    if (c.is_moe_layer(l)) {
      common += moe_other;
      ++moe_layers;
    } else {
      common += dense;
    }
  }
  auto sat = [](U v) { return v > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(v); };
  b.per_layer = sat(common + experts * static_cast<U>(moe_layers));
  b.shared = sat(common + (moe_layers > 0 ? experts : 0));
  return b;
}

DeepseekModel::DeepseekModel(Backend& backend, const ModelConfig& cfg, const RankShape& shape, MemoryMode mode,
                             const ModelOptions& opt)
    : be_(backend), cfg_(cfg), shape_(shape), mode_(mode), opt_(opt), w_(std::make_unique<Weights>()) {
  if (opt_.symm_mem) opt_.require_symmetric_output = true;  // SGLang: the provided buffer must lie in the pool
  // Per-layer decisions, computed once.
  plans_.resize(shape_.layers);
  moe_ordinal_.assign(static_cast<size_t>(shape_.layers), -1);
  for (int64_t l = 0; l < shape_.layers; ++l) {
    LayerPlan& p = plans_[l];
    p.moe = cfg_.is_moe_layer(l);
    if (p.moe) {
      moe_ordinal_[static_cast<size_t>(l)] = static_cast<int64_t>(moe_layers_.size());
      moe_layers_.push_back(l);
    }
    p.scope = "layer." + std::to_string(l);
    // Layer 0's input is the embedding output, which also becomes the residual: never dead.
    const bool reuse = mode_ == MemoryMode::kReuse || mode_ == MemoryMode::kFixes;
    const bool fixes = mode_ == MemoryMode::kFixes;
    p.provide_output_buffer = reuse && p.moe && l > 0;
    p.clear_attn_inputs = reuse;
    p.free_mlp_input_after_use = fixes;
    p.free_router_logits_after_topk = fixes && p.moe;
    p.free_quantized_input_after_gemm1 = fixes && p.moe;
  }
  softmax_scale_ = static_cast<float>(1.0 / std::sqrt(double(cfg_.qk_head_dim())));
  if (cfg_.rope_scaling.type == "yarn" && cfg_.rope_scaling.mscale_all_dim > 0) {
    double m = yarn_mscale(cfg_.rope_scaling.factor, cfg_.rope_scaling.mscale_all_dim);
    softmax_scale_ = static_cast<float>(softmax_scale_ * m * m);
  }
}

DeepseekModel::~DeepseekModel() = default;

Result<std::unique_ptr<DeepseekModel>> DeepseekModel::create(Backend& backend, const ModelConfig& cfg,
                                                              const RankShape& shape, MemoryMode mode,
                                                              const ModelOptions& opt) {
  std::unique_ptr<DeepseekModel> m(new DeepseekModel(backend, cfg, shape, mode, opt));
  if (opt.routing.forced()) {
    // The draws' seed follows the run's: the same routing in every memory mode and on every backend.
    MOEPROF_ASSIGN_OR_RETURN(RoutingDraw d, RoutingDraw::create(opt.routing, cfg.n_routed_experts, cfg.num_experts_per_tok,
                                                                opt.seed ^ 0x4F07E5D4A11ull));
    m->draw_ = std::move(d);
  }
  WeightBytes wb = estimate_weight_bytes(cfg, shape);
  switch (opt.weights) {
    case WeightsMode::kShared:
      m->weights_shared_ = true;
      m->weights_note_ = "all MoE layers alias one layer's expert weights (--weights shared)";
      break;
    case WeightsMode::kPerLayer:
      break;
    case WeightsMode::kAuto: {
      size_t free_b = 0, total_b = 0;
      if (backend.memory_info(&free_b, &total_b)) {
        // Leave room for the KV cache and activations: take per-layer weights only when they use
        // at most 85% of the free memory.
        if (wb.per_layer > static_cast<uint64_t>(0.85 * double(free_b))) {
          m->weights_shared_ = true;
          m->weights_note_ = "per-layer weights (" + group_thousands(wb.per_layer) + " B, the parameters) are more than 85% of the " +
                             group_thousands(free_b) +
                             " B free (room is left for the KV cache and activations): all MoE layers alias one layer's expert "
                             "weights (activation memory is unchanged)";
        }
      }
      break;
    }
  }
  MOEPROF_RETURN_IF_ERROR(m->init_weights());
  return m;
}

std::vector<LinearShape> model_linear_shapes(const ModelConfig& cfg, const RankShape& shape) {
  const int64_t T = shape.tokens, H = cfg.hidden_size, h = shape.heads, qk = cfg.qk_head_dim(),
                nope = cfg.qk_nope_head_dim, vd = cfg.v_head_dim, kvl = cfg.kv_lora_rank, rope = cfg.qk_rope_head_dim,
                ql = cfg.q_lora_rank;
  std::vector<LinearShape> v;
  auto add = [&](const char* name, int64_t rows, int64_t n, int64_t k, DType out = DType::kBF16) {
    for (const LinearShape& s : v)
      if (s.rows == rows && s.n == n && s.k == k && s.out == out) return;
    v.push_back(LinearShape{name, rows, n, k, out});
  };
  if (ql > 0) {
    add("fused_qkv_a_proj_with_mqa", T, cfg.latent_dim(), H);
    add("q_b_proj", T, h * qk, ql);
  } else {
    add("q_proj", T, h * qk, H);
    add("kv_a_proj_with_mqa", T, kvl + rope, H);
  }
  add("kv_b_proj", T, h * (nope + vd), kvl);
  add("o_proj", T, H, h * vd);
  bool dense = false, moe = false;
  for (int64_t l = 0; l < shape.layers; ++l) (cfg.is_moe_layer(l) ? moe : dense) = true;
  if (dense) {
    add("gate_up_proj", T, 2 * shape.dense_inter, H);
    add("down_proj", T, H, shape.dense_inter);
  }
  if (moe) {
    add("gate", T, cfg.n_routed_experts, H, DType::kF32);
    if (shape.shared_inter > 0) {
      add("shared_experts.gate_up_proj", T, 2 * shape.shared_inter, H);
      add("shared_experts.down_proj", T, H, shape.shared_inter);
    }
  }
  add("lm_head", 1, shape.vocab, H, DType::kF32);  // the last token only
  return v;
}

size_t model_linear_workspace_bytes(const Backend& backend, const ModelConfig& cfg, const RankShape& shape) {
  size_t ws = 0;
  for (const LinearShape& s : model_linear_shapes(cfg, shape))
    ws = std::max(ws, backend.linear_workspace_bytes(s.rows, s.n, s.k));
  return ws;
}

Status prepare_model_linears(Backend& backend, const ModelConfig& cfg, const RankShape& shape) {
  const size_t ws = model_linear_workspace_bytes(backend, cfg, shape);
  for (const LinearShape& s : model_linear_shapes(cfg, shape))
    MOEPROF_RETURN_IF_ERROR(backend.prepare_linear(s.rows, s.n, s.k, s.out, ws).with_context("preparing " + s.name));
  return Status::ok();
}

Result<Tensor> DeepseekModel::act(DType dt, int64_t rows, int64_t cols, const std::string& name,
                                  const std::string& scope, Category cat) {
  return be_.empty(dt, rows, cols, AllocTag{name, scope_prefix_ + scope, cat});
}

Result<Tensor> DeepseekModel::routed_act(DType dt, int64_t rows, int64_t cols, uint64_t worst_bytes, bool data_dependent,
                                         const std::string& name, const std::string& scope) {
  return be_.empty(dt, rows, cols, AllocTag{name, scope_prefix_ + scope, Category::kActivation, worst_bytes, data_dependent});
}

bool DeepseekModel::sized_by_routing(bool by_counts) const {
  const bool static_shapes = step_ != nullptr && step_->static_shapes;
  return by_counts && !static_shapes && opt_.routing.kind != RoutingKind::kWorst;
}

Result<Tensor> DeepseekModel::reduced_act(int64_t layer, int64_t rows, int64_t cols, const std::string& name,
                                          const std::string& scope) {
  const bool outside = std::find(opt_.symm_outside_layers.begin(), opt_.symm_outside_layers.end(), layer) !=
                       opt_.symm_outside_layers.end();
  if (!opt_.symm_mem || outside) return act(DType::kBF16, rows, cols, name, scope);
  return be_.empty(DType::kBF16, rows, cols, AllocTag{name, scope_prefix_ + scope, Category::kActivation}, MemKind::kSymmetric);
}

Status DeepseekModel::op(const std::string& what, Status st, std::initializer_list<const Tensor*> reads,
                         std::initializer_list<const Tensor*> writes) {
  if (!st.is_ok()) return st.with_context(what);
  if (!ep_quiet_) be_.note_use(what, reads, writes);
  return st;
}

Status DeepseekModel::init_weights() {
  const int64_t H = cfg_.hidden_size, h = shape_.heads, qk = cfg_.qk_head_dim(), nope = cfg_.qk_nope_head_dim,
                vd = cfg_.v_head_dim, kvl = cfg_.kv_lora_rank, rope = cfg_.qk_rope_head_dim, ql = cfg_.q_lora_rank;
  const uint64_t seed = opt_.seed;
  uint64_t tensor_idx = 0;
  auto alloc = [&](DType dt, int64_t r, int64_t c, const std::string& name, const std::string& scope,
                   Category cat = Category::kWeights) { return be_.empty(dt, r, c, AllocTag{name, scope, cat}); };
  // bf16 linear weight [N, K], uniform with variance 1/K.
  auto linear_w = [&](int64_t layer, int64_t n, int64_t k, const std::string& name,
                      const std::string& scope) -> Result<Tensor> {
    MOEPROF_ASSIGN_OR_RETURN(Tensor t, alloc(DType::kBF16, n, k, name, scope));
    MOEPROF_RETURN_IF_ERROR(be_.init_uniform(t, mix_seed(seed, layer, ++tensor_idx), std::sqrt(3.0f / float(k))));
    return t;
  };
  // Host-generated small vectors: v = center + spread * (2u - 1).
  auto host_vec = [&](int64_t layer, DType dt, int64_t n, float center, float spread, const std::string& name,
                      const std::string& scope) -> Result<Tensor> {
    MOEPROF_ASSIGN_OR_RETURN(Tensor t, alloc(dt, 1, n, name, scope));
    const uint64_t s = mix_seed(seed, layer, ++tensor_idx);
    if (dt == DType::kBF16) {
      std::vector<uint16_t> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = kern::f32_to_bf16(center + spread * (2.0f * kern::hash_unit(s, i) - 1.0f));
      MOEPROF_RETURN_IF_ERROR(be_.copy_from_host(t, v.data()));
    } else {
      std::vector<float> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = center + spread * (2.0f * kern::hash_unit(s, i) - 1.0f);
      MOEPROF_RETURN_IF_ERROR(be_.copy_from_host(t, v.data()));
    }
    return t;
  };

  Weights& W = *w_;
  MOEPROF_ASSIGN_OR_RETURN(W.embed, linear_w(-1, shape_.vocab, H, "embed_tokens", "model/embed"));
  MOEPROF_ASSIGN_OR_RETURN(W.final_norm, host_vec(-1, DType::kBF16, H, 1.0f, 0.1f, "final_norm", "model/norm"));
  MOEPROF_ASSIGN_OR_RETURN(W.lm_head, linear_w(-2, shape_.vocab, H, "lm_head", "model/lm_head"));
  {
    const int64_t positions = opt_.rope_positions > 0 ? opt_.rope_positions : shape_.tokens;
    MOEPROF_ASSIGN_OR_RETURN(W.cos_sin, alloc(DType::kF32, positions, rope, "rope_cos_sin", "model/rope"));
    if (be_.computes()) {  // the meta backend holds no values: no host table that grows with the tokens
      std::vector<float> table = rope_table(cfg_, positions);
      MOEPROF_RETURN_IF_ERROR(be_.copy_from_host(W.cos_sin, table.data()));
    }
  }
  // One cuBLASLt-style workspace for all dense projections (0 bytes on the CPU backend).
  const size_t ws = model_linear_workspace_bytes(be_, cfg_, shape_);
  if (ws > 0) {
    MOEPROF_ASSIGN_OR_RETURN(W.workspace, alloc(DType::kU8, 1, static_cast<int64_t>(ws), "linear_workspace",
                                                "model/workspace", Category::kWorkspace));
  }

  W.layers.resize(shape_.layers);
  const LayerWeights* shared_experts = nullptr;
  for (int64_t l = 0; l < shape_.layers; ++l) {
    if (opt_.progress) opt_.progress("weights", l, shape_.layers);
    LayerWeights& L = W.layers[l];
    const std::string sa = "layer." + std::to_string(l) + "/attn/weights";
    MOEPROF_ASSIGN_OR_RETURN(L.input_norm, host_vec(l, DType::kBF16, H, 1.0f, 0.1f, "input_layernorm", sa));
    MOEPROF_ASSIGN_OR_RETURN(L.post_attn_norm, host_vec(l, DType::kBF16, H, 1.0f, 0.1f, "post_attention_layernorm", sa));
    if (ql > 0) {
      MOEPROF_ASSIGN_OR_RETURN(L.qkv_a, linear_w(l, cfg_.latent_dim(), H, "fused_qkv_a_proj_with_mqa", sa));
      MOEPROF_ASSIGN_OR_RETURN(L.q_a_norm, host_vec(l, DType::kBF16, ql, 1.0f, 0.1f, "q_a_layernorm", sa));
      MOEPROF_ASSIGN_OR_RETURN(L.q_b, linear_w(l, h * qk, ql, "q_b_proj", sa));
    } else {
      MOEPROF_ASSIGN_OR_RETURN(L.q_proj, linear_w(l, h * qk, H, "q_proj", sa));
      MOEPROF_ASSIGN_OR_RETURN(L.kv_a, linear_w(l, kvl + rope, H, "kv_a_proj_with_mqa", sa));
    }
    MOEPROF_ASSIGN_OR_RETURN(L.kv_a_norm, host_vec(l, DType::kBF16, kvl, 1.0f, 0.1f, "kv_a_layernorm", sa));
    MOEPROF_ASSIGN_OR_RETURN(L.kv_b, linear_w(l, h * (nope + vd), kvl, "kv_b_proj", sa));
    MOEPROF_ASSIGN_OR_RETURN(L.o_proj, linear_w(l, H, h * vd, "o_proj", sa));
    if (!opt_.paged_kv) {
      MOEPROF_ASSIGN_OR_RETURN(L.kv_cache, alloc(DType::kBF16, shape_.tokens, kvl + rope, "kv_cache",
                                                 "layer." + std::to_string(l) + "/attn", Category::kKvCache));
    }
    if (!plans_[l].moe) {
      const std::string sm = "layer." + std::to_string(l) + "/mlp/weights";
      MOEPROF_ASSIGN_OR_RETURN(L.mlp_gate_up, linear_w(l, 2 * shape_.dense_inter, H, "gate_up_proj", sm));
      MOEPROF_ASSIGN_OR_RETURN(L.mlp_down, linear_w(l, H, shape_.dense_inter, "down_proj", sm));
      continue;
    }
    const std::string sm = "layer." + std::to_string(l) + "/moe/weights";
    const int64_t E = cfg_.n_routed_experts, I = shape_.moe_inter;
    MOEPROF_ASSIGN_OR_RETURN(L.gate, linear_w(l, E, H, "gate", sm));
    if (cfg_.topk_method == TopkMethod::kNoauxTc) {
      MOEPROF_ASSIGN_OR_RETURN(L.gate_bias, host_vec(l, DType::kF32, E, 0.0f, 0.05f, "e_score_correction_bias", sm));
    }
    if (shape_.shared_inter > 0) {
      MOEPROF_ASSIGN_OR_RETURN(L.shared_gate_up, linear_w(l, 2 * shape_.shared_inter, H, "shared_experts.gate_up_proj", sm));
      MOEPROF_ASSIGN_OR_RETURN(L.shared_down, linear_w(l, H, shape_.shared_inter, "shared_experts.down_proj", sm));
    }
    // NVFP4 activation scales (static per-tensor input_scale, as in ModelOpt checkpoints).
    L.a_gs = 12.0f / (6.0f * 448.0f);
    L.h_gs = 4.0f / (6.0f * 448.0f);
    if (weights_shared_ && shared_experts) {
      L.w13 = shared_experts->w13;
      L.w13_scales = shared_experts->w13_scales;
      L.w13_gs = shared_experts->w13_gs;
      L.w2 = shared_experts->w2;
      L.w2_scales = shared_experts->w2_scales;
      L.w2_gs = shared_experts->w2_gs;
      L.all_w13 = shared_experts->all_w13;
      L.all_w13_scales = shared_experts->all_w13_scales;
      L.all_w13_gs = shared_experts->all_w13_gs;
      L.all_w2 = shared_experts->all_w2;
      L.all_w2_scales = shared_experts->all_w2_scales;
      L.all_w2_gs = shared_experts->all_w2_gs;
      L.rank_w13_gs = shared_experts->rank_w13_gs;
      L.rank_w2_gs = shared_experts->rank_w2_gs;
      continue;
    }
    // Codes uniform over all 16 e2m1 values (mean |v| = 2.25), block scales in [16, 64]; the
    // global scale makes the dequantized weights' spread about 1/sqrt(K).
    // w13 in the layout the backend's gemm1 reads fastest (the values of init_bytes / init_e4m3).
    // Expert parallelism: the rank holds El = E/N experts. On the CPU reference (ep_compute_all)
    // all E are generated as with one rank, unrecorded, and the rank's slice copied from them
    // through the host (row-major there), so its values are those of experts [e0, e0 + El).
    // Elsewhere the rank's tensors are generated for El experts from the same seeds (rank 0's
    // values exactly; other ranks hold experts 0 .. El-1's values: emulated outputs, like
    // emulated TP's, are not the model's).
    const int ep = shape_.ep_size;
    const int64_t El = E / ep, e0 = El * shape_.ep_rank;
    const bool all = ep > 1 && (opt_.ep_compute_all || opt_.ep_model_values);
    struct Unrecorded {  // an unrecorded stretch (restores the previous state)
      Backend& b;
      bool was;
      explicit Unrecorded(Backend& be) : b(be), was(be.unrecorded()) { b.set_unrecorded(true); }
      ~Unrecorded() { b.set_unrecorded(was); }
    };
    auto copy_rows = [&](const Tensor& from, Tensor& to, int64_t row0) -> Status {
      const size_t bytes = static_cast<size_t>(to.rows() * to.cols()) * dtype_size(to.dtype());
      std::vector<uint8_t> host(bytes);
      Tensor src = from.rows() == 1 ? from.cols_view(row0, to.cols()) : from.rows_view(row0, to.rows());
      MOEPROF_RETURN_IF_ERROR(be_.copy_to_host(src, host.data()));
      return be_.copy_from_host(to, host.data());
    };
    // A per-expert global scale: the rank's El values (recorded); with every expert computed, also
    // the E of all ranks (unrecorded) and each rank's slice of them.
    auto global_scales = [&](float gs, const char* name, Tensor& local, Tensor& every, std::vector<Tensor>& ranks) -> Status {
      if (!all) {
        MOEPROF_ASSIGN_OR_RETURN(local, host_vec(l, DType::kF32, El, gs, 0.25f * gs, name, sm));
        return Status::ok();
      }
      MOEPROF_ASSIGN_OR_RETURN(local, alloc(DType::kF32, 1, El, name, sm));
      Unrecorded u(be_);
      MOEPROF_ASSIGN_OR_RETURN(every, host_vec(l, DType::kF32, E, gs, 0.25f * gs, name, sm));
      MOEPROF_RETURN_IF_ERROR(copy_rows(every, local, e0));
      for (int r = 0; r < ep; ++r) {
        MOEPROF_ASSIGN_OR_RETURN(Tensor g, alloc(DType::kF32, 1, El, name, sm));
        MOEPROF_RETURN_IF_ERROR(copy_rows(every, g, El * r));
        ranks.push_back(g);
      }
      return Status::ok();
    };
    MOEPROF_ASSIGN_OR_RETURN(L.w13, alloc(DType::kFP4x2, El * 2 * I, H / 2, "experts.w13_weight", sm));
    MOEPROF_ASSIGN_OR_RETURN(L.w13_scales, alloc(DType::kE4M3, El * 2 * I, H / 16, "experts.w13_weight_scale", sm));
    const uint64_t seed_codes = mix_seed(seed, l, ++tensor_idx), seed_scales = mix_seed(seed, l, ++tensor_idx);
    if (all) {
      Unrecorded u(be_);
      MOEPROF_ASSIGN_OR_RETURN(L.all_w13, alloc(DType::kFP4x2, E * 2 * I, H / 2, "experts.w13_weight", sm));
      MOEPROF_ASSIGN_OR_RETURN(L.all_w13_scales, alloc(DType::kE4M3, E * 2 * I, H / 16, "experts.w13_weight_scale", sm));
      MOEPROF_RETURN_IF_ERROR(be_.init_moe_w13(L.all_w13, L.all_w13_scales, E, seed_codes, seed_scales, 16.0f, 64.0f));
      MOEPROF_RETURN_IF_ERROR(copy_rows(L.all_w13, L.w13, e0 * 2 * I));
      MOEPROF_RETURN_IF_ERROR(copy_rows(L.all_w13_scales, L.w13_scales, e0 * 2 * I));
    } else {
      MOEPROF_RETURN_IF_ERROR(be_.init_moe_w13(L.w13, L.w13_scales, El, seed_codes, seed_scales, 16.0f, 64.0f));
    }
    const float gs13 = 1.0f / (std::sqrt(float(H)) * 2.8f * 40.0f);
    MOEPROF_RETURN_IF_ERROR(global_scales(gs13, "experts.w13_weight_scale_2", L.w13_gs, L.all_w13_gs, L.rank_w13_gs));
    // w2 likewise, in gemm2's layout.
    MOEPROF_ASSIGN_OR_RETURN(L.w2, alloc(DType::kFP4x2, El * H, I / 2, "experts.w2_weight", sm));
    MOEPROF_ASSIGN_OR_RETURN(L.w2_scales, alloc(DType::kE4M3, El * H, I / 16, "experts.w2_weight_scale", sm));
    const uint64_t seed_codes2 = mix_seed(seed, l, ++tensor_idx), seed_scales2 = mix_seed(seed, l, ++tensor_idx);
    if (all) {
      Unrecorded u(be_);
      MOEPROF_ASSIGN_OR_RETURN(L.all_w2, alloc(DType::kFP4x2, E * H, I / 2, "experts.w2_weight", sm));
      MOEPROF_ASSIGN_OR_RETURN(L.all_w2_scales, alloc(DType::kE4M3, E * H, I / 16, "experts.w2_weight_scale", sm));
      MOEPROF_RETURN_IF_ERROR(be_.init_moe_w2(L.all_w2, L.all_w2_scales, E, seed_codes2, seed_scales2, 16.0f, 64.0f));
      MOEPROF_RETURN_IF_ERROR(copy_rows(L.all_w2, L.w2, e0 * H));
      MOEPROF_RETURN_IF_ERROR(copy_rows(L.all_w2_scales, L.w2_scales, e0 * H));
    } else {
      MOEPROF_RETURN_IF_ERROR(be_.init_moe_w2(L.w2, L.w2_scales, El, seed_codes2, seed_scales2, 16.0f, 64.0f));
    }
    const float gs2 = 1.0f / (std::sqrt(float(I)) * 2.8f * 40.0f);
    MOEPROF_RETURN_IF_ERROR(global_scales(gs2, "experts.w2_weight_scale_2", L.w2_gs, L.all_w2_gs, L.rank_w2_gs));
    if (all && !opt_.ep_compute_all) {  // ep_model_values: only the rank's slice is kept
      for (Tensor* t : {&L.all_w13, &L.all_w13_scales, &L.all_w13_gs, &L.all_w2, &L.all_w2_scales, &L.all_w2_gs}) t->reset();
      L.rank_w13_gs.clear();
      L.rank_w2_gs.clear();
    }
    if (!shared_experts) shared_experts = &L;
  }
  return be_.synchronize();
}


std::vector<std::pair<std::string, Tensor>> DeepseekModel::named_weights() const {
  std::vector<std::pair<std::string, Tensor>> v;
  auto add = [&](const std::string& n, const Tensor& t) {
    if (t.defined()) v.emplace_back(n, t);
  };
  add("model.embed_tokens.weight", w_->embed);
  add("model.norm.weight", w_->final_norm);
  add("lm_head.weight", w_->lm_head);
  add("rope.cos_sin", w_->cos_sin);
  for (size_t l = 0; l < w_->layers.size(); ++l) {
    const LayerWeights& L = w_->layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", L.input_norm);
    add(p + "post_attention_layernorm.weight", L.post_attn_norm);
    add(p + "self_attn.fused_qkv_a_proj_with_mqa.weight", L.qkv_a);
    add(p + "self_attn.q_proj.weight", L.q_proj);
    add(p + "self_attn.kv_a_proj_with_mqa.weight", L.kv_a);
    add(p + "self_attn.q_a_layernorm.weight", L.q_a_norm);
    add(p + "self_attn.kv_a_layernorm.weight", L.kv_a_norm);
    add(p + "self_attn.q_b_proj.weight", L.q_b);
    add(p + "self_attn.kv_b_proj.weight", L.kv_b);
    add(p + "self_attn.o_proj.weight", L.o_proj);
    add(p + "mlp.gate_up_proj.weight", L.mlp_gate_up);
    add(p + "mlp.down_proj.weight", L.mlp_down);
    add(p + "mlp.gate.weight", L.gate);
    add(p + "mlp.gate.e_score_correction_bias", L.gate_bias);
    add(p + "mlp.shared_experts.gate_up_proj.weight", L.shared_gate_up);
    add(p + "mlp.shared_experts.down_proj.weight", L.shared_down);
    add(p + "mlp.experts.w13_weight", L.w13);
    add(p + "mlp.experts.w13_weight_scale", L.w13_scales);
    add(p + "mlp.experts.w13_weight_scale_2", L.w13_gs);
    add(p + "mlp.experts.w2_weight", L.w2);
    add(p + "mlp.experts.w2_weight_scale", L.w2_scales);
    add(p + "mlp.experts.w2_weight_scale_2", L.w2_gs);
  }
  return v;
}

std::pair<float, float> DeepseekModel::moe_activation_scales(int64_t layer) const {
  const LayerWeights& L = w_->layers.at(static_cast<size_t>(layer));
  return {L.a_gs, L.h_gs};
}


}  // namespace moeprof
