#include "kernels/embedding.cuh"

namespace moeprof::kern {
namespace {

__global__ void embedding_kernel(const int32_t* ids, const uint16_t* table, int64_t vocab_rows, int64_t ld_table,
                                 int64_t vocab_start, int64_t H, uint16_t* out, int64_t ld_out) {
  const int64_t t = blockIdx.x;
  const int64_t row = static_cast<int64_t>(ids[t]) - vocab_start;
  const bool in = row >= 0 && row < vocab_rows;
  uint16_t* o = out + t * ld_out;
  const uint16_t* src = in ? table + row * ld_table : nullptr;
  for (int64_t c = threadIdx.x; c < H; c += blockDim.x) o[c] = in ? src[c] : uint16_t{0};
}

}  // namespace

cudaError_t launch_embedding(const int32_t* ids, int64_t T, const uint16_t* table, int64_t vocab_rows, int64_t ld_table,
                             int64_t vocab_start, int64_t H, uint16_t* out, int64_t ld_out, cudaStream_t stream) {
  if (T <= 0 || H <= 0) return cudaSuccess;
  embedding_kernel<<<static_cast<unsigned>(T), 256, 0, stream>>>(ids, table, vocab_rows, ld_table, vocab_start, H, out,
                                                                 ld_out);
  return last_launch_error();
}

}  // namespace moeprof::kern
