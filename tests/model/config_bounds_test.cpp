// Config bounds and checked shapes (issue 14): every config integer has an upper bound, numbers
// are range-checked before any conversion, floats that must be positive are, and a shape that
// does not fit fails where it is derived (make_rank_shape) or allocated (Backend::empty), never
// as a wrapped size.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/checked.h"
#include "executor/backends.h"
#include "executor/deepseek_model.h"
#include "model/config.h"

using namespace moeprof;

namespace {

std::string tiny_text() {
  std::ifstream in(std::string(MOEPROF_SOURCE_DIR) + "/examples/configs/tiny.json");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

Result<ModelConfig> tiny_with(const std::string& field, const nlohmann::json& value) {
  nlohmann::json j = nlohmann::json::parse(tiny_text(), nullptr, true, true);
  j[field] = value;
  return parse_model_config(j.dump(), "t.json");
}

std::string error_of(const std::string& field, const nlohmann::json& value) {
  auto r = tiny_with(field, value);
  if (r.is_ok()) return "accepted";
  CHECK(r.status().code() == ErrorCode::kBadInput);
  return r.status().message();
}

}  // namespace

TEST_CASE("config integers have upper bounds, checked before any conversion", "[model][config][bounds]") {
  CHECK(error_of("vocab_size", nlohmann::json(uint64_t{1} << 62)) ==
        "config t.json: field 'vocab_size' must be an integer in [1, 16777216] (got 4611686018427387904)");
  CHECK(error_of("n_shared_experts", nlohmann::json(uint64_t{1} << 62)) ==
        "config t.json: field 'n_shared_experts' must be an integer in [0, 1024] (got 4611686018427387904)");
  // 1e300 used to be cast to int64 (undefined behaviour) before its range check.
  CHECK(error_of("vocab_size", 1e300) == "config t.json: field 'vocab_size' must be an integer in [1, 16777216] (got 1e+300)");
  CHECK(error_of("hidden_size", 256.5) == "config t.json: field 'hidden_size' must be an integer (got 256.5)");
  CHECK(error_of("num_hidden_layers", nlohmann::json(UINT64_MAX)) ==
        "config t.json: field 'num_hidden_layers' must be an integer in [1, 16384] (got 18446744073709551615)");
  CHECK(error_of("num_hidden_layers", -2) == "config t.json: field 'num_hidden_layers' must be an integer in [1, 16384] (got -2)");
  CHECK(error_of("n_routed_experts", nlohmann::json(int64_t{1} << 40)) ==
        "config t.json: field 'n_routed_experts' must be an integer in [0, 16384] (got 1099511627776)");
  CHECK(error_of("num_experts_per_tok", 33) == "config t.json: field 'num_experts_per_tok' must be an integer in [1, 32] (got 33)");
  CHECK(error_of("n_group", 65) == "config t.json: field 'n_group' must be an integer in [1, 64] (got 65)");
  // Integral floats in range are integers, as HF writes some of them.
  auto f = tiny_with("vocab_size", 1024.0);
  REQUIRE(f.is_ok());
  CHECK(f->vocab_size == 1024);
  CHECK(tiny_with("vocab_size", 16777216).is_ok());
  CHECK(error_of("vocab_size", 16777217) != "accepted");
}

TEST_CASE("config floats are finite and in range", "[model][config][bounds]") {
  CHECK(error_of("rms_norm_eps", -1) == "config t.json: field 'rms_norm_eps' must be a finite number > 0 and <= 1 (got -1)");
  CHECK(error_of("rms_norm_eps", 0) == "config t.json: field 'rms_norm_eps' must be a finite number > 0 and <= 1 (got 0)");
  CHECK(error_of("rope_theta", 0) == "config t.json: field 'rope_theta' must be a finite number > 0 and <= 1e+12 (got 0)");
  CHECK(error_of("rope_theta", -10000.0) != "accepted");
  CHECK(error_of("routed_scaling_factor", 0) != "accepted");
  CHECK(error_of("rope_theta", 50000) == "accepted");
  auto yarn = [](double factor) {
    nlohmann::json j = nlohmann::json::parse(tiny_text(), nullptr, true, true);
    j["rope_scaling"] = {{"type", "yarn"}, {"factor", factor}};
    return parse_model_config(j.dump(), "t.json");
  };
  CHECK(yarn(40).is_ok());
  REQUIRE_FALSE(yarn(-1).is_ok());
  CHECK(yarn(-1).status().message() == "config t.json: field 'factor' must be a finite number > 0 and <= 1e+06 (got -1.0)");
}

TEST_CASE("rank shapes: every product is checked", "[model][config][bounds]") {
  // Configs built in code are not bounded by the parser: the shape derivation checks itself.
  auto cfg = resolve_model_config("tiny");
  REQUIRE(cfg.is_ok());
  ModelConfig c = cfg.value();
  c.n_shared_experts = int64_t{1} << 62;  // moe_intermediate_size * shared wrapped to a negative width before
  auto s = make_rank_shape(c, 100, 1, 0, 0);
  REQUIRE_FALSE(s.is_ok());
  CHECK(s.status().message() == "tiny: moe_intermediate_size * n_shared_experts does not fit in a 64-bit integer");

  c = cfg.value();
  c.n_routed_experts = int64_t{1} << 62;
  c.num_experts_per_tok = 8;
  s = make_rank_shape(c, 100, 1, 0, 0);
  REQUIRE_FALSE(s.is_ok());
  CHECK(s.status().message() == "tiny: tokens * num_experts_per_tok + n_routed_experts * (tile - 1) does not fit in a 64-bit integer");

  c = cfg.value();
  s = make_rank_shape(c, (int64_t{1} << 40) + 1, 1, 0, 0);
  REQUIRE_FALSE(s.is_ok());
  CHECK(s.status().message() == "tiny: --tokens 1099511627777 exceeds 2^40");
  s = make_rank_shape(c, int64_t{1} << 40, 1, 0, 0);
  REQUIRE(s.is_ok());
  CHECK(s->padded_rows == (int64_t{1} << 40) * 2 + 8 * 63);  // T*k + E*(tile-1), tile 64
  CHECK(moe_tile_rows(INT64_MAX, 8, 8) == 64);                // T*k overflows: the largest tile
  CHECK(moe_tile_rows(100, 2, 8) == 32);
}

TEST_CASE("Backend::empty refuses a shape whose bytes do not fit", "[executor][bounds]") {
  for (auto make : {make_cpu_backend, make_meta_backend}) {
    auto be = make();
    AllocTag tag{"embed_tokens", "model", Category::kWeights};
    // vocab 2^62 x hidden 256 x bf16: wrapped to 0 bytes in size_t before, and init then wrote
    // 2^70 elements into it (the SIGSEGV of issue 14).
    auto t = be->empty(DType::kBF16, int64_t{1} << 62, 256, tag);
    REQUIRE_FALSE(t.is_ok());
    CHECK(t.status().code() == ErrorCode::kBadInput);
    CHECK(t.status().message() == "tensor model/embed_tokens of 4611686018427387904 x 256 elements needs more than 2^63-1 bytes");
    CHECK(be->allocation_count() == 0);
    auto ok = be->empty(DType::kBF16, 3, 5, tag);
    REQUIRE(ok.is_ok());
    CHECK(ok->bytes() == 30);
  }
}

TEST_CASE("a model with the largest vocabulary allowed runs on the meta backend", "[model][config][bounds]") {
  // The bound leaves the full-size range usable: vocab 2^24 (a 32 GiB embedding at hidden 1024)
  // allocates on meta, and the layer-1 run succeeds.
  nlohmann::json j = nlohmann::json::parse(tiny_text(), nullptr, true, true);
  j["vocab_size"] = kMaxVocab;
  auto cfg = parse_model_config(j.dump(), "big.json");
  REQUIRE(cfg.is_ok());
  auto shape = make_rank_shape(cfg.value(), 4, 1, 0, 1);
  REQUIRE(shape.is_ok());
  auto be = make_meta_backend();
  auto model = DeepseekModel::create(*be, cfg.value(), shape.value(), MemoryMode::kBaseline, ModelOptions{});
  REQUIRE(model.is_ok());
  auto out = model.value()->forward();
  REQUIRE(out.is_ok());
  CHECK(out->logits.size() == static_cast<size_t>(kMaxVocab));
}
