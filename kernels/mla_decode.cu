#include "kernels/mla_decode.cuh"

namespace moeprof::kern {
namespace {

constexpr int kThreads = 256;
constexpr int kRows = 16;     // query rows per block (q_absorb)
constexpr int kUpRows = 8;    // rows per block (v_up)
constexpr int kHeads = 16;    // heads per block (paged attention)
constexpr int kTile = 16;     // cache positions per tile (paged attention)

__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

__global__ void kv_cache_store_kernel(const uint16_t* latent, int64_t ld_latent, int64_t L, const uint16_t* k_pe,
                                      int64_t ld_kpe, int64_t R, const int32_t* slots, uint16_t* cache, int64_t ld_cache) {
  const int64_t n = blockIdx.x;
  uint16_t* dst = cache + static_cast<int64_t>(slots[n]) * ld_cache;
  for (int64_t c = threadIdx.x; c < L + R; c += blockDim.x) dst[c] = c < L ? latent[n * ld_latent + c] : k_pe[n * ld_kpe + (c - L)];
}

// Block: kRows query rows of one head. Thread: output columns c, tid + k * blockDim.
__global__ void q_absorb_kernel(const uint16_t* q, int64_t ld_q, const uint16_t* w, int64_t ld_w, int64_t kvl, int64_t N,
                                int64_t nope, int64_t rope, int64_t v_dim, uint16_t* out, int64_t ld_out) {
  extern __shared__ float q_s[];  // [kRows][nope]
  const int64_t h = blockIdx.y, n0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int rows = static_cast<int>(imin(kRows, N - n0));
  const int64_t qk = nope + rope;
  for (int64_t idx = threadIdx.x; idx < kRows * nope; idx += blockDim.x) {
    const int64_t r = idx / nope, i = idx - r * nope;
    q_s[idx] = r < rows ? ld_bf16(q + (n0 + r) * ld_q + h * qk + i) : 0.0f;
  }
  __syncthreads();
  const uint16_t* wh = w + h * (nope + v_dim) * ld_w;
  for (int64_t c = threadIdx.x; c < kvl; c += blockDim.x) {
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
    for (int64_t i = 0; i < nope; ++i) {
      const float wv = ld_bf16(wh + i * ld_w + c);
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] = __fadd_rn(acc[r], __fmul_rn(q_s[r * nope + i], wv));
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (r < rows) st_bf16(out + (n0 + r) * ld_out + h * (kvl + rope) + c, acc[r]);
  }
  for (int64_t idx = threadIdx.x; idx < rows * rope; idx += blockDim.x) {
    const int64_t r = idx / rope, j = idx - r * rope;
    out[(n0 + r) * ld_out + h * (kvl + rope) + kvl + j] = q[(n0 + r) * ld_q + h * qk + nope + j];
  }
}

// Block: one query row, up to kHeads heads. Shared: the heads' queries, a tile of cache rows, the
// tile's scores, the running max / sum / rescale per head, the output accumulators.
__global__ void paged_attention_kernel(const uint16_t* q_abs, int64_t ld_q, const uint16_t* cache, int64_t D,
                                       const int32_t* req_to_token, int64_t C, const int32_t* row_req, const int32_t* row_pos,
                                       int64_t heads, int64_t kvl, float scale, uint16_t* out, int64_t ld_out) {
  extern __shared__ float sm[];
  const int64_t n = blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y) * kHeads;
  const int hg = static_cast<int>(imin(kHeads, heads - h0));
  float* q_s = sm;                      // [kHeads][D]
  float* k_s = q_s + kHeads * D;        // [kTile][D]
  float* s_s = k_s + kTile * D;         // [kTile][kHeads]
  float* m_s = s_s + kTile * kHeads;    // [kHeads]
  float* l_s = m_s + kHeads;            // [kHeads]
  float* c_s = l_s + kHeads;            // [kHeads] rescale of the accumulators
  float* acc = c_s + kHeads;            // [kHeads][kvl]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  const int32_t* slots = req_to_token + static_cast<int64_t>(row_req[n]) * C;
  const int64_t L = static_cast<int64_t>(row_pos[n]) + 1;
  for (int64_t idx = tid; idx < hg * D; idx += blockDim.x) q_s[idx] = ld_bf16(q_abs + n * ld_q + h0 * D + idx);
  for (int64_t idx = tid; idx < hg * kvl; idx += blockDim.x) acc[idx] = 0.0f;
  if (tid < kHeads) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.0f;
  }
  __syncthreads();
  for (int64_t t0 = 0; t0 < L; t0 += kTile) {
    const int nt = static_cast<int>(imin(kTile, L - t0));
    for (int64_t idx = tid; idx < nt * D; idx += blockDim.x) {
      const int64_t j = idx / D, d = idx - j * D;
      k_s[idx] = ld_bf16(cache + static_cast<int64_t>(slots[t0 + j]) * D + d);
    }
    __syncthreads();
    for (int pair = warp; pair < nt * hg; pair += nwarps) {
      const int j = pair / hg, hh = pair - j * hg;
      float dot = 0.0f;
      for (int64_t d = lane; d < D; d += 32) dot += q_s[hh * D + d] * k_s[j * D + d];
      dot = warp_sum(dot);
      if (lane == 0) s_s[j * kHeads + hh] = scale * dot;
    }
    __syncthreads();
    if (tid < hg) {
      float m = m_s[tid];
      for (int j = 0; j < nt; ++j) m = fmaxf(m, s_s[j * kHeads + tid]);
      const float corr = expf(m_s[tid] - m);  // exp(-inf) = 0 on the first tile
      float l = l_s[tid] * corr;
      for (int j = 0; j < nt; ++j) {
        const float p = expf(s_s[j * kHeads + tid] - m);
        s_s[j * kHeads + tid] = p;
        l += p;
      }
      m_s[tid] = m;
      l_s[tid] = l;
      c_s[tid] = corr;
    }
    __syncthreads();
    for (int64_t idx = tid; idx < hg * kvl; idx += blockDim.x) {
      const int64_t hh = idx / kvl, c = idx - hh * kvl;
      float a = acc[idx] * c_s[hh];
      for (int j = 0; j < nt; ++j) a += s_s[j * kHeads + hh] * k_s[j * D + c];
      acc[idx] = a;
    }
    __syncthreads();
  }
  for (int64_t idx = tid; idx < hg * kvl; idx += blockDim.x) {
    const int64_t hh = idx / kvl, c = idx - hh * kvl;
    st_bf16(out + n * ld_out + (h0 + hh) * kvl + c, acc[idx] / l_s[hh]);
  }
}

// Block: kUpRows rows of one head; each warp computes output columns j, lanes striding over kvl.
__global__ void v_up_kernel(const uint16_t* lat, int64_t ld_lat, const uint16_t* w, int64_t ld_w, int64_t kvl, int64_t N,
                            int64_t nope, int64_t v_dim, uint16_t* out, int64_t ld_out) {
  extern __shared__ float lat_s[];  // [kUpRows][kvl]
  const int64_t h = blockIdx.y, n0 = static_cast<int64_t>(blockIdx.x) * kUpRows;
  const int rows = static_cast<int>(imin(kUpRows, N - n0));
  for (int64_t idx = threadIdx.x; idx < kUpRows * kvl; idx += blockDim.x) {
    const int64_t r = idx / kvl, c = idx - r * kvl;
    lat_s[idx] = r < rows ? ld_bf16(lat + (n0 + r) * ld_lat + h * kvl + c) : 0.0f;
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (int64_t j = warp; j < v_dim; j += nwarps) {
    const uint16_t* wr = w + (h * (nope + v_dim) + nope + j) * ld_w;
    float acc[kUpRows];
#pragma unroll
    for (int r = 0; r < kUpRows; ++r) acc[r] = 0.0f;
    for (int64_t c = lane; c < kvl; c += 32) {
      const float wv = ld_bf16(wr + c);
#pragma unroll
      for (int r = 0; r < kUpRows; ++r) acc[r] += lat_s[r * kvl + c] * wv;
    }
#pragma unroll
    for (int r = 0; r < kUpRows; ++r) acc[r] = warp_sum(acc[r]);
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < kUpRows; ++r)
        if (r < rows) st_bf16(out + (n0 + r) * ld_out + h * v_dim + j, acc[r]);
    }
  }
}

// Dynamic shared memory above the default 48 KiB needs the kernel's opt-in.
template <typename Kernel>
cudaError_t allow_smem(Kernel k, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

}  // namespace

cudaError_t launch_kv_cache_store(const uint16_t* latent, int64_t ld_latent, int64_t L, const uint16_t* k_pe, int64_t ld_kpe,
                                  int64_t R, int64_t N, const int32_t* slots, uint16_t* cache, int64_t ld_cache,
                                  cudaStream_t stream) {
  if (N <= 0) return cudaSuccess;
  kv_cache_store_kernel<<<static_cast<unsigned>(N), 128, 0, stream>>>(latent, ld_latent, L, k_pe, ld_kpe, R, slots, cache, ld_cache);
  return last_launch_error();
}

cudaError_t launch_mla_q_absorb(const uint16_t* q, int64_t ld_q, const uint16_t* kv_b, int64_t ld_w, int64_t kvl, int64_t N,
                                int64_t heads, int64_t nope, int64_t rope, int64_t v_dim, uint16_t* q_abs, int64_t ld_out,
                                cudaStream_t stream) {
  if (N <= 0 || heads <= 0) return cudaSuccess;
  const size_t smem = static_cast<size_t>(kRows * nope) * sizeof(float);
  KERN_RETURN_IF_ERROR(allow_smem(q_absorb_kernel, smem));
  const dim3 grid(ceil_div_u(N, kRows), static_cast<unsigned>(heads));
  q_absorb_kernel<<<grid, kThreads, smem, stream>>>(q, ld_q, kv_b, ld_w, kvl, N, nope, rope, v_dim, q_abs, ld_out);
  return last_launch_error();
}

cudaError_t launch_mla_paged_attention(const uint16_t* q_abs, int64_t ld_q, const uint16_t* cache, int64_t D,
                                       const int32_t* req_to_token, int64_t C, const int32_t* row_req, const int32_t* row_pos,
                                       int64_t N, int64_t heads, int64_t kvl, float scale, uint16_t* out, int64_t ld_out,
                                       cudaStream_t stream) {
  if (N <= 0 || heads <= 0) return cudaSuccess;
  const size_t smem = static_cast<size_t>(kHeads * D + kTile * D + kTile * kHeads + 3 * kHeads + kHeads * kvl) * sizeof(float);
  KERN_RETURN_IF_ERROR(allow_smem(paged_attention_kernel, smem));
  const dim3 grid(static_cast<unsigned>(N), ceil_div_u(heads, kHeads));
  paged_attention_kernel<<<grid, kThreads, smem, stream>>>(q_abs, ld_q, cache, D, req_to_token, C, row_req, row_pos, heads, kvl,
                                                            scale, out, ld_out);
  return last_launch_error();
}

cudaError_t launch_mla_v_up(const uint16_t* lat, int64_t ld_lat, const uint16_t* kv_b, int64_t ld_w, int64_t kvl, int64_t N,
                            int64_t heads, int64_t nope, int64_t v_dim, uint16_t* out, int64_t ld_out, cudaStream_t stream) {
  if (N <= 0 || heads <= 0) return cudaSuccess;
  const size_t smem = static_cast<size_t>(kUpRows * kvl) * sizeof(float);
  KERN_RETURN_IF_ERROR(allow_smem(v_up_kernel, smem));
  const dim3 grid(ceil_div_u(N, kUpRows), static_cast<unsigned>(heads));
  v_up_kernel<<<grid, kThreads, smem, stream>>>(lat, ld_lat, kv_b, ld_w, kvl, N, nope, v_dim, out, ld_out);
  return last_launch_error();
}

}  // namespace moeprof::kern
