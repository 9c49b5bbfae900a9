#include "model/config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/checked.h"
#include "core/nearest.h"
#include "core/utf8.h"
#include "model/builtin_configs.h"

namespace moeprof {

namespace {

using json = nlohmann::json;

// A value as it appears in an error message: scalars as written, containers by kind (dumping a
// deeply nested one would recurse once per level), long strings cut.
std::string shown(const json& v) {
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

struct FieldReader {
  const json& j;
  const std::string& source;
  Status error;

  bool ok() const { return error.is_ok(); }
  void fail(const std::string& field, const std::string& what) {
    if (error.is_ok()) error = Status::bad_input("config " + source + ": field '" + field + "' " + what);
  }
  // Integer field in [min_value, max_value]; `required` -> missing is an error; null counts as
  // missing. A number written with a fraction or exponent is accepted when it is an integer in
  // range; the range is checked in floating point before any conversion (1e300 is out of range,
  // not a cast).
  int64_t integer(const char* field, bool required, int64_t def, int64_t min_value, int64_t max_value) {
    if (!j.contains(field) || j[field].is_null()) {
      if (required) fail(field, "is missing");
      return def;
    }
    const json& v = j[field];
    const std::string range = "[" + std::to_string(min_value) + ", " + std::to_string(max_value) + "]";
    int64_t out = 0;
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > static_cast<uint64_t>(max_value)) {
        fail(field, "must be an integer in " + range + " (got " + shown(v) + ")");
        return def;
      }
      out = static_cast<int64_t>(v.get<uint64_t>());
    } else if (v.is_number_integer()) {
      out = v.get<int64_t>();
    } else if (v.is_number_float()) {
      const double d = v.get<double>();
      if (!std::isfinite(d) || d != std::trunc(d)) {
        fail(field, "must be an integer (got " + shown(v) + ")");
        return def;
      }
      if (d < static_cast<double>(min_value) || d > static_cast<double>(max_value)) {
        fail(field, "must be an integer in " + range + " (got " + shown(v) + ")");
        return def;
      }
      out = static_cast<int64_t>(d);
    } else {
      fail(field, "must be an integer (got " + shown(v) + ")");
      return def;
    }
    if (out < min_value || out > max_value) {
      fail(field, "must be an integer in " + range + " (got " + std::to_string(out) + ")");
      return def;
    }
    return out;
  }
  // Number field in [lo, hi] (finite); `lo_open` excludes lo itself (a value that must be > lo).
  double number(const char* field, double def, double lo, double hi, bool lo_open = false) {
    if (!j.contains(field) || j[field].is_null()) return def;
    if (!j[field].is_number()) {
      fail(field, "must be a number (got " + shown(j[field]) + ")");
      return def;
    }
    const double d = j[field].get<double>();
    if (!std::isfinite(d) || (lo_open ? d <= lo : d < lo) || d > hi) {
      fail(field, fmt_range(lo, hi, lo_open) + " (got " + shown(j[field]) + ")");
      return def;
    }
    return d;
  }
  static std::string fmt_range(double lo, double hi, bool lo_open) {
    std::ostringstream os;
    os << "must be a finite number " << (lo_open ? "> " : ">= ") << lo << " and <= " << hi;
    return os.str();
  }
  bool boolean(const char* field, bool def) {
    if (!j.contains(field) || j[field].is_null()) return def;
    if (!j[field].is_boolean()) {
      fail(field, "must be true or false (got " + shown(j[field]) + ")");
      return def;
    }
    return j[field].get<bool>();
  }
  std::string string(const char* field, const std::string& def) {
    if (!j.contains(field) || j[field].is_null()) return def;
    if (!j[field].is_string()) {
      fail(field, "must be a string (got " + shown(j[field]) + ")");
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
    return Status::bad_input("config " + source + ": model_type '" + printable(c.model_type) +
                             "' is not a DeepSeek-V2-family model (supported: deepseek_v2, deepseek_v3, kimi_k2)");
  // Bounds (docs/robustness.md): generous next to every published DeepSeek-V2-family model, and
  // small enough that every tensor shape of a rank (with --tokens up to 2^40) is an exact int64
  // product; the op contract's limits where it has them (top-k <= 32, at most 64 groups).
  c.hidden_size = r.integer("hidden_size", true, 0, 1, kMaxHidden);
  c.num_hidden_layers = r.integer("num_hidden_layers", true, 0, 1, kMaxLayers);
  c.num_attention_heads = r.integer("num_attention_heads", true, 0, 1, kMaxHeads);
  c.intermediate_size = r.integer("intermediate_size", true, 0, 1, kMaxIntermediate);
  c.kv_lora_rank = r.integer("kv_lora_rank", true, 0, 1, kMaxRank);
  c.q_lora_rank = r.integer("q_lora_rank", false, 0, 0, kMaxRank);
  c.qk_nope_head_dim = r.integer("qk_nope_head_dim", true, 0, 1, kMaxHeadDim);
  c.qk_rope_head_dim = r.integer("qk_rope_head_dim", true, 0, 2, kMaxHeadDim);
  c.v_head_dim = r.integer("v_head_dim", true, 0, 1, kMaxHeadDim);
  c.vocab_size = r.integer("vocab_size", true, 0, 1, kMaxVocab);
  c.max_position_embeddings = r.integer("max_position_embeddings", false, 4096, 1, kMaxPositions);
  c.n_routed_experts = r.integer("n_routed_experts", false, 0, 0, kMaxExperts);
  // Fields a config may leave out take its class's defaults: Hugging Face's DeepseekV3Config (and
  // Kimi's, the same architecture) route by sigmoid scores with noaux_tc, and V3 keeps its first
  // 3 layers dense; DeepseekV2Config's are softmax, greedy and 0.
  const bool v3 = c.model_type == "deepseek_v3" || c.model_type == "kimi_k2";
  c.first_k_dense_replace = r.integer("first_k_dense_replace", false, c.model_type == "deepseek_v3" ? 3 : 0, 0, kMaxLayers);
  c.moe_layer_freq = r.integer("moe_layer_freq", false, 1, 1, kMaxLayers);
  c.n_shared_experts = r.integer("n_shared_experts", false, 0, 0, kMaxSharedExperts);
  if (c.n_routed_experts > 0) {
    c.num_experts_per_tok = r.integer("num_experts_per_tok", true, 0, 1, kMaxTopK);
    c.moe_intermediate_size = r.integer("moe_intermediate_size", true, 0, 1, kMaxIntermediate);
  }
  c.n_group = r.integer("n_group", false, 1, 1, kMaxGroups);
  c.topk_group = r.integer("topk_group", false, 1, 1, kMaxGroups);
  c.routed_scaling_factor = r.number("routed_scaling_factor", 1.0, 0.0, 1e6, /*lo_open=*/true);
  c.norm_topk_prob = r.boolean("norm_topk_prob", false);
  c.rms_norm_eps = r.number("rms_norm_eps", 1e-6, 0.0, 1.0, /*lo_open=*/true);
  c.rope_theta = r.number("rope_theta", 10000.0, 0.0, 1e12, /*lo_open=*/true);
  const std::string topk = r.string("topk_method", v3 ? "noaux_tc" : "greedy");
  const std::string scoring = r.string("scoring_func", v3 ? "sigmoid" : "softmax");
  if (!r.ok()) return r.error;
  if (topk == "greedy") c.topk_method = TopkMethod::kGreedy;
  else if (topk == "group_limited_greedy") c.topk_method = TopkMethod::kGroupLimitedGreedy;
  else if (topk == "noaux_tc") c.topk_method = TopkMethod::kNoauxTc;
  else
    return Status::bad_input("config " + source + ": field 'topk_method' value '" + printable(topk) +
                             "' is not supported (supported: greedy, group_limited_greedy, noaux_tc)");
  if (scoring == "softmax") c.scoring_func = ScoringFunc::kSoftmax;
  else if (scoring == "sigmoid") c.scoring_func = ScoringFunc::kSigmoid;
  else
    return Status::bad_input("config " + source + ": field 'scoring_func' value '" + printable(scoring) +
                             "' is not supported (supported: softmax, sigmoid)");
  // The routed experts run as NVFP4 whatever the checkpoint's format: say so when the config names
  // another one.
  // A multimodal config (text_config) keeps it at its top level.
  const json& qholder = j.contains("quantization_config") ? j : root;
  if (qholder.contains("quantization_config") && !qholder["quantization_config"].is_null()) {
    const json& q = qholder["quantization_config"];
    if (!q.is_object()) return Status::bad_input("config " + source + ": field 'quantization_config' must be an object or null");
    auto text = [&](const char* k) { return q.contains(k) && q[k].is_string() ? q[k].get<std::string>() : std::string(); };
    std::string what = text("quant_algo").empty() ? text("quant_method") : text("quant_method") + " " + text("quant_algo");
    std::string upper;
    for (char ch : what) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (upper.find("NVFP4") == std::string::npos)  // MXFP4 (an E8M0 scale per 32 values) is another format
      c.notes.push_back("its quantization_config is " + (what.empty() ? std::string("without a quant_method") : printable(what)) +
                        ": the executor runs the routed experts as NVFP4 all the same (its weights are NVFP4's bytes, "
                        "not the checkpoint's)");
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const json& rs = j["rope_scaling"];
    if (!rs.is_object()) return Status::bad_input("config " + source + ": field 'rope_scaling' must be an object or null");
    FieldReader rr{rs, source, Status::ok()};
    std::string type = rr.string("type", rr.string("rope_type", ""));
    if (type != "yarn" && type != "deepseek_yarn")
      return Status::bad_input("config " + source + ": field 'rope_scaling.type' value '" + printable(type) +
                               "' is not supported (supported: yarn, deepseek_yarn, or null)");
    c.rope_scaling.type = "yarn";
    c.rope_scaling.factor = rr.number("factor", 1.0, 0.0, 1e6, /*lo_open=*/true);
    c.rope_scaling.original_max_position_embeddings =
        rr.number("original_max_position_embeddings", 4096, 0.0, static_cast<double>(kMaxPositions), /*lo_open=*/true);
    c.rope_scaling.beta_fast = rr.number("beta_fast", 32.0, 0.0, 1e6, /*lo_open=*/true);
    c.rope_scaling.beta_slow = rr.number("beta_slow", 1.0, 0.0, 1e6, /*lo_open=*/true);
    c.rope_scaling.mscale = rr.number("mscale", 1.0, 0.0, 1e6);
    c.rope_scaling.mscale_all_dim = rr.number("mscale_all_dim", 0.0, 0.0, 1e6);
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
  if (c.is_ok()) c->name = model_name_of_path(path);
  return c;
}

std::string model_name_of_path(const std::string& path) {
  // Absolute and without "." or "..": ./config.json is named by its folder. Symbolic links are
  // not followed (a Hugging Face cache links snapshots/<commit>/config.json into blobs/).
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  if (ec) p = path;
  p = p.lexically_normal();
  if (p.filename() != "config.json" || !p.has_parent_path() || p.parent_path().filename().empty()) return p.stem().string();
  const std::filesystem::path dir = p.parent_path();
  // models--ORG--NAME/snapshots/<commit>/config.json (the Hugging Face cache): NAME.
  if (dir.parent_path().filename() == "snapshots") {
    const std::string repo = dir.parent_path().parent_path().filename().string();
    if (repo.rfind("models--", 0) == 0) {
      const size_t cut = repo.rfind("--");
      if (cut != std::string::npos && cut + 2 < repo.size()) return repo.substr(cut + 2);
    }
  }
  return dir.filename().string();
}

std::vector<std::string> builtin_model_names() {
  std::vector<std::string> names;
  for (const auto& b : builtin_configs()) names.emplace_back(b.name);
  return names;
}

Result<ModelConfig> resolve_model_config(const std::string& name_or_path) {
  // Built-in names are case-insensitive: "Kimi-K2.5", as the README and Hugging Face spell it.
  auto same_name = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
  };
  for (const auto& b : builtin_configs()) {
    if (same_name(name_or_path, b.name)) {
      auto c = parse_model_config(std::string(b.json), "builtin:" + std::string(b.name));
      if (c.is_ok()) c->name = b.name;
      return c;
    }
  }
  std::error_code ec;
  if (std::filesystem::is_directory(name_or_path, ec)) {
    // A model folder (a Hugging Face checkout or snapshot, SGLang's --model-path): its config.json.
    const std::filesystem::path cfg = std::filesystem::path(name_or_path) / "config.json";
    if (!std::filesystem::exists(cfg, ec))
      return Status::bad_input("model " + printable(name_or_path, 200) + " is a directory without a config.json");
    return load_model_config_file(cfg.string());
  }
  if (std::filesystem::exists(name_or_path, ec) || name_or_path.ends_with(".json"))
    return load_model_config_file(name_or_path);
  std::string known;
  for (const auto& n : builtin_model_names()) known += (known.empty() ? "" : ", ") + n;
  return Status::bad_input("unknown model '" + printable(name_or_path, 200) + "'" +
                           did_you_mean(name_or_path.substr(0, 200), builtin_model_names()) + " (built-in: " + known +
                           "; or a path to a config.json)");
}

int64_t moe_tile_rows(int64_t tokens, int64_t top_k, int64_t experts) {
  const auto rows = checked_mul<int64_t>(tokens, top_k);
  const int64_t per = experts > 0 && rows ? *rows / experts : (experts > 0 ? INT64_MAX : 0);
  int64_t p2 = 8;
  while (p2 < per && p2 < 64) p2 <<= 1;
  return p2;
}

Result<RankShape> make_rank_shape(const ModelConfig& cfg, int64_t tokens, int tp_size, int tp_rank,
                                  int64_t layers_override) {
  auto bad = [&](const std::string& m) { return Status::bad_input(cfg.name + ": " + m); };
  if (tokens <= 0) return bad("--tokens must be positive");
  if (tokens > kMaxTokens) return bad("--tokens " + std::to_string(tokens) + " exceeds 2^40");
  if (tp_size <= 0) return bad("--tp must be positive");
  if (tp_rank < 0 || tp_rank >= tp_size) return bad("TP rank out of range");
  RankShape s;
  s.tokens = tokens;
  s.tp_size = tp_size;
  s.tp_rank = tp_rank;
  s.layers = layers_override > 0 ? layers_override : cfg.num_hidden_layers;
  if (layers_override > cfg.num_hidden_layers)
    return bad("--layers " + std::to_string(layers_override) + " exceeds num_hidden_layers (" + std::to_string(cfg.num_hidden_layers) + ")");
  auto tp_divides = [&](int64_t n, const char* what) -> Status {
    if (n % tp_size == 0) return Status::ok();
    return bad("--tp " + std::to_string(tp_size) + " does not divide " + what + " (" + std::to_string(n) + ")");
  };
  MOEPROF_RETURN_IF_ERROR(tp_divides(cfg.num_attention_heads, "num_attention_heads"));
  s.heads = cfg.num_attention_heads / tp_size;
  MOEPROF_RETURN_IF_ERROR(tp_divides(cfg.intermediate_size, "intermediate_size"));
  s.dense_inter = cfg.intermediate_size / tp_size;
  if (cfg.hidden_size % 32) return bad("hidden_size must be a multiple of 32 for NVFP4 experts");
  // Every product below is checked: a config read from disk is bounded (parse_model_config), one
  // built in code need not be.
  auto overflow = [&](const char* what) { return bad(std::string(what) + " does not fit in a 64-bit integer"); };
  if (cfg.n_routed_experts > 0) {
    MOEPROF_RETURN_IF_ERROR(tp_divides(cfg.moe_intermediate_size, "moe_intermediate_size"));
    s.moe_inter = cfg.moe_intermediate_size / tp_size;
    if (s.moe_inter % 32)
      return bad("moe_intermediate_size / TP = " + std::to_string(s.moe_inter) + " must be a multiple of 32 for NVFP4");
    auto shared = checked_product({cfg.moe_intermediate_size, cfg.n_shared_experts});
    if (!shared) return overflow("moe_intermediate_size * n_shared_experts");
    s.shared_inter = *shared / tp_size;
    s.moe_tile = moe_tile_rows(tokens, cfg.num_experts_per_tok, cfg.n_routed_experts);
    auto routed = checked_product({tokens, cfg.num_experts_per_tok});
    auto pad = checked_product({cfg.n_routed_experts, s.moe_tile - 1});
    auto padded = routed && pad ? checked_add<int64_t>(*routed, *pad) : std::nullopt;
    if (!padded) return overflow("tokens * num_experts_per_tok + n_routed_experts * (tile - 1)");
    s.padded_rows = *padded;
  }
  // Vocab-parallel embedding / LM head: ceil(V / tp) rows per rank.
  if (cfg.vocab_size < 0) return bad("vocab_size must be positive");
  s.vocab = cfg.vocab_size / tp_size + (cfg.vocab_size % tp_size != 0 ? 1 : 0);
  auto start = checked_product({s.vocab, int64_t{tp_rank}});
  if (!start) return overflow("vocab_start");
  s.vocab_start = *start;
  return s;
}

}  // namespace moeprof
