#include "kernels/fp4_quant.cuh"

namespace moeprof::kern {
namespace {

// One thread per 16-element block. kVec: the block's 16 values as two 16-byte loads and its 8 code
// bytes as one 8-byte store (rows 16-byte aligned, code rows 8-byte aligned); else element by
// element. The same quantization function either way.
template <bool kVec>
__global__ void fp4_quantize_kernel(const uint16_t* x, int64_t ld_x, int64_t T, int64_t K, float gs, uint8_t* out,
                                    int64_t ld_out, uint8_t* scales, int64_t ld_scales) {
  constexpr int W = kVec ? 8 : 1;
  const int64_t nb = K / 16;
  const int64_t n = T * nb;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = j / nb, b = j - t * nb;
    const uint16_t* src = x + t * ld_x + b * 16;
    float v[16];
#pragma unroll
    for (int i = 0; i < 16; i += W) {
      float part[W];
      load_bf16<W>(src + i, part);
#pragma unroll
      for (int e = 0; e < W; ++e) v[i + e] = part[e];
    }
    uint8_t packed[8];
    scales[t * ld_scales + b] = nvfp4_quantize16(v, gs, packed);
    uint8_t* dst = out + t * ld_out + b * 8;
    if constexpr (kVec) {
      *reinterpret_cast<uint2*>(dst) = pack_codes8(packed);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) dst[i] = packed[i];
    }
  }
}

}  // namespace

cudaError_t launch_fp4_quantize(const uint16_t* x, int64_t ld_x, int64_t T, int64_t K, float global_scale, uint8_t* out,
                                int64_t ld_out, uint8_t* scales, int64_t ld_scales, cudaStream_t stream) {
  if (K % 16 != 0) return cudaErrorInvalidValue;
  const int64_t n = T * (K / 16);
  if (n <= 0) return cudaSuccess;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 65536) blocks = 65536;
  const bool vec = aligned16(x, ld_x, 2) && reinterpret_cast<uintptr_t>(out) % 8 == 0 && ld_out % 8 == 0;
  if (vec)
    fp4_quantize_kernel<true><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(x, ld_x, T, K, global_scale, out,
                                                                                ld_out, scales, ld_scales);
  else
    fp4_quantize_kernel<false><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(x, ld_x, T, K, global_scale, out,
                                                                                 ld_out, scales, ld_scales);
  return last_launch_error();
}

}  // namespace moeprof::kern
