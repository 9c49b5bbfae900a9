// Runs with a drawn routing (RunPlan::routing, moe_rows; model/routing.h) on the CPU reference and
// the meta backend: the bound allocates what the router's routing does, routed rows follow the
// routing up to the worst routing's, the meta backend allocates the CPU's bytes for the same
// routing, and a serving run's decode graphs take the worst case while replaying the eager
// steps' routing token for token.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "core/trace_io.h"
#include "executor/backends.h"
#include "executor/deepseek_model.h"
#include "executor/graph_runner.h"
#include "executor/run.h"
#include "model/config.h"
#include "model/routing.h"

using namespace moeprof;
namespace fs = std::filesystem;

namespace {

// The tiny model: 8 routed experts, top-2, hidden 256, three MoE layers (1 to 3).
constexpr int64_t kE = 8, kK = 2, kH = 256, kMoeLayers = 3;

std::string out_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("moeprof_routing_" + std::to_string(::getpid())) / name;
  fs::create_directories(d);
  return d.string();
}

RunPlan plan_of(const std::string& name, const char* routing, MoeRows rows, int64_t tokens) {
  RunPlan plan;
  plan.model = "tiny";
  plan.tokens = tokens;
  plan.out_dir = out_dir(name);
  plan.modes = {MemoryMode::kBaseline};
  auto spec = parse_routing(routing);
  REQUIRE(spec.is_ok());
  plan.routing = *spec;
  plan.moe_rows = rows;
  return plan;
}

// The trace's records in order: kind, name, scope, shape, bytes (allocations and frees), category.
// `uses`: with the op uses, else allocations and frees only.
std::string sequence(const std::string& path, bool uses) {
  auto t = read_trace(path);
  REQUIRE(t.is_ok());
  std::ostringstream os;
  for (const TraceRecord& rec : t->records) {
    const bool mem = rec.kind == EventKind::kFree || rec.kind == EventKind::kAlloc;
    if (rec.kind == EventKind::kKernel || (!uses && !mem)) continue;
    os << int(rec.kind) << ' ' << t->str(rec.name_id) << ' ' << t->str(rec.scope_id) << ' ' << t->str(rec.shape_id) << ' '
       << (mem ? rec.bytes : 0) << ' ' << int(rec.category) << '\n';
  }
  return os.str();
}

// Bytes of every allocation named `name` whose scope starts with `scope`, in order.
std::vector<uint64_t> allocations(const std::string& path, const std::string& name, const std::string& scope = "") {
  auto t = read_trace(path);
  REQUIRE(t.is_ok());
  std::vector<uint64_t> out;
  for (const TraceRecord& rec : t->records)
    if (rec.kind == EventKind::kAlloc && t->str(rec.name_id) == name && t->str(rec.scope_id).rfind(scope, 0) == 0) out.push_back(rec.bytes);
  return out;
}

RunMeta meta_of(const std::string& path) {
  auto t = read_trace(path);
  REQUIRE(t.is_ok());
  return t->meta;
}

}  // namespace

TEST_CASE("routing runs - with the bound a drawn routing allocates what the router's does, and the CPU computes with it", "[executor][routing]") {
  auto be = make_cpu_backend();
  const int64_t T = 37;
  auto router = execute_run_plan(*be, plan_of("bound_router", "router", MoeRows::kBound, T));
  REQUIRE(router.is_ok());
  const std::string ref = sequence(router->modes[0].trace_path, false);
  CHECK(ref.size() > 1000);
  // The default records its routing, and its rows at the bound (nothing follows the routing).
  const RunMeta m = meta_of(router->modes[0].trace_path);
  CHECK(m.extra.at("routing") == "router");
  CHECK(m.extra.at("moe_rows") == "bound");
  CHECK(router->modes[0].accounting.peak_activation_worst == router->modes[0].accounting.peak_activation);
  CHECK(router->modes[0].moe.rows_allocated == kMoeLayers * moe_bound_rows(T, kK, kE, moe_tile_rows(T, kK, kE)));
  uint64_t hash = router->modes[0].output.hidden_hash;
  for (const char* r : {"uniform", "zipf:1.2", "hot:1", "worst"}) {
    INFO(r);
    auto a = execute_run_plan(*be, plan_of(std::string("bound_") + r, r, MoeRows::kBound, T));
    REQUIRE(a.is_ok());
    CHECK(sequence(a->modes[0].trace_path, false) == ref);
    CHECK(a->modes[0].accounting.peak_activation == router->modes[0].accounting.peak_activation);
    // The routing is applied: another routing, another result; the same routing, the same result.
    CHECK(a->modes[0].output.hidden_hash != hash);
    hash = a->modes[0].output.hidden_hash;
    auto again = execute_run_plan(*be, plan_of(std::string("bound2_") + r, r, MoeRows::kBound, T));
    REQUIRE(again.is_ok());
    CHECK(again->modes[0].output.hidden_hash == hash);
  }
}

TEST_CASE("routing runs - routed rows follow the routing, skew pads more at 37 tokens, worst reaches the stated bound", "[executor][routing]") {
  auto be = make_cpu_backend();
  const int64_t T = 37, tile = moe_tile_rows(T, kK, kE);  // 16
  const int64_t worst_rows = moe_worst_rows(T, kK, kE, tile), bound_rows = moe_bound_rows(T, kK, kE, tile);
  REQUIRE(worst_rows == 192);  // 12 tiles of 16: 8 experts' first tiles, then (74 - 8) / 16 = 4 more
  REQUIRE(bound_rows == 194);
  std::map<std::string, ModeResult> res;
  for (const char* r : {"router", "uniform", "zipf:2", "hot:1", "worst"}) {
    INFO(r);
    auto a = execute_run_plan(*be, plan_of(std::string("routed_") + r, r, MoeRows::kRouted, T));
    REQUIRE(a.is_ok());
    const ModeResult& m = a->modes[0];
    CHECK(m.moe.calls == kMoeLayers);
    CHECK(m.moe.rows_bound == kMoeLayers * bound_rows);
    CHECK(m.moe.rows_worst == kMoeLayers * worst_rows);
    CHECK(m.moe.rows_allocated <= m.moe.rows_worst);
    CHECK(m.accounting.peak_activation <= m.accounting.peak_activation_worst);
    CHECK(m.accounting.peak_total <= m.accounting.peak_total_worst);
    // The allocations are the stats' rows: gemm2_out is [rows, hidden] bf16 in every MoE layer.
    const auto g2 = allocations(m.trace_path, "gemm2_out");
    REQUIRE(static_cast<int64_t>(g2.size()) == kMoeLayers);
    uint64_t rows = 0;
    for (uint64_t b : g2) {
      CHECK(b % (kH * 2 * tile) == 0);
      rows += b / (kH * 2);
    }
    CHECK(static_cast<int64_t>(rows) == m.moe.rows_allocated);
    const RunMeta meta = meta_of(m.trace_path);
    CHECK(meta.extra.at("routing") == r);
    CHECK(meta.extra.at("moe_rows") == "routed");
    CHECK(meta.extra.at("routing.rows_allocated") == std::to_string(m.moe.rows_allocated));
    CHECK(meta.extra.at("routing.rows_worst") == std::to_string(kMoeLayers * worst_rows));
    CHECK(meta.extra.at("routing.peak_activation_worst_bytes") == std::to_string(m.accounting.peak_activation_worst));
    CHECK(meta.extra.at("routing.max_expert_capacity") == std::to_string(T));
    res[r] = m;
  }
  // At 37 tokens (9 per expert on average, under one tile) uniform opens one tile per expert and
  // skew opens more. (At Kimi-K2.5's 16,384 tokens it is the other way round: docs/budget.md.)
  CHECK(res["uniform"].moe.rows_allocated < res["zipf:2"].moe.rows_allocated);
  CHECK(res["uniform"].moe.rows_allocated < res["hot:1"].moe.rows_allocated);
  CHECK(res["uniform"].accounting.peak_activation < res["hot:1"].accounting.peak_activation);
  // hot:1: the hot expert takes every token of every call.
  CHECK(res["hot:1"].moe.max_expert_tokens == T);
  // worst: every call pads the worst routing's rows, so the peak is the worst-case bound.
  CHECK(res["worst"].moe.rows_allocated == kMoeLayers * worst_rows);
  CHECK(res["worst"].accounting.peak_activation == res["worst"].accounting.peak_activation_worst);
  for (const auto& [name, m] : res) CHECK(m.accounting.peak_activation_worst == res["worst"].accounting.peak_activation_worst);
  // Every allocation but the routed ones is the same whatever the routing.
  CHECK(res["uniform"].accounting.peak[static_cast<int>(Category::kWeights)] == res["worst"].accounting.peak[static_cast<int>(Category::kWeights)]);
}

TEST_CASE("routing runs - the meta backend allocates the CPU's bytes for the same drawn routing", "[executor][routing][meta]") {
  for (const char* r : {"zipf:1.2", "hot:3", "worst", "uniform"}) {
    INFO(r);
    auto run = [&](Backend& be, const std::string& dir) {
      RunPlan plan = plan_of(dir, r, MoeRows::kRouted, 41);
      plan.modes = {MemoryMode::kBaseline, MemoryMode::kFixes};
      auto res = execute_run_plan(be, plan);
      REQUIRE(res.is_ok());
      return std::make_pair(sequence(res->modes[0].trace_path, true) + sequence(res->modes[1].trace_path, true), res->modes[1].moe);
    };
    auto cpu = make_cpu_backend();
    auto meta = make_meta_backend();
    const auto a = run(*cpu, std::string("same_cpu_") + r);
    const auto b = run(*meta, std::string("same_meta_") + r);
    CHECK(a.first.size() > 1000);
    CHECK(a.first == b.first);
    CHECK(a.second.rows_allocated == b.second.rows_allocated);
    CHECK(a.second.max_expert_tokens == b.second.max_expert_tokens);
  }
  // The router's own routing cannot be counted on the meta backend.
  auto meta = make_meta_backend();
  auto bad = execute_run_plan(*meta, plan_of("meta_router_routed", "router", MoeRows::kRouted, 41));
  REQUIRE(!bad.is_ok());
  CHECK(bad.status().message().find("needs a drawn routing") != std::string::npos);
}

TEST_CASE("routing runs - serving with a drawn routing: decode graphs take the worst case and replay the eager routing", "[executor][routing][serving]") {
  auto be = make_cpu_backend();
  auto serve = [&](const std::string& name, const char* routing, bool graphs) {
    RunPlan plan = plan_of(name, routing, MoeRows::kRouted, 100);
    ServingOptions so;
    so.workload = "synthetic:7,3-30,2-7,5";
    so.chunked_prefill_size = 24;
    so.page_size = 4;
    so.max_running_requests = 4;
    so.kv_tokens = 200;
    so.cuda_graph_bs = {1, 2, 4};
    so.disable_cuda_graph = !graphs;
    plan.serving = so;
    auto r = execute_run_plan(*be, plan);
    REQUIRE(r.is_ok());
    return r->modes[0];
  };
  const ModeResult eager = serve("serve_eager", "zipf:1.2", false);
  const ModeResult graph = serve("serve_graph", "zipf:1.2", true);
  const ModeResult router = serve("serve_router", "router", true);
  REQUIRE(eager.serving);
  REQUIRE(graph.serving);
  // A token meets the same experts in a graph's padded batch as in an eager step.
  CHECK(graph.serving->outputs == eager.serving->outputs);
  CHECK(graph.serving->decode.graph_steps > 0);
  CHECK(graph.serving->outputs != router.serving->outputs);  // the drawn routing is applied in decode too
  // Captured MoE runners size their rows by the worst routing of the graph's batch: a graph cannot
  // size by its data. Batch 1: 2 rows of 2 experts, tile 8, worst 16 rows (the bound is 58).
  // (The pool's blocks are not trace allocations: the capture's blocks say what each took.)
  REQUIRE(graph.serving->graph_captures.size() == 3);
  for (const GraphCapture& c : graph.serving->graph_captures) {
    INFO("bs " << c.bs);
    const int64_t tile = moe_tile_rows(c.bs, kK, kE);
    int64_t found = 0;
    for (const auto& b : c.blocks)
      if (b.name == "gemm2_out" && b.scope == "graph.bs" + std::to_string(c.bs) + "/layer.1/moe/experts") {
        ++found;
        CHECK(b.bytes == static_cast<uint64_t>(moe_worst_rows(c.bs, kK, kE, tile) * kH * 2));
      }
    CHECK(found == 1);
  }
  CHECK(moe_worst_rows(1, kK, kE, 8) == 16);
  CHECK(moe_bound_rows(1, kK, kE, 8) == 58);
  // The graphs read every MoE layer's drawn ids from one static input: [3 layers x 4 rows, 2] i32.
  CHECK(allocations(graph.trace_path, "routed_ids") == std::vector<uint64_t>{kMoeLayers * 4 * kK * 4});
  CHECK(allocations(router.trace_path, "routed_ids").empty());
  // Each step kind's peak under the worst routing is at least the peak measured.
  for (const StepKindStats* k : {&graph.serving->prefill, &graph.serving->decode, &eager.serving->decode}) {
    CHECK(k->peak_activation_worst_bytes >= k->peak_activation_bytes);
    CHECK(k->worst_step >= 0);
  }
  // (The tiny model's peaks are at the attention's split partial sums, whose size does not follow
  // the routing; the captures' gemm2_out blocks above show the worst-case sizing.)
  CHECK(eager.serving->prefill.live_at_peak.front().name == "attention_partials");
  CHECK(graph.accounting.peak_activation_worst >= graph.accounting.peak_activation);
}

TEST_CASE("routing runs - a decode step's reads count each hit expert once per MoE layer, on the CPU and the meta backend", "[executor][routing][serving]") {
  auto cfg = resolve_model_config("tiny");
  REQUIRE(cfg.is_ok());
  auto shape = make_rank_shape(*cfg, 37, 1, 0, 0);
  REQUIRE(shape.is_ok());
  std::mt19937_64 rng(0xDEC0DE);
  for (const char* backend : {"cpu", "meta"}) {
    auto be = std::string(backend) == "cpu" ? make_cpu_backend() : make_meta_backend();
    ModelOptions opt;
    opt.paged_kv = true;
    opt.rope_positions = 512;
    opt.routing = *parse_routing("zipf:1.1");
    auto model = DeepseekModel::create(*be, *cfg, *shape, MemoryMode::kBaseline, opt);
    REQUIRE(model.is_ok());
    const DeepseekModel& m = **model;
    REQUIRE(m.routing_draw() != nullptr);
    for (int64_t rows : {1, 5, 13}) {
      INFO(backend << ", " << rows << " rows");
      std::vector<uint64_t> keys;
      std::vector<int64_t> ctx;
      uint64_t ctx_sum = 0;
      for (int64_t r = 0; r < rows; ++r) {
        keys.push_back(routing_key(rng() % 50, rng() % 400));
        ctx.push_back(static_cast<int64_t>(1 + rng() % 300));
        ctx_sum += static_cast<uint64_t>(ctx.back());
      }
      auto reads = m.decode_reads(keys, ctx);
      REQUIRE(reads.is_ok());
      // Independently: every weight tensor once per layer, the embedding by its rows, each MoE
      // layer's experts by the share of distinct experts its rows are drawn to.
      uint64_t want = 0, want_experts = 0;
      int64_t want_hit = 0;
      std::map<int64_t, int64_t> hit_of_layer;
      for (int64_t l : m.moe_layers()) {
        std::vector<int32_t> ids(static_cast<size_t>(rows * kK));
        m.routing_draw()->draw(l, keys, ids.data());
        hit_of_layer[l] = static_cast<int64_t>(std::set<int32_t>(ids.begin(), ids.end()).size());
        want_hit += hit_of_layer[l];
      }
      for (const auto& [name, t] : m.named_weights()) {
        if (!t.defined() || name == "rope.cos_sin") continue;
        if (name == "model.embed_tokens.weight") {
          want += static_cast<uint64_t>(rows * kH * 2);
          continue;
        }
        if (name.find(".mlp.experts.") != std::string::npos) {
          const int64_t l = std::stoll(name.substr(std::string("model.layers.").size()));
          const uint64_t part = t.bytes() / kE * static_cast<uint64_t>(hit_of_layer.at(l));
          CHECK(t.bytes() % kE == 0);
          want_experts += part;
          want += part;
          continue;
        }
        want += t.bytes();
      }
      CHECK(reads->experts_hit == want_hit);
      CHECK(reads->expert_bytes == want_experts);
      CHECK(reads->weight_bytes == want);
      CHECK(reads->kv_bytes == static_cast<uint64_t>(shape->layers) * ctx_sum * static_cast<uint64_t>(cfg->kv_lora_rank + cfg->qk_rope_head_dim) * 2);
      CHECK(want_hit > static_cast<int64_t>(m.moe_layers().size()));  // more than one expert per layer was hit
    }
  }
  // The router's own routing is known only on the device: no floor.
  auto be = make_meta_backend();
  ModelOptions opt;
  opt.paged_kv = true;
  auto model = DeepseekModel::create(*be, *cfg, *shape, MemoryMode::kBaseline, opt);
  REQUIRE(model.is_ok());
  CHECK_FALSE((*model)->decode_reads({1}, {1}).is_ok());
}

TEST_CASE("routing runs - a serving run with a drawn routing reports what its decode steps read", "[executor][routing][serving]") {
  for (const char* routing : {"uniform", "router"}) {
    auto be = make_meta_backend();
    RunPlan plan = plan_of(std::string("reads_") + routing, routing, MoeRows::kBound, 100);
    ServingOptions so;
    so.workload = "synthetic:5,3-20,2-9,3";
    so.chunked_prefill_size = 16;
    so.kv_tokens = 160;
    so.cuda_graph_bs = {1, 2, 4};
    plan.serving = so;
    auto r = execute_run_plan(*be, plan);
    REQUIRE(r.is_ok());
    const ServingResult& s = *r->modes[0].serving;
    INFO(routing);
    CHECK(s.prefill.read_steps == 0);
    if (std::string(routing) == "router") {
      CHECK(s.decode.read_steps == 0);
      CHECK(s.decode.read_weight_bytes == 0);
      continue;
    }
    REQUIRE(s.decode.steps > 3);
    CHECK(s.decode.read_steps == s.decode.steps);
    CHECK(s.decode.read_expert_bytes > 0);
    CHECK(s.decode.read_weight_bytes > s.decode.read_expert_bytes);
    CHECK(s.decode.read_kv_bytes > 0);
    CHECK(s.decode.experts_hit >= s.decode.steps * kMoeLayers);
    CHECK(s.decode.read_seconds <= s.decode.seconds);
    auto j = nlohmann::json::parse(s.summary_json());
    CHECK(j["step_kinds"]["decode"]["reads"]["weight_bytes"].get<uint64_t>() == s.decode.read_weight_bytes);
    CHECK(j["step_kinds"]["decode"]["reads"]["steps"].get<int64_t>() == s.decode.steps);
  }
}
