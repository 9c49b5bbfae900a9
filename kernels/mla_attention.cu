#include "kernels/mla_attention.cuh"

#include <cmath>

namespace moeprof::kern {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

// ---- tensor-core path ----------------------------------------------------------------------
// Block: 64 queries of one head, 4 warps x 16 query rows; key tiles of 64. D / DV: padded dims.
constexpr int kBM = 64, kBN = 64, kWarps = 4, kThreads = kWarps * 32;

template <int D, int DV>
struct Smem {
  static constexpr int kQPitch = D + 8, kVPitch = DV + 8;  // conflict-free 32-bit fragment loads
  static constexpr size_t kBytes = (static_cast<size_t>(kBM) * kQPitch + kBN * kQPitch + kBN * kVPitch) * 2;
};

// Copies rows [r0, r0+64) x cols [0, dim) of a head into smem (pitch `pitch`), zero-filling
// columns >= dim up to `dpad` and rows >= T.
__device__ __forceinline__ void load_tile(uint16_t* dst, int pitch, int dpad, const uint16_t* src, int64_t ld,
                                          int64_t col0, int64_t r0, int64_t T, int64_t dim, bool vec) {
  const int chunks = dpad / 8;
  for (int idx = threadIdx.x; idx < 64 * chunks; idx += blockDim.x) {
    const int r = idx / chunks, c = (idx - r * chunks) * 8;
    uint16_t* d = dst + r * pitch + c;
    const int64_t row = r0 + r;
    if (row < T && c + 8 <= dim && vec) {
      *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(src + row * ld + col0 + c);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) d[j] = (row < T && c + j < dim) ? src[row * ld + col0 + c + j] : uint16_t{0};
    }
  }
}

template <int D, int DV>
__global__ void __launch_bounds__(kThreads) attention_tc_kernel(AttentionArgs a, bool vec) {
  using S = Smem<D, DV>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* Qs = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* Ks = Qs + kBM * S::kQPitch;
  uint16_t* Vs = Ks + kBN * S::kQPitch;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q4 = lane & 3;
  const int qb = gridDim.x - 1 - blockIdx.x;  // longest rows first
  const int64_t h = blockIdx.y;
  const int64_t q0 = static_cast<int64_t>(qb) * kBM;
  const int64_t qk_col = h * a.qk_head_stride, v_col = a.v_offset + h * a.v_head_stride;

  load_tile(Qs, S::kQPitch, D, a.q, a.ld_q, qk_col, q0, a.T, a.qk_dim, vec);
  __syncthreads();
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint16_t* base = Qs + (warp * 16 + g) * S::kQPitch + kk * 16 + 2 * q4;
    qf[kk][0] = *reinterpret_cast<const uint32_t*>(base);
    qf[kk][1] = *reinterpret_cast<const uint32_t*>(base + 8 * S::kQPitch);
    qf[kk][2] = *reinterpret_cast<const uint32_t*>(base + 8);
    qf[kk][3] = *reinterpret_cast<const uint32_t*>(base + 8 * S::kQPitch + 8);
  }

  float o[DV / 8][4];
#pragma unroll
  for (int j = 0; j < DV / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float sl2 = a.scale * kLog2e;
  const int64_t row_a = q0 + warp * 16 + g, row_b = row_a + 8;

  for (int kb = 0; kb <= qb; ++kb) {
    const int64_t k0 = static_cast<int64_t>(kb) * kBN;
    __syncthreads();
    load_tile(Ks, S::kQPitch, D, a.k, a.ld_k, qk_col, k0, a.T, a.qk_dim, vec);
    load_tile(Vs, S::kVPitch, DV, a.v, a.ld_v, v_col, k0, a.T, a.v_dim, vec);
    __syncthreads();

    float s[kBN / 8][4];
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const uint16_t* base = Ks + (j * 8 + g) * S::kQPitch + kk * 16 + 2 * q4;
        mma_bf16_16816(s[j], qf[kk], *reinterpret_cast<const uint32_t*>(base),
                       *reinterpret_cast<const uint32_t*>(base + 8));
      }
    }

    const bool need_mask = (kb == qb) || (k0 + kBN > a.T);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float v = s[j][c] * sl2;
        if (need_mask) {
          const int64_t key = k0 + j * 8 + 2 * q4 + (c & 1);
          const int64_t row = (c < 2) ? row_a : row_b;
          if (key > row || key >= a.T) v = -INFINITY;
        }
        s[j][c] = v;
        mx[c >> 1] = fmaxf(mx[c >> 1], v);
      }
    }
    float alpha[2], mu[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float mn = fmaxf(m[r], mx[r]);
      mu[r] = mn == -INFINITY ? 0.0f : mn;
      alpha[r] = exp2f(m[r] - mu[r]);
      m[r] = mn;
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int j = 0; j < DV / 8; ++j) {
      o[j][0] *= alpha[0]; o[j][1] *= alpha[0];
      o[j][2] *= alpha[1]; o[j][3] *= alpha[1];
    }
    // P (bf16) as A fragments of the P.V product; l sums the rounded values actually used.
    uint32_t pf[kBN / 16][4];
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      float p[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        p[c] = round_bf16(exp2f(s[j][c] - mu[c >> 1]));
        l[c >> 1] += p[c];
      }
      pf[j >> 1][(j & 1) * 2 + 0] = pack_bf16x2(p[0], p[1]);
      pf[j >> 1][(j & 1) * 2 + 1] = pack_bf16x2(p[2], p[3]);
    }
#pragma unroll
    for (int t = 0; t < kBN / 16; ++t) {
      const int kr = t * 16 + 2 * q4;
#pragma unroll
      for (int j = 0; j < DV / 8; ++j) {
        const int col = j * 8 + g;
        const uint32_t b0 = static_cast<uint32_t>(Vs[kr * S::kVPitch + col]) |
                            (static_cast<uint32_t>(Vs[(kr + 1) * S::kVPitch + col]) << 16);
        const uint32_t b1 = static_cast<uint32_t>(Vs[(kr + 8) * S::kVPitch + col]) |
                            (static_cast<uint32_t>(Vs[(kr + 9) * S::kVPitch + col]) << 16);
        mma_bf16_16816(o[j], pf[t], b0, b1);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  const float inv_a = l[0] > 0.0f ? 1.0f / l[0] : 0.0f, inv_b = l[1] > 0.0f ? 1.0f / l[1] : 0.0f;
#pragma unroll
  for (int j = 0; j < DV / 8; ++j) {
    const int col = j * 8 + 2 * q4;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int64_t row = c < 2 ? row_a : row_b;
      const int d = col + (c & 1);
      if (row < a.T && d < a.v_dim) a.out[row * a.ld_out + h * a.v_dim + d] = f32_to_bf16(o[j][c] * (c < 2 ? inv_a : inv_b));
    }
  }
}

// ---- scalar fallback (any head dims): one warp per (query, head), online softmax over keys ----
__global__ void attention_fallback_kernel(AttentionArgs a) {
  extern __shared__ float fb_smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * nw + warp;
  if (item >= a.T * a.n_heads) return;
  const int64_t t = item / a.n_heads, h = item - t * a.n_heads;
  float* acc = fb_smem + static_cast<int64_t>(warp) * a.v_dim;
  for (int64_t d = lane; d < a.v_dim; d += 32) acc[d] = 0.0f;
  const uint16_t* qr = a.q + t * a.ld_q + h * a.qk_head_stride;
  float m = -INFINITY, l = 0.0f;
  for (int64_t s = 0; s <= t; ++s) {
    const uint16_t* kr = a.k + s * a.ld_k + h * a.qk_head_stride;
    float dot = 0.0f;
    for (int64_t d = lane; d < a.qk_dim; d += 32) dot += bf16_to_f32(qr[d]) * bf16_to_f32(kr[d]);
    dot = warp_sum(dot) * a.scale;
    const float mn = fmaxf(m, dot);
    const float alpha = expf(m - mn), p = expf(dot - mn);
    l = l * alpha + p;
    m = mn;
    const uint16_t* vr = a.v + s * a.ld_v + a.v_offset + h * a.v_head_stride;
    for (int64_t d = lane; d < a.v_dim; d += 32) acc[d] = acc[d] * alpha + p * bf16_to_f32(vr[d]);
  }
  for (int64_t d = lane; d < a.v_dim; d += 32) a.out[t * a.ld_out + h * a.v_dim + d] = f32_to_bf16(acc[d] / l);
}

bool al16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

cudaError_t launch_causal_attention(const AttentionArgs& a, cudaStream_t stream) {
  if (a.T <= 0 || a.n_heads <= 0) return cudaSuccess;
  if (a.qk_dim <= 0 || a.v_dim <= 0) return cudaErrorInvalidValue;
  if (a.qk_dim <= 192 && a.v_dim <= 128) {
    constexpr int D = 192, DV = 128;
    const bool vec = al16(a.q) && al16(a.k) && al16(a.v) && a.ld_q % 8 == 0 && a.ld_k % 8 == 0 && a.ld_v % 8 == 0 &&
                     a.qk_head_stride % 8 == 0 && a.v_offset % 8 == 0 && a.v_head_stride % 8 == 0;
    const size_t smem = Smem<D, DV>::kBytes;
    KERN_RETURN_IF_ERROR(cudaFuncSetAttribute(attention_tc_kernel<D, DV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem)));
    const int64_t qblocks = (a.T + kBM - 1) / kBM;
    if (qblocks > 0x7fffffff || a.n_heads > 65535) return cudaErrorInvalidConfiguration;
    attention_tc_kernel<D, DV><<<dim3(static_cast<unsigned>(qblocks), static_cast<unsigned>(a.n_heads)), kThreads, smem,
                                 stream>>>(a, vec);
    return last_launch_error();
  }
  const int warps = 4;
  const size_t smem = static_cast<size_t>(warps) * a.v_dim * sizeof(float);
  if (smem > 48 * 1024)
    KERN_RETURN_IF_ERROR(cudaFuncSetAttribute(attention_fallback_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem)));
  attention_fallback_kernel<<<ceil_div_u(a.T * a.n_heads, warps), warps * 32, smem, stream>>>(a);
  return last_launch_error();
}

}  // namespace moeprof::kern
