// The memory budget of a serving engine on a device of a given size, from a run's trace: every
// byte of the device in components that sum exactly to its size, the KV capacity in tokens and
// requests, and the engine settings that give that capacity. CPU only; knows only the trace model
// (through RunAnalysis, analysed with keep_lifetimes). docs/budget.md.
//
// Components (one device: the rank whose fixed needs are largest):
//   weights          the weights category's high-water mark
//   kv_pool          (kv_tokens + page_size) x bytes per token: SGLang's MLA pool holds one page
//                    of padding rows beside the kv_tokens it hands out
//   request_table    a serving run's request table (SGLang's req_to_token pool, i32
//                    [max_running_requests + 1, context_len + 4]); its rows follow kv_tokens under
//                    SGLang's rule unless the run gave --max-running-requests. 0 for one prefill
//   activation_peak  activation + unknown bytes live at the activation peak (the worst step)
//   routing_worst    only for a run whose buffers follow the routing (meta.extra moe_rows =
//                    routed: the MoE runner's padded rows; ep_buffers = exact with ep_size > 1: the
//                    expert-parallel buffers sized by the rows received): what the activation peak grows by when every
//                    MoE call meets the worst routing of the router's capacity (the executor's
//                    routing.peak_activation_worst_bytes - the peak measured). docs/budget.md
//   graph_pool       the graph category's high-water mark, or the CUDA-graph memory the driver
//                    reported (kGraphMem), whichever is larger
//   workspaces       workspace + communication bytes live at the activation peak (cuBLAS, cuDNN,
//                    NCCL buffers)
//   allocator_rest   pools reserved beyond the tensors in them, and the rounding of every live
//                    allocation up to BudgetOptions::granularity
//   untraced         the device memory in use beyond the traced allocations, at most, where the
//                    trace measured it (the CUDA backend's cuda.untraced_peak_bytes: the CUDA
//                    context, kernel modules, libraries' state, the driver's rounding); else 0
//   margin           BudgetOptions::margin_bytes (none by default: the capacity is exact)
//   free             what is left: less than one page of KV (negative when nothing fits)
// The trace's own KV cache (a prefill's [T, kv] per layer, or a serving run's pool) is replaced by
// the pool the device can hold.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "planner/analysis.h"

namespace moeprof::planner {

// Device sizes as the CUDA driver reports them (docs/budget.md cites each).
struct GpuSize {
  std::string_view name;  // "H200"
  uint64_t bytes = 0;
  std::string_view source;
};
const std::vector<GpuSize>& known_gpus();
// BYTES (digits; ',' and '_' allowed) or a known GPU name (case-insensitive).
Result<uint64_t> parse_gpu_memory(std::string_view text);

struct BudgetOptions {
  uint64_t gpu_memory_bytes = 0;
  uint64_t kv_bytes_per_token = 0;  // 0: the trace's KV cache bytes / its tokens (must divide exactly)
  std::string kv_cost_source = "given";  // where a given kv_bytes_per_token comes from
  uint64_t page_size = 0;           // tokens per KV page (SGLang's --page-size); 0: the serving run's, else 1
  uint64_t request_tokens = 0;      // tokens of one request; 0: the trace's tokens
  uint64_t margin_bytes = 0;
  uint64_t granularity = 1;         // an allocator's rounding of each live allocation (1 = none)
  size_t live_limit = 12;           // entries of the live set listed at the worst step's peak
};

struct BudgetComponent {
  std::string name;
  int64_t bytes = 0;
  std::string detail;
};

struct BudgetResult {
  uint64_t gpu_memory_bytes = 0;
  uint16_t device = 0;
  std::vector<BudgetComponent> components;  // sum == gpu_memory_bytes
  bool fits = false;                        // at least one page of KV fits
  uint64_t shortfall_bytes = 0;             // when not: what is missing for one page
  uint64_t weights_bytes = 0, activation_bytes = 0, workspace_bytes = 0, graph_bytes = 0, rest_bytes = 0;
  uint64_t untraced_bytes = 0;               // the untraced component
  bool untraced_measured = false;            // the trace carries the CUDA backend's measurement
  uint64_t available_for_kv_bytes = 0;      // device - everything but the pool and free (0 when negative)
  uint64_t kv_bytes_per_token = 0;
  uint64_t trace_kv_bytes_per_token = 0;    // the trace's own: its pool (or KV cache) over its tokens; 0 when not whole
  std::string kv_cost_source;
  uint64_t page_size = 1;
  uint64_t kv_tokens = 0, kv_pool_bytes = 0;
  // kv_tokens is the most int32 slots address (2^31 - page_size, rounded down to pages): the
  // memory left beyond that pool is `free`.
  bool kv_slots_capped = false;
  uint64_t request_tokens = 0, requests = 0;
  uint64_t trace_kv_cache_bytes = 0;        // the KV cache the trace itself holds
  // The request table of a serving run (0 for a trace of one prefill): its bytes at kv_tokens.
  // With table_context_len > 0 its rows follow SGLang's rule, clamp(int(kv_tokens / context_len
  // x 512), 2048, 4096) + 1, of table_row_bytes each; otherwise it is table_fixed_bytes.
  uint64_t request_table_bytes = 0, table_row_bytes = 0, table_fixed_bytes = 0;
  uint64_t table_fixed_rows = 0;  // the rows of table_fixed_bytes (the run's --max-running-requests + 1)
  int64_t table_context_len = 0;
  // The worst step: the step scope of the allocation that makes the activation peak
  // ("step.N/prefill"), or "prefill" for a trace of one prefill; what is live there.
  std::string worst_step;
  uint64_t activation_peak_bytes = 0;       // activation_bytes + workspace_bytes
  // Routing skew (the routing_worst component): the run's routing ("zipf:1.2"; "" when the trace
  // does not say), the activation peak under the worst routing, and what is reserved for it
  // beyond activation_peak_bytes (0 unless the padded rows followed the routing).
  std::string routing, moe_rows;
  uint64_t weights_aliased_bytes = 0;  // expert weights the run aliased (--weights shared), counted in weights
  bool routing_follows = false;  // moe_rows = routed, or exact EP buffers: the reserve applies
  std::string follows_text;      // which option made them follow ("--moe-rows routed", "--ep-buffers exact")
  uint64_t worst_routing_peak_bytes = 0, routing_reserve_bytes = 0;
  std::vector<LiveEntry> live_at_peak;
  size_t live_at_peak_count = 0;
  // A serving run whose pool held requests back (meta.extra pool_held_requests, kv_pool_tokens):
  // at a larger pool (kv_tokens > trace_pool_tokens) the scheduler admits them sooner, more prompt
  // tokens share a prefill step (up to the chunk size), and the worst step can exceed the one
  // measured. schedule_unconfirmed says so; a run at kv_tokens confirms the budget.
  uint64_t pool_held_requests = 0, trace_pool_tokens = 0;
  bool schedule_unconfirmed = false;
  // Steps' own activation high-water marks (scopes step.N), largest first, when the trace has them.
  std::vector<std::pair<std::string, uint64_t>> steps;
};

Result<BudgetResult> memory_budget(const RunAnalysis& run, const BudgetOptions& opt);

// The usable KV tokens of a device where everything but the activation peak stays as in `b` (the
// routing reserve included), and the activation peak is `activation_peak_bytes` (activation +
// workspaces): what a mode or a fix buys. 0 when no page fits.
uint64_t kv_tokens_with_peak(const BudgetResult& b, uint64_t activation_peak_bytes);
// The KV tokens (pages of page_size) that `avail` bytes hold with their padding page and the
// request table; at most 2^31 - page_size (int32 slots). 0 when no page fits.
uint64_t kv_tokens_for_bytes(const BudgetResult& b, uint64_t avail);
// The request table's bytes when the pool holds kv_tokens (BudgetResult's table fields).
uint64_t request_table_bytes_at(const BudgetResult& b, uint64_t kv_tokens);
// Requests of request_tokens running at once at kv_tokens: the pool's whole requests, at most the
// request table's rows (SGLang's max_running_requests at that pool, or the run's own; 0: no table).
uint64_t requests_for(const BudgetResult& b, uint64_t kv_tokens);
uint64_t request_limit_at(const BudgetResult& b, uint64_t kv_tokens);

// The shortest decimal in [lo_num / den, hi_num / den) (hi excluded), at most 12 digits after the
// point; "" when none is.
std::string shortest_decimal(uint64_t lo_num, uint64_t hi_num, uint64_t den);

// SGLang's --mem-fraction-static for the pool of `b` (the variant that measures the free memory
// before the weights load: rest = f x pre_load_free - weights, pre_load_free = the device size),
// and vLLM's gpu_memory_utilization (KV cache = u x total - the non-KV memory).
struct EngineSettings {
  std::string mem_fraction_static;       // shortest decimal that gives exactly kv_tokens
  std::string mem_fraction_rounded;      // the same, rounded down to two decimals
  uint64_t rounded_kv_tokens = 0;        // what the rounded value gives
  std::string gpu_memory_utilization;    // shortest decimal that holds kv_tokens in vLLM
};
EngineSettings engine_settings(const BudgetResult& b);

}  // namespace moeprof::planner
