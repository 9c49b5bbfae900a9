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
  // Kernel choice, for cross-checks and benchmarks: 0 the default (see kDefaultPath in the .cu);
  // 1 the generic kernels; 2..5 one FA2 variant (2: 16 query rows per warp, 64-key tiles; 3: 32 rows,
  // 64 keys; 4: 32 rows, 48 keys; 5: 32 rows, 32 keys); 10 the warp-specialized wgmma (sm_90a)
  // kernel (copier warpgroup, mbarriers, ping-pong between the two computing warpgroups); the
  // generic kernels where the chosen one does not apply. 6 to 9 (earlier wgmma variants, removed)
  // are refused with cudaErrorInvalidValue.
  int path = 0;
};

// out[t, h*v_dim + d] = sum_{s<=t} softmax_s(scale * q_t . k_s) v_s[d], fp32 softmax and
// accumulation, P rounded to bf16 for the P.V tensor-core product. Kernels, first applicable wins:
//  - wgmma (sm_90a, MLA shape): qk_dim == 192, v_dim == 128, scale > 0, every pointer 16-byte
//    aligned and every leading dimension / head stride / v_offset a multiple of 8 elements,
//    ceil(T/128) <= 65535; 128 queries per CTA, two computing warpgroups x 64 rows, 128-key tiles,
//    a copier warpgroup (cp.async + mbarriers), ping-pong between the computing warpgroups;
//  - FA2-style (same conditions, ceil(T/256) <= 65535): 8 warps x 32 query rows (256 per block) x
//    48-key tiles, ldmatrix + mma.sync, cp.async double buffering, exp2 softmax, causal tile skipping;
//  - generic tensor-core kernel: qk_dim <= 192 and v_dim <= 128 (zero-padded), any strides;
//  - scalar fallback otherwise.
cudaError_t launch_causal_attention(const AttentionArgs& a, cudaStream_t stream);

namespace detail {
// The warp-specialized wgmma kernel (path 10; kernels/mla_attention_wgmma.cu, built for sm_90a):
// same shape conditions as the FA2 kernel.
bool attention_wgmma_applies(const AttentionArgs& a);
cudaError_t launch_attention_wgmma(const AttentionArgs& a, cudaStream_t stream);
}  // namespace detail

}  // namespace moeprof::kern
