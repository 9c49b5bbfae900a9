// Serving: the executor runs what a serving engine runs (docs/executor.md, "Serving"). A paged MLA
// KV pool sized at start (executor/kv_pool.h), a scheduler that drives prefill (chunked) and decode
// steps from a workload (executor/scheduler.h, executor/workload.h), absorbed MLA decode, CUDA
// graphs for decode sharing one pool (executor/graph_runner.h) and greedy tokens. Every step is a
// marker range and an allocation scope prefix ("step.7/decode/layer.3/attn"); the pool's occupancy
// goes into the trace as counter records; the run's figures go into the trace's metadata as
// extra["serving"] (JSON), from which the reports build their `serving` object.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "executor/backend.h"
#include "executor/deepseek_model.h"
#include "executor/graph_runner.h"
#include "executor/recorder.h"
#include "executor/scheduler.h"
#include "executor/workload.h"

namespace moeprof {

struct ServingOptions {
  std::string workload;                 // FILE.jsonl or synthetic:N,PROMPT,OUTPUT[,SEED]
  int64_t chunked_prefill_size = 8192;  // prompt tokens per prefill step
  int64_t kv_tokens = 0;                // > 0: the pool's tokens (--kv-tokens)
  double mem_fraction_static = 0;       // > 0: size the pool SGLang's way (--mem-fraction-static)
  int64_t page_size = 1;
  int64_t max_running_requests = 0;     // 0: SGLang's default (serving.cpp)
  int64_t context_len = 0;              // 0: the model's max_position_embeddings
  std::vector<int64_t> cuda_graph_bs;   // empty: SGLang's default list for the device's memory
  int64_t cuda_graph_max_bs = 0;        // > 0: only sizes up to it
  bool disable_cuda_graph = false;
};

// Memory the run saw before and after the weights (Backend::memory_info), for --mem-fraction-static.
struct DeviceMemory {
  bool known = false;
  uint64_t total = 0, free_before_weights = 0, free_after_weights = 0;
  bool weights_estimated = false;  // free_after_weights from an estimate of the weights (at most what they take)
};

// An activation allocation live at a step kind's peak.
struct LiveTensor {
  std::string name, scope, shape;
  Category category = Category::kActivation;
  uint64_t bytes = 0;
  uint64_t worst_bytes = 0;  // its size under the worst routing (= bytes unless it follows the routing)
};

struct StepKindStats {
  int64_t steps = 0, rows = 0, max_rows = 0;
  int64_t graph_steps = 0;               // decode steps replayed from a captured graph
  uint64_t peak_activation_bytes = 0;    // the highest activation bytes live during a step of the kind
  int64_t peak_step = -1, peak_rows = 0;
  std::vector<LiveTensor> live_at_peak;  // activation tensors live there, largest first
  // The same peak with every routed tensor at its worst-routing size (AllocTag::worst_bytes): what
  // a step of this kind reaches if its MoE calls meet the worst routing of the router's capacity.
  uint64_t peak_activation_worst_bytes = 0;
  int64_t worst_step = -1;
  double seconds = 0, max_seconds = 0;   // wall time per step, to its tokens on the host
  // Decode steps with a drawn routing (--routing): the bytes they read at least (StepReads), summed
  // over read_steps steps, and those steps' wall time.
  int64_t read_steps = 0, experts_hit = 0;
  uint64_t read_weight_bytes = 0, read_expert_bytes = 0, read_kv_bytes = 0;
  double read_seconds = 0;
};

// The activation bytes live during each step kind and what is live at each kind's highest point,
// from the backend's recorded allocations (the ones the trace holds). Attach it before the model
// is built, so that it sees every live activation allocation (the linear workspace included).
class StepPeakTracker : public AllocationObserver {
 public:
  void begin(StepKindStats* kind, int64_t step, int64_t rows);
  void end() { kind_ = nullptr; }
  void on_alloc(const Storage& s, const AllocTag& tag, DType dtype, const std::string& shape) override;
  void on_free(const Storage& s) override;

 private:
  void check_peak();
  std::unordered_map<uint64_t, LiveTensor> live_;
  uint64_t live_bytes_ = 0, live_worst_bytes_ = 0;
  StepKindStats* kind_ = nullptr;
  int64_t step_ = 0, rows_ = 0;
};

struct OccupancySample {
  int64_t step = 0, tokens_used = 0, pages_used = 0, running = 0, waiting = 0;
};

struct ServingResult {
  std::string workload;
  int64_t requests = 0, output_tokens = 0, waited_requests = 0;
  int64_t pool_held_requests = 0;  // of the waited, those held back by the pool's pages (a larger pool schedules otherwise)
  int64_t kv_pool_tokens = 0, page_size = 1, context_len = 0, max_running_requests = 0, chunked_prefill_size = 0;
  uint64_t cell_bytes = 0, kv_pool_bytes = 0, req_to_token_bytes = 0;
  uint64_t req_to_token_row_bytes = 0;        // one row of the request table: (context_len + 4) x 4 B
  bool max_running_requests_given = false;    // --max-running-requests, else SGLang's rule (serving.cpp)
  std::string pool_sizing;  // "kv-tokens" | "mem-fraction-static" | "workload"
  double mem_fraction_static = 0;
  DeviceMemory device;
  uint64_t weights_bytes = 0;
  bool weights_shared = false;          // the MoE layers alias one layer's experts (--weights)
  uint64_t weights_per_layer_bytes = 0; // what per-layer expert weights would take
  bool graphs = false;
  std::vector<int64_t> graph_sizes;
  uint64_t graph_pool_bytes = 0, graph_input_bytes = 0;
  std::vector<GraphCapture> graph_captures;  // ascending batch size
  StepKindStats prefill, decode;
  int64_t moe_layers = 0;                     // MoE layers of the model (StepKindStats::experts_hit per layer)
  std::vector<std::vector<int32_t>> outputs;  // generated tokens per request
  std::vector<OccupancySample> occupancy;     // the scheduler's own counts, after every change
  int64_t peak_tokens_used = 0;
  // The whole figure as JSON (trace metadata extra["serving"]; docs/report.md, "serving").
  std::string summary_json() const;
};

// SGLang's pool size from --mem-fraction-static F (the newer variant, against the memory free
// before the weights were loaded): rest = free_after_weights - free_before_weights * (1 - F);
// tokens = rest / cell_bytes, rounded down to a whole page. Fails (bad input) when the result is
// not a page, with SGLang's advice.
Result<int64_t> kv_tokens_from_fraction(double fraction, const DeviceMemory& mem, uint64_t cell_bytes, int64_t page_size);

// The workload's own prompt ids are in the vocabulary.
Status check_prompt_ids(const Workload& workload, const ModelConfig& cfg);
// The pool's tokens: --kv-tokens (whole pages), --mem-fraction-static from `mem` (0 when mem is
// null: not known before the weights load), else what the workload's requests need, page by page.
Result<int64_t> serving_pool_tokens(const ServingOptions& opt, const Workload& workload, const DeviceMemory* mem, uint64_t cell_bytes);
// The scheduler of a pool: its request table holds --max-running-requests, else SGLang's
// clamp(pool_tokens / context_len x 512, 2048, 4096).
SchedulerConfig scheduler_config(const ServingOptions& opt, int64_t pool_tokens, int64_t context_len);
// What run_serving would refuse before its first step that needs no device: prompt ids, page size,
// the pool from --kv-tokens or the workload against every request, the context length, and
// --mem-fraction-static where the backend reports no memory. `moeprof run` checks it before it
// writes anything. `estimated` (optional): the device's free memory, and after the weights by an
// estimate that is at most what they take (estimate_weight_bytes), for `layers` layers: a pool
// from --mem-fraction-static is then at most the estimate's, so one that has no page, or a request
// it cannot hold, is refused here too.
Status check_serving_plan(const ServingOptions& opt, const Workload& workload, const ModelConfig& cfg, bool memory_known,
                          const DeviceMemory* estimated = nullptr, int64_t layers = 0);

// Runs the workload on `model` (built with ModelOptions::paged_kv): allocates the pool, captures
// the graphs, drives the steps to the last token, releases the graphs and the pool. `seed` draws
// the prompts the workload does not give; `accounting` is the run's own (weights bytes); `tracker`
// is attached to the backend.
Result<ServingResult> run_serving(Backend& backend, DeepseekModel& model, const ServingOptions& opt, const Workload& workload,
                                  const DeviceMemory& mem, const MemoryAccounting& accounting, StepPeakTracker& tracker,
                                  uint64_t seed, bool real_collectives, MoeRunnerStats* stats);

// The context length and rope table rows of a serving model: opt.context_len or the config's.
int64_t serving_context_len(const ServingOptions& opt, const ModelConfig& cfg);

}  // namespace moeprof
