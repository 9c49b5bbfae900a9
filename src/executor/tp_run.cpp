#include "executor/tp_run.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "core/trace_io.h"
#include "core/trace_merge.h"
#include "executor/backends.h"
#include "model/config.h"

#ifdef MOEPROF_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "executor/cuda_backend.h"
#include "executor/cuda_check.h"
#include "executor/cuda_nccl.h"
#endif

namespace moeprof {

#ifndef MOEPROF_HAVE_CUDA

Result<RunPlanResult> execute_tp_run_plan(const RunPlan& /*plan*/, int gpus) {
  return Status::run_failure("--gpus " + std::to_string(gpus) +
                             " needs the CUDA backend; this moeprof was built without it (MOEPROF_ENABLE_CUDA=OFF)");
}

#else

namespace {

// How long the other ranks get to finish after the first failure before the communicators are
// aborted (a rank waiting in a collective for the failed one would otherwise wait forever).
constexpr auto kGraceAfterFailure = std::chrono::seconds(5);

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
  }
  return m;
}

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

Result<RunPlanResult> execute_tp_run_plan(const RunPlan& plan, int gpus) {
  if (gpus < 2) return Status::bad_input("--gpus must be at least 2 for a multi-GPU run (got " + std::to_string(gpus) + ")");
  const int tp = plan.tp <= 1 ? gpus : plan.tp;
  if (tp != gpus)
    return Status::bad_input("--gpus " + std::to_string(gpus) + " runs one TP rank per GPU: --tp must be " +
                             std::to_string(gpus) + " (got " + std::to_string(plan.tp) + ")");
  MOEPROF_ASSIGN_OR_RETURN(ModelConfig cfg, resolve_model_config(plan.model));
  std::vector<RankShape> shapes;
  for (int r = 0; r < gpus; ++r) {
    MOEPROF_ASSIGN_OR_RETURN(RankShape s, make_rank_shape(cfg, plan.tokens, gpus, r, plan.layers));
    shapes.push_back(s);
  }
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
  if (plan.log)
    std::fprintf(plan.log, "moeprof: TP=%d over %d GPUs, NCCL %s (NCCL_NVLS_ENABLE=0)\n", gpus, gpus,
                 nccl_version().c_str());

  RunPlanResult result;
  result.model = cfg.name;
  result.tokens = shapes[0].tokens;
  result.tp = gpus;
  result.layers = shapes[0].layers;
  result.tp_emulated = false;
  result.gpus = gpus;
  result.rank_modes.resize(static_cast<size_t>(gpus));

  for (MemoryMode mode : plan.modes) {
    const std::string mode_name(memory_mode_name(mode));
    std::vector<std::optional<Result<ModeResult>>> rank_results(static_cast<size_t>(gpus));
    std::mutex mu;
    std::condition_variable cv;
    int done = 0;
    int first_failed = -1;
    std::vector<std::thread> threads;
    for (int r = 0; r < gpus; ++r) {
      threads.emplace_back([&, r]() {
        RankModeOptions opt;
        opt.trace_path = (std::filesystem::path(plan.out_dir) / (mode_name + ".rank" + std::to_string(r) + ".mtrace")).string();
        opt.tp_emulated = false;
        opt.progress = plan.progress && r == 0;
        opt.log_weights_note = r == 0 && mode == plan.modes.front();
        opt.hooks = false;
        Result<ModeResult> res = Status::run_failure("not run");
        if (Status bound = bind_rank_device(r); !bound.is_ok()) {
          res = bound;
        } else {
          res = run_rank_mode(*backends[static_cast<size_t>(r)], cfg, shapes[static_cast<size_t>(r)], plan, mode, opt);
        }
        std::lock_guard<std::mutex> lock(mu);
        if (!res.is_ok() && first_failed < 0) first_failed = r;
        rank_results[static_cast<size_t>(r)] = std::move(res);
        ++done;
        cv.notify_all();
      });
    }
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done == gpus || first_failed >= 0; });
      if (done < gpus && !cv.wait_for(lock, kGraceAfterFailure, [&] { return done == gpus; })) {
        // Some rank is still running after another failed: it may wait in a collective for the
        // failed rank. Abort the communicators (its kernels stop, later collectives fail).
        lock.unlock();
        comms->abort();
        lock.lock();
        cv.wait(lock, [&] { return done == gpus; });
      }
    }
    for (auto& t : threads) t.join();
    if (first_failed >= 0) {
      const Status& st = rank_results[static_cast<size_t>(first_failed)]->status();
      return st.with_context("rank " + std::to_string(first_failed) + " of " + std::to_string(gpus));
    }

    // Merge the rank traces, as written, into DIR/<mode>.mtrace.
    std::vector<Trace> traces;
    std::vector<const CategoryCounters*> acc;
    ModeResult merged;
    merged.mode = mode_name;
    merged.trace_path = (std::filesystem::path(plan.out_dir) / (mode_name + ".mtrace")).string();
    for (int r = 0; r < gpus; ++r) {
      ModeResult& mr = rank_results[static_cast<size_t>(r)]->value();
      MOEPROF_ASSIGN_OR_RETURN(Trace t, read_trace(mr.trace_path));
      traces.push_back(std::move(t));
      merged.forward_seconds = std::max(merged.forward_seconds, mr.forward_seconds);
      merged.total_seconds = std::max(merged.total_seconds, mr.total_seconds);
      if (mr.weights_shared) {
        result.weights_shared = true;
        if (result.weights_note.empty()) result.weights_note = mr.weights_note;
      }
    }
    Trace m = merge_traces(traces);
    m.meta.name = mode_name;
    MOEPROF_RETURN_IF_ERROR(write_trace(merged.trace_path, m));
    traces.clear();
    for (int r = 0; r < gpus; ++r) {
      result.rank_modes[static_cast<size_t>(r)].push_back(std::move(rank_results[static_cast<size_t>(r)]->value()));
      acc.push_back(&result.rank_modes[static_cast<size_t>(r)].back().accounting);
    }
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
  // Ranks that chose different weights (--weights auto on GPUs with different free memory).
  bool weights_differ = false;
  for (const auto& per_rank : result.rank_modes)
    for (const auto& mr : per_rank) weights_differ = weights_differ || mr.weights_shared != result.weights_shared;
  if (weights_differ) result.weights_note += " (ranks differ: not every rank's run shares its expert weights)";
  return result;
}

#endif

}  // namespace moeprof
