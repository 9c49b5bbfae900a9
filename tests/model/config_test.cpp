// Model configs: the shipped HF config.json files load with the right fields; malformed or
// unsupported ones fail naming the field.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/config.h"

using namespace moeprof;

namespace {
std::string read_file(const std::string& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
std::string cfg_path(const std::string& name) {
  return std::string(MOEPROF_SOURCE_DIR) + "/examples/configs/" + name + ".json";
}
}  // namespace

TEST_CASE("shipped configs load with the published fields", "[model][config]") {
  struct Row {
    const char* name;
    int64_t hidden, layers, dense, experts, topk, shared, moe_inter, heads, q_lora, vocab;
    TopkMethod method;
    ScoringFunc scoring;
  };
  const Row rows[] = {
      {"kimi-k2.5", 7168, 61, 1, 384, 8, 1, 2048, 64, 1536, 163840, TopkMethod::kNoauxTc, ScoringFunc::kSigmoid},
      {"deepseek-v3", 7168, 61, 3, 256, 8, 1, 2048, 128, 1536, 129280, TopkMethod::kNoauxTc, ScoringFunc::kSigmoid},
      {"deepseek-v2", 5120, 60, 1, 160, 6, 2, 1536, 128, 1536, 102400, TopkMethod::kGroupLimitedGreedy,
       ScoringFunc::kSoftmax},
      {"deepseek-v2-lite", 2048, 27, 1, 64, 6, 2, 1408, 16, 0, 102400, TopkMethod::kGreedy, ScoringFunc::kSoftmax},
  };
  for (const Row& r : rows) {
    INFO(r.name);
    auto from_file = load_model_config_file(cfg_path(r.name));
    REQUIRE(from_file.is_ok());
    auto builtin = resolve_model_config(r.name);
    REQUIRE(builtin.is_ok());
    for (const ModelConfig* c : {&from_file.value(), &builtin.value()}) {
      CHECK(c->hidden_size == r.hidden);
      CHECK(c->num_hidden_layers == r.layers);
      CHECK(c->first_k_dense_replace == r.dense);
      CHECK(c->n_routed_experts == r.experts);
      CHECK(c->num_experts_per_tok == r.topk);
      CHECK(c->n_shared_experts == r.shared);
      CHECK(c->moe_intermediate_size == r.moe_inter);
      CHECK(c->num_attention_heads == r.heads);
      CHECK(c->q_lora_rank == r.q_lora);
      CHECK(c->vocab_size == r.vocab);
      CHECK(c->topk_method == r.method);
      CHECK(c->scoring_func == r.scoring);
      CHECK(c->kv_lora_rank == 512);
      CHECK(c->qk_head_dim() == 192);
    }
  }
  // The seed's latent width: q_lora + kv_lora + rope = 2112.
  CHECK(resolve_model_config("kimi-k2.5")->latent_dim() == 2112);
  CHECK(resolve_model_config("kimi-k2.5")->rms_norm_eps == Approx(1e-5));
}

TEST_CASE("rank shapes follow SGLang's TP sharding", "[model][config]") {
  auto c = resolve_model_config("kimi-k2.5");
  REQUIRE(c.is_ok());
  auto s = make_rank_shape(c.value(), 16384, 4, 0, 0);
  REQUIRE(s.is_ok());
  CHECK(s->heads == 16);
  CHECK(s->moe_inter == 512);
  CHECK(s->shared_inter == 512);
  CHECK(s->vocab == 40960);
  CHECK(s->moe_tile == 64);            // T*k/E = 341 -> next pow2 512 -> clamp 64
  CHECK(s->padded_rows == 155264);     // 16384*8 + 384*63
  CHECK(moe_tile_rows(100, 2, 8) == 32);
  CHECK(moe_tile_rows(7, 2, 8) == 8);
  CHECK(moe_tile_rows(1 << 20, 8, 8) == 64);
  // Bad TP sizes name what they do not divide.
  auto bad = make_rank_shape(c.value(), 64, 3, 0, 0);
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().message() == "kimi-k2.5: --tp 3 does not divide num_attention_heads (64)");
  CHECK_FALSE(make_rank_shape(c.value(), 0, 1, 0, 0).is_ok());
  auto deep = make_rank_shape(c.value(), 64, 1, 0, 62);
  REQUIRE_FALSE(deep.is_ok());
  CHECK(deep.status().message() == "kimi-k2.5: --layers 62 exceeds num_hidden_layers (61)");
}

TEST_CASE("malformed and unsupported configs give one clear error naming the field", "[model][config]") {
  const std::string base = read_file(cfg_path("deepseek-v3"));
  auto mutate = [&](auto f) {
    nlohmann::json j = nlohmann::json::parse(base);
    f(j);
    return parse_model_config(j.dump(), "test.json");
  };
  struct Case {
    const char* field;
    std::function<void(nlohmann::json&)> f;
  };
  const Case cases[] = {
      {"hidden_size", [](nlohmann::json& j) { j.erase("hidden_size"); }},
      {"hidden_size", [](nlohmann::json& j) { j["hidden_size"] = "7168"; }},
      {"num_hidden_layers", [](nlohmann::json& j) { j["num_hidden_layers"] = -2; }},
      {"topk_method", [](nlohmann::json& j) { j["topk_method"] = "random"; }},
      {"scoring_func", [](nlohmann::json& j) { j["scoring_func"] = "relu"; }},
      {"model_type", [](nlohmann::json& j) { j["model_type"] = "llama"; }},
      {"num_experts_per_tok", [](nlohmann::json& j) { j["num_experts_per_tok"] = 999; }},
      {"rope_scaling", [](nlohmann::json& j) { j["rope_scaling"]["type"] = "dynamic"; }},
      {"norm_topk_prob", [](nlohmann::json& j) { j["norm_topk_prob"] = 3; }},
      {"n_group", [](nlohmann::json& j) { j["n_group"] = 7; }},
  };
  for (const Case& c : cases) {
    auto r = mutate(c.f);
    INFO(c.field);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == ErrorCode::kBadInput);
    CHECK(r.status().message().find(c.field) != std::string::npos);
    CHECK(r.status().message().find('\n') == std::string::npos);
  }
  CHECK_FALSE(parse_model_config("{not json", "x.json").is_ok());
  CHECK_FALSE(parse_model_config("[1,2]", "x.json").is_ok());
  auto unknown = resolve_model_config("gpt-17");
  REQUIRE_FALSE(unknown.is_ok());
  CHECK(unknown.status().message().find("unknown model 'gpt-17'") != std::string::npos);
  CHECK_FALSE(resolve_model_config("/nonexistent/config.json").is_ok());
}

TEST_CASE("q_lora_rank null means q_proj (V2-Lite), defaults apply when fields are absent", "[model][config]") {
  auto c = resolve_model_config("deepseek-v2-lite");
  REQUIRE(c.is_ok());
  CHECK(c->q_lora_rank == 0);
  CHECK(c->latent_dim() == 512 + 64);
  nlohmann::json j = nlohmann::json::parse(read_file(cfg_path("tiny")));
  j.erase("rms_norm_eps");
  j.erase("rope_theta");
  auto d = parse_model_config(j.dump(), "tiny-defaults.json");
  REQUIRE(d.is_ok());
  CHECK(d->rms_norm_eps == Approx(1e-6));
  CHECK(d->rope_theta == Approx(10000.0));
  // Routing and dense-layer defaults follow the model type, as Hugging Face's config classes do.
  for (const char* type : {"deepseek_v3", "kimi_k2", "deepseek_v2"}) {
    INFO(type);
    nlohmann::json k = nlohmann::json::parse(read_file(cfg_path("tiny")));
    k["model_type"] = type;
    for (const char* f : {"scoring_func", "topk_method", "first_k_dense_replace"}) k.erase(f);
    auto e = parse_model_config(k.dump(), "tiny-types.json");
    REQUIRE(e.is_ok());
    const bool v3 = std::string(type) != "deepseek_v2";
    CHECK((e->scoring_func == ScoringFunc::kSigmoid) == v3);
    CHECK((e->topk_method == TopkMethod::kNoauxTc) == v3);
    CHECK(e->first_k_dense_replace == (std::string(type) == "deepseek_v3" ? 3 : 0));
  }
}

TEST_CASE("quantization_config: NVFP4 is read silently, another format gets a note, a non-object is refused", "[model][config]") {
  nlohmann::json j = nlohmann::json::parse(read_file(cfg_path("tiny")));
  struct Case {
    nlohmann::json q;
    size_t notes;
  };
  for (const Case& c : {Case{nullptr, 0}, Case{{{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}}, 0},
                        Case{{{"quant_method", "fp8"}, {"fmt", "e4m3"}}, 1}, Case{{{"quant_method", "awq"}, {"bits", 4}}, 1},
                        Case{nlohmann::json::object(), 1}}) {
    INFO(c.q.dump());
    j["quantization_config"] = c.q;
    auto r = parse_model_config(j.dump(), "tiny-q.json");
    REQUIRE(r.is_ok());
    CHECK(r->notes.size() == c.notes);
    if (c.notes) CHECK(r->notes[0].find("the executor runs the routed experts as NVFP4") != std::string::npos);
  }
  j["quantization_config"] = "NVFP4";
  auto bad = parse_model_config(j.dump(), "tiny-q.json");
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().message() == "config tiny-q.json: field 'quantization_config' must be an object or null");
  CHECK(resolve_model_config("kimi-k2.5")->notes.empty());  // modelopt NVFP4, at the top level beside text_config
  // Kimi-K2.5's config nests the model in text_config and keeps quantization_config at the top.
  nlohmann::json k = nlohmann::json::parse(read_file(cfg_path("kimi-k2.5")));
  REQUIRE(k.contains("text_config"));
  REQUIRE(k.contains("quantization_config"));
  k["quantization_config"] = {{"quant_method", "mxfp4"}};
  auto mx = parse_model_config(k.dump(), "kimi-mx.json");
  REQUIRE(mx.is_ok());
  CHECK(mx->notes.size() == 1);
  k["quantization_config"] = "garbage";
  CHECK_FALSE(parse_model_config(k.dump(), "kimi-mx.json").is_ok());
}

TEST_CASE("model names are case-insensitive, and a mistyped one gets the nearest names", "[model][config]") {
  for (const char* spelled : {"Kimi-K2.5", "KIMI-K2.5", "kimi-k2.5"}) {
    auto c = resolve_model_config(spelled);
    REQUIRE(c.is_ok());
    CHECK(c->name == "kimi-k2.5");
  }
  CHECK(resolve_model_config("DeepSeek-V2-Lite")->name == "deepseek-v2-lite");
  auto typo = resolve_model_config("kimi-k25");
  REQUIRE_FALSE(typo.is_ok());
  CHECK(typo.status().code() == ErrorCode::kBadInput);
  CHECK(typo.status().message() ==
        "unknown model 'kimi-k25'; did you mean 'kimi-k2.5'? (built-in: deepseek-v2-lite, deepseek-v2, deepseek-v3, kimi-k2.5, "
        "tiny; or a path to a config.json)");
  // Nothing near: no suggestion.
  auto far = resolve_model_config("llama");
  REQUIRE_FALSE(far.is_ok());
  CHECK(far.status().message().find("did you mean") == std::string::npos);
}

TEST_CASE("a config's model name comes from its folder, also as ./config.json and in a Hugging Face cache", "[model][config]") {
  CHECK(model_name_of_path("/models/DeepSeek-V3/config.json") == "DeepSeek-V3");
  CHECK(model_name_of_path("/models/DeepSeek-V3/./sub/../config.json") == "DeepSeek-V3");
  CHECK(model_name_of_path("/hub/models--deepseek-ai--DeepSeek-V3/snapshots/86518964eaef84e3fdd98e9861759a1384f9c29d/config.json") ==
        "DeepSeek-V3");
  CHECK(model_name_of_path("/models/my-v2.json") == "my-v2");
  // Relative paths are named as their absolute form: ./config.json is its folder's.
  const auto dir = std::filesystem::temp_directory_path() / ("moeprof_cfgname_" + std::to_string(::getpid())) / "Kimi-Like";
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "config.json") << read_file(cfg_path("tiny"));
  }
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  auto here = resolve_model_config("./config.json");
  std::filesystem::current_path(cwd);
  REQUIRE(here.is_ok());
  CHECK(here->name == "Kimi-Like");
  // A model folder (SGLang's --model-path) reads its config.json; one without is named as such.
  auto folder = resolve_model_config(dir.string());
  REQUIRE(folder.is_ok());
  CHECK(folder->name == "Kimi-Like");
  CHECK(folder->hidden_size == resolve_model_config("tiny")->hidden_size);
  auto empty = resolve_model_config(dir.parent_path().string());
  REQUIRE_FALSE(empty.is_ok());
  CHECK(empty.status().message() == "model " + dir.parent_path().string() + " is a directory without a config.json");
}
