#include "kernels/moe_router.cuh"

#include <cmath>

namespace moeprof::kern {
namespace {

constexpr int kWarps = 4;

struct Best {
  float v;
  int i;
};

// Better = larger value; on equal values, the lower index.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

__device__ __forceinline__ Best warp_argmax(Best b) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, b.v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, b.i, o);
    if (better(ov, oi, b.v, b.i)) b = Best{ov, oi};
  }
  return b;
}

// One warp per token. Shared memory per warp: scores[E], choice[E].
__global__ void __launch_bounds__(kWarps * 32) router_kernel(const float* logits, int64_t ld_logits, const float* bias,
                                                             int64_t T, int E, RouterConfig cfg, int32_t* ids,
                                                             int64_t ld_ids, float* weights, int64_t ld_w) {
  extern __shared__ float smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = blockIdx.x * static_cast<int64_t>(kWarps) + warp;
  if (t >= T) return;  // whole warp leaves together
  float* scores = smem + static_cast<int64_t>(warp) * 2 * E;
  float* choice = scores + E;
  const float* lg = logits + t * ld_logits;

  if (cfg.scoring == 0) {
    float m = -INFINITY;
    for (int e = lane; e < E; e += 32) m = fmaxf(m, lg[e]);
    m = warp_max(m);
    for (int e = lane; e < E; e += 32) scores[e] = exp_accurate(__fsub_rn(lg[e], m));
    __syncwarp();
    float sum = 0.0f;
    if (lane == 0)
      for (int e = 0; e < E; ++e) sum = __fadd_rn(sum, scores[e]);  // sequential, like the reference
    sum = __shfl_sync(0xffffffffu, sum, 0);
    for (int e = lane; e < E; e += 32) scores[e] = __fdiv_rn(scores[e], sum);
  } else {
    for (int e = lane; e < E; e += 32) scores[e] = __fdiv_rn(1.0f, __fadd_rn(1.0f, exp_accurate(-lg[e])));
  }
  __syncwarp();
  const bool use_bias = cfg.method == 2 && bias != nullptr;
  for (int e = lane; e < E; e += 32) choice[e] = use_bias ? __fadd_rn(scores[e], bias[e]) : scores[e];
  __syncwarp();

  // Group limiting: keep the topk_group best groups, mask the rest to -inf.
  if (cfg.method != 0 && cfg.n_group > 1 && cfg.topk_group < cfg.n_group) {
    const int G = cfg.n_group, per = E / G;
    // Group score per lane (groups g = lane, lane + 32, ...), kept in registers via recompute.
    auto group_score = [&](int g) {
      const float* c = choice + g * per;
      if (cfg.method == 1) {
        float m = -INFINITY;
        for (int i = 0; i < per; ++i) m = fmaxf(m, c[i]);
        return m;
      }
      float a = -INFINITY, b = -INFINITY;  // top-2 sum (noaux_tc)
      for (int i = 0; i < per; ++i) {
        const float v = c[i];
        if (v > a) { b = a; a = v; } else if (v > b) { b = v; }
      }
      return __fadd_rn(a, b);
    };
    unsigned long long chosen = 0;  // n_group <= 64
    for (int r = 0; r < cfg.topk_group; ++r) {
      Best b{-INFINITY, 0x7fffffff};
      for (int g = lane; g < G; g += 32) {
        if (chosen & (1ull << g)) continue;
        const float v = group_score(g);
        if (better(v, g, b.v, b.i)) b = Best{v, g};
      }
      b = warp_argmax(b);
      if (b.i >= 0 && b.i < G) chosen |= 1ull << b.i;
    }
    __syncwarp();
    for (int e = lane; e < E; e += 32) {
      const int g = e / per;
      if (g >= G || !(chosen & (1ull << g))) choice[e] = -INFINITY;
    }
    __syncwarp();
  }

  // Greedy top-k on the choice scores.
  float w_sel = 0.0f;  // lane j holds weight j
  int id_sel = 0;
  for (int j = 0; j < cfg.top_k; ++j) {
    Best b{-INFINITY, 0x7fffffff};
    for (int e = lane; e < E; e += 32)
      if (better(choice[e], e, b.v, b.i)) b = Best{choice[e], e};
    b = warp_argmax(b);
    const int sel = b.i < E ? b.i : 0;
    if (lane == j) {
      id_sel = sel;
      w_sel = scores[sel];
    }
    __syncwarp();
    if (lane == 0) choice[sel] = __int_as_float(0xff800001u);  // taken: a NaN never compares better
    __syncwarp();
  }
  // Normalize in j order.
  float sum = 0.0f;
  if (cfg.norm_topk_prob) {
    for (int j = 0; j < cfg.top_k; ++j) sum = __fadd_rn(sum, __shfl_sync(0xffffffffu, w_sel, j));
  }
  if (lane < cfg.top_k) {
    float w = w_sel;
    if (cfg.norm_topk_prob) w = __fdiv_rn(w, sum);
    w = __fmul_rn(w, cfg.routed_scaling_factor);
    ids[t * ld_ids + lane] = id_sel;
    weights[t * ld_w + lane] = w;
  }
}

}  // namespace

cudaError_t launch_router_topk(const float* logits, int64_t ld_logits, const float* bias, int64_t T, int64_t E,
                               const RouterConfig& cfg, int32_t* ids, int64_t ld_ids, float* weights, int64_t ld_w,
                               cudaStream_t stream) {
  if (cfg.top_k <= 0 || cfg.top_k > 32 || cfg.top_k > E || cfg.n_group < 1 || cfg.n_group > 64 ||
      E % cfg.n_group != 0)
    return cudaErrorInvalidValue;
  if (T <= 0) return cudaSuccess;
  const size_t smem = static_cast<size_t>(kWarps) * 2 * static_cast<size_t>(E) * sizeof(float);
  if (smem > 48 * 1024)
    KERN_RETURN_IF_ERROR(cudaFuncSetAttribute(router_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem)));
  router_kernel<<<ceil_div_u(T, kWarps), kWarps * 32, smem, stream>>>(logits, ld_logits, bias, T, static_cast<int>(E),
                                                                      cfg, ids, ld_ids, weights, ld_w);
  return last_launch_error();
}

}  // namespace moeprof::kern
