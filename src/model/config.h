// DeepSeek-V2-family model configuration, read from HF config.json files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/router.h"

namespace moeprof {

// Upper bounds of the config fields and of --tokens (docs/robustness.md): far above every
// published DeepSeek-V2-family model, low enough that every shape product of a rank is exact in
// int64 (checked again where the shapes are derived and where tensors are allocated).
inline constexpr int64_t kMaxHidden = int64_t{1} << 20;
inline constexpr int64_t kMaxIntermediate = int64_t{1} << 22;
inline constexpr int64_t kMaxLayers = int64_t{1} << 14;
inline constexpr int64_t kMaxHeads = int64_t{1} << 12;
inline constexpr int64_t kMaxRank = int64_t{1} << 16;      // q_lora_rank, kv_lora_rank
inline constexpr int64_t kMaxHeadDim = int64_t{1} << 12;
inline constexpr int64_t kMaxVocab = int64_t{1} << 24;
inline constexpr int64_t kMaxPositions = int64_t{1} << 24;
inline constexpr int64_t kMaxExperts = int64_t{1} << 14;
inline constexpr int64_t kMaxSharedExperts = int64_t{1} << 10;
inline constexpr int64_t kMaxTopK = 32;                    // the router's limit
inline constexpr int64_t kMaxGroups = 64;                  // the router's limit
inline constexpr int64_t kMaxTokens = int64_t{1} << 40;

struct RopeScaling {
  std::string type;  // "" (none) or "yarn"
  double factor = 1.0;
  double original_max_position_embeddings = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
};

struct ModelConfig {
  std::string name;        // "kimi-k2.5", "tiny", or the file stem
  std::string model_type;  // as in the file ("deepseek_v3", "kimi_k2", ...)
  std::string source;      // where it came from (path or "builtin:<name>")
  // What a user should know about how the file was read (a quantization_config the executor does
  // not follow); `moeprof run` and `budget` print them.
  std::vector<std::string> notes;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;
  int64_t n_routed_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_shared_experts = 0;
  int64_t moe_intermediate_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_attention_heads = 0;
  int64_t q_lora_rank = 0;  // 0: no q LoRA (q_proj H -> heads * qk_head_dim)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 4096;
  TopkMethod topk_method = TopkMethod::kGreedy;
  ScoringFunc scoring_func = ScoringFunc::kSoftmax;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
  bool norm_topk_prob = false;
  double rms_norm_eps = 1e-6;     // default when absent
  double rope_theta = 10000.0;    // default when absent
  RopeScaling rope_scaling;

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // Width of the fused qkv_a projection output (the attention latent).
  int64_t latent_dim() const { return (q_lora_rank > 0 ? q_lora_rank : 0) + kv_lora_rank + qk_rope_head_dim; }
  bool is_moe_layer(int64_t layer) const {
    return n_routed_experts > 0 && layer >= first_k_dense_replace && (layer % moe_layer_freq) == 0;
  }
};

// Shapes of one TP rank.
struct RankShape {
  int64_t tokens = 0;
  int64_t layers = 0;
  int tp_size = 1;
  int tp_rank = 0;
  int64_t heads = 0;             // local attention heads
  int64_t moe_inter = 0;         // local routed-expert intermediate
  int64_t shared_inter = 0;      // local shared-expert intermediate (all shared experts fused)
  int64_t dense_inter = 0;       // local dense-MLP intermediate
  int64_t vocab = 0;             // local vocab rows
  int64_t vocab_start = 0;
  int64_t moe_tile = 8;          // rows per expert tile of the FP4 runner
  int64_t padded_rows = 0;       // P = T*k + E*(tile-1)
  // Expert parallelism (model/expert_parallel.h): this rank holds E / ep_size routed experts,
  // [ep_rank * E/ep_size, ...); 1: every expert (TP-sharded by tp_size).
  int ep_size = 1;
  int ep_rank = 0;
  // DP attention with EP (`--dp N --ep N`, docs/executor.md "Expert parallelism"): this rank's
  // attention, dense layers and MoE input hold its own request only, tokens [token_offset,
  // token_offset + tokens) of a batch of batch_tokens (slice ep_rank of model/expert_parallel.h).
  // Its prompt is those tokens of the batch's prompt; positions start at 0 (its own request).
  bool dp_attention = false;
  int64_t batch_tokens = 0;
  int64_t token_offset = 0;
};

// Parses config.json text. DeepSeek-V2/V3 fields at top level, Kimi-K2.5 nested under
// "text_config". Errors name the field.
Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source);
Result<ModelConfig> load_model_config_file(const std::string& path);
// The model name a config's path gives: FOLDER of FOLDER/config.json (the path made absolute and
// normal first, so ./config.json has one), NAME of a Hugging Face cache's
// models--ORG--NAME/snapshots/<commit>/config.json, else the file's stem.
std::string model_name_of_path(const std::string& path);
// Built-in names: tiny, deepseek-v2-lite, deepseek-v2, deepseek-v3, kimi-k2.5 (the files in
// examples/configs/, compiled in). A value ending in .json or naming an existing file is read
// from disk.
Result<ModelConfig> resolve_model_config(const std::string& name_or_path);
std::vector<std::string> builtin_model_names();

// Validates and derives the rank's shapes. tokens > 0, tp_size divides heads and the
// intermediate sizes, FP4 alignment (hidden and intermediates multiples of 32).
Result<RankShape> make_rank_shape(const ModelConfig& cfg, int64_t tokens, int tp_size, int tp_rank,
                                  int64_t layers_override);

// Rows per expert tile: clamp(next_pow2(T*k/E), 8, 64) (vLLM's flashinfer integration).
int64_t moe_tile_rows(int64_t tokens, int64_t top_k, int64_t experts);

}  // namespace moeprof
