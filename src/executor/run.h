// Runs the model once per memory mode, each run recorded into its own trace
// (DIR/<mode>.mtrace) with the executor's own accounting alongside.
#pragma once

#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "executor/backend.h"
#include "executor/recorder.h"
#include "executor/deepseek_model.h"
#include "executor/serving.h"

namespace moeprof {

struct RunPlan {
  std::string model = "tiny";  // built-in name or config path
  int64_t tokens = 100;
  int tp = 1;
  int64_t layers = 0;          // 0: all
  uint64_t seed = 0x5EED;
  std::string out_dir = "moeprof-out";
  std::vector<MemoryMode> modes = {MemoryMode::kBaseline, MemoryMode::kReuse};
  WeightsMode weights = WeightsMode::kAuto;
  // --symm-mem on: SGLang's symmetric memory (ModelOptions::symm_mem). With real TP the tensors
  // come from an NCCL symmetric window per rank (tp_run.h); on one device it is emulated.
  bool symm_mem = false;
  uint64_t symm_pool_bytes = 0;               // 0: symmetric_pool_bytes(shape)
  std::vector<int64_t> symm_outside_layers;  // testing (ModelOptions::symm_outside_layers)
  bool progress = false;       // "layer k of n" on stderr (terminal)
  // `--op-times`: time every op of the forward by family (op_profile.h) into ModeResult::ops.
  bool op_times = false;
  std::FILE* log = nullptr;    // one-line notes (weights choice); null = silent
  // `--workload`: each mode runs the serving workload (executor/serving.h) instead of one prefill;
  // the rank's shapes are then those of a --chunked-prefill-size step.
  std::optional<ServingOptions> serving;
  // `--routing` and `--moe-rows` (ModelOptions::routing, moe_rows; model/routing.h).
  RoutingSpec routing;
  MoeRows moe_rows = MoeRows::kBound;
  // `--ep N` (docs/executor.md "Expert parallelism"): rank ep_rank's shapes (-1: every rank in
  // turn on the meta backend, rank 0 elsewhere), its dispatch buffers sized by ep_buffers.
  int ep = 1;
  int ep_rank = -1;
  EpBuffers ep_buffers = EpBuffers::kExact;
  // `--dp N` (N = ep): DP attention. Rank r runs its own request, tokens [r T/N, (r+1) T/N) of the
  // batch of `tokens` (RankShape::dp_attention); otherwise every rank attends over the whole batch.
  bool dp_attention = false;
  // Called around each mode's run, e.g. to start and stop a CUPTI tracer: before_mode right
  // after the trace is opened, after_mode once the model is torn down and the device is idle.
  std::function<Status(const std::string& mode, const RunMeta& meta)> before_mode;
  std::function<Status(const std::string& mode, const RunMeta& meta)> after_mode;  // meta: the run's trace metadata so far
};

struct ModeResult {
  std::string mode;
  std::string trace_path;
  double forward_seconds = 0;
  double total_seconds = 0;    // weights + forward + teardown
  MoeRunnerStats moe;
  CategoryCounters accounting;  // the executor's own count of the bytes it asked for
  ForwardOutput output;
  bool weights_shared = false;  // this run's model aliased the first MoE layer's expert weights
  std::optional<OpProfile> ops;  // with RunPlan::op_times: the forward's ops by family
  std::string weights_note;
  std::optional<ServingResult> serving;  // with RunPlan::serving
};

struct RunPlanResult {
  std::string model;
  int64_t tokens = 0;
  int tp = 1;
  int64_t layers = 0;
  bool tp_emulated = false;
  bool weights_shared = false;
  std::string weights_note;
  std::vector<ModeResult> modes;
  bool outputs_identical = true;  // all modes: same final hidden-state hash and logits bits
  // Real TP (`--gpus N`, tp_run.h): one entry per rank, each with one ModeResult per mode (trace
  // DIR/<mode>.rank<r>.mtrace). `modes` then holds the merged traces (DIR/<mode>.mtrace), rank
  // 0's outputs, and the accounting as the planner's run level sees it (max over ranks).
  // outputs_identical then covers every rank. Empty for one-device runs.
  int gpus = 1;
  std::vector<std::vector<ModeResult>> rank_modes;
  // Expert parallelism (RunPlan::ep > 1): one entry per emulated EP rank, each with one
  // ModeResult per mode (its own trace: DIR/<mode>.mtrace for one rank, DIR/<mode>.ep<r>.mtrace
  // for several). `modes` then holds, per mode, the rank with the largest activation peak (the
  // rank that sets the budget), named by budget_ranks.
  int ep = 1;
  EpBuffers ep_buffers = EpBuffers::kExact;
  std::vector<int> ep_ranks;                      // the ranks emulated, in order
  std::vector<std::vector<ModeResult>> ep_rank_modes;  // [ep_ranks index][mode index]
  std::vector<int> budget_ranks;                  // per mode
  int64_t ep_worst_rows = 0;  // per MoE call: T * min(top_k, E/N)
  // False for real EP ranks (`--ep N --gpus N`): ep_rank_modes are then rank_modes (every rank's
  // own run), and `modes` the merged traces as for real TP.
  bool ep_emulated = true;
  bool dp_attention = false;  // RunPlan::dp_attention
};

// Each mode: open the trace, build the model (weights, KV cache), one prefill, tear down, close
// the trace. A failure still closes (flushes) the trace written so far.
Result<RunPlanResult> execute_run_plan(Backend& backend, const RunPlan& plan);

// One rank's run of one mode, the part of execute_run_plan shared with the multi-GPU run
// (tp_run.cpp), which calls it from one thread per rank: opens `trace_path`, builds the model
// with `shape` (rank shape.tp_rank of shape.tp_size), one prefill, tears it down, closes the
// trace (also after a failure; the error then names the trace kept).
struct RankModeOptions {
  std::string trace_path;
  bool tp_emulated = false;   // meta.extra["tp_emulated"]
  bool progress = false;      // "layer k of n" on stderr (plan.progress is not read)
  bool log_weights_note = false;  // print the weights note to plan.log
  bool hooks = true;          // call plan.before_mode / plan.after_mode
};
Result<ModeResult> run_rank_mode(Backend& backend, const ModelConfig& cfg, const RankShape& shape,
                                 const RunPlan& plan, MemoryMode mode, const RankModeOptions& opt);

// The symmetric pool a rank needs: the tensors SGLang places there that are live at once (the
// layer's input, the o_proj output, the MLP/MoE output) and one spare, T x hidden bf16 each.
uint64_t symmetric_pool_bytes(const RankShape& shape, const ModelConfig& cfg);

// EP rank `rank` of plan.ep's shapes (TP 1): the whole batch, or with plan.dp_attention its own
// request (tokens [rank T/N, (rank+1) T/N)). kBadInput when a DP rank would get no token (T < N).
Result<RankShape> ep_rank_shape(const ModelConfig& cfg, const RunPlan& plan, int rank);

// Same final hidden-state hash, same logits bits.
bool same_forward_output(const ForwardOutput& a, const ForwardOutput& b);

}  // namespace moeprof
