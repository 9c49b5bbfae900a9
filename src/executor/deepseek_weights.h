// The DeepSeek-V2-family weights of one rank (private to the executor): the tensors of each layer
// and the model-wide ones. Defined here so the weight generation (deepseek_weights.cpp) and the
// forward (deepseek_forward.cpp) share them.
#pragma once

#include <vector>

#include "executor/deepseek_model.h"

namespace moeprof {

struct LayerWeights {
  Tensor input_norm, post_attn_norm;
  // attention
  Tensor qkv_a;       // [q_lora + kv_lora + rope, H]   (q_lora > 0)
  Tensor q_proj;      // [h * qk_head, H]               (q_lora == 0)
  Tensor kv_a;        // [kv_lora + rope, H]            (q_lora == 0)
  Tensor q_a_norm, kv_a_norm;
  Tensor q_b;         // [h * qk_head, q_lora]
  Tensor kv_b;        // [h * (nope + v), kv_lora]
  Tensor o_proj;      // [H, h * v]
  // dense MLP
  Tensor mlp_gate_up, mlp_down;
  // MoE
  Tensor gate, gate_bias;
  Tensor shared_gate_up, shared_down;
  Tensor w13, w13_scales, w13_gs, w2, w2_scales, w2_gs;
  float a_gs = 1.0f, h_gs = 1.0f;
  // Expert parallelism with ModelOptions::ep_compute_all: every rank's experts (E of them,
  // unrecorded), from which the rank's own w13 .. w2_gs (E/N experts) were copied; the other
  // ranks' expert work reads their slices.
  Tensor all_w13, all_w13_scales, all_w13_gs, all_w2, all_w2_scales, all_w2_gs;
  std::vector<Tensor> rank_w13_gs, rank_w2_gs;  // each rank's [1, E/N] slice of all_w13_gs / all_w2_gs
  Tensor kv_cache;    // [kv_tokens, kv_lora + rope]
};

struct DeepseekModel::Weights {
  Tensor embed, final_norm, lm_head, cos_sin, workspace;
  std::vector<LayerWeights> layers;
};

}  // namespace moeprof
