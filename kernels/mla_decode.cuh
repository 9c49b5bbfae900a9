// The paged MLA ops of serving (absorbed MLA over a paged latent cache; executor/backend.h,
// "paged MLA"): the KV pool's scatter, W_UK folded into the query, attention over the latent +
// rope cache, W_UV after. Straightforward kernels: fp32 accumulation, one rounding to bf16 per
// output element.
#pragma once
#include "kernels/common.cuh"

namespace moeprof::kern {

// cache[slots[n], :] = concat(latent[n, :L], k_pe[n, :R]) for n < N.
cudaError_t launch_kv_cache_store(const uint16_t* latent, int64_t ld_latent, int64_t L, const uint16_t* k_pe, int64_t ld_kpe,
                                  int64_t R, int64_t N, const int32_t* slots, uint16_t* cache, int64_t ld_cache,
                                  cudaStream_t stream);
// q_abs[n, h*(kvl+rope) + c] = bf16(sum_{i<nope} q[n, h*(nope+rope) + i] * kv_b[h*(nope+v_dim) + i, c]) (increasing i,
// no FMA: the CPU reference's order), then the rope columns copied.
cudaError_t launch_mla_q_absorb(const uint16_t* q, int64_t ld_q, const uint16_t* kv_b, int64_t ld_w, int64_t kvl, int64_t N,
                                int64_t heads, int64_t nope, int64_t rope, int64_t v_dim, uint16_t* q_abs, int64_t ld_out,
                                cudaStream_t stream);
// out[n, h*kvl + c] = bf16(sum_j softmax_j(scale * q_abs[n, h, :D] . cache[slot_j, :D]) * cache[slot_j, c]) over the
// positions j <= row_pos[n] of request row_req[n], slot_j = req_to_token[row_req[n] * C + j] (online softmax in
// tiles of 32 positions on tensor cores, up to 16 heads per block sharing each cache row read).
// workspace: null, or mla_decode_workspace_floats(N, heads, D, kvl) floats (kernels/common/mla_split.h)
// to split each row's positions over mla_decode_splits(...) blocks and merge their partial sums in a
// second kernel (flash-decoding: small batches fill the device); null or a split count of 1 runs
// one block per row and head group.
cudaError_t launch_mla_paged_attention(const uint16_t* q_abs, int64_t ld_q, const uint16_t* cache, int64_t D,
                                       const int32_t* req_to_token, int64_t C, const int32_t* row_req, const int32_t* row_pos,
                                       int64_t N, int64_t heads, int64_t kvl, float scale, uint16_t* out, int64_t ld_out,
                                       float* workspace, cudaStream_t stream);
// out[n, h*v_dim + j] = bf16(sum_{c<kvl} lat[n, h*kvl + c] * kv_b[h*(nope+v_dim) + nope + j, c]).
cudaError_t launch_mla_v_up(const uint16_t* lat, int64_t ld_lat, const uint16_t* kv_b, int64_t ld_w, int64_t kvl, int64_t N,
                            int64_t heads, int64_t nope, int64_t v_dim, uint16_t* out, int64_t ld_out, cudaStream_t stream);

}  // namespace moeprof::kern
