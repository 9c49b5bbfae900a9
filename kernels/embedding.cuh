// Vocab-parallel embedding lookup (bf16 rows copied bit for bit; out-of-shard ids give zeros).
#pragma once
#include "kernels/common.cuh"

namespace moeprof::kern {

// out[t, :] = table[ids[t] - vocab_start, :] if 0 <= ids[t] - vocab_start < vocab_rows, else 0.
cudaError_t launch_embedding(const int32_t* ids, int64_t T, const uint16_t* table, int64_t vocab_rows, int64_t ld_table,
                             int64_t vocab_start, int64_t H, uint16_t* out, int64_t ld_out, cudaStream_t stream);

}  // namespace moeprof::kern
