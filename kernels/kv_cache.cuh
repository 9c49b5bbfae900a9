// MLA KV-cache write and per-head K assembly (bit-exact bf16 copies).
#pragma once
#include "kernels/common.cuh"

namespace moeprof::kern {

// cache[slot0 + t, :] = concat(latent[t, :L], k_pe[t, :R]).
cudaError_t launch_kv_cache_write(const uint16_t* latent, int64_t ld_latent, int64_t L, const uint16_t* k_pe,
                                  int64_t ld_kpe, int64_t R, int64_t T, uint16_t* cache, int64_t ld_cache,
                                  int64_t slot0, cudaStream_t stream);
// k[t, h*(nope+R) + :] = concat(kv[t, h*kv_head_stride : +nope], k_pe[t, :R]) for h < n_heads.
cudaError_t launch_mla_build_k(const uint16_t* kv, int64_t ld_kv, int64_t n_heads, int64_t kv_head_stride, int64_t nope,
                               const uint16_t* k_pe, int64_t ld_kpe, int64_t R, int64_t T, uint16_t* k, int64_t ld_k,
                               cudaStream_t stream);

}  // namespace moeprof::kern
