#include "executor/tp_run.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "core/trace_io.h"
#include "core/trace_merge.h"
#include "executor/backends.h"
#include "executor/cpu_backend.h"
#include "executor/host_group.h"
#include "model/expert_parallel.h"
#include "model/config.h"

#ifdef MOEPROF_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "executor/cuda_backend.h"
#include "executor/cuda_check.h"
#include "executor/cuda_nccl.h"
#endif

namespace moeprof {

namespace {

uint64_t extra_u64(const RunMeta& m, const std::string& key) {
  auto it = m.extra.find(key);
  if (it == m.extra.end()) return 0;
  try {
    return std::stoull(it->second);
  } catch (...) {
    return 0;
  }
}

double extra_f64(const RunMeta& m, const std::string& key) {
  auto it = m.extra.find(key);
  if (it == m.extra.end()) return 0;
  try {
    return std::stod(it->second);
  } catch (...) {
    return 0;
  }
}

// A rank's ModeResult as the executor wrote it into its trace's META (run_rank_mode).
ModeResult mode_result_from_meta(const RunMeta& m, const std::string& path) {
  ModeResult mr;
  mr.mode = m.mode;
  mr.trace_path = path;
  mr.forward_seconds = extra_f64(m, "forward_seconds");
  mr.total_seconds = extra_f64(m, "total_seconds");
  mr.moe.reused = static_cast<int64_t>(extra_u64(m, "moe_output_reused"));
  mr.moe.fresh = static_cast<int64_t>(extra_u64(m, "moe_output_fresh"));
  mr.moe.fallback = static_cast<int64_t>(extra_u64(m, "moe_output_fallback"));
  if (auto it = m.extra.find("moe_output_fallback_layers"); it != m.extra.end()) {
    size_t pos = 0;
    const std::string& v = it->second;
    while (pos < v.size()) {
      size_t end = v.find(',', pos);
      if (end == std::string::npos) end = v.size();
      try {
        mr.moe.fallback_layers.push_back(std::stoll(v.substr(pos, end - pos)));
      } catch (...) {
      }
      pos = end + 1;
    }
  }
  for (int c = 0; c < kNumCategories; ++c) {
    const std::string cat(category_name(static_cast<Category>(c)));
    mr.accounting.peak[c] = extra_u64(m, "accounting.peak_bytes." + cat);
    mr.accounting.allocated[c] = extra_u64(m, "accounting.allocated_bytes." + cat);
    mr.accounting.allocations[c] = extra_u64(m, "accounting.allocations." + cat);
  }
  mr.accounting.peak_total = extra_u64(m, "accounting.peak_total_bytes");
  mr.accounting.peak_activation = extra_u64(m, "accounting.peak_activation_bytes");
  mr.accounting.peak_total_worst = extra_u64(m, "routing.peak_total_worst_bytes");
  mr.accounting.peak_activation_worst = extra_u64(m, "routing.peak_activation_worst_bytes");
  mr.moe.calls = static_cast<int64_t>(extra_u64(m, "routing.moe_calls"));
  mr.moe.rows_allocated = static_cast<int64_t>(extra_u64(m, "routing.rows_allocated"));
  mr.moe.rows_bound = static_cast<int64_t>(extra_u64(m, "routing.rows_bound"));
  mr.moe.rows_worst = static_cast<int64_t>(extra_u64(m, "routing.rows_worst"));
  if (m.extra.count("routing.max_expert_tokens")) {
    mr.moe.max_expert_tokens = static_cast<int64_t>(extra_u64(m, "routing.max_expert_tokens"));
    mr.moe.max_expert_capacity = static_cast<int64_t>(extra_u64(m, "routing.max_expert_capacity"));
  }
  mr.moe.ep_rows_received = static_cast<int64_t>(extra_u64(m, "ep.rows_received"));
  mr.moe.ep_rows_buffered = static_cast<int64_t>(extra_u64(m, "ep.rows_buffered"));
  mr.moe.ep_rows_worst = static_cast<int64_t>(extra_u64(m, "ep.rows_worst"));
  mr.moe.ep_max_rows_received = static_cast<int64_t>(extra_u64(m, "ep.max_rows_received"));
  mr.output.hidden_hash = extra_u64(m, "output.hidden_hash");
  mr.output.logits_hash = extra_u64(m, "output.logits_hash");
  mr.output.moe = mr.moe;
  if (auto it = m.extra.find("weights"); it != m.extra.end()) mr.weights_shared = it->second == "shared";
  if (auto it = m.extra.find("weights_note"); it != m.extra.end()) mr.weights_note = it->second;
  return mr;
}

// The planner's run level over ranks: each figure is the maximum over devices (docs/metrics.md).
CategoryCounters max_over_ranks(const std::vector<const CategoryCounters*>& cs) {
  CategoryCounters m;
  for (const CategoryCounters* c : cs) {
    for (int i = 0; i < kNumCategories; ++i) {
      m.current[i] = std::max(m.current[i], c->current[i]);
      m.peak[i] = std::max(m.peak[i], c->peak[i]);
      m.allocated[i] = std::max(m.allocated[i], c->allocated[i]);
      m.allocations[i] = std::max(m.allocations[i], c->allocations[i]);
    }
    m.current_total = std::max(m.current_total, c->current_total);
    m.peak_total = std::max(m.peak_total, c->peak_total);
    m.current_activation = std::max(m.current_activation, c->current_activation);
    m.peak_activation = std::max(m.peak_activation, c->peak_activation);
    m.current_total_worst = std::max(m.current_total_worst, c->current_total_worst);
    m.peak_total_worst = std::max(m.peak_total_worst, c->peak_total_worst);
    m.current_activation_worst = std::max(m.current_activation_worst, c->current_activation_worst);
    m.peak_activation_worst = std::max(m.peak_activation_worst, c->peak_activation_worst);
  }
  return m;
}

std::string rank_trace_path(const RunPlan& plan, const std::string& mode, int rank) {
  return (std::filesystem::path(plan.out_dir) / (mode + ".rank" + std::to_string(rank) + ".mtrace")).string();
}

}  // namespace

Result<RunPlanResult> collect_rank_traces(const RunPlan& plan, int world) {
  if (world < 1) return Status::bad_input("collect_rank_traces: world " + std::to_string(world));
  RunPlanResult result;
  result.tp = plan.ep > 1 ? 1 : world;
  result.gpus = world;
  result.tp_emulated = false;
  result.rank_modes.resize(static_cast<size_t>(world));
  for (MemoryMode mode : plan.modes) {
    const std::string mode_name(memory_mode_name(mode));
    std::vector<Trace> traces;
    ModeResult merged;
    merged.mode = mode_name;
    merged.trace_path = (std::filesystem::path(plan.out_dir) / (mode_name + ".mtrace")).string();
    for (int r = 0; r < world; ++r) {
      const std::string path = rank_trace_path(plan, mode_name, r);
      auto t = read_trace(path);
      if (!t.is_ok()) return Status::bad_input("rank " + std::to_string(r) + ": " + t.status().message());
      const RunMeta& m = t->meta;
      // The rank's place: its TP rank, or with expert parallelism (TP 1) its EP rank.
      const bool ep_rank_trace = plan.ep > 1;
      const int m_rank = ep_rank_trace ? static_cast<int>(extra_u64(m, "ep_rank")) : m.tp_rank;
      const int m_size = ep_rank_trace ? static_cast<int>(extra_u64(m, "ep_size")) : m.tp_size;
      if (m_rank != r || m_size != world || m.mode != mode_name)
        return Status::bad_input(path + " holds " + (ep_rank_trace ? "EP" : "TP") + " rank " + std::to_string(m_rank) + " of " +
                                 std::to_string(m_size) + ", mode " + m.mode + "; expected rank " + std::to_string(r) + " of " +
                                 std::to_string(world) + ", mode " + mode_name);
      if (auto e = m.extra.find("error"); e != m.extra.end())
        return Status::run_failure("rank " + std::to_string(r) + " failed: " + e->second + " (trace kept in " + path + ")");
      if (t->truncated) return Status::run_failure("rank " + std::to_string(r) + "'s trace " + path + " is truncated");
      ModeResult mr = mode_result_from_meta(m, path);
      result.model = m.model;
      result.tokens = m.tokens;
      result.layers = m.layers;
      merged.forward_seconds = std::max(merged.forward_seconds, mr.forward_seconds);
      merged.total_seconds = std::max(merged.total_seconds, mr.total_seconds);
      if (mr.weights_shared) {
        result.weights_shared = true;
        if (result.weights_note.empty()) result.weights_note = mr.weights_note;
      }
      result.rank_modes[static_cast<size_t>(r)].push_back(std::move(mr));
      traces.push_back(std::move(t).value());
    }
    MOEPROF_RETURN_IF_ERROR(offset_rank_devices(&traces));
    Trace m = merge_traces(traces);
    m.meta.name = mode_name;
    MOEPROF_RETURN_IF_ERROR(write_trace(merged.trace_path, m));
    std::vector<const CategoryCounters*> acc;
    for (int r = 0; r < world; ++r) acc.push_back(&result.rank_modes[static_cast<size_t>(r)].back().accounting);
    merged.accounting = max_over_ranks(acc);
    const ModeResult& r0 = result.rank_modes[0].back();
    merged.moe = r0.moe;
    merged.output = r0.output;
    merged.weights_shared = r0.weights_shared;
    merged.weights_note = r0.weights_note;
    result.modes.push_back(std::move(merged));
  }
  for (const auto& per_rank : result.rank_modes)
    for (size_t i = 1; i < per_rank.size(); ++i)
      result.outputs_identical = result.outputs_identical && same_forward_output(per_rank[0].output, per_rank[i].output);
  if (plan.ep > 1) {
    // Real expert parallelism: per-rank figures as emulated ranks give them (RunPlanResult's EP
    // fields), and every rank ends with the same rows (the all-gather): the same output; with DP
    // attention each rank has its own request's.
    MOEPROF_ASSIGN_OR_RETURN(ModelConfig cfg, resolve_model_config(plan.model));
    result.ep = world;
    result.ep_emulated = false;
    result.dp_attention = plan.dp_attention;
    result.tokens = plan.tokens;  // the batch (with DP attention each rank's trace holds its own request's)
    result.ep_buffers = plan.ep_buffers;
    result.ep_worst_rows = ep_worst_rows(result.tokens, cfg.num_experts_per_tok, cfg.n_routed_experts, world);
    result.ep_rank_modes = result.rank_modes;
    for (int r = 0; r < world; ++r) result.ep_ranks.push_back(r);
    for (size_t m = 0; m < plan.modes.size(); ++m) {
      int best = 0;
      for (int r = 1; r < world; ++r)
        if (budget_order(result.rank_modes[static_cast<size_t>(r)][m].accounting,
                         result.rank_modes[static_cast<size_t>(best)][m].accounting))
          best = r;
      result.budget_ranks.push_back(best);
      if (plan.dp_attention) continue;  // DP attention: each rank's own request, its own output
      for (int r = 1; r < world; ++r)
        result.outputs_identical = result.outputs_identical && same_forward_output(result.rank_modes[0][m].output,
                                                                                   result.rank_modes[static_cast<size_t>(r)][m].output);
    }
  }
  bool weights_differ = false;
  for (const auto& per_rank : result.rank_modes)
    for (const auto& mr : per_rank) weights_differ = weights_differ || mr.weights_shared != result.weights_shared;
  if (weights_differ) result.weights_note += " (ranks differ: not every rank's run shares its expert weights)";
  return result;
}

namespace {

// How long the other ranks get to finish after the first failure before the group is aborted (a
// rank waiting in a collective for the failed one would otherwise wait forever).
constexpr auto kGraceAfterFailure = std::chrono::seconds(5);

// The N ranks' shapes: TP rank r of N, or with expert parallelism (plan.ep > 1) EP rank r of N,
// each with the whole batch's attention (TP 1).
Result<std::vector<RankShape>> rank_shapes(const RunPlan& plan, const ModelConfig& cfg, int n) {
  std::vector<RankShape> shapes;
  if (plan.ep > 1) {
    if (plan.ep != n)
      return Status::bad_input("--ep " + std::to_string(plan.ep) + " over real ranks runs one EP rank per device: --gpus must be " +
                               std::to_string(plan.ep) + " (got " + std::to_string(n) + ")");
    if (plan.tp > 1) return Status::bad_input("--ep runs with --tp 1 (attention over the whole batch on every rank)");
    MOEPROF_RETURN_IF_ERROR(check_ep_size(plan.ep, cfg.n_routed_experts, cfg.name));
    for (int r = 0; r < n; ++r) {
      MOEPROF_ASSIGN_OR_RETURN(RankShape s, ep_rank_shape(cfg, plan, r));
      shapes.push_back(s);
    }
    return shapes;
  }
  const int tp = plan.tp <= 1 ? n : plan.tp;
  if (tp != n)
    return Status::bad_input("--gpus " + std::to_string(n) + " runs one TP rank per device: --tp must be " + std::to_string(n) +
                             " (got " + std::to_string(plan.tp) + ")");
  for (int r = 0; r < n; ++r) {
    MOEPROF_ASSIGN_OR_RETURN(RankShape s, make_rank_shape(cfg, plan.tokens, n, r, plan.layers));
    shapes.push_back(s);
  }
  return shapes;
}

// Each mode of the plan on N ranks at once, one thread per rank: body(r, mode, trace options).
// After the first failure the other ranks get kGraceAfterFailure to finish; then abort() stops
// the collectives they may wait in. Returns the first failure, naming its rank.
Status run_modes_in_threads(const RunPlan& plan, int n,
                            const std::function<Result<ModeResult>(int, MemoryMode, const RankModeOptions&)>& body,
                            const std::function<void()>& abort) {
  for (MemoryMode mode : plan.modes) {
    const std::string mode_name(memory_mode_name(mode));
    std::vector<std::optional<Result<ModeResult>>> rank_results(static_cast<size_t>(n));
    std::mutex mu;
    std::condition_variable cv;
    int done = 0;
    int first_failed = -1;
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r]() {
        RankModeOptions opt;
        opt.trace_path = rank_trace_path(plan, mode_name, r);
        opt.tp_emulated = false;
        opt.progress = plan.progress && r == 0;
        opt.log_weights_note = r == 0 && mode == plan.modes.front();
        opt.hooks = false;
        Result<ModeResult> res = body(r, mode, opt);
        std::lock_guard<std::mutex> lock(mu);
        if (!res.is_ok() && first_failed < 0) first_failed = r;
        rank_results[static_cast<size_t>(r)] = std::move(res);
        ++done;
        cv.notify_all();
      });
    }
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done == n || first_failed >= 0; });
      if (done < n && !cv.wait_for(lock, kGraceAfterFailure, [&] { return done == n; })) {
        lock.unlock();
        abort();
        lock.lock();
        cv.wait(lock, [&] { return done == n; });
      }
    }
    for (auto& t : threads) t.join();
    if (first_failed >= 0) {
      const Status& st = rank_results[static_cast<size_t>(first_failed)]->status();
      return st.with_context("rank " + std::to_string(first_failed) + " of " + std::to_string(n));
    }
  }
  return Status::ok();
}

// Real ranks without a GPU: N CPU reference backends in threads, meeting in a HostRankGroup.
Result<RunPlanResult> execute_cpu_ranks(const RunPlan& plan, int n) {
  MOEPROF_ASSIGN_OR_RETURN(ModelConfig cfg, resolve_model_config(plan.model));
  MOEPROF_ASSIGN_OR_RETURN(std::vector<RankShape> shapes, rank_shapes(plan, cfg, n));
  std::error_code ec;
  std::filesystem::create_directories(plan.out_dir, ec);
  if (ec) return Status::bad_input("cannot create output directory " + plan.out_dir + ": " + ec.message());
  HostRankGroup group(n);
  // The machine's cores shared among the ranks (each backend splits its ops over its threads).
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::unique_ptr<CpuBackend>> backends;
  for (int r = 0; r < n; ++r) {
    backends.push_back(std::make_unique<CpuBackend>(std::max(1, cores / n)));
    backends.back()->attach_group(&group, r);
  }
  if (plan.log)
    std::fprintf(plan.log, "moeprof: %s=%d over %d CPU ranks (threads of this process, collectives through host memory)\n",
                 plan.ep > 1 ? "EP" : "TP", n, n);
  MOEPROF_RETURN_IF_ERROR(run_modes_in_threads(
      plan, n,
      [&](int r, MemoryMode mode, const RankModeOptions& opt) {
        return run_rank_mode(*backends[static_cast<size_t>(r)], cfg, shapes[static_cast<size_t>(r)], plan, mode, opt);
      },
      [&] { group.abort(); }));
  return collect_rank_traces(plan, n);
}

}  // namespace

#ifndef MOEPROF_HAVE_CUDA

Result<RunPlanResult> execute_tp_run_plan(const RunPlan& plan, int gpus, const std::string& backend) {
  if (backend == "cpu") return execute_cpu_ranks(plan, gpus);
  return Status::run_failure("--gpus " + std::to_string(gpus) +
                             " needs the CUDA backend; this moeprof was built without it (MOEPROF_ENABLE_CUDA=OFF)");
}

Result<RunPlanResult> execute_tp_rank(const RunPlan& /*plan*/, const RankLaunch& launch) {
  return Status::run_failure("--rank " + std::to_string(launch.rank) +
                             " needs the CUDA backend; this moeprof was built without it (MOEPROF_ENABLE_CUDA=OFF)");
}

#else

namespace {

// CUDA devices visible to this process; 0 when the driver cannot say (a probe, not a failure:
// the caller reports too few devices).
int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

// Binds the calling thread to GPU `rank`: its kernels and allocations go there.
Status bind_rank_device(int rank) {
  MOEPROF_CUDA_CHECK("rank " + std::to_string(rank), cudaSetDevice(rank));
  return Status::ok();
}

}  // namespace

Result<RunPlanResult> execute_tp_run_plan(const RunPlan& plan, int gpus, const std::string& backend) {
  if (gpus < 2) return Status::bad_input("--gpus must be at least 2 for a multi-GPU run (got " + std::to_string(gpus) + ")");
  if (backend == "cpu") return execute_cpu_ranks(plan, gpus);
  MOEPROF_ASSIGN_OR_RETURN(ModelConfig cfg, resolve_model_config(plan.model));
  MOEPROF_ASSIGN_OR_RETURN(std::vector<RankShape> shapes, rank_shapes(plan, cfg, gpus));
  const int count = cuda_device_count();
  if (count < gpus)
    return Status::run_failure("--gpus " + std::to_string(gpus) + " needs " + std::to_string(gpus) +
                               " CUDA devices; " + std::to_string(count) + " found");
  {
    Status ld = nccl_load();
    if (!ld.is_ok()) return Status::run_failure("--gpus " + std::to_string(gpus) + " needs NCCL: " + ld.message());
  }
  std::error_code ec;
  std::filesystem::create_directories(plan.out_dir, ec);
  if (ec) return Status::bad_input("cannot create output directory " + plan.out_dir + ": " + ec.message());

  // Backends first, communicators second: destroyed in the reverse order (comms while the
  // streams that used them still exist).
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<CudaBackend*> cuda;
  for (int r = 0; r < gpus; ++r) {
    auto b = make_cuda_backend(r);
    if (!b.is_ok()) return b.status().with_context("rank " + std::to_string(r));
    backends.push_back(std::move(b).value());
    cuda.push_back(static_cast<CudaBackend*>(backends.back().get()));
  }
  std::vector<int> devices(static_cast<size_t>(gpus));
  for (int r = 0; r < gpus; ++r) devices[static_cast<size_t>(r)] = r;
  MOEPROF_ASSIGN_OR_RETURN(auto comms, NcclCommunicators::create(devices));
  for (int r = 0; r < gpus; ++r) MOEPROF_RETURN_IF_ERROR(cuda[static_cast<size_t>(r)]->attach_nccl(comms->comm(r), r, gpus));
  struct DetachAll {
    std::vector<CudaBackend*>& cuda;
    ~DetachAll() {
      for (CudaBackend* c : cuda) (void)c->attach_nccl(nullptr, 0, 1);
    }
  } detach_all{cuda};
  // Symmetric pools: created and destroyed by all ranks at once (window registration is collective).
  std::vector<std::unique_ptr<SymmetricPool>> pools(static_cast<size_t>(gpus));
  struct DestroyPools {
    std::vector<std::unique_ptr<SymmetricPool>>& pools;
    std::vector<CudaBackend*>& cuda;
    ~DestroyPools() {
      std::vector<std::thread> ts;
      for (size_t r = 0; r < pools.size(); ++r)
        if (pools[r]) {
          cuda[r]->attach_symmetric_pool(nullptr);
          ts.emplace_back([this, r] {
            cudaSetDevice(static_cast<int>(r));
            pools[r].reset();
          });
        }
      for (auto& t : ts) t.join();
    }
  } destroy_pools{pools, cuda};
  if (plan.symm_mem) {
    const uint64_t bytes = plan.symm_pool_bytes > 0 ? plan.symm_pool_bytes : symmetric_pool_bytes(shapes[0], cfg);
    std::vector<Status> st(static_cast<size_t>(gpus));
    std::vector<std::thread> ts;
    for (int r = 0; r < gpus; ++r)
      ts.emplace_back([&, r] {
        if (Status b = bind_rank_device(r); !b.is_ok()) {
          st[static_cast<size_t>(r)] = b;
          return;
        }
        auto p = SymmetricPool::create(comms->comm(r), bytes);
        if (p.is_ok()) pools[static_cast<size_t>(r)] = std::move(p).value();
        else st[static_cast<size_t>(r)] = p.status();
      });
    for (auto& t : ts) t.join();
    for (int r = 0; r < gpus; ++r)
      if (!st[static_cast<size_t>(r)].is_ok()) {
        comms->abort();
        return st[static_cast<size_t>(r)].with_context("rank " + std::to_string(r) + " symmetric pool");
      }
    for (int r = 0; r < gpus; ++r) cuda[static_cast<size_t>(r)]->attach_symmetric_pool(pools[static_cast<size_t>(r)].get());
  }
  if (plan.log)
    std::fprintf(plan.log, "moeprof: %s=%d over %d GPUs, NCCL %s (NCCL_NVLS_ENABLE=0)%s\n", plan.ep > 1 ? "EP" : "TP", gpus, gpus,
                 nccl_version().c_str(),
                 plan.symm_mem ? (", symmetric pool of " + std::to_string(pools[0]->capacity()) + " bytes per rank").c_str() : "");

  MOEPROF_RETURN_IF_ERROR(run_modes_in_threads(
      plan, gpus,
      [&](int r, MemoryMode mode, const RankModeOptions& opt) -> Result<ModeResult> {
        MOEPROF_RETURN_IF_ERROR(bind_rank_device(r));
        return run_rank_mode(*backends[static_cast<size_t>(r)], cfg, shapes[static_cast<size_t>(r)], plan, mode, opt);
      },
      // Some rank still runs after another failed: it may wait in a collective for the failed
      // rank. Abort the communicators (its kernels stop, later collectives fail).
      [&] { comms->abort(); }));
  // Merge the rank traces, as written, into DIR/<mode>.mtrace (the same path as ranks in processes).
  return collect_rank_traces(plan, gpus);
}

namespace {

// Rank 0 writes NCCL's unique id (aside, then renamed: readers never see half a file); the others
// wait for it.
Result<NcclUniqueId> exchange_unique_id(const RankLaunch& l) {
  namespace fs = std::filesystem;
  if (l.rank == 0) {
    std::error_code ec;
    if (fs::exists(l.id_file, ec))
      return Status::bad_input("--nccl-id " + l.id_file + " exists already (from an earlier run?): remove it, or give a new path");
    MOEPROF_ASSIGN_OR_RETURN(NcclUniqueId id, nccl_unique_id());
    const std::string tmp = l.id_file + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(id.data(), static_cast<std::streamsize>(id.size()));
      out.close();
      if (!out) return Status::bad_input("cannot write the NCCL id to " + tmp);
    }
    fs::rename(tmp, l.id_file, ec);
    if (ec) return Status::bad_input("cannot rename " + tmp + " to " + l.id_file + ": " + ec.message());
    return id;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(l.timeout_seconds);
  for (;;) {
    std::ifstream in(l.id_file, std::ios::binary);
    if (in) {
      NcclUniqueId id{};
      in.read(id.data(), static_cast<std::streamsize>(id.size()));
      if (in.gcount() == static_cast<std::streamsize>(id.size())) return id;
    }
    if (std::chrono::steady_clock::now() > deadline)
      return Status::run_failure("no NCCL id in " + l.id_file + " after " + std::to_string(static_cast<int>(l.timeout_seconds)) +
                                 " s: is rank 0 running, and does it see the same file?");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

Result<RunPlanResult> execute_tp_rank(const RunPlan& plan, const RankLaunch& l) {
  if (l.world < 2) return Status::bad_input("--world must be at least 2 (got " + std::to_string(l.world) + ")");
  if (l.rank < 0 || l.rank >= l.world)
    return Status::bad_input("--rank " + std::to_string(l.rank) + " is not in [0, " + std::to_string(l.world) + ")");
  if (l.id_file.empty()) return Status::bad_input("--rank needs --nccl-id FILE (rank 0 writes it, the others read it)");
  if (plan.tp > 1 && plan.tp != l.world)
    return Status::bad_input("--world " + std::to_string(l.world) + " runs one TP rank per process: --tp must be " +
                             std::to_string(l.world) + " (got " + std::to_string(plan.tp) + ")");
  MOEPROF_ASSIGN_OR_RETURN(ModelConfig cfg, resolve_model_config(plan.model));
  MOEPROF_ASSIGN_OR_RETURN(RankShape shape, make_rank_shape(cfg, plan.tokens, l.world, l.rank, plan.layers));
  const int count = cuda_device_count();
  const int device = l.device >= 0 ? l.device : (count > 0 ? l.rank % count : 0);
  if (device < 0 || device >= count)
    return Status::run_failure("rank " + std::to_string(l.rank) + " wants CUDA device " + std::to_string(device) + "; " +
                               std::to_string(count) + " visible");
  if (Status ld = nccl_load(); !ld.is_ok()) return Status::run_failure("--rank needs NCCL: " + ld.message());
  std::error_code ec;
  std::filesystem::create_directories(plan.out_dir, ec);
  if (ec) return Status::bad_input("cannot create output directory " + plan.out_dir + ": " + ec.message());
  MOEPROF_RETURN_IF_ERROR(bind_rank_device(device));
  if (l.on_device_bound) MOEPROF_RETURN_IF_ERROR(l.on_device_bound());
  MOEPROF_ASSIGN_OR_RETURN(auto backend, make_cuda_backend(device));
  auto* cuda = static_cast<CudaBackend*>(backend.get());
  MOEPROF_ASSIGN_OR_RETURN(NcclUniqueId id, exchange_unique_id(l));
  MOEPROF_ASSIGN_OR_RETURN(auto comms, NcclCommunicators::create_rank(id, l.world, l.rank));
  MOEPROF_RETURN_IF_ERROR(cuda->attach_nccl(comms->comm(0), l.rank, l.world));
  std::unique_ptr<SymmetricPool> pool;
  struct Detach {
    CudaBackend* cuda;
    std::unique_ptr<SymmetricPool>& pool;
    ~Detach() {
      cuda->attach_symmetric_pool(nullptr);
      pool.reset();  // collective: every rank gets here (or the communicator was aborted)
      (void)cuda->attach_nccl(nullptr, 0, 1);
    }
  } detach{cuda, pool};
  if (plan.symm_mem) {
    auto p = SymmetricPool::create(comms->comm(0), plan.symm_pool_bytes > 0 ? plan.symm_pool_bytes : symmetric_pool_bytes(shape, cfg));
    if (!p.is_ok()) {
      comms->abort();
      return p.status().with_context("rank " + std::to_string(l.rank) + " symmetric pool");
    }
    pool = std::move(p).value();
    cuda->attach_symmetric_pool(pool.get());
  }
  if (l.on_ready) l.on_ready(nccl_version());

  RunPlanResult result;
  result.model = cfg.name;
  result.tokens = shape.tokens;
  result.tp = l.world;
  result.layers = shape.layers;
  result.gpus = l.world;
  result.rank_modes.resize(1);
  for (MemoryMode mode : plan.modes) {
    const std::string mode_name(memory_mode_name(mode));
    RankModeOptions opt;
    opt.trace_path = rank_trace_path(plan, mode_name, l.rank);
    opt.tp_emulated = false;
    opt.progress = plan.progress && l.rank == 0;
    opt.log_weights_note = l.rank == 0 && mode == plan.modes.front();
    opt.hooks = true;
    auto res = run_rank_mode(*backend, cfg, shape, plan, mode, opt);
    if (!res.is_ok()) {
      comms->abort();  // later collectives here fail at once; the launcher stops the other ranks
      return res.status().with_context("rank " + std::to_string(l.rank) + " of " + std::to_string(l.world));
    }
    result.modes.push_back(res.value());
    result.rank_modes[0].push_back(std::move(res).value());
  }
  // Every rank's traces are closed once all ranks pass this all-reduce.
  {
    MOEPROF_ASSIGN_OR_RETURN(Tensor flag, backend->empty(DType::kF32, 1, 1, AllocTag{"barrier", "nccl", Category::kCommunication}));
    MOEPROF_RETURN_IF_ERROR(backend->init_uniform(flag, 1, 1.0f));
    MOEPROF_RETURN_IF_ERROR(backend->all_reduce(flag).with_context("the closing barrier"));
    MOEPROF_RETURN_IF_ERROR(backend->synchronize().with_context("the closing barrier"));
  }
  for (size_t i = 1; i < result.rank_modes[0].size(); ++i)
    result.outputs_identical = result.outputs_identical && same_forward_output(result.rank_modes[0][0].output, result.rank_modes[0][i].output);
  return result;
}
#endif

}  // namespace moeprof
