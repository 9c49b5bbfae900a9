// Routing skew of the MoE layers (`moeprof run --routing`, docs/budget.md "Routing skew"): which
// experts each token is sent to, drawn on the host from a distribution and a seed, and the padded
// rows an expert runner allocates for a routing. Plain data and host arithmetic: the executor
// applies the draw to its router's top-k (executor/deepseek_forward.cpp) the same way on every
// backend, so the meta backend, which computes nothing, allocates what the CPU and CUDA backends
// allocate for the same routing.
//
// A routing is a property of the token, not of its batch: token (request, position) of MoE layer l
// goes to the same experts whatever step or batch it runs in, as a router's choice depends on the
// token's hidden state only. Every draw is exact integer arithmetic on a 64-bit counter hash, so
// it is the same on every machine.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace moeprof {

enum class RoutingKind {
  kRouter,   // the router's own top-k (the deterministic weights): the default
  kUniform,  // k distinct experts, each equally likely
  kZipf,     // k distinct experts drawn without replacement, expert of rank r weighted 1 / r^S
  kHot,      // N hot experts take every token they can: all N in every token's top-k when N <= k,
             // k of them (uniformly) when N > k; the rest uniform among the other experts
  kWorst,    // per MoE call, the counts that make the most padded rows within the router's
             // capacity (each expert receives at most every token once): moe_worst_counts
};

struct RoutingSpec {
  RoutingKind kind = RoutingKind::kRouter;
  double zipf_s = 0;  // kZipf: the exponent S > 0
  int64_t hot = 0;    // kHot: N >= 1
  std::string text() const;  // "router", "uniform", "zipf:1.2", "hot:4", "worst"
  bool forced() const { return kind != RoutingKind::kRouter; }
};
// "router" | "uniform" | "zipf:S" (0 < S <= 64) | "hot:N" (N >= 1) | "worst". Errors name the spec.
Result<RoutingSpec> parse_routing(std::string_view text);

// How an expert runner sizes its padded rows (permuted_to_token, gemm1's and gemm2's outputs):
//  kBound:  T*k + E*(tile-1), before the routing is known (trtllm's getMaxPermutedPaddedCount;
//           the FP4 runner SGLang uses for the seed model): no allocation depends on the routing;
//  kRouted: sum over experts of count_e rounded up to the tile, once the counts are on the host
//           (a contiguous grouped-GEMM layout sized by the routed counts, as DeepEP's normal mode
//           hands DeepGEMM num_recv_tokens_per_expert): the allocations follow the routing. A CUDA
//           graph cannot allocate by its data: a captured step takes moe_worst_rows.
enum class MoeRows { kBound, kRouted };
std::string_view moe_rows_name(MoeRows r);
Result<MoeRows> parse_moe_rows(std::string_view text);

// T*k + E*(tile-1).
int64_t moe_bound_rows(int64_t tokens, int64_t top_k, int64_t experts, int64_t tile);
// sum_e ceil(count_e / tile) * tile.
int64_t moe_routed_rows(const std::vector<int64_t>& counts, int64_t tile);
// The largest moe_routed_rows over every routing of `tokens` tokens to top_k distinct experts of
// `experts` (each count in [0, tokens], the counts summing to tokens * top_k): the router's
// capacity. Never above moe_bound_rows.
int64_t moe_worst_rows(int64_t tokens, int64_t top_k, int64_t experts, int64_t tile);
// Counts that reach moe_worst_rows (experts 0, 1, ... take the tiles in order).
std::vector<int64_t> moe_worst_counts(int64_t tokens, int64_t top_k, int64_t experts, int64_t tile);

// The key of a token for the draws: request index and position (a prefill's request is 0).
inline uint64_t routing_key(uint64_t request, uint64_t position) { return (request << 32) ^ position; }
// The key of a padded row of a CUDA-graph batch (its routing is drawn like any row's).
constexpr uint64_t kPaddingRoutingKey = ~uint64_t{0};

// Draws the routing of one MoE layer for a batch of rows.
class RoutingDraw {
 public:
  // spec.forced() must hold; 1 <= top_k <= experts; hot <= experts.
  static Result<RoutingDraw> create(const RoutingSpec& spec, int64_t experts, int64_t top_k, uint64_t seed);
  // ids[r * top_k + j]: the experts of row r (distinct within a row), for rows with keys[r]
  // (kWorst ignores the keys: it depends only on the row count). `layer` is the MoE layer's index.
  void draw(int64_t layer, const std::vector<uint64_t>& keys, int32_t* ids) const;
  const RoutingSpec& spec() const { return spec_; }

 private:
  RoutingDraw() = default;
  std::vector<int64_t> layer_order(int64_t layer) const;  // experts by rank (zipf) / hot first (hot)
  RoutingSpec spec_;
  int64_t E_ = 0, k_ = 0;
  uint64_t seed_ = 0;
  std::vector<uint64_t> zipf_weights_;  // by rank, integers >= 1 (E^S at most 2^30)
  // Beyond that range the integer weights would lose the tail: the draw is then a race of
  // exponential clocks, rank r's clock Exp(1) / w_r, the k first in order (the same law).
  std::vector<double> zipf_log_weights_;  // by rank: -S ln(r + 1)
};

// Per-expert counts of ids (values in [0, experts)).
std::vector<int64_t> expert_counts(const int32_t* ids, int64_t n, int64_t experts);

}  // namespace moeprof
