#include "executor/kv_pool.h"

#include <algorithm>
#include <string>

namespace moeprof {

uint64_t kv_cell_bytes(const ModelConfig& cfg, int64_t layers) {
  return static_cast<uint64_t>(cfg.kv_lora_rank + cfg.qk_rope_head_dim) * static_cast<uint64_t>(layers) * 2;
}

Result<std::unique_ptr<KvPool>> KvPool::create(Backend& backend, const ModelConfig& cfg, int64_t layers,
                                               const KvPoolShape& shape) {
  std::unique_ptr<KvPool> p(new KvPool(backend, shape));
  const int64_t width = cfg.kv_lora_rank + cfg.qk_rope_head_dim;
  for (int64_t l = 0; l < layers; ++l) {
    MOEPROF_ASSIGN_OR_RETURN(Tensor t, backend.empty(DType::kBF16, shape.tokens + shape.page_size, width,
                                                     AllocTag{"kv_buffer." + std::to_string(l), "kv_pool", Category::kKvCache}));
    p->kv_bytes_ += t.bytes();
    p->layers_.push_back(std::move(t));
  }
  MOEPROF_ASSIGN_OR_RETURN(p->req_to_token_,
                           backend.empty(DType::kI32, shape.max_requests + 1, shape.context_len + kReqToTokenExtra,
                                         AllocTag{"req_to_token", "kv_pool", Category::kKvCache}));
  // SGLang zero-fills the table: every position of every row, padding included, points at slot 0.
  const int64_t cols = p->req_to_token_.cols(), rows = p->req_to_token_.rows();
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 20) / cols);  // about 4 MiB of zeros at a time
  const std::vector<int32_t> zeros(static_cast<size_t>(std::min(chunk, rows) * cols), 0);
  for (int64_t r = 0; r < rows; r += chunk) {
    Tensor part = p->req_to_token_.rows_view(r, std::min(chunk, rows - r));
    MOEPROF_RETURN_IF_ERROR(backend.copy_from_host(part, zeros.data()));
  }
  return p;
}

Status KvPool::write_slots(int64_t row, int64_t pos0, const std::vector<int32_t>& slots) {
  if (slots.empty()) return Status::ok();
  Tensor dst = req_to_token_.rows_view(row, 1).cols_view(pos0, static_cast<int64_t>(slots.size()));
  return be_.copy_from_host(dst, slots.data());
}

}  // namespace moeprof
