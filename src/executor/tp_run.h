// Real tensor parallelism in one process: `moeprof run --backend cuda --tp N --gpus N`.
// Rank r runs on GPU r with rank r's shapes (make_rank_shape(cfg, T, N, r, layers)), in its own
// thread, on its own CudaBackend, with a real NCCL communicator attached (all_reduce = in-place
// ncclAllReduce sum). NCCL is loaded at run time (cuda_nccl.h): a binary without libnccl still
// starts; only this path needs it.
#pragma once

#include <functional>
#include <string>

#include "core/status.h"
#include "executor/run.h"

namespace moeprof {

// For each mode of plan.modes: one thread per rank runs that rank's part of the flow
// (run_rank_mode) into DIR/<mode>.rank<r>.mtrace (meta tp_rank r, tp_size N, tp_emulated false,
// records on device r); the rank traces are then merged (merge_traces) into DIR/<mode>.mtrace,
// whose devices are the ranks. plan.tp must equal `gpus` (or be 1: it is then taken as `gpus`).
// plan.before_mode/after_mode are not called (no per-process CUPTI tracer here).
// Errors: the first rank to fail wins; the other ranks are given time to finish, then the
// communicators are aborted so that no rank hangs in a collective; every rank's trace is closed.
// Without the CUDA backend compiled in, kRunFailure.
// With plan.symm_mem, every rank also creates an NCCL symmetric pool (SymmetricPool, of
// plan.symm_pool_bytes or symmetric_pool_bytes(shape)) attached to its backend for all modes.
// With plan.ep > 1 the ranks are EP ranks (TP 1, rank r holding experts [r*E/N, ...)): the
// dispatch and combine are all-to-alls of rows, the output's slices an all-gather (deepseek_ep.cpp).
// backend "cpu": the ranks are CPU reference backends in threads, meeting in a HostRankGroup
// (host_group.h): real collectives without a GPU. "cuda": one GPU per rank, NCCL.
Result<RunPlanResult> execute_tp_run_plan(const RunPlan& plan, int gpus, const std::string& backend = "cuda");

// Ranks in separate processes (`moeprof run --rank R --world N --nccl-id FILE`, or
// `--launch processes`, which starts them): this process runs rank `rank` of `world` on CUDA
// device `device`. Rank 0 writes NCCL's unique id to `id_file` (written aside, then renamed);
// the others wait for it up to `timeout_seconds`. Every mode writes DIR/<mode>.rank<R>.mtrace
// (devices = the rank's device); at the end all ranks meet in one all-reduce (so rank 0 knows
// every trace is closed). The result holds this rank's modes only (rank_modes[0]).
struct RankLaunch {
  int rank = 0;
  int world = 1;
  int device = -1;  // -1: rank % the visible devices
  std::string id_file;
  double timeout_seconds = 300;
  // Called once this process is bound to its device, before NCCL starts (e.g. to start a CUPTI
  // tracer that sees what NCCL allocates, and nothing on another GPU).
  std::function<Status()> on_device_bound;
  // Called once the communicator exists and before the first mode (e.g. to note the NCCL version).
  std::function<void(const std::string& nccl_version)> on_ready;
};
Result<RunPlanResult> execute_tp_rank(const RunPlan& plan, const RankLaunch& launch);

// Rank 0 (or the parent of `--launch processes`): reads DIR/<mode>.rank<r>.mtrace of every rank
// and mode of `plan`, rebuilds each rank's ModeResult from the trace (the executor writes its
// accounting, timings, MoE buffer counts and output hashes into the META), and merges them into
// DIR/<mode>.mtrace: the same RunPlanResult as execute_tp_run_plan. Works without CUDA (the
// traces are files). kBadInput naming the file when one is missing or names another rank.
Result<RunPlanResult> collect_rank_traces(const RunPlan& plan, int world);

}  // namespace moeprof
