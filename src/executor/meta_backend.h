// MetaBackend: shapes and allocations only, no memory and no compute (like PyTorch's meta device).
// Every op is checked by the op contract and then does nothing; allocations get distinct,
// 256-byte aligned addresses from a reserved range that is never mapped; copies to the host
// produce zeros. So a run makes exactly the allocations, frees and uses the CPU reference backend
// makes (no workspaces, as on the CPU), in seconds whatever the model: `moeprof run --backend
// meta` predicts the memory of any config on any machine, and lets tests check full-size cases
// such as the seed (Kimi-K2.5, 16K tokens, TP=4) without a GPU. Outputs are not computed.
// With a device size (`moeprof run --gpu-memory`) it behaves as a device of that size:
// an allocation that would take the bytes live (as requested, the trace's bytes) past it fails
// with the out-of-memory error, naming the tensor and its scope.
#pragma once

#include <cstdint>
#include <string>

#include "executor/backend.h"

namespace moeprof {

class MetaBackend final : public Backend {
 public:
  // device_bytes > 0: a device of that size (`moeprof run --gpu-memory`): memory_info reports it,
  // less the bytes allocated and not yet freed, and an allocation past it fails out of memory.
  // 0: no device size (memory_info is false, allocations never fail). enforce = false: memory_info
  // reports the size (what a run sizes by it: the --mem-fraction-static pool, the default graph
  // sizes, --weights auto) but allocations past it do not fail (moeprof budget's serving runs).
  explicit MetaBackend(uint64_t device_bytes = 0, bool enforce = true) : device_bytes_(device_bytes), enforce_(enforce) {}
  std::string name() const override { return "meta"; }
  std::string device_name() const override { return "meta (no memory, no compute)"; }
  bool computes() const override { return false; }
  MemKind default_mem_kind(Category /*c*/) const override { return MemKind::kHost; }
  bool memory_info(size_t* free_bytes, size_t* total_bytes) const override {
    if (device_bytes_ == 0) return false;
    *total_bytes = static_cast<size_t>(device_bytes_);
    *free_bytes = static_cast<size_t>(live_bytes_ < device_bytes_ ? device_bytes_ - live_bytes_ : 0);
    return true;
  }
  Status synchronize() override { return Status::ok(); }

 protected:
  Result<void*> do_allocate(size_t bytes, MemKind kind, const AllocTag& tag) override;
  void do_free(void* /*ptr*/, size_t bytes, MemKind /*kind*/) override { live_bytes_ -= bytes; }

  Status do_copy_from_host(Tensor&, const void*) override { return Status::ok(); }
  Status do_copy_to_host(const Tensor& src, void* dst) override;
  Status do_init_uniform(Tensor&, uint64_t, float) override { return Status::ok(); }
  Status do_init_e4m3(Tensor&, uint64_t, float, float) override { return Status::ok(); }
  Status do_init_bytes(Tensor&, uint64_t) override { return Status::ok(); }
  Status do_init_ints(Tensor&, uint64_t, int32_t, int32_t) override { return Status::ok(); }
  Status do_iota(Tensor&, int32_t) override { return Status::ok(); }
  Status do_embedding(const Tensor&, const Tensor&, int64_t, Tensor&) override { return Status::ok(); }
  Status do_rmsnorm(const Tensor&, const Tensor&, float, Tensor&) override { return Status::ok(); }
  Status do_fused_add_rmsnorm(Tensor&, Tensor&, const Tensor&, float) override { return Status::ok(); }
  Status do_add_rmsnorm(const Tensor&, Tensor&, const Tensor&, float, Tensor&) override { return Status::ok(); }
  Status do_linear(const Tensor&, const Tensor&, Tensor&, const Tensor&) override { return Status::ok(); }
  Status do_rope(Tensor&, int64_t, int64_t, int64_t, int64_t, const Tensor&, const Tensor&) override { return Status::ok(); }
  Status do_mla_build_k(const Tensor&, int64_t, int64_t, int64_t, const Tensor&, Tensor&) override { return Status::ok(); }
  Status do_kv_cache_write(const Tensor&, const Tensor&, Tensor&, int64_t) override { return Status::ok(); }
  Status do_causal_attention(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, int64_t, int64_t, int64_t, float,
                             Tensor&) override {
    return Status::ok();
  }
  Status do_silu_and_mul(const Tensor&, Tensor&) override { return Status::ok(); }
  Status do_add_inplace(Tensor&, const Tensor&) override { return Status::ok(); }
  Status do_all_reduce(Tensor&) override { return Status::ok(); }
  Status do_all_to_all_bytes(const void*, const std::vector<size_t>&, void*, const std::vector<size_t>&) override { return Status::ok(); }
  Status do_all_gather_bytes(void*, const std::vector<size_t>&) override { return Status::ok(); }
  Status do_router_topk(const Tensor&, const Tensor&, const RouterParams&, Tensor&, Tensor&) override { return Status::ok(); }
  Status do_fp4_quantize(const Tensor&, float, Tensor&, Tensor&) override { return Status::ok(); }
  Status do_moe_permute(const Tensor&, int64_t, int64_t, Tensor&, Tensor&, Tensor&, const Tensor&) override { return Status::ok(); }
  Status do_moe_gemm1_fp4(const Tensor&, const Tensor&, float, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, float, Tensor&, Tensor&) override {
    return Status::ok();
  }
  Status do_moe_gemm2_fp4(const Tensor&, const Tensor&, float, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, Tensor&) override {
    return Status::ok();
  }
  Status do_moe_combine(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&) override { return Status::ok(); }
  Status do_kv_cache_store(const Tensor&, const Tensor&, Tensor&, const Tensor&) override { return Status::ok(); }
  Status do_mla_q_absorb(const Tensor&, const Tensor&, int64_t, int64_t, int64_t, int64_t, Tensor&) override { return Status::ok(); }
  Status do_mla_paged_attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, float,
                                Tensor&, const Tensor&) override {
    return Status::ok();
  }
  Status do_mla_v_up(const Tensor&, const Tensor&, int64_t, int64_t, int64_t, Tensor&) override { return Status::ok(); }

 private:
  uint64_t next_ = 0x7e0000000000ull;  // a range a process never maps
  uint64_t device_bytes_ = 0, live_bytes_ = 0;
  bool enforce_ = true;
};

}  // namespace moeprof
