#include "kernels/moe_permute.cuh"

#include <cub/device/device_radix_sort.cuh>

namespace moeprof::kern {
namespace {

size_t align_up(size_t x) { return (x + 255) & ~size_t{255}; }

struct Layout {
  size_t keys_in, keys_out, vals_in, vals_out, counts, ustart, temp, total, temp_bytes;
};

int key_bits(int64_t E) {
  int b = 1;
  while ((int64_t{1} << b) <= E) ++b;  // keys 0..E (E = dropped)
  return b;
}

cudaError_t layout_for(int64_t N, int64_t E, Layout* L) {
  size_t temp = 0;
  KERN_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(nullptr, temp, static_cast<const int32_t*>(nullptr),
                                                       static_cast<int32_t*>(nullptr),
                                                       static_cast<const int32_t*>(nullptr),
                                                       static_cast<int32_t*>(nullptr), static_cast<int>(N), 0,
                                                       key_bits(E)));
  const size_t n4 = align_up(static_cast<size_t>(N) * 4), e4 = align_up(static_cast<size_t>(E + 1) * 4);
  L->keys_in = 0;
  L->keys_out = L->keys_in + n4;
  L->vals_in = L->keys_out + n4;
  L->vals_out = L->vals_in + n4;
  L->counts = L->vals_out + n4;
  L->ustart = L->counts + e4;
  L->temp = L->ustart + e4;
  L->temp_bytes = temp;
  L->total = L->temp + align_up(temp);
  return cudaSuccess;
}

__global__ void prepare_kernel(const int32_t* ids, int64_t N, int64_t E, int32_t* keys, int32_t* vals, int32_t* counts,
                               int32_t* p2t, int64_t P) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < N || i < P; i += stride) {
    if (i < N) {
      const int32_t e = ids[i];
      const bool ok = e >= 0 && e < E;
      keys[i] = ok ? e : static_cast<int32_t>(E);
      vals[i] = static_cast<int32_t>(i);
      if (ok) atomicAdd(&counts[e], 1);  // integer counts: order-independent
    }
    if (i < P) p2t[i] = -1;
  }
}

// One block: padded and unpadded exclusive scans over the experts, 256 experts per round (warp
// shuffles, then the warps' totals), the running totals carried from round to round. (It used to be
// one thread walking the experts: each step waited for a global load, about 2 us per 16 experts.)
constexpr int kScanThreads = 256;
__global__ void __launch_bounds__(kScanThreads) scan_kernel(const int32_t* counts, int64_t E, int64_t tile,
                                                            int32_t* offsets, int32_t* ustart) {
  __shared__ int32_t warp_p[kScanThreads / 32], warp_u[kScanThreads / 32];
  __shared__ int32_t carry_p, carry_u;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) carry_p = carry_u = 0;
  __syncthreads();
  for (int64_t base = 0; base < E; base += kScanThreads) {
    const int64_t e = base + threadIdx.x;
    const int32_t u = e < E ? counts[e] : 0;
    const int32_t p = static_cast<int32_t>((static_cast<int64_t>(u) + tile - 1) / tile * tile);
    int32_t ip = p, iu = u;  // inclusive scans within the warp
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t a = __shfl_up_sync(0xffffffffu, ip, o), b = __shfl_up_sync(0xffffffffu, iu, o);
      if (lane >= o) {
        ip += a;
        iu += b;
      }
    }
    if (lane == 31) {
      warp_p[warp] = ip;
      warp_u[warp] = iu;
    }
    __syncthreads();
    if (warp == 0) {  // inclusive scan of the warps' totals
      int32_t wp = lane < kScanThreads / 32 ? warp_p[lane] : 0, wu = lane < kScanThreads / 32 ? warp_u[lane] : 0;
#pragma unroll
      for (int o = 1; o < kScanThreads / 32; o <<= 1) {
        const int32_t a = __shfl_up_sync(0xffffffffu, wp, o), b = __shfl_up_sync(0xffffffffu, wu, o);
        if (lane >= o) {
          wp += a;
          wu += b;
        }
      }
      if (lane < kScanThreads / 32) {
        warp_p[lane] = wp;
        warp_u[lane] = wu;
      }
    }
    __syncthreads();
    const int32_t ex_p = carry_p + (warp > 0 ? warp_p[warp - 1] : 0) + ip - p;
    const int32_t ex_u = carry_u + (warp > 0 ? warp_u[warp - 1] : 0) + iu - u;
    if (e < E) {
      offsets[e] = ex_p;
      ustart[e] = ex_u;
    }
    __syncthreads();  // every thread has read carry_* and warp_*
    if (threadIdx.x == kScanThreads - 1) {
      carry_p = ex_p + p;
      carry_u = ex_u + u;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    offsets[E] = carry_p;
    ustart[E] = carry_u;
  }
}

__global__ void scatter_kernel(const int32_t* keys_sorted, const int32_t* vals_sorted, int64_t N, int64_t E, int64_t k,
                               const int32_t* offsets, const int32_t* ustart, int32_t* p2t, int64_t P, int32_t* e2p) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < N; p += stride) {
    const int32_t e = keys_sorted[p];
    const int32_t i = vals_sorted[p];
    if (e >= E) {
      e2p[i] = -1;
      continue;
    }
    const int64_t r = offsets[e] + (p - ustart[e]);
    if (r < P) {
      e2p[i] = static_cast<int32_t>(r);
      p2t[r] = static_cast<int32_t>(i / k);
    } else {
      e2p[i] = -1;  // caller's permuted_to_token too short (cannot happen with P >= N + E*(tile-1))
    }
  }
}

unsigned grid_for(int64_t n) {
  int64_t b = (n + 255) / 256;
  return static_cast<unsigned>(b > 8192 ? 8192 : (b < 1 ? 1 : b));
}

}  // namespace

cudaError_t moe_permute_workspace_bytes(int64_t N, int64_t E, size_t* bytes) {
  Layout L{};
  KERN_RETURN_IF_ERROR(layout_for(N, E, &L));
  *bytes = L.total;
  return cudaSuccess;
}

cudaError_t launch_moe_permute(const int32_t* topk_ids, int64_t N, int64_t k, int64_t E, int64_t tile,
                               int32_t* offsets, int32_t* permuted_to_token, int64_t P,
                               int32_t* expanded_to_permuted, void* workspace, size_t workspace_bytes,
                               cudaStream_t stream) {
  if (E <= 0 || tile <= 0 || k <= 0 || N < 0 || N > INT32_MAX / 2) return cudaErrorInvalidValue;
  Layout L{};
  KERN_RETURN_IF_ERROR(layout_for(N, E, &L));
  if (workspace_bytes < L.total || (L.total > 0 && workspace == nullptr)) return cudaErrorInvalidValue;
  char* ws = static_cast<char*>(workspace);
  auto* keys_in = reinterpret_cast<int32_t*>(ws + L.keys_in);
  auto* keys_out = reinterpret_cast<int32_t*>(ws + L.keys_out);
  auto* vals_in = reinterpret_cast<int32_t*>(ws + L.vals_in);
  auto* vals_out = reinterpret_cast<int32_t*>(ws + L.vals_out);
  auto* counts = reinterpret_cast<int32_t*>(ws + L.counts);
  auto* ustart = reinterpret_cast<int32_t*>(ws + L.ustart);
  KERN_RETURN_IF_ERROR(cudaMemsetAsync(counts, 0, static_cast<size_t>(E + 1) * 4, stream));
  prepare_kernel<<<grid_for(N > P ? N : P), 256, 0, stream>>>(topk_ids, N, E, keys_in, vals_in, counts,
                                                               permuted_to_token, P);
  KERN_RETURN_IF_ERROR(last_launch_error());
  scan_kernel<<<1, kScanThreads, 0, stream>>>(counts, E, tile, offsets, ustart);
  KERN_RETURN_IF_ERROR(last_launch_error());
  if (N > 0) {
    size_t temp = L.temp_bytes;
    KERN_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(ws + L.temp, temp, keys_in, keys_out, vals_in, vals_out,
                                                         static_cast<int>(N), 0, key_bits(E), stream));
    scatter_kernel<<<grid_for(N), 256, 0, stream>>>(keys_out, vals_out, N, E, k, offsets, ustart, permuted_to_token, P,
                                                    expanded_to_permuted);
    KERN_RETURN_IF_ERROR(last_launch_error());
  }
  return cudaSuccess;
}

}  // namespace moeprof::kern
