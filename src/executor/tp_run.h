// Real tensor parallelism in one process: `moeprof run --backend cuda --tp N --gpus N`.
// Rank r runs on GPU r with rank r's shapes (make_rank_shape(cfg, T, N, r, layers)), in its own
// thread, on its own CudaBackend, with a real NCCL communicator attached (all_reduce = in-place
// ncclAllReduce sum). NCCL is loaded at run time (cuda_nccl.h): a binary without libnccl still
// starts; only this path needs it.
#pragma once

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
Result<RunPlanResult> execute_tp_run_plan(const RunPlan& plan, int gpus);

}  // namespace moeprof
