// The paged MLA KV pool of a serving run, allocated once at start as SGLang allocates it:
//  * MLATokenToKVPool: per layer one buffer [pool_tokens + page_size, kv_lora_rank + qk_rope_head_dim]
//    bf16 (the compressed latent and the rope key of every token; the first page is the padding
//    slots), category kv_cache, scope `kv_pool`, name `kv_buffer.<layer>`;
//  * ReqToTokenPool: int32 [max_requests + 1, context_len + 4] (row r, column p: the slot of
//    request row r's position p; row 0 is the padding row), category kv_cache, scope `kv_pool`,
//    name `req_to_token`.
// Which pages and rows each request holds is the scheduler's bookkeeping (executor/scheduler.h);
// the pool holds the memory and writes the table.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "executor/backend.h"
#include "executor/deepseek_model.h"
#include "model/config.h"

namespace moeprof {

inline constexpr int64_t kReqToTokenExtra = 4;  // SGLang: context_len + 4 columns

struct KvPoolShape {
  int64_t tokens = 0;        // usable tokens, a multiple of page_size
  int64_t page_size = 1;
  int64_t max_requests = 1;
  int64_t context_len = 1;
};

// Bytes one token takes in the pool on one rank: (kv_lora_rank + qk_rope_head_dim) x layers x 2
// (bf16). The latent is not sharded by TP: every rank holds the whole latent.
uint64_t kv_cell_bytes(const ModelConfig& cfg, int64_t layers);

class KvPool {
 public:
  static Result<std::unique_ptr<KvPool>> create(Backend& backend, const ModelConfig& cfg, int64_t layers,
                                                const KvPoolShape& shape);
  PagedKv paged() { return PagedKv{&layers_, &req_to_token_}; }
  const KvPoolShape& shape() const { return shape_; }
  uint64_t kv_bytes() const { return kv_bytes_; }        // the layers' buffers
  uint64_t table_bytes() const { return req_to_token_.bytes(); }
  // req_to_token[row, pos0 + i] = slots[i].
  Status write_slots(int64_t row, int64_t pos0, const std::vector<int32_t>& slots);

 private:
  KvPool(Backend& b, const KvPoolShape& s) : be_(b), shape_(s) {}
  Backend& be_;
  KvPoolShape shape_;
  std::vector<Tensor> layers_;
  Tensor req_to_token_;
  uint64_t kv_bytes_ = 0;
};

}  // namespace moeprof
