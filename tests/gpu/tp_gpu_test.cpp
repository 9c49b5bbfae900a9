// Real tensor parallelism over NCCL (`moeprof run --gpus 2`): one process, one thread per GPU.
// Needs 2 GPUs and libnccl.so.2 (loaded at run time); tagged [gpu], skipped with a warning
// otherwise. Checks: the NCCL all-reduce sums across ranks; both modes bitwise identical on every
// rank; each rank's activation peak equals the emulated single-GPU run's (--tp 2 on one GPU) to
// the byte (NCCL's own buffers never go through the backend, so the accounting does not see
// them); rank 1's peak equals rank 0's; the merged trace holds both ranks as devices 0 and 1.
// Real expert parallelism (`--ep 2 --gpus 2`): the dispatch and combine are grouped ncclSend/Recv
// all-to-alls; both ranks end with the same output, and each rank's allocations and activation
// peak equal the emulated rank's (`--ep 2 --ep-rank r` on GPU 0) to the byte.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "core/trace_io.h"
#include "executor/backends.h"
#include "executor/cuda_backend.h"
#include "executor/cuda_nccl.h"
#include "executor/run.h"
#include "executor/tp_run.h"
#include "model/config.h"
#include "model/routing.h"
#include "tests/gpu_skip.h"

using namespace moeprof;
namespace fs = std::filesystem;

namespace {

// Why the test cannot run here, or "" when it can (2 GPUs, NCCL loadable).
std::string skip_reason() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return "no usable CUDA driver";
  }
  if (n < 2) return "needs 2 GPUs, found " + std::to_string(n);
  for (int d = 0; d < 2; ++d) {
    auto b = make_cuda_backend(d);
    if (!b.is_ok()) return b.status().message();
  }
  Status st = nccl_load();
  if (!st.is_ok()) return st.message();
  return "";
}

std::string out_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("moeprof_tp_gpu_test_" + std::to_string(::getpid())) / name;
  fs::create_directories(d);
  return d.string();
}

// Per-device activation peak of a trace, replayed in file order (the merged trace keeps each
// rank's own order).
std::map<uint16_t, uint64_t> activation_peaks(const Trace& t) {
  std::map<std::pair<uint16_t, uint64_t>, std::pair<uint64_t, bool>> live;  // -> bytes, activation
  std::map<uint16_t, uint64_t> cur, peak;
  for (const TraceRecord& r : t.records) {
    if (r.kind == EventKind::kAlloc) {
      const bool act = counts_as_activation(static_cast<Category>(r.category));
      live[{r.device, r.address}] = {r.bytes, act};
      if (act) peak[r.device] = std::max(peak[r.device], cur[r.device] += r.bytes);
    } else if (r.kind == EventKind::kFree) {
      auto it = live.find({r.device, r.address});
      if (it == live.end()) continue;
      if (it->second.second) cur[r.device] -= it->second.first;
      live.erase(it);
    }
  }
  return peak;
}

void check_tp2(const std::string& model, int64_t tokens, int64_t layers) {
  INFO(model << " T=" << tokens << " layers=" << layers);
  RunPlan plan;
  plan.model = model;
  plan.tokens = tokens;
  plan.tp = 2;
  plan.layers = layers;
  plan.weights = WeightsMode::kPerLayer;

  // Emulated: rank 0's shapes on GPU 0, collectives no-ops.
  RunPlanResult emu;
  {
    auto g = make_cuda_backend(0);
    REQUIRE(g.is_ok());
    plan.out_dir = out_dir(model + "-emulated");
    auto r = execute_run_plan(*g.value(), plan);
    if (!r.is_ok()) FAIL(r.status().message());
    emu = std::move(r).value();
  }
  REQUIRE(emu.tp_emulated);

  plan.out_dir = out_dir(model + "-tp2");
  auto res = execute_tp_run_plan(plan, 2);
  if (!res.is_ok()) FAIL(res.status().message());
  const RunPlanResult& r = res.value();
  CHECK_FALSE(r.tp_emulated);
  REQUIRE(r.gpus == 2);
  REQUIRE(r.rank_modes.size() == 2);
  REQUIRE(r.modes.size() == 2);
  CHECK(r.outputs_identical);

  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const auto& rm = r.rank_modes[static_cast<size_t>(rank)];
    REQUIRE(rm.size() == 2);
    // Baseline vs reuse: bitwise identical on this rank.
    CHECK(rm[0].output.hidden_hash == rm[1].output.hidden_hash);
    CHECK(rm[0].output.logits_hash == rm[1].output.logits_hash);
    for (size_t m = 0; m < 2; ++m) {
      INFO("mode " << rm[m].mode);
      // Same allocations as the emulated rank 0: the activation peak to the byte.
      CHECK(rm[m].accounting.peak_activation == emu.modes[m].accounting.peak_activation);
      CHECK(rm[m].accounting.peak_activation == r.rank_modes[0][m].accounting.peak_activation);
      for (Category cat : {Category::kActivation, Category::kWorkspace, Category::kKvCache}) {
        const auto i = static_cast<size_t>(cat);
        CHECK(rm[m].accounting.peak[i] == emu.modes[m].accounting.peak[i]);
      }
      // Nothing the executor allocated is communication memory: NCCL's buffers are its own.
      CHECK(rm[m].accounting.allocated[static_cast<size_t>(Category::kCommunication)] == 0);
      auto rt = read_trace(rm[m].trace_path);
      REQUIRE(rt.is_ok());
      CHECK(rt.value().meta.tp_rank == rank);
      CHECK(rt.value().meta.tp_size == 2);
      CHECK(rt.value().meta.extra.at("tp_emulated") == "false");
      for (const auto& rec : rt.value().records) {
        if (rec.device != rank) FAIL("rank " << rank << " trace has a record on device " << rec.device);
      }
    }
  }
  // The reuse saving is the same as emulated.
  const int64_t emu_delta = int64_t(emu.modes[1].accounting.peak_activation) - int64_t(emu.modes[0].accounting.peak_activation);
  const int64_t tp_delta = int64_t(r.modes[1].accounting.peak_activation) - int64_t(r.modes[0].accounting.peak_activation);
  CHECK(tp_delta == emu_delta);
  WARN(model << " TP=2 on 2 GPUs: peak activation baseline " << r.modes[0].accounting.peak_activation << " reuse "
             << r.modes[1].accounting.peak_activation << " (emulated " << emu.modes[0].accounting.peak_activation
             << " / " << emu.modes[1].accounting.peak_activation << ")");

  // Merged traces: both ranks as devices, per-device peaks as the rank accounting says.
  for (size_t m = 0; m < 2; ++m) {
    auto mt = read_trace(r.modes[m].trace_path);
    REQUIRE(mt.is_ok());
    CHECK(mt.value().meta.extra.at("ranks") == "2");
    auto peaks = activation_peaks(mt.value());
    REQUIRE(peaks.size() == 2);
    CHECK(peaks[0] == r.rank_modes[0][m].accounting.peak_activation);
    CHECK(peaks[1] == r.rank_modes[1][m].accounting.peak_activation);
    CHECK(r.modes[m].accounting.peak_activation == std::max(peaks[0], peaks[1]));
  }
}

// --symm-mem on: the all-reduced tensors come from each rank's NCCL window; every MoE layer after
// the first reuses inside the pool; forcing layer 0's output outside makes layer 1 fall back.
void check_tp2_symm(const std::string& model, int64_t tokens, int64_t layers) {
  auto cfg = resolve_model_config(model);
  REQUIRE(cfg.is_ok());
  const int64_t n_layers = layers > 0 ? layers : cfg->num_hidden_layers;
  int64_t moe_after_0 = 0;
  for (int64_t l = 1; l < n_layers; ++l) moe_after_0 += cfg->is_moe_layer(l);
  RunPlan plan;
  plan.model = model;
  plan.tokens = tokens;
  plan.tp = 2;
  plan.layers = layers;
  plan.weights = WeightsMode::kPerLayer;
  plan.out_dir = out_dir(model + "-tp2-plain");
  auto plain = execute_tp_run_plan(plan, 2);
  if (!plain.is_ok()) FAIL(plain.status().message());
  plan.symm_mem = true;
  plan.out_dir = out_dir(model + "-tp2-symm");
  auto res = execute_tp_run_plan(plan, 2);
  if (!res.is_ok()) FAIL(res.status().message());
  CHECK(res->outputs_identical);
  auto shape = make_rank_shape(*cfg, tokens, 2, 0, layers);
  REQUIRE(shape.is_ok());
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const auto& rm = res->rank_modes[static_cast<size_t>(rank)];
    CHECK(rm[1].moe.reused == moe_after_0);
    CHECK(rm[1].moe.fallback == 0);
    for (size_t m = 0; m < 2; ++m) {
      // The same bytes and the same results as without symmetric memory.
      CHECK(rm[m].accounting.peak_activation == plain->rank_modes[static_cast<size_t>(rank)][m].accounting.peak_activation);
      CHECK(rm[m].output.hidden_hash == plain->rank_modes[static_cast<size_t>(rank)][m].output.hidden_hash);
      CHECK(rm[m].output.logits_hash == plain->rank_modes[static_cast<size_t>(rank)][m].output.logits_hash);
      auto rt = read_trace(rm[m].trace_path);
      REQUIRE(rt.is_ok());
      uint64_t pool = 0, symm_allocs = 0;
      for (const auto& rec : rt->records) {
        if (rec.kind == EventKind::kPoolReserve && rec.mem_kind == MemKind::kSymmetric) pool = rec.bytes;
        if (rec.kind == EventKind::kAlloc && rec.mem_kind == MemKind::kSymmetric) ++symm_allocs;
      }
      CHECK(pool == symmetric_pool_bytes(*shape, *cfg));
      CHECK(symm_allocs > 0);
    }
  }
  plan.symm_outside_layers = {0};
  plan.modes = {MemoryMode::kReuse};
  plan.out_dir = out_dir(model + "-tp2-symm-forced");
  auto forced = execute_tp_run_plan(plan, 2);
  if (!forced.is_ok()) FAIL(forced.status().message());
  for (int rank = 0; rank < 2; ++rank) {
    const auto& mr = forced->rank_modes[static_cast<size_t>(rank)][0];
    CHECK(mr.moe.fallback_layers == std::vector<int64_t>{1});
    CHECK(mr.moe.reused == moe_after_0 - 1);
    CHECK(mr.output.hidden_hash == res->rank_modes[static_cast<size_t>(rank)][1].output.hidden_hash);
  }
  WARN(model << " TP=2 --symm-mem on: " << res->rank_modes[0][1].moe.reused << " of " << moe_after_0
             << " MoE layers reused inside the pool; forced fallback at layer 1 seen on both ranks");
}

}  // namespace

TEST_CASE("NCCL all_reduce through two CudaBackends sums across ranks", "[gpu][tp]") {
  const std::string why = skip_reason();
  if (!why.empty()) MOEPROF_SKIP(why);
  WARN("NCCL " << nccl_version());
  std::vector<std::unique_ptr<Backend>> be;
  for (int d = 0; d < 2; ++d) be.push_back(std::move(make_cuda_backend(d)).value());
  size_t free0 = 0, total0 = 0, free1 = 0, total1 = 0;
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(cudaMemGetInfo(&free0, &total0) == cudaSuccess);
  auto comms = NcclCommunicators::create({0, 1});
  if (!comms.is_ok()) FAIL(comms.status().message());
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(cudaMemGetInfo(&free1, &total1) == cudaSuccess);
  // NCCL's memory comes from the driver directly, never through Backend::empty: informational.
  WARN("ncclCommInitAll took " << (free0 > free1 ? free0 - free1 : 0) << " bytes of GPU 0 outside the backend");

  const int64_t rows = 3, cols = 1000;
  std::vector<std::thread> th;
  std::vector<std::vector<uint16_t>> got(2);
  std::vector<Status> st(2);
  for (int r = 0; r < 2; ++r) {
    auto* cb = static_cast<CudaBackend*>(be[static_cast<size_t>(r)].get());
    REQUIRE(cb->attach_nccl(comms.value()->comm(r), r, 2).is_ok());
    th.emplace_back([&, r, cb]() {
      st[r] = [&]() -> Status {
        if (cudaSetDevice(r) != cudaSuccess) return Status::run_failure("cudaSetDevice");
        MOEPROF_ASSIGN_OR_RETURN(Tensor t, cb->empty(DType::kBF16, rows, cols, AllocTag{"x", "test", Category::kActivation}));
        // bf16 of (r + 1) * (i % 7): 1..6 and 2..12 are exact, so are their sums.
        std::vector<uint16_t> h(static_cast<size_t>(rows * cols));
        for (size_t i = 0; i < h.size(); ++i) {
          const float v = float(r + 1) * float(i % 7);
          uint32_t u;
          std::memcpy(&u, &v, 4);
          h[i] = static_cast<uint16_t>(u >> 16);
        }
        MOEPROF_RETURN_IF_ERROR(cb->copy_from_host(t, h.data()));
        MOEPROF_RETURN_IF_ERROR(cb->all_reduce(t));
        got[static_cast<size_t>(r)].resize(h.size());
        MOEPROF_RETURN_IF_ERROR(cb->copy_to_host(t, got[static_cast<size_t>(r)].data()));
        return cb->synchronize();
      }();
    });
  }
  for (auto& t : th) t.join();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE(st[r].is_ok());
    for (size_t i = 0; i < got[r].size(); ++i) {
      const float want = 3.0f * float(i % 7);
      uint32_t u = uint32_t(got[r][i]) << 16;
      float v;
      std::memcpy(&v, &u, 4);
      if (v != want) FAIL("element " << i << ": " << v << " != " << want);
    }
    REQUIRE(static_cast<CudaBackend*>(be[static_cast<size_t>(r)].get())->attach_nccl(nullptr, 0, 1).is_ok());
  }
}

TEST_CASE("real TP=2: modes identical per rank, per-rank peaks equal the emulated run's", "[gpu][tp]") {
  const std::string why = skip_reason();
  if (!why.empty()) MOEPROF_SKIP(why);
  check_tp2("tiny", 100, 0);
  check_tp2("kimi-k2.5", 2048, 4);
}

TEST_CASE("real TP=2 with NCCL symmetric memory: reuse inside the pool, forced fallback", "[gpu][tp][symm]") {
  const std::string why = skip_reason();
  if (!why.empty()) MOEPROF_SKIP(why);
  check_tp2_symm("tiny", 100, 0);
  check_tp2_symm("kimi-k2.5", 2048, 4);
}

namespace {

// Allocations in order (name, scope, bytes): what the executor asked for.
std::vector<std::string> alloc_sequence(const std::string& path) {
  auto t = read_trace(path);
  REQUIRE(t.is_ok());
  std::vector<std::string> out;
  for (const TraceRecord& rec : t->records)
    if (rec.kind == EventKind::kAlloc)
      out.push_back(std::string(t->str(rec.name_id)) + " " + std::string(t->str(rec.scope_id)) + " " + std::to_string(rec.bytes));
  return out;
}

void check_ep2(const std::string& model, int64_t tokens, int64_t layers, const char* routing, EpBuffers buffers, bool dp = false) {
  INFO(model << " T=" << tokens << " layers=" << layers << " routing " << routing << " " << ep_buffers_name(buffers) << (dp ? " DP" : ""));
  RunPlan plan;
  plan.model = model;
  plan.tokens = tokens;
  plan.layers = layers;
  plan.ep = 2;
  plan.ep_buffers = buffers;
  plan.dp_attention = dp;
  auto spec = parse_routing(routing);
  REQUIRE(spec.is_ok());
  plan.routing = *spec;
  std::string tag = model + "-" + std::string(ep_buffers_name(buffers)) + "-" + spec->text();
  std::replace(tag.begin(), tag.end(), ':', '_');
  if (dp) tag += "-dp";
  plan.out_dir = out_dir(tag + "-ep2");
  auto res = execute_tp_run_plan(plan, 2);
  if (!res.is_ok()) FAIL(res.status().message());
  const RunPlanResult& r = res.value();
  CHECK_FALSE(r.ep_emulated);
  REQUIRE(r.ep == 2);
  REQUIRE(r.rank_modes.size() == 2);
  CHECK(r.outputs_identical);  // both ranks hold the all-gathered output (DP: their own), in every mode
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    RunPlan e = plan;
    e.ep_rank = rank;
    e.out_dir = out_dir(tag + "-emulated" + std::to_string(rank));
    auto g = make_cuda_backend(0);
    REQUIRE(g.is_ok());
    auto emu = execute_run_plan(*g.value(), e);
    if (!emu.is_ok()) FAIL(emu.status().message());
    for (size_t m = 0; m < plan.modes.size(); ++m) {
      const ModeResult& real = r.rank_modes[static_cast<size_t>(rank)][m];
      INFO("mode " << real.mode);
      CHECK(alloc_sequence(real.trace_path) == alloc_sequence(emu->modes[m].trace_path));
      CHECK(real.accounting.peak_activation == emu->modes[m].accounting.peak_activation);
      CHECK(real.moe.ep_rows_received == emu->modes[m].moe.ep_rows_received);
    }
  }
  WARN(model << " EP=2 on 2 GPUs (" << routing << ", " << ep_buffers_name(buffers) << "): peak activation rank 0 "
             << r.rank_modes[0][0].accounting.peak_activation << ", rank 1 " << r.rank_modes[1][0].accounting.peak_activation
             << "; budget rank " << r.budget_ranks[0]);
}

}  // namespace

TEST_CASE("real EP=2 over NCCL: ranks agree, per-rank allocations and peaks equal the emulated ranks'", "[gpu][tp][ep]") {
  const std::string why = skip_reason();
  if (!why.empty()) MOEPROF_SKIP(why);
  check_ep2("tiny", 100, 0, "router", EpBuffers::kExact);
  check_ep2("tiny", 77, 0, "zipf:1.2", EpBuffers::kWorstCase);
  check_ep2("kimi-k2.5", 2048, 4, "uniform", EpBuffers::kExact);
  check_ep2("kimi-k2.5", 2048, 4, "zipf:1.2", EpBuffers::kExact);
  check_ep2("kimi-k2.5", 4096, 4, "zipf:1.2", EpBuffers::kExact, true);  // DP attention: 2,048 tokens per rank
}
