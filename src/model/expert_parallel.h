// Expert parallelism (`moeprof run --ep N`, docs/executor.md "Expert parallelism"): which rank
// holds which routed experts, which token rows each rank receives for a routing, and the size of
// its dispatch buffers, exact or at the router's worst case. Plain data and host arithmetic,
// shared by every backend (the meta backend allocates by it what the CPU reference allocates).
//
// Layout: rank r of N holds experts [r*E/N, (r+1)*E/N). The MoE input of T tokens is cut into N
// contiguous slices, slice s = [s*T/N, (s+1)*T/N) (floor), owned by rank s: the rank that sends
// the slice's rows and receives their expert outputs back. A (token, slot) pair travels to the
// rank of its expert as one row: rank r receives the pairs (t, j) with topk_ids[t, j] among its
// experts, in the order of the flat index t*k + j (by source rank, then token, then slot).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace moeprof {

// How a rank sizes its dispatch buffers (the received rows and everything the expert runner
// allocates from them): exact = by the rows it receives in this call; worst-case = by
// ep_worst_rows, fixed whatever the routing.
enum class EpBuffers { kExact, kWorstCase };
std::string_view ep_buffers_name(EpBuffers b);
Result<EpBuffers> parse_ep_buffers(std::string_view text);

// Token slice [begin, end) owned by rank s of N over T tokens.
struct EpSlice {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
EpSlice ep_token_slice(int64_t tokens, int ranks, int rank);

// The most rows a rank can receive in one call, from the router's capacity: each of the T tokens
// sends one row per distinct expert of its top-k on the rank, at most min(top_k, E/N):
//   W = T * min(top_k, E/N).
int64_t ep_worst_rows(int64_t tokens, int64_t top_k, int64_t experts, int ranks);

// What rank `rank` receives for one routing ids [T*k] (expert ids in [0, experts)).
struct EpReceive {
  std::vector<int64_t> pairs;          // flat indices t*k + j, ascending
  std::vector<int32_t> local_experts;  // per pair: expert id - first expert of the rank
  int64_t rows() const { return static_cast<int64_t>(pairs.size()); }
};
EpReceive ep_receive(const int32_t* ids, int64_t tokens, int64_t top_k, int64_t experts, int ranks, int rank);

// Checks N against the model: 1 <= N <= experts, N divides the routed experts.
Status check_ep_size(int ranks, int64_t experts, const std::string& model);

}  // namespace moeprof
