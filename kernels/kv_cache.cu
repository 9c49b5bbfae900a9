#include "kernels/kv_cache.cuh"

namespace moeprof::kern {
namespace {

__global__ void kv_cache_write_kernel(const uint16_t* latent, int64_t ld_latent, int64_t L, const uint16_t* k_pe,
                                      int64_t ld_kpe, int64_t R, uint16_t* cache, int64_t ld_cache, int64_t slot0) {
  const int64_t t = blockIdx.x;
  uint16_t* dst = cache + (slot0 + t) * ld_cache;
  for (int64_t c = threadIdx.x; c < L + R; c += blockDim.x)
    dst[c] = c < L ? latent[t * ld_latent + c] : k_pe[t * ld_kpe + (c - L)];
}

// The same copy in 16-byte units where L and R are multiples of 8 and every row is 16-byte aligned.
__global__ void kv_cache_write_vec_kernel(const uint16_t* latent, int64_t ld_latent, int64_t L, const uint16_t* k_pe,
                                          int64_t ld_kpe, int64_t R, uint16_t* cache, int64_t ld_cache, int64_t slot0) {
  const int64_t t = blockIdx.x, L8 = L / 8;
  uint4* dst = reinterpret_cast<uint4*>(cache + (slot0 + t) * ld_cache);
  const uint4* lat = reinterpret_cast<const uint4*>(latent + t * ld_latent);
  const uint4* pe = reinterpret_cast<const uint4*>(k_pe + t * ld_kpe);
  for (int64_t c = threadIdx.x; c < L8 + R / 8; c += blockDim.x) dst[c] = c < L8 ? lat[c] : pe[c - L8];
}

__global__ void build_k_kernel(const uint16_t* kv, int64_t ld_kv, int64_t n_heads, int64_t kv_head_stride, int64_t nope,
                               const uint16_t* k_pe, int64_t ld_kpe, int64_t R, uint16_t* k, int64_t ld_k) {
  const int64_t t = blockIdx.x;
  const int64_t hd = nope + R;
  for (int64_t j = threadIdx.x; j < n_heads * hd; j += blockDim.x) {
    const int64_t h = j / hd, c = j - h * hd;
    k[t * ld_k + j] = c < nope ? kv[t * ld_kv + h * kv_head_stride + c] : k_pe[t * ld_kpe + (c - nope)];
  }
}

// The same copy in 16-byte units (8 bf16), where nope, R and the head stride are multiples of 8
// and every row is 16-byte aligned.
__global__ void build_k_vec_kernel(const uint16_t* kv, int64_t ld_kv, int64_t n_heads, int64_t kv_head_stride,
                                   int64_t nope, const uint16_t* k_pe, int64_t ld_kpe, int64_t R, uint16_t* k,
                                   int64_t ld_k) {
  const int64_t t = blockIdx.x;
  const int64_t hd8 = (nope + R) / 8, nope8 = nope / 8;
  uint4* dst = reinterpret_cast<uint4*>(k + t * ld_k);
  const uint16_t* kv_row = kv + t * ld_kv;
  const uint4* pe = reinterpret_cast<const uint4*>(k_pe + t * ld_kpe);
  for (int64_t j = threadIdx.x; j < n_heads * hd8; j += blockDim.x) {
    const int64_t h = j / hd8, c = j - h * hd8;
    dst[j] = c < nope8 ? reinterpret_cast<const uint4*>(kv_row + h * kv_head_stride)[c] : pe[c - nope8];
  }
}

}  // namespace

cudaError_t launch_kv_cache_write(const uint16_t* latent, int64_t ld_latent, int64_t L, const uint16_t* k_pe,
                                  int64_t ld_kpe, int64_t R, int64_t T, uint16_t* cache, int64_t ld_cache,
                                  int64_t slot0, cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  if (L % 8 == 0 && R % 8 == 0 && aligned16(latent, ld_latent, 2) && aligned16(k_pe, ld_kpe, 2) &&
      aligned16(cache, ld_cache, 2))
    kv_cache_write_vec_kernel<<<static_cast<unsigned>(T), 128, 0, stream>>>(latent, ld_latent, L, k_pe, ld_kpe, R, cache,
                                                                             ld_cache, slot0);
  else
    kv_cache_write_kernel<<<static_cast<unsigned>(T), 256, 0, stream>>>(latent, ld_latent, L, k_pe, ld_kpe, R, cache,
                                                                        ld_cache, slot0);
  return last_launch_error();
}

cudaError_t launch_mla_build_k(const uint16_t* kv, int64_t ld_kv, int64_t n_heads, int64_t kv_head_stride, int64_t nope,
                               const uint16_t* k_pe, int64_t ld_kpe, int64_t R, int64_t T, uint16_t* k, int64_t ld_k,
                               cudaStream_t stream) {
  if (T <= 0 || n_heads <= 0) return cudaSuccess;
  const bool vec = nope % 8 == 0 && R % 8 == 0 && kv_head_stride % 8 == 0 && aligned16(kv, ld_kv, 2) &&
                   aligned16(k_pe, ld_kpe, 2) && aligned16(k, ld_k, 2);
  if (vec)
    build_k_vec_kernel<<<static_cast<unsigned>(T), 256, 0, stream>>>(kv, ld_kv, n_heads, kv_head_stride, nope, k_pe,
                                                                     ld_kpe, R, k, ld_k);
  else
    build_k_kernel<<<static_cast<unsigned>(T), 256, 0, stream>>>(kv, ld_kv, n_heads, kv_head_stride, nope, k_pe, ld_kpe,
                                                                 R, k, ld_k);
  return last_launch_error();
}

}  // namespace moeprof::kern
