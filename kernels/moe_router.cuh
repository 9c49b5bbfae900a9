// MoE router: scores (softmax | sigmoid) and top-k (greedy | group-limited greedy | noaux_tc),
// matching the CPU reference bit for bit (fixed summation order, correctly rounded exp).
#pragma once
#include "kernels/common.cuh"

namespace moeprof::kern {

struct RouterConfig {
  int top_k = 2;
  int n_group = 1;
  int topk_group = 1;
  int method = 0;   // 0 greedy, 1 group-limited greedy, 2 noaux_tc
  int scoring = 0;  // 0 softmax, 1 sigmoid
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;
};

// logits [T, E] f32 (row stride ld_logits); bias [E] f32 (noaux_tc only, else may be null).
// ids [T, k] i32 in selection order (descending choice score, ties to the lower expert);
// weights [T, k] f32 = score (without bias), normalized by their sum (in j order) when
// norm_topk_prob, then times routed_scaling_factor.
cudaError_t launch_router_topk(const float* logits, int64_t ld_logits, const float* bias, int64_t T, int64_t E,
                               const RouterConfig& cfg, int32_t* ids, int64_t ld_ids, float* weights, int64_t ld_w,
                               cudaStream_t stream);

}  // namespace moeprof::kern
