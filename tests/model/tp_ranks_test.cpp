// Tensor parallelism as SGLang runs it, the CPU-testable parts (docs/executor.md, "Ranks in
// processes, symmetric memory"): the symmetric-memory reuse condition and its fallback, rank
// traces rebuilt and merged from files as `--launch processes` does, and the rank launcher.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/trace_io.h"
#include "executor/backends.h"
#include "executor/deepseek_model.h"
#include "executor/launch.h"
#include "executor/run.h"
#include "executor/tp_run.h"
#include "planner/analysis.h"

using namespace moeprof;
namespace fs = std::filesystem;

namespace {

std::string out_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("moeprof_tpranks_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

RunPlan tiny_plan(const std::string& dir, int64_t tokens) {
  RunPlan plan;
  plan.model = "tiny";
  plan.tokens = tokens;
  plan.out_dir = dir;
  return plan;
}

// The executor's own allocations of one kind in a trace.
std::set<std::string> names_of_kind(const Trace& t, MemKind kind) {
  std::set<std::string> names;
  for (const auto& r : t.records)
    if (r.kind == EventKind::kAlloc && r.mem_kind == kind) names.insert(std::string(t.strings.get(r.name_id)));
  return names;
}

}  // namespace

TEST_CASE("symmetric memory: every MoE layer reuses inside the pool, a buffer outside it falls back", "[model][symm]") {
  auto cfg = resolve_model_config("tiny");
  REQUIRE(cfg.is_ok());
  const int64_t moe_layers_after_0 = [&] {
    int64_t n = 0;
    for (int64_t l = 1; l < cfg->num_hidden_layers; ++l) n += cfg->is_moe_layer(l);
    return n;
  }();
  REQUIRE(moe_layers_after_0 >= 2);

  auto be = make_cpu_backend();
  RunPlan off = tiny_plan(out_dir("symm_off"), 53);
  auto r_off = execute_run_plan(*be, off);
  REQUIRE(r_off.is_ok());

  RunPlan on = tiny_plan(out_dir("symm_on"), 53);
  on.symm_mem = true;
  auto r_on = execute_run_plan(*be, on);
  REQUIRE(r_on.is_ok());
  CHECK(r_on->outputs_identical);
  const ModeResult& reuse = r_on->modes[1];
  CHECK(reuse.moe.reused == moe_layers_after_0);
  CHECK(reuse.moe.fallback == 0);
  CHECK(reuse.moe.fallback_layers.empty());
  // The same bytes as without symmetric memory, the same outputs.
  for (size_t m = 0; m < 2; ++m) {
    CHECK(r_on->modes[m].accounting.peak_activation == r_off->modes[m].accounting.peak_activation);
    CHECK(same_forward_output(r_on->modes[m].output, r_off->modes[m].output));
  }
  // What SGLang all-reduces is tagged symmetric in the trace, and nothing else.
  auto t = read_trace(on.out_dir + "/baseline.mtrace");
  REQUIRE(t.is_ok());
  CHECK(names_of_kind(*t, MemKind::kSymmetric) == std::set<std::string>{"mlp_out", "moe_output", "o_proj_out"});
  CHECK(t->meta.extra.at("symm_mem") == "on");
  auto t_off = read_trace(off.out_dir + "/baseline.mtrace");
  REQUIRE(t_off.is_ok());
  CHECK(names_of_kind(*t_off, MemKind::kSymmetric).empty());

  // Layer 0's output (the dense MLP's) outside the pool: layer 1's provided buffer is not
  // symmetric, so it falls back to a fresh buffer in the pool, which layer 2 then reuses; the
  // outputs stay identical.
  RunPlan forced = tiny_plan(out_dir("symm_forced"), 53);
  forced.symm_mem = true;
  forced.symm_outside_layers = {0};
  auto r_forced = execute_run_plan(*be, forced);
  REQUIRE(r_forced.is_ok());
  CHECK(r_forced->outputs_identical);
  CHECK(r_forced->modes[1].moe.fallback == 1);
  CHECK(r_forced->modes[1].moe.fallback_layers == std::vector<int64_t>{1});
  CHECK(r_forced->modes[1].moe.reused == moe_layers_after_0 - 1);
  CHECK(same_forward_output(r_forced->modes[1].output, r_on->modes[1].output));
  // The fallback costs one more T x hidden buffer at the peak (or nothing, if the peak is elsewhere).
  CHECK(r_forced->modes[1].accounting.peak_activation >= reuse.accounting.peak_activation);
  auto tf = read_trace(forced.out_dir + "/reuse.mtrace");
  REQUIRE(tf.is_ok());
  CHECK(tf->meta.extra.at("moe_output_fallback_layers") == "1");
}

TEST_CASE("rank traces: rebuilt from their META and merged as --launch processes does", "[model][ranks]") {
  auto cfg = resolve_model_config("tiny");
  REQUIRE(cfg.is_ok());
  const std::string dir = out_dir("ranks");
  RunPlan plan = tiny_plan(dir, 41);
  plan.tp = 2;
  plan.symm_mem = true;
  std::vector<std::vector<ModeResult>> direct(2);
  for (int r = 0; r < 2; ++r) {
    auto shape = make_rank_shape(*cfg, plan.tokens, 2, r, 0);
    REQUIRE(shape.is_ok());
    auto be = make_cpu_backend();
    for (MemoryMode mode : plan.modes) {
      RankModeOptions opt;
      opt.trace_path = dir + "/" + std::string(memory_mode_name(mode)) + ".rank" + std::to_string(r) + ".mtrace";
      auto mr = run_rank_mode(*be, *cfg, *shape, plan, mode, opt);
      REQUIRE(mr.is_ok());
      direct[static_cast<size_t>(r)].push_back(std::move(mr).value());
    }
  }
  auto res = collect_rank_traces(plan, 2);
  REQUIRE(res.is_ok());
  REQUIRE(res->rank_modes.size() == 2);
  REQUIRE(res->modes.size() == 2);
  CHECK(res->gpus == 2);
  CHECK(res->tokens == 41);
  for (int r = 0; r < 2; ++r)
    for (size_t m = 0; m < 2; ++m) {
      const ModeResult& a = direct[static_cast<size_t>(r)][m];
      const ModeResult& b = res->rank_modes[static_cast<size_t>(r)][m];
      CHECK(b.accounting.peak == a.accounting.peak);
      CHECK(b.accounting.allocated == a.accounting.allocated);
      CHECK(b.accounting.allocations == a.accounting.allocations);
      CHECK(b.accounting.peak_total == a.accounting.peak_total);
      CHECK(b.accounting.peak_activation == a.accounting.peak_activation);
      CHECK(b.moe.reused == a.moe.reused);
      CHECK(b.output.hidden_hash == a.output.hidden_hash);
      CHECK(b.output.logits_hash == a.output.logits_hash);
      CHECK(same_forward_output(a.output, b.output));
    }
  CHECK(res->outputs_identical);
  // The merged trace: one device per rank, each with that rank's own peak.
  auto merged = read_trace(dir + "/reuse.mtrace");
  REQUIRE(merged.is_ok());
  const planner::RunAnalysis an = planner::analyze(*merged);
  REQUIRE(an.devices.size() == 2);
  for (int r = 0; r < 2; ++r)
    CHECK(an.devices[static_cast<size_t>(r)].peak_activation_bytes == direct[static_cast<size_t>(r)][1].accounting.peak_activation);
  CHECK(an.peak_activation_bytes == res->modes[1].accounting.peak_activation);

  // A missing rank is named; a rank trace from another world is refused.
  fs::rename(dir + "/baseline.rank1.mtrace", dir + "/moved.mtrace");
  auto missing = collect_rank_traces(plan, 2);
  REQUIRE_FALSE(missing.is_ok());
  CHECK(missing.status().message().find("rank 1") != std::string::npos);
  fs::rename(dir + "/moved.mtrace", dir + "/baseline.rank1.mtrace");
  auto wrong = collect_rank_traces(plan, 3);
  REQUIRE_FALSE(wrong.is_ok());
  CHECK(wrong.status().message().find("expected rank 0 of 3") != std::string::npos);
}

TEST_CASE("rank launcher: all ranks succeed, one failure stops the others and is named", "[model][launch]") {
  const std::string dir = out_dir("launch");
  std::vector<RankProcess> ok;
  for (int r = 0; r < 3; ++r)
    ok.push_back({{"/bin/sh", "-c", "echo rank " + std::to_string(r) + " > /dev/stderr; exit 0"}, dir + "/ok" + std::to_string(r) + ".log"});
  REQUIRE(run_rank_processes(ok).is_ok());
  std::ifstream in(dir + "/ok2.log");
  std::string line;
  std::getline(in, line);
  CHECK(line == "rank 2");

  // Rank 1 fails after a moment; rank 0 would wait for a minute (as a rank blocked in a collective).
  std::vector<RankProcess> bad = {{{"/bin/sh", "-c", "sleep 60"}, dir + "/bad0.log"},
                                  {{"/bin/sh", "-c", "sleep 0.2; echo 'moeprof run: error: out of GPU memory'; exit 5"}, dir + "/bad1.log"},
                                  {{"/bin/sh", "-c", "trap '' TERM; sleep 60"}, dir + "/bad2.log"}};
  LaunchOptions lo;
  lo.grace_seconds = 0.5;
  const auto t0 = std::chrono::steady_clock::now();
  Status st = run_rank_processes(bad, lo);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_FALSE(st.is_ok());
  CHECK(st.message().find("rank 1 exited with code 5: moeprof run: error: out of GPU memory") != std::string::npos);
  CHECK(st.message().find("bad1.log") != std::string::npos);
  CHECK(took < 30);  // rank 0 got SIGTERM, rank 2 (ignoring it) SIGKILL

  std::vector<RankProcess> missing = {{{"/nonexistent/moeprof"}, dir + "/m0.log"}};
  Status sm = run_rank_processes(missing);
  REQUIRE_FALSE(sm.is_ok());
  CHECK(sm.message().find("exited with code 127") != std::string::npos);
}
