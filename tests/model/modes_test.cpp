// Baseline vs reuse on the CPU reference backend: bitwise-identical outputs, a peak difference
// equal to the bytes of the tensors whose lifetimes changed, the fallback paths, and tagging.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "core/trace_io.h"
#include "executor/backends.h"
#include "executor/run.h"
#include "executor/deepseek_model.h"
#include "planner/analysis.h"

using namespace moeprof;
namespace fs = std::filesystem;

namespace {

std::string out_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("moeprof_modes_" + std::to_string(::getpid())) / name;
  fs::create_directories(d);
  return d.string();
}

// Writes a variant of the tiny config with some fields changed; returns its path.
std::string tiny_variant(const std::string& name, const std::function<void(nlohmann::json&)>& f) {
  std::ifstream in(std::string(MOEPROF_SOURCE_DIR) + "/examples/configs/tiny.json");
  nlohmann::json j = nlohmann::json::parse(in);
  f(j);
  const std::string p = out_dir("configs") + "/" + name + ".json";
  std::ofstream(p) << j.dump(2);
  return p;
}

struct Both {
  RunPlanResult result;
  planner::RunAnalysis baseline, reuse;
  Trace baseline_trace, reuse_trace;
};

Both run_both(const std::string& model, int64_t tokens, const std::string& dir, int tp = 1) {
  auto be = make_cpu_backend();
  RunPlan plan;
  plan.model = model;
  plan.tokens = tokens;
  plan.tp = tp;
  plan.out_dir = dir;
  auto r = execute_run_plan(*be, plan);
  REQUIRE(r.is_ok());
  Both b;
  b.result = r.value();
  auto tb = read_trace(dir + "/baseline.mtrace");
  auto tr = read_trace(dir + "/reuse.mtrace");
  REQUIRE(tb.is_ok());
  REQUIRE(tr.is_ok());
  REQUIRE_FALSE(tb->truncated);
  REQUIRE_FALSE(tr->truncated);
  b.baseline_trace = tb.value();
  b.reuse_trace = tr.value();
  b.baseline = planner::analyze(b.baseline_trace);
  b.reuse = planner::analyze(b.reuse_trace);
  return b;
}

std::set<std::string> live_names(const planner::RunAnalysis& a) {
  std::set<std::string> s;
  for (const auto& e : a.devices.at(0).live_set_at_activation_peak) s.insert(e.scope + "/" + e.name);
  return s;
}

}  // namespace

TEST_CASE("reuse mode saves exactly T*(2H + latent)*2 bytes of peak activation", "[model][modes]") {
  struct Case {
    std::string model;
    int64_t tokens;
  };
  const std::string no_q_lora = tiny_variant("tiny-no-q-lora", [](nlohmann::json& j) { j["q_lora_rank"] = nullptr; });
  const std::string five_layers = tiny_variant("tiny-5-layers", [](nlohmann::json& j) {
    j["num_hidden_layers"] = 5;
    j["hidden_size"] = 288;  // odd multiple of 32
  });
  for (const Case& c : {Case{"tiny", 37}, Case{"tiny", 100}, Case{"tiny", 131}, Case{no_q_lora, 53},
                        Case{five_layers, 77}}) {
    INFO(c.model << " T=" << c.tokens);
    auto cfg = resolve_model_config(c.model);
    REQUIRE(cfg.is_ok());
    Both b = run_both(c.model, c.tokens, out_dir("delta"));
    REQUIRE(b.result.outputs_identical);
    REQUIRE(b.result.modes.size() == 2);
    // Bitwise: same logits bits and same final hidden-state hash.
    const auto& ob = b.result.modes[0].output;
    const auto& orr = b.result.modes[1].output;
    CHECK(ob.hidden_hash == orr.hidden_hash);
    REQUIRE(ob.logits.size() == orr.logits.size());
    CHECK(std::memcmp(ob.logits.data(), orr.logits.data(), ob.logits.size() * 4) == 0);
    CHECK(ob.hidden_tail == orr.hidden_tail);

    const uint64_t T = c.tokens, H = cfg->hidden_size, latent = cfg->latent_dim();
    const uint64_t expected = T * (2 * H + latent) * 2;
    CHECK(b.baseline.peak_activation_bytes - b.reuse.peak_activation_bytes == expected);
    // Churn: every MoE layer but layer 0 stops allocating its [T,H] output.
    int64_t reused_layers = 0;
    for (int64_t l = 1; l < cfg->num_hidden_layers; ++l) reused_layers += cfg->is_moe_layer(l);
    CHECK(b.baseline.churn_bytes - b.reuse.churn_bytes == static_cast<uint64_t>(reused_layers) * T * H * 2);
    CHECK(b.result.modes[1].moe.reused == reused_layers);
    CHECK(b.result.modes[0].moe.fresh == b.result.modes[1].moe.reused);
    // Weights and KV cache are identical in both runs.
    CHECK(b.baseline.devices[0].peak_by_category[Category::kWeights] ==
          b.reuse.devices[0].peak_by_category[Category::kWeights]);
    CHECK(b.baseline.devices[0].peak_by_category[Category::kKvCache] ==
          b.reuse.devices[0].peak_by_category[Category::kKvCache]);
    // The executor's own accounting agrees with the trace replay to the byte.
    for (size_t i = 0; i < 2; ++i) {
      const auto& an = i == 0 ? b.baseline : b.reuse;
      const auto& acc = b.result.modes[i].accounting;
      CHECK(an.peak_activation_bytes == acc.peak_activation);
      CHECK(an.peak_total_bytes == acc.peak_total);
      CHECK(an.churn_bytes == [&] { uint64_t s = 0; for (auto v : acc.allocated) s += v; return s; }());
    }
  }
}

TEST_CASE("the baseline peak holds the needless buffers, the reuse peak does not", "[model][modes]") {
  Both b = run_both("tiny", 61, out_dir("liveset"));
  auto lb = live_names(b.baseline);
  auto lr = live_names(b.reuse);
  // The peak is during a MoE layer's expert runner in both modes.
  bool any_gemm2_b = false, any_gemm2_r = false;
  for (const auto& n : lb) any_gemm2_b |= n.ends_with("/moe/experts/gemm2_out");
  for (const auto& n : lr) any_gemm2_r |= n.ends_with("/moe/experts/gemm2_out");
  CHECK(any_gemm2_b);
  CHECK(any_gemm2_r);
  auto has_suffix = [](const std::set<std::string>& s, const std::string& suf) {
    for (const auto& n : s) if (n.ends_with(suf)) return true;
    return false;
  };
  CHECK(has_suffix(lb, "/attn/post_norm"));
  CHECK(has_suffix(lb, "/attn/qkv_a_latent"));
  CHECK(has_suffix(lb, "/moe/experts/moe_output"));
  CHECK_FALSE(has_suffix(lr, "/attn/post_norm"));
  CHECK_FALSE(has_suffix(lr, "/attn/qkv_a_latent"));
  CHECK_FALSE(has_suffix(lr, "/moe/experts/moe_output"));
}

TEST_CASE("every allocation is tagged with a name, a scope and a category", "[model][modes]") {
  Both b = run_both("tiny", 29, out_dir("tags"), /*tp=*/2);
  for (const Trace* t : {&b.baseline_trace, &b.reuse_trace}) {
    size_t allocs = 0, frees = 0;
    for (const auto& r : t->records) {
      if (r.kind == EventKind::kFree) ++frees;
      if (r.kind != EventKind::kAlloc) continue;
      ++allocs;
      CHECK_FALSE(t->str(r.name_id).empty());
      CHECK_FALSE(t->str(r.scope_id).empty());
      CHECK(r.category != Category::kUnknown);
      CHECK(r.dtype != DType::kUnknown);
      CHECK_FALSE(t->str(r.shape_id).empty());
    }
    CHECK(allocs > 100);
    CHECK(allocs == frees);  // the whole program, weights included, is inside the trace
    CHECK(t->meta.tp_size == 2);
    CHECK(t->meta.extra.at("tp_emulated") == "true");
  }
  CHECK(b.baseline.anomalies.total() == 0);
  CHECK(b.reuse.anomalies.total() == 0);
  // The executor's own per-category accounting travels in the trace metadata and equals the
  // replayed per-category high-water marks and churn.
  for (auto [t, an] : {std::pair{&b.baseline_trace, &b.baseline}, std::pair{&b.reuse_trace, &b.reuse}}) {
    for (Category c : {Category::kWeights, Category::kKvCache, Category::kActivation}) {
      const std::string cat(category_name(c));
      CHECK(t->meta.extra.at("accounting.peak_bytes." + cat) == std::to_string(an->devices[0].peak_by_category[c]));
      CHECK(t->meta.extra.at("accounting.allocated_bytes." + cat) == std::to_string(an->devices[0].churn_by_category[c]));
    }
  }
}

TEST_CASE("fallbacks: layer 0 gets a fresh buffer, mismatched or non-symmetric buffers are rejected",
          "[model][modes]") {
  // All layers MoE: layer 0's input is the embedding output (also the residual), never offered.
  const std::string all_moe = tiny_variant("tiny-all-moe", [](nlohmann::json& j) { j["first_k_dense_replace"] = 0; });
  Both b = run_both(all_moe, 43, out_dir("allmoe"));
  CHECK(b.result.outputs_identical);
  CHECK(b.result.modes[1].moe.fresh == 1);
  CHECK(b.result.modes[1].moe.reused == 3);

  auto cfg = resolve_model_config("tiny");
  REQUIRE(cfg.is_ok());
  auto shape = make_rank_shape(cfg.value(), 37, 1, 0, 0);
  REQUIRE(shape.is_ok());
  auto be = make_cpu_backend();
  for (bool require_symmetric : {false, true}) {
    ModelOptions mo;
    mo.require_symmetric_output = require_symmetric;
    auto model = DeepseekModel::create(*be, cfg.value(), shape.value(), MemoryMode::kReuse, mo);
    REQUIRE(model.is_ok());
    REQUIRE(model.value()->plans()[1].provide_output_buffer);
    REQUIRE_FALSE(model.value()->plans()[0].provide_output_buffer);
    const int64_t T = 37, H = cfg->hidden_size, k = cfg->num_experts_per_tok;
    AllocTag tag{"t", "test", Category::kActivation};
    auto moe_in = be->empty(DType::kBF16, T, H, tag);
    REQUIRE(be->init_uniform(moe_in.value(), 5, 1.0f).is_ok());
    auto ids = be->empty(DType::kI32, T, k, tag);
    REQUIRE(be->init_ints(ids.value(), 9, 0, static_cast<int32_t>(cfg->n_routed_experts)).is_ok());
    auto w = be->empty(DType::kF32, T, k, tag);
    REQUIRE(be->init_uniform(w.value(), 11, 1.0f).is_ok());
    auto good = be->empty(DType::kBF16, T, H, tag);
    auto wrong_rows = be->empty(DType::kBF16, T + 1, H, tag);
    auto wrong_dtype = be->empty(DType::kF32, T, H, tag);
    // Some top-k rows may pick the same expert twice with init_ints: fine for the protocol.
    MoeRunnerStats st;
    {
      MoeOutputBufferScope scope(&good.value());
      auto out = model.value()->run_routed_experts_for_test(1, moe_in.value(), ids.value(), w.value(), Tensor(), &st);
      REQUIRE(out.is_ok());
      if (require_symmetric) {
        CHECK(out->storage() != good->storage());  // host memory is not in a symmetric pool
      } else {
        CHECK(out->storage() == good->storage());
      }
    }
    for (const Tensor* bad : {&wrong_rows.value(), &wrong_dtype.value()}) {
      MoeOutputBufferScope scope(bad);
      auto out = model.value()->run_routed_experts_for_test(1, moe_in.value(), ids.value(), w.value(), Tensor(), &st);
      REQUIRE(out.is_ok());
      CHECK(out->storage() != bad->storage());
      CHECK(out->rows() == T);
      CHECK(out->cols() == H);
    }
    CHECK(st.reused == (require_symmetric ? 0 : 1));
    CHECK(st.fallback == (require_symmetric ? 3 : 2));
  }
}

TEST_CASE("the output-buffer scope nests, restores on exit and is per thread", "[model][modes]") {
  auto be = make_cpu_backend();
  AllocTag tag{"t", "test", Category::kActivation};
  auto a = be->empty(DType::kBF16, 3, 32, tag);
  auto b = be->empty(DType::kBF16, 3, 32, tag);
  CHECK(MoeOutputBufferScope::current() == nullptr);
  {
    MoeOutputBufferScope s1(&a.value());
    CHECK(MoeOutputBufferScope::current() == &a.value());
    try {
      MoeOutputBufferScope s2(&b.value());
      CHECK(MoeOutputBufferScope::current() == &b.value());
      const Tensor* seen_by_other_thread = &a.value();
      std::thread([&] { seen_by_other_thread = MoeOutputBufferScope::current(); }).join();
      CHECK(seen_by_other_thread == nullptr);
      throw std::runtime_error("unwind");
    } catch (const std::runtime_error&) {
    }
    CHECK(MoeOutputBufferScope::current() == &a.value());
  }
  CHECK(MoeOutputBufferScope::current() == nullptr);
}

TEST_CASE("peak savings scale linearly with tokens as the formula says", "[model][modes]") {
  auto cfg = resolve_model_config("tiny");
  REQUIRE(cfg.is_ok());
  const uint64_t per_token = (2 * cfg->hidden_size + cfg->latent_dim()) * 2;
  for (int64_t T : {17, 64, 203}) {
    Both b = run_both("tiny", T, out_dir("scale"));
    CHECK(b.baseline.peak_activation_bytes - b.reuse.peak_activation_bytes == per_token * T);
  }
}

// model_linear_shapes (the cuBLASLt tuning list) must name exactly the linear weights the model
// allocates: every bf16 [n, k] weight the forward multiplies by appears with its shape, and
// every listed shape belongs to some weight. Meta backend: every built-in model at full size.
TEST_CASE("model_linear_shapes lists exactly the dense projections of every built-in model", "[model]") {
  struct Weights : AllocationObserver {
    std::set<std::pair<std::string, std::string>> seen;  // (weight name, "NxK")
    void on_alloc(const Storage& s, const AllocTag& tag, DType dtype, const std::string& shape) override {
      if (s.category() == Category::kWeights && dtype == DType::kBF16 && tag.name != "embed_tokens" &&
          shape.find('x') != std::string::npos && shape.rfind("1x", 0) != 0)
        seen.insert({tag.name, shape});
    }
    void on_free(const Storage&) override {}
  };
  for (const std::string& name : builtin_model_names()) {
    for (int tp : {1, 4}) {
      auto cfg = resolve_model_config(name);
      REQUIRE(cfg.is_ok());
      auto shape = make_rank_shape(*cfg, 257, tp, 0, 0);
      if (!shape.is_ok()) continue;  // TP=4 does not divide some model's heads
      INFO(name << " TP=" << tp);
      auto be = make_meta_backend();
      Weights w;
      be->add_observer(&w);
      {
        auto m = DeepseekModel::create(*be, *cfg, *shape, MemoryMode::kBaseline, ModelOptions{});
        REQUIRE(m.is_ok());
      }
      be->remove_observer(&w);
      // Shapes only: the list names one weight per distinct shape (o_proj and a shared down
      // projection can coincide).
      std::set<std::string> listed, allocated;
      for (const LinearShape& s : model_linear_shapes(*cfg, *shape)) {
        CHECK(s.rows == (s.name == "lm_head" ? 1 : 257));
        CHECK(s.out == (s.name == "gate" || s.name == "lm_head" ? DType::kF32 : DType::kBF16));
        CHECK(listed.insert(std::to_string(s.n) + "x" + std::to_string(s.k)).second);  // each shape once
      }
      for (const auto& [n, sh] : w.seen) {
        INFO("allocated, not listed: " << n << " " << sh);
        CHECK(listed.count(sh) == 1);
        allocated.insert(sh);
      }
      CHECK(allocated == listed);
    }
  }
}
