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

// Single block: padded and unpadded exclusive scans over experts (E is small: hundreds).
__global__ void scan_kernel(const int32_t* counts, int64_t E, int64_t tile, int32_t* offsets, int32_t* ustart) {
  if (threadIdx.x != 0) return;
  int32_t off = 0, u = 0;
  for (int64_t e = 0; e < E; ++e) {
    offsets[e] = off;
    ustart[e] = u;
    const int32_t c = counts[e];
    off += static_cast<int32_t>((c + tile - 1) / tile * tile);
    u += c;
  }
  offsets[E] = off;
  ustart[E] = u;
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
  scan_kernel<<<1, 32, 0, stream>>>(counts, E, tile, offsets, ustart);
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
