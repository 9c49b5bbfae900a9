// Causal prefill attention for MLA's non-absorbed path (flash-attention style: tiles of queries
// and keys, online softmax, no T x T score matrix).
#pragma once
#include "kernels/common.cuh"

namespace moeprof::kern {

struct AttentionArgs {
  const uint16_t* q; int64_t ld_q;   // head h at column h * qk_head_stride, qk_dim wide
  const uint16_t* k; int64_t ld_k;   // same head layout as q
  const uint16_t* v; int64_t ld_v;   // head h at column v_offset + h * v_head_stride, v_dim wide
  uint16_t* out; int64_t ld_out;     // head h at column h * v_dim
  int64_t T, n_heads, qk_dim, v_dim, qk_head_stride, v_offset, v_head_stride;
  float scale;
};

// out[t, h*v_dim + d] = sum_{s<=t} softmax_s(scale * q_t . k_s) v_s[d], fp32 softmax and
// accumulation, P rounded to bf16 for the P.V tensor-core product. Tensor-core path for
// qk_dim <= 192 and v_dim <= 128 (zero-padded); a scalar fallback otherwise.
cudaError_t launch_causal_attention(const AttentionArgs& a, cudaStream_t stream);

}  // namespace moeprof::kern
