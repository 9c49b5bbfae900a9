#include "kernels/fp4_quant.cuh"

namespace moeprof::kern {
namespace {

// One thread per 16-element block. kVec: the block's 16 values as two 16-byte loads and its 8 code
// bytes as one 8-byte store (rows 16-byte aligned, code rows 8-byte aligned); else element by
// element. The same quantization function either way (nvfp4_quantize16_bf16: the codes of two
// elements per packed compare). Idx is the block index type: uint32_t where the T * K / 16 blocks
// fit, so the row / block split is a 32-bit division (the kernel is bound by its ALU pipe; the
// 64-bit division cost it 5%).
template <bool kVec, typename Idx>
__global__ void fp4_quantize_kernel(const uint16_t* x, int64_t ld_x, int64_t T, int64_t K, float gs, uint8_t* out,
                                    int64_t ld_out, uint8_t* scales, int64_t ld_scales) {
  const Idx nb = static_cast<Idx>(K / 16);
  const Idx n = static_cast<Idx>(T) * nb;
  for (Idx j = blockIdx.x * static_cast<Idx>(blockDim.x) + threadIdx.x; j < n; j += static_cast<Idx>(gridDim.x) * blockDim.x) {
    const Idx t = j / nb, b = j - t * nb;
    const uint16_t* src = x + t * ld_x + b * 16;
    uint32_t w[8];  // the block's bf16 pairs, element 2i in the low half of w[i]
    if constexpr (kVec) {
      const uint4 lo = *reinterpret_cast<const uint4*>(src), hi = *reinterpret_cast<const uint4*>(src + 8);
      w[0] = lo.x; w[1] = lo.y; w[2] = lo.z; w[3] = lo.w;
      w[4] = hi.x; w[5] = hi.y; w[6] = hi.z; w[7] = hi.w;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) w[i] = src[2 * i] | (static_cast<uint32_t>(src[2 * i + 1]) << 16);
    }
    uint2 codes;
    scales[t * ld_scales + b] = nvfp4_quantize16_bf16(w, gs, codes);
    uint8_t* dst = out + t * ld_out + b * 8;
    if constexpr (kVec) {
      *reinterpret_cast<uint2*>(dst) = codes;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) dst[i] = static_cast<uint8_t>((i < 4 ? codes.x : codes.y) >> (8 * (i & 3)));
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
  // 32-bit block indices while j + the grid stride cannot wrap.
  const bool narrow = n + blocks * 256 <= int64_t{0xFFFFFFFF};
  const unsigned grid = static_cast<unsigned>(blocks);
  if (vec && narrow)
    fp4_quantize_kernel<true, uint32_t><<<grid, 256, 0, stream>>>(x, ld_x, T, K, global_scale, out, ld_out, scales, ld_scales);
  else if (vec)
    fp4_quantize_kernel<true, int64_t><<<grid, 256, 0, stream>>>(x, ld_x, T, K, global_scale, out, ld_out, scales, ld_scales);
  else if (narrow)
    fp4_quantize_kernel<false, uint32_t><<<grid, 256, 0, stream>>>(x, ld_x, T, K, global_scale, out, ld_out, scales,
                                                                   ld_scales);
  else
    fp4_quantize_kernel<false, int64_t><<<grid, 256, 0, stream>>>(x, ld_x, T, K, global_scale, out, ld_out, scales,
                                                                  ld_scales);
  return last_launch_error();
}

}  // namespace moeprof::kern
