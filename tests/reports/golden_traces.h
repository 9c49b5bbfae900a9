// The two small traces checked in under tests/golden/ (baseline.mtrace, reuse.mtrace): a two-layer
// toy of the seed change (docs/seed-model.md) with hand-countable sizes. T=7 tokens, H=48, bf16:
// [T,H] = 672 B, latent [T,20] = 280 B, attention workspace 333 B, weights 10000 B, KV 1500 B.
//
// Hand figures (activation = activation + workspace + communication + unknown):
//   baseline: activation peak 2296 B at t=800 (x0 672 + post_norm0 672 + latent0 280 + moe_out0 672);
//             total peak 13796 B (+ weights 10000 + kv 1500); churn 15753 B in 10 allocations.
//   reuse:    activation peak 1957 B at t=600 (x0 + post_norm0 + latent0 + workspace 333);
//             total peak 13457 B; churn 15081 B in 9 allocations (no layer.1 moe_output);
//             one free of an unknown address; 3 dropped records.
//   comparison (reuse - baseline): activation -339, total -339, churn -672, allocations -1,
//             only in baseline: layer.1/moe moe_output 672 B x1.
#pragma once

#include <string>

#include "core/trace.h"

namespace moeprof::testing {

class GoldenBuilder {
 public:
  explicit GoldenBuilder(Trace* t) : t_(t) {}
  void alloc(uint64_t ts, uint64_t addr, uint64_t bytes, const char* name, const char* scope, const char* shape,
             Category cat, DType dt = DType::kBF16) {
    auto& r = t_->add(EventKind::kAlloc, ts, addr, bytes);
    r.name_id = t_->strings.intern(name);
    r.scope_id = t_->strings.intern(scope);
    r.shape_id = t_->strings.intern(shape);
    r.category = cat;
    r.dtype = dt;
    r.mem_kind = MemKind::kHost;
    r.tid = 11;
  }
  void free(uint64_t ts, uint64_t addr) { t_->add(EventKind::kFree, ts, addr, 0).tid = 11; }
  void use(uint64_t ts, uint64_t addr, const char* op, uint16_t flags) {
    auto& r = t_->add(EventKind::kUse, ts, addr, 0);
    r.name_id = t_->strings.intern(op);
    r.flags = flags;
    r.tid = 11;
  }
  void marker(uint64_t begin, uint64_t end, const char* name) {
    auto id = t_->strings.intern(name);
    auto& b = t_->add(EventKind::kMarkerBegin, begin, 0, 0);
    b.name_id = id;
    b.tid = 11;
    auto& e = t_->add(EventKind::kMarkerEnd, end, 0, 0);
    e.name_id = id;
    e.tid = 11;
  }
  void kernel(uint64_t ts, uint64_t dur, const char* name) {
    auto& r = t_->add(EventKind::kKernel, ts, 0, dur);
    r.name_id = t_->strings.intern(name);
    r.stream = 7;
  }

 private:
  Trace* t_;
};

inline constexpr uint64_t kW = 0x10000, kKv = 0x20000, kX0 = 0x30000, kPn0 = 0x31000, kLat0 = 0x32000,
                          kWs = 0x33000, kMo0 = 0x34000, kPn1 = 0x35000, kLat1 = 0x36000, kMo1 = 0x37000;

inline RunMeta golden_meta(const std::string& mode) {
  RunMeta m;
  m.name = mode;
  m.mode = mode;
  m.model = "golden-tiny";
  m.backend = "cpu";
  m.device_name = "cpu (golden)";
  m.moeprof_version = "0.1.0";
  m.tokens = 7;
  m.layers = 2;
  m.tp_size = 2;
  m.tp_rank = 1;
  m.extra["tp_emulated"] = "true";
  m.extra["weights"] = "shared";
  return m;
}

inline Trace golden_trace(bool reuse) {
  Trace t;
  t.meta = golden_meta(reuse ? "reuse" : "baseline");
  GoldenBuilder b(&t);
  constexpr auto kR = kUseRead, kWr = kUseWrite;
  b.alloc(100, kW, 10000, "weights", "model", "5000", Category::kWeights);
  b.alloc(200, kKv, 1500, "kv_cache", "model", "2x7x576", Category::kKvCache, DType::kU8);
  b.marker(250, 950, "layer.0");
  b.alloc(300, kX0, 672, "hidden", "layer.0/embed", "7x48", Category::kActivation);
  b.use(350, kX0, "rmsnorm", kR);
  b.alloc(400, kPn0, 672, "post_norm", "layer.0/attn", "7x48", Category::kActivation);
  b.use(450, kPn0, "qkv_a_proj", kR);
  b.alloc(500, kLat0, 280, "qkv_a_latent", "layer.0/attn", "7x20", Category::kActivation);
  b.use(550, kLat0, "q_b_proj", kR);
  b.alloc(600, kWs, 333, "attn_workspace", "layer.0/attn", "333", Category::kWorkspace, DType::kU8);
  b.kernel(610, 55, "mla_attention");
  b.use(650, kWs, "mla_attention", kR | kWr);
  b.free(700, kWs);
  if (reuse) {
    b.free(750, kPn0);
    b.free(760, kLat0);
  }
  b.alloc(800, kMo0, 672, "moe_output", "layer.0/moe", "7x48", Category::kCommunication);
  b.kernel(820, 40, "moe_gemm_fp4");
  b.use(850, kMo0, "moe_combine", kWr);
  b.free(900, kX0);
  b.marker(950, 1750, "layer.1");
  b.alloc(1000, kPn1, 672, "post_norm", "layer.1/attn", "7x48", Category::kActivation);
  b.use(1050, kMo0, "rmsnorm", kR);
  if (!reuse) {
    b.free(1100, kPn0);
    b.free(1200, kLat0);
  }
  b.use(1250, kPn1, "qkv_a_proj", kR);
  b.alloc(1300, kLat1, 280, "qkv_a_latent", "layer.1/attn", "7x20", Category::kActivation);
  b.use(1350, kLat1, "q_b_proj", kR);
  if (reuse) {
    b.free(1360, kPn1);
    b.free(1370, kLat1);
    b.use(1450, kMo0, "moe_combine", kWr);  // layer 1 writes its output into x (layer 0's output)
    b.free(1600, 0xdead0);                   // a free of an address never allocated
    t.dropped_records = 3;
  } else {
    b.alloc(1400, kMo1, 672, "moe_output", "layer.1/moe", "7x48", Category::kCommunication);
    b.use(1450, kMo1, "moe_combine", kWr);
    b.free(1500, kMo0);
    b.free(1600, kPn1);
    b.free(1700, kLat1);
  }
  return t;
}

}  // namespace moeprof::testing
