// CUDA graphs of the serving decode step (executor/serving.h), as SGLang's CudaGraphRunner has them:
// one graph per batch size of --cuda-graph-bs, captured at start largest first, all sharing one
// memory pool (executor/graph_pool.h); a decode batch replays the smallest captured size that
// holds it, its rows padded.
//
// The graphs' inputs are static buffers of the largest size (input_ids, positions,
// req_pool_indices, out_cache_loc: i32, category graph, scope graph/inputs): a replay copies the
// batch into them, padding with request row 0, position 0, slot 0 (the pool's padding page) and
// the first token of the rank's vocabulary. A graph's outputs (its logits) stay live in the pool.
// With a drawn routing (--routing) the graphs also read every MoE layer's expert ids from a static
// input (routed_ids, category graph), and a captured MoE runner sized by the routed counts
// (--moe-rows routed) takes the worst case of the router's capacity: a graph cannot size by data.
//
// On the CUDA backend a capture records the decode forward on the backend's stream
// (Backend::begin_capture / end_capture) and a replay launches the graph: nothing is allocated.
// The CPU reference and the meta backend record nothing: their "capture" runs the decode forward
// once with its tensors carved from the pool (so the pool grows exactly as on the GPU), and a
// replay runs the forward again at the captured size without recording its tensors (a replay
// allocates nothing), so the padded batch computes what the graph would.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "executor/backend.h"
#include "executor/deepseek_model.h"
#include "executor/graph_pool.h"

namespace moeprof {

struct GraphCapture {
  int64_t bs = 0;
  uint64_t pool_bytes_after = 0;  // the pool's segments once this size is captured
  uint64_t output_bytes = 0;      // its outputs, live in the pool
  uint64_t live_peak_bytes = 0;   // the most bytes live in the pool during its capture
  std::vector<GraphPool::LiveBlock> live_at_peak;  // largest first
  std::vector<GraphPool::LiveBlock> blocks;        // every tensor it carved, largest per (scope, name)
  // Of live_peak_bytes, the blocks of this capture itself (scope graph.bsN/...): what its capture
  // needs alone; the rest are the outputs of the graphs captured before it.
  uint64_t own_peak_bytes = 0;
  uint64_t output_block_bytes = 0;  // its outputs as the pool holds them (rounded to the granule)
};

// What one pool shared by the graphs of `sizes` (captured ones, any order) needs, from their
// captures: captured largest first, the capture of size s has live its own blocks and the outputs
// of the larger graphs of the set, so the need is max over s of own_peak(s) + the larger graphs'
// output blocks, in live bytes (the pool's segments round it up). Separate pools would need the
// sum of the own peaks. Bad input when a size was not captured.
struct SharedPoolNeed {
  uint64_t need_bytes = 0;       // live bytes one shared pool needs
  int64_t at_bs = 0;             // the capture where that is reached
  uint64_t at_own_bytes = 0, at_outputs_bytes = 0;  // its own peak, and the larger graphs' outputs
  uint64_t separate_bytes = 0;   // sum of the own peaks: one pool per graph
};
Result<SharedPoolNeed> shared_pool_need(const std::vector<GraphCapture>& captures, std::vector<int64_t> sizes);

class DecodeGraphs {
 public:
  // Captures every size of `sizes` (distinct, >= 1), largest first. `pad_token` is the id padded
  // rows embed.
  static Result<std::unique_ptr<DecodeGraphs>> capture(Backend& backend, DeepseekModel& model, const PagedKv& kv,
                                                       std::vector<int64_t> sizes, int32_t pad_token, MoeRunnerStats* stats);
  ~DecodeGraphs();

  // The smallest captured size >= batch; 0 when none holds it (the step then runs eagerly).
  int64_t size_for(int64_t batch) const;
  // Replays the decode of rows.size() <= size rows (ids, positions, request rows, slots, and the
  // rows' routing keys for a drawn routing: StepInputs::route_keys) on the graph of `size`; the
  // logits of the real rows, [rows, vocab] f32 on the host.
  Result<std::vector<float>> replay(int64_t size, const std::vector<int32_t>& ids, const std::vector<int32_t>& positions,
                                    const std::vector<int32_t>& rows, const std::vector<int32_t>& slots,
                                    const std::vector<uint64_t>& route_keys = {});

  uint64_t pool_bytes() const { return pool_.reserved_bytes(); }
  uint64_t input_bytes() const;
  const std::vector<GraphCapture>& captures() const { return captures_; }

 private:
  DecodeGraphs(Backend& b, DeepseekModel& m, const PagedKv& kv) : be_(b), model_(m), kv_(kv), pool_(b) {}
  Status fill_inputs(int64_t size, const std::vector<int32_t>& ids, const std::vector<int32_t>& positions,
                     const std::vector<int32_t>& rows, const std::vector<int32_t>& slots, const std::vector<uint64_t>& route_keys);
  StepInputs inputs(int64_t size, const std::string& scope) const;

  Backend& be_;
  DeepseekModel& model_;
  PagedKv kv_;
  int32_t pad_token_ = 0;
  Tensor ids_, positions_, rows_, slots_;  // [1, max size] i32 each
  // With a drawn routing: every MoE layer's expert ids, [moe layers x max size, top_k] i32
  // (StepInputs::routed_ids), filled by each replay from the rows' keys.
  Tensor routed_ids_;
  int64_t max_bs_ = 0;
  GraphPool pool_;
  struct Graph {
    int64_t bs = 0;
    std::shared_ptr<void> handle;  // the backend's graph (null on the CPU and meta backends)
    Tensor logits;                 // its output, in the pool
  };
  std::vector<Graph> graphs_;      // ascending size
  std::vector<GraphCapture> captures_;
};

// SGLang's default capture sizes for a device of `device_bytes` (0: unknown): [1, 2, 4, 8] and
// 16..160 step 8; with more than 96 GiB also 168..256 step 8; with more than 180 GiB also
// 272..512 step 16; then graph_capture_sizes().
std::vector<int64_t> default_graph_sizes(uint64_t device_bytes, int64_t max_bs, int64_t max_running_requests);
// The sizes captured from a list (the default or --cuda-graph-bs), as SGLang's
// get_batch_sizes_to_capture: when the list goes past max_running_requests, that size is added (so
// the largest batch that can run replays a graph); then only the sizes <= max_bs (when > 0) and
// <= max_running_requests, ascending, each once.
std::vector<int64_t> graph_capture_sizes(std::vector<int64_t> sizes, int64_t max_bs, int64_t max_running_requests);

}  // namespace moeprof
