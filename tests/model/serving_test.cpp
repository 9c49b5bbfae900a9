// Serving on the CPU reference and the meta backend (executor/serving.h): greedy tokens identical
// across memory modes and between graph and eager decode, chunked prefill against the unchunked
// prefill, a workload larger than the pool, the pool's occupancy in the trace against the
// scheduler's own counts, the per-step-kind peaks against the planner, the graph pool in the trace,
// and a full-size Kimi-K2.5 workload on the meta backend.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/trace_io.h"
#include "executor/backends.h"
#include "executor/deepseek_model.h"
#include "executor/kv_pool.h"
#include "executor/run.h"
#include "kernels/common/fp_formats.h"
#include "planner/analysis.h"

using namespace moeprof;
namespace fs = std::filesystem;

namespace {

std::string out_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("moeprof_serving_" + std::to_string(::getpid())) / name;
  fs::create_directories(d);
  return d.string();
}

RunPlan serving_plan(const std::string& dir, const std::string& workload, std::vector<MemoryMode> modes) {
  RunPlan plan;
  plan.model = "tiny";
  plan.out_dir = dir;
  plan.modes = std::move(modes);
  ServingOptions so;
  so.workload = workload;
  so.chunked_prefill_size = 24;
  so.page_size = 4;
  so.max_running_requests = 4;
  so.kv_tokens = 200;
  so.cuda_graph_bs = {1, 2, 4};
  plan.serving = so;
  return plan;
}

const std::vector<MemoryMode> kAllModes = {MemoryMode::kBaseline, MemoryMode::kReuse, MemoryMode::kFixes};

}  // namespace

TEST_CASE("serving: greedy tokens are identical across memory modes, and graph decode equals eager decode", "[cpu][serving]") {
  auto be = make_cpu_backend();
  const std::string wl = "synthetic:7,3-30,2-7,5";
  RunPlan eager = serving_plan(out_dir("eager"), wl, kAllModes);
  eager.serving->disable_cuda_graph = true;
  auto e = execute_run_plan(*be, eager);
  REQUIRE(e.is_ok());
  RunPlan graphs = serving_plan(out_dir("graphs"), wl, kAllModes);
  auto g = execute_run_plan(*be, graphs);
  REQUIRE(g.is_ok());
  const auto& ref = e->modes[0].serving->outputs;
  REQUIRE(ref.size() == 7);
  std::set<int32_t> distinct;
  for (const auto& req : ref)
    for (int32_t t : req) distinct.insert(t);
  CHECK(distinct.size() >= 3);  // the model computes: the tokens are not one constant
  for (const auto* r : {&e.value(), &g.value()}) {
    CHECK(r->outputs_identical);
    for (const ModeResult& m : r->modes) {
      INFO(m.mode);
      REQUIRE(m.serving);
      CHECK(m.serving->outputs == ref);
    }
  }
  const ServingResult& gs = *g->modes[0].serving;
  CHECK(gs.graphs);
  CHECK(gs.graph_sizes == std::vector<int64_t>{1, 2, 4});
  CHECK(gs.decode.graph_steps == gs.decode.steps);  // every decode batch (<= 4 requests) replayed a graph
  CHECK(gs.decode.graph_steps > 0);
  CHECK(e->modes[0].serving->decode.graph_steps == 0);
  CHECK(gs.graph_pool_bytes > 0);
  CHECK(e->modes[0].serving->graph_pool_bytes == 0);
}

namespace {

// The last token's final hidden state (bf16 bits) of a prompt prefilled through step() over a
// paged pool in chunks of `chunk`; `mha_first`: the first chunk (no prefix) attends as the prefill
// does (MHA), else every chunk attends in the absorbed form over the pool.
std::vector<uint16_t> chunked_last_hidden(Backend& be, const ModelConfig& cfg, const std::vector<int32_t>& prompt, int64_t chunk,
                                          bool mha_first) {
  const int64_t T = static_cast<int64_t>(prompt.size());
  auto shape = make_rank_shape(cfg, chunk, 1, 0, 0);
  REQUIRE(shape.is_ok());
  ModelOptions so;
  so.paged_kv = true;
  so.rope_positions = T;
  auto model = DeepseekModel::create(be, cfg, *shape, MemoryMode::kBaseline, so);
  REQUIRE(model.is_ok());
  auto pool = KvPool::create(be, cfg, shape->layers, KvPoolShape{T, 1, 1, T});
  REQUIRE(pool.is_ok());
  std::vector<int32_t> slots(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) slots[static_cast<size_t>(i)] = static_cast<int32_t>(T - i);  // out of order: paged
  REQUIRE(pool.value()->write_slots(1, 0, slots).is_ok());
  std::vector<uint16_t> last(static_cast<size_t>(cfg.hidden_size));
  for (int64_t a = 0; a < T; a += chunk) {
    const int64_t n = std::min(chunk, T - a);
    auto vec = [&](std::vector<int32_t> v) {
      auto t = be.empty(DType::kI32, 1, n, AllocTag{"in", "test", Category::kActivation});
      REQUIRE(t.is_ok());
      REQUIRE(be.copy_from_host(*t, v.data()).is_ok());
      return std::move(t).value();
    };
    std::vector<int32_t> pos;
    for (int64_t i = 0; i < n; ++i) pos.push_back(static_cast<int32_t>(a + i));
    StepInputs in;
    in.ids = vec(std::vector<int32_t>(prompt.begin() + a, prompt.begin() + a + n));
    in.positions = vec(pos);
    in.row_req = vec(std::vector<int32_t>(static_cast<size_t>(n), 1));
    in.slots = vec(std::vector<int32_t>(slots.begin() + a, slots.begin() + a + n));
    if (a == 0 && mha_first) in.mha_segments = {{0, n}};
    in.logit_rows = {n - 1};
    in.scope = "step." + std::to_string(a / chunk) + "/prefill";
    auto out = model.value()->step(in, pool.value()->paged(), nullptr);
    REQUIRE(out.is_ok());
    REQUIRE(be.copy_to_host(out->hidden.rows_view(n - 1, 1), last.data()).is_ok());
  }
  return last;
}

double rel_l2(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = kern::bf16_to_f32(a[i]), y = kern::bf16_to_f32(b[i]);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("serving: chunked prefill gives the unchunked prefill's last hidden state", "[cpu][serving]") {
  auto be = make_cpu_backend();
  const int64_t T = 45;
  // tiny, and tiny with dense MLPs only (no NVFP4 experts, see below).
  auto tiny = resolve_model_config("tiny");
  REQUIRE(tiny.is_ok());
  ModelConfig dense = *tiny;
  dense.first_k_dense_replace = dense.num_hidden_layers;
  for (const ModelConfig& cfg : {*tiny, dense}) {
    const bool moe = cfg.first_k_dense_replace < cfg.num_hidden_layers;
    INFO((moe ? "tiny" : "tiny, dense layers only"));
    auto full_shape = make_rank_shape(cfg, T, 1, 0, 0);
    REQUIRE(full_shape.is_ok());
    auto legacy = DeepseekModel::create(*be, cfg, *full_shape, MemoryMode::kBaseline, ModelOptions{});
    REQUIRE(legacy.is_ok());
    auto ref = legacy.value()->forward();
    REQUIRE(ref.is_ok());
    legacy.value().reset();
    const std::vector<int32_t>& prompt = ref->input_ids;

    // One chunk without a prefix is the prefill itself, row by row: bit for bit.
    CHECK(chunked_last_hidden(*be, cfg, prompt, T, true) == ref->hidden_tail);
    // Chunking over the pool is exact: in the absorbed form, chunks of 16 (each after its cached
    // prefix) give the one-chunk result bit for bit.
    const auto absorbed_one = chunked_last_hidden(*be, cfg, prompt, T, false);
    CHECK(chunked_last_hidden(*be, cfg, prompt, 16, false) == absorbed_one);
    CHECK(chunked_last_hidden(*be, cfg, prompt, 7, false) == absorbed_one);
    // Serving's chunked prefill (the first chunk as the prefill, the others absorbed) against the
    // unchunked prefill: the two attention forms round differently (0.6% of the attention output
    // per layer here, tests/executor/mla_ops_test.cpp bounds it at 1%). Through dense layers the
    // last hidden state stays within the stated 3% (relative L2; measured 1.3%). Through the
    // NVFP4 experts the difference is amplified (a 0.6% change moves e2m1 codes and top-k
    // choices): measured 26% on tiny, so only the dense model is held to a bound.
    const double rel = rel_l2(chunked_last_hidden(*be, cfg, prompt, 16, true), ref->hidden_tail);
    INFO("relative L2 error of the last hidden state " << rel);
    CHECK(rel > 0);
    if (!moe) CHECK(rel <= 0.03);
  }
}

TEST_CASE("serving: a workload larger than the pool completes, the pool's occupancy in the trace is the scheduler's", "[cpu][serving]") {
  auto be = make_cpu_backend();
  const std::string dir = out_dir("small-pool");
  RunPlan plan = serving_plan(dir, "synthetic:9,10-20,3-5,2", {MemoryMode::kReuse});
  plan.serving->kv_tokens = 48;  // 12 pages of 4: two requests at a time at most
  auto r = execute_run_plan(*be, plan);
  REQUIRE(r.is_ok());
  const ServingResult& s = *r->modes[0].serving;
  CHECK(s.waited_requests > 0);
  CHECK(s.peak_tokens_used <= s.kv_pool_tokens);
  for (const auto& o : s.occupancy) CHECK(o.pages_used * s.page_size <= s.kv_pool_tokens);
  for (const auto& out : s.outputs) CHECK(out.size() >= 3);
  // Samples of the steps that ran only (two a step: its slots taken, its requests finished), in
  // step order: no point for an empty pool before the first step.
  std::set<int64_t> sampled;
  for (size_t i = 0; i < s.occupancy.size(); ++i) {
    sampled.insert(s.occupancy[i].step);
    if (i > 0) CHECK(s.occupancy[i - 1].step <= s.occupancy[i].step);
  }
  CHECK(static_cast<int64_t>(sampled.size()) == s.prefill.steps + s.decode.steps);
  {
    // A first request that arrives late: still one sampled step per step that ran.
    const std::string late = dir + "/late.jsonl";
    std::ofstream(late) << "{\"prompt_tokens\": 11, \"output_tokens\": 3, \"arrival_step\": 7}\n";
    auto lr = execute_run_plan(*be, serving_plan(out_dir("late"), late, {MemoryMode::kBaseline}));
    REQUIRE(lr.is_ok());
    const ServingResult& ls = *lr->modes[0].serving;
    std::set<int64_t> steps;
    for (const auto& o : ls.occupancy) steps.insert(o.step);
    CHECK(static_cast<int64_t>(steps.size()) == ls.prefill.steps + ls.decode.steps);
    CHECK(*steps.begin() >= 7);
  }

  auto tr = read_trace(r->modes[0].trace_path);
  REQUIRE(tr.is_ok());
  const planner::RunAnalysis an = planner::analyze(*tr);
  const planner::CounterSeries* used = nullptr;
  const planner::CounterSeries* waiting = nullptr;
  for (const auto& c : an.counters) {
    if (c.name == "kv_pool.tokens_used") used = &c;
    if (c.name == "scheduler.waiting") waiting = &c;
  }
  REQUIRE(used != nullptr);
  REQUIRE(waiting != nullptr);
  REQUIRE(used->points.size() == s.occupancy.size());
  for (size_t i = 0; i < s.occupancy.size(); ++i) {
    INFO("sample " << i);
    CHECK(used->points[i].value == static_cast<uint64_t>(s.occupancy[i].tokens_used));
    CHECK(used->points[i].step == static_cast<uint64_t>(s.occupancy[i].step));
    CHECK(waiting->points[i].value == static_cast<uint64_t>(s.occupancy[i].waiting));
  }
  CHECK(used->max_value == static_cast<uint64_t>(s.peak_tokens_used));

  // The executor's per-step-kind peaks against the planner's run-level peak.
  CHECK(an.peak_activation_bytes == std::max(s.prefill.peak_activation_bytes, s.decode.peak_activation_bytes));
  // The graph pool: segments of category graph, scoped by the capture that grew the pool.
  uint64_t graph_bytes = 0;
  std::set<std::string> scopes;
  for (const TraceRecord& rec : tr->records)
    if (rec.kind == EventKind::kAlloc && rec.category == Category::kGraph && tr->str(rec.name_id) == "graph_pool_segment") {
      graph_bytes += rec.bytes;
      scopes.insert(std::string(tr->str(rec.scope_id)));
    }
  CHECK(graph_bytes == s.graph_pool_bytes);
  CHECK(graph_bytes > 0);
  for (const std::string& sc : scopes) CHECK(sc.rfind("graph.bs", 0) == 0);
  // Steps are scopes enclosing the layers.
  bool step_scoped = false;
  for (const TraceRecord& rec : tr->records)
    if (rec.kind == EventKind::kAlloc && std::string(tr->str(rec.scope_id)).rfind("step.", 0) == 0 &&
        std::string(tr->str(rec.scope_id)).find("/layer.1/") != std::string::npos)
      step_scoped = true;
  CHECK(step_scoped);
  // The summary travels in the trace's metadata.
  REQUIRE(tr->meta.extra.count("serving") == 1);
  auto j = nlohmann::json::parse(tr->meta.extra.at("serving"));
  CHECK(j["kv_pool_tokens"] == 48);
  CHECK(j["steps"]["prefill"] == s.prefill.steps);
  CHECK(j["step_kinds"]["prefill"]["peak_activation_bytes"] == s.prefill.peak_activation_bytes);
}

TEST_CASE("serving: Kimi-K2.5 at full size on the meta backend, the pool sized from --mem-fraction-static", "[cpu][serving]") {
  const uint64_t device = 150754820096ull;  // an H200's memory
  auto be = make_meta_backend_of(device);
  RunPlan plan;
  plan.model = "kimi-k2.5";
  plan.tp = 4;
  plan.out_dir = out_dir("kimi");
  plan.modes = {MemoryMode::kBaseline};
  plan.weights = WeightsMode::kShared;
  ServingOptions so;
  so.workload = "synthetic:16,2048,8";
  so.chunked_prefill_size = 16384;
  so.mem_fraction_static = 0.88;
  so.max_running_requests = 16;
  so.cuda_graph_max_bs = 16;
  plan.serving = so;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = execute_run_plan(*be, plan);
  REQUIRE(r.is_ok());
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 60.0);
  const ServingResult& s = *r->modes[0].serving;
  // SGLang's formula, from the meta device's free bytes before and after the weights.
  REQUIRE(s.device.known);
  CHECK(s.device.free_before_weights == device);
  const double rest = double(s.device.free_after_weights) - double(device) * (1 - 0.88);
  CHECK(s.cell_bytes == 70272);  // 576 x 61 x 2
  CHECK(s.kv_pool_tokens == static_cast<int64_t>(std::floor(rest / 70272.0)));
  CHECK(s.kv_pool_bytes == static_cast<uint64_t>(s.kv_pool_tokens + 1) * 576 * 2 * 61);
  CHECK(s.graph_sizes == std::vector<int64_t>{1, 2, 4, 8, 16});
  CHECK(s.graph_pool_bytes > 0);
  CHECK(s.prefill.steps == 2);                   // 16 x 2048 tokens in chunks of 16384
  CHECK(s.prefill.peak_activation_bytes > 3000000000ull);  // a 16K-token step of Kimi-K2.5
  CHECK(s.decode.steps == 7);
  CHECK(s.decode.graph_steps == 7);
}
