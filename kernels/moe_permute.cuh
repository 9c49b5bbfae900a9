// Expert-contiguous, tile-padded permutation of the (token, slot) pairs; deterministic and stable
// in the flat index i = t*k + j (a stable radix sort on the expert id, then per-expert ranks).
#pragma once
#include "kernels/common.cuh"

namespace moeprof::kern {

// Bytes of device workspace launch_moe_permute needs for N = T*k entries and E experts.
// Calls into CUB's size query (needs a current CUDA device; launches nothing).
cudaError_t moe_permute_workspace_bytes(int64_t N, int64_t E, size_t* bytes);

// topk_ids [N] i32 (ids outside [0, E) are dropped: expanded_to_permuted = -1) ->
//   offsets [E+1]: offsets[0] = 0, offsets[e+1] = offsets[e] + round_up(count_e, tile);
//   permuted_to_token [P]: token t = i / k of the row's entry, -1 for padding and rows >= offsets[E];
//   expanded_to_permuted [N]: padded row of entry i.
cudaError_t launch_moe_permute(const int32_t* topk_ids, int64_t N, int64_t k, int64_t E, int64_t tile,
                               int32_t* offsets, int32_t* permuted_to_token, int64_t P,
                               int32_t* expanded_to_permuted, void* workspace, size_t workspace_bytes,
                               cudaStream_t stream);

}  // namespace moeprof::kern
