#include "model/config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/builtin_configs.h"

namespace moeprof {

namespace {

using json = nlohmann::json;

struct FieldReader {
  const json& j;
  const std::string& source;
  Status error;

  bool ok() const { return error.is_ok(); }
  void fail(const std::string& field, const std::string& what) {
    if (error.is_ok()) error = Status::bad_input("config " + source + ": field '" + field + "' " + what);
  }
  // Integer field; `required` -> missing is an error; null counts as missing.
  int64_t integer(const char* field, bool required, int64_t def, int64_t min_value = 0) {
    if (!j.contains(field) || j[field].is_null()) {
      if (required) fail(field, "is missing");
      return def;
    }
    const json& v = j[field];
    int64_t out = 0;
    if (v.is_number_integer()) {
      out = v.get<int64_t>();
    } else if (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>()))) {
      out = static_cast<int64_t>(v.get<double>());
    } else {
      fail(field, "must be an integer (got " + v.dump() + ")");
      return def;
    }
    if (out < min_value) fail(field, "must be >= " + std::to_string(min_value) + " (got " + std::to_string(out) + ")");
    return out;
  }
  double number(const char* field, double def) {
    if (!j.contains(field) || j[field].is_null()) return def;
    if (!j[field].is_number()) {
      fail(field, "must be a number (got " + j[field].dump() + ")");
      return def;
    }
    return j[field].get<double>();
  }
  bool boolean(const char* field, bool def) {
    if (!j.contains(field) || j[field].is_null()) return def;
    if (!j[field].is_boolean()) {
      fail(field, "must be true or false (got " + j[field].dump() + ")");
      return def;
    }
    return j[field].get<bool>();
  }
  std::string string(const char* field, const std::string& def) {
    if (!j.contains(field) || j[field].is_null()) return def;
    if (!j[field].is_string()) {
      fail(field, "must be a string (got " + j[field].dump() + ")");
      return def;
    }
    return j[field].get<std::string>();
  }
};

const char* const kSupportedModelTypes[] = {"deepseek_v2", "deepseek_v3", "kimi_k2"};

}  // namespace

Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/true);
  if (root.is_discarded()) return Status::bad_input("config " + source + ": not valid JSON");
  if (!root.is_object()) return Status::bad_input("config " + source + ": top level must be a JSON object");
  const json* jp = &root;
  if (root.contains("text_config")) {
    if (!root["text_config"].is_object())
      return Status::bad_input("config " + source + ": field 'text_config' must be an object");
    jp = &root["text_config"];
  }
  const json& j = *jp;
  FieldReader r{j, source, Status::ok()};
  ModelConfig c;
  c.source = source;
  c.model_type = r.string("model_type", "");
  if (c.model_type.empty()) return Status::bad_input("config " + source + ": field 'model_type' is missing");
  bool supported = false;
  for (const char* t : kSupportedModelTypes) supported |= c.model_type == t;
  if (!supported)
    return Status::bad_input("config " + source + ": model_type '" + c.model_type +
                             "' is not a DeepSeek-V2-family model (supported: deepseek_v2, deepseek_v3, kimi_k2)");
  c.hidden_size = r.integer("hidden_size", true, 0, 1);
  c.num_hidden_layers = r.integer("num_hidden_layers", true, 0, 1);
  c.num_attention_heads = r.integer("num_attention_heads", true, 0, 1);
  c.intermediate_size = r.integer("intermediate_size", true, 0, 1);
  c.kv_lora_rank = r.integer("kv_lora_rank", true, 0, 1);
  c.q_lora_rank = r.integer("q_lora_rank", false, 0, 0);
  c.qk_nope_head_dim = r.integer("qk_nope_head_dim", true, 0, 1);
  c.qk_rope_head_dim = r.integer("qk_rope_head_dim", true, 0, 2);
  c.v_head_dim = r.integer("v_head_dim", true, 0, 1);
  c.vocab_size = r.integer("vocab_size", true, 0, 1);
  c.max_position_embeddings = r.integer("max_position_embeddings", false, 4096, 1);
  c.n_routed_experts = r.integer("n_routed_experts", false, 0, 0);
  c.first_k_dense_replace = r.integer("first_k_dense_replace", false, 0, 0);
  c.moe_layer_freq = r.integer("moe_layer_freq", false, 1, 1);
  c.n_shared_experts = r.integer("n_shared_experts", false, 0, 0);
  if (c.n_routed_experts > 0) {
    c.num_experts_per_tok = r.integer("num_experts_per_tok", true, 0, 1);
    c.moe_intermediate_size = r.integer("moe_intermediate_size", true, 0, 1);
  }
  c.n_group = r.integer("n_group", false, 1, 1);
  c.topk_group = r.integer("topk_group", false, 1, 1);
  c.routed_scaling_factor = r.number("routed_scaling_factor", 1.0);
  c.norm_topk_prob = r.boolean("norm_topk_prob", false);
  c.rms_norm_eps = r.number("rms_norm_eps", 1e-6);
  c.rope_theta = r.number("rope_theta", 10000.0);
  const std::string topk = r.string("topk_method", "greedy");
  const std::string scoring = r.string("scoring_func", "softmax");
  if (!r.ok()) return r.error;
  if (topk == "greedy") c.topk_method = TopkMethod::kGreedy;
  else if (topk == "group_limited_greedy") c.topk_method = TopkMethod::kGroupLimitedGreedy;
  else if (topk == "noaux_tc") c.topk_method = TopkMethod::kNoauxTc;
  else
    return Status::bad_input("config " + source + ": field 'topk_method' value '" + topk +
                             "' is not supported (supported: greedy, group_limited_greedy, noaux_tc)");
  if (scoring == "softmax") c.scoring_func = ScoringFunc::kSoftmax;
  else if (scoring == "sigmoid") c.scoring_func = ScoringFunc::kSigmoid;
  else
    return Status::bad_input("config " + source + ": field 'scoring_func' value '" + scoring +
                             "' is not supported (supported: softmax, sigmoid)");
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const json& rs = j["rope_scaling"];
    if (!rs.is_object()) return Status::bad_input("config " + source + ": field 'rope_scaling' must be an object or null");
    FieldReader rr{rs, source, Status::ok()};
    std::string type = rr.string("type", rr.string("rope_type", ""));
    if (type != "yarn" && type != "deepseek_yarn")
      return Status::bad_input("config " + source + ": field 'rope_scaling.type' value '" + type +
                               "' is not supported (supported: yarn, deepseek_yarn, or null)");
    c.rope_scaling.type = "yarn";
    c.rope_scaling.factor = rr.number("factor", 1.0);
    c.rope_scaling.original_max_position_embeddings = rr.number("original_max_position_embeddings", 4096);
    c.rope_scaling.beta_fast = rr.number("beta_fast", 32.0);
    c.rope_scaling.beta_slow = rr.number("beta_slow", 1.0);
    c.rope_scaling.mscale = rr.number("mscale", 1.0);
    c.rope_scaling.mscale_all_dim = rr.number("mscale_all_dim", 0.0);
    if (!rr.ok()) return rr.error;
  }
  if (c.n_routed_experts > 0) {
    if (c.num_experts_per_tok > c.n_routed_experts)
      return Status::bad_input("config " + source + ": field 'num_experts_per_tok' (" +
                               std::to_string(c.num_experts_per_tok) + ") exceeds n_routed_experts");
    if (c.n_routed_experts % c.n_group != 0)
      return Status::bad_input("config " + source + ": field 'n_group' must divide n_routed_experts");
    if (c.topk_group > c.n_group)
      return Status::bad_input("config " + source + ": field 'topk_group' exceeds n_group");
  }
  if (c.qk_rope_head_dim % 2 != 0)
    return Status::bad_input("config " + source + ": field 'qk_rope_head_dim' must be even");
  return c;
}

Result<ModelConfig> load_model_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::bad_input("cannot open config " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto c = parse_model_config(ss.str(), path);
  if (c.is_ok()) {
    std::filesystem::path p(path);
    c->name = p.filename() == "config.json" && p.has_parent_path() ? p.parent_path().filename().string()
                                                                    : p.stem().string();
  }
  return c;
}

std::vector<std::string> builtin_model_names() {
  std::vector<std::string> names;
  for (const auto& b : builtin_configs()) names.emplace_back(b.name);
  return names;
}

Result<ModelConfig> resolve_model_config(const std::string& name_or_path) {
  for (const auto& b : builtin_configs()) {
    if (name_or_path == b.name) {
      auto c = parse_model_config(std::string(b.json), "builtin:" + std::string(b.name));
      if (c.is_ok()) c->name = b.name;
      return c;
    }
  }
  std::error_code ec;
  if (std::filesystem::exists(name_or_path, ec) || name_or_path.ends_with(".json"))
    return load_model_config_file(name_or_path);
  std::string known;
  for (const auto& n : builtin_model_names()) known += (known.empty() ? "" : ", ") + n;
  return Status::bad_input("unknown model '" + name_or_path + "' (built-in: " + known + "; or a path to a config.json)");
}

int64_t moe_tile_rows(int64_t tokens, int64_t top_k, int64_t experts) {
  int64_t per = experts > 0 ? (tokens * top_k) / experts : 0;
  int64_t p2 = 1;
  while (p2 < per) p2 <<= 1;
  if (p2 < 8) p2 = 8;
  if (p2 > 64) p2 = 64;
  return p2;
}

Result<RankShape> make_rank_shape(const ModelConfig& cfg, int64_t tokens, int tp_size, int tp_rank,
                                  int64_t layers_override) {
  auto bad = [&](const std::string& m) { return Status::bad_input(cfg.name + ": " + m); };
  if (tokens <= 0) return bad("--tokens must be positive");
  if (tp_size <= 0) return bad("--tp must be positive");
  if (tp_rank < 0 || tp_rank >= tp_size) return bad("TP rank out of range");
  RankShape s;
  s.tokens = tokens;
  s.tp_size = tp_size;
  s.tp_rank = tp_rank;
  s.layers = layers_override > 0 ? layers_override : cfg.num_hidden_layers;
  if (layers_override > cfg.num_hidden_layers) return bad("--layers exceeds num_hidden_layers");
  if (cfg.num_attention_heads % tp_size) return bad("TP size " + std::to_string(tp_size) + " does not divide num_attention_heads");
  s.heads = cfg.num_attention_heads / tp_size;
  if (cfg.intermediate_size % tp_size) return bad("TP size does not divide intermediate_size");
  s.dense_inter = cfg.intermediate_size / tp_size;
  if (cfg.hidden_size % 32) return bad("hidden_size must be a multiple of 32 for NVFP4 experts");
  if (cfg.n_routed_experts > 0) {
    if (cfg.moe_intermediate_size % tp_size) return bad("TP size does not divide moe_intermediate_size");
    s.moe_inter = cfg.moe_intermediate_size / tp_size;
    if (s.moe_inter % 32)
      return bad("moe_intermediate_size / TP = " + std::to_string(s.moe_inter) + " must be a multiple of 32 for NVFP4");
    s.shared_inter = cfg.moe_intermediate_size * cfg.n_shared_experts / tp_size;
    s.moe_tile = moe_tile_rows(tokens, cfg.num_experts_per_tok, cfg.n_routed_experts);
    s.padded_rows = tokens * cfg.num_experts_per_tok + cfg.n_routed_experts * (s.moe_tile - 1);
  }
  // Vocab-parallel embedding / LM head: ceil(V / tp) rows per rank.
  s.vocab = (cfg.vocab_size + tp_size - 1) / tp_size;
  s.vocab_start = s.vocab * tp_rank;
  return s;
}

}  // namespace moeprof
