// Runs the model once per memory mode, each run recorded into its own trace
// (DIR/<mode>.mtrace) with the executor's own accounting alongside.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "executor/backend.h"
#include "executor/recorder.h"
#include "model/deepseek.h"

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
  bool progress = false;       // "layer k of n" on stderr (terminal)
  std::FILE* log = nullptr;    // one-line notes (weights choice); null = silent
  // Called around each mode's run, e.g. to start and stop a CUPTI tracer: before_mode right
  // after the trace is opened, after_mode once the model is torn down and the device is idle.
  std::function<Status(const std::string& mode, const RunMeta& meta)> before_mode;
  std::function<Status(const std::string& mode)> after_mode;
};

struct ModeResult {
  std::string mode;
  std::string trace_path;
  double forward_seconds = 0;
  double total_seconds = 0;    // weights + forward + teardown
  MoeRunnerStats moe;
  CategoryCounters accounting;  // the executor's own count of the bytes it asked for
  ForwardOutput output;
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
};

// Each mode: open the trace, build the model (weights, KV cache), one prefill, tear down, close
// the trace. A failure still closes (flushes) the trace written so far.
Result<RunPlanResult> execute_run_plan(Backend& backend, const RunPlan& plan);

}  // namespace moeprof
