// A small fixed trace for the rule harnesses: two devices, scopes, names, uses, a marker range and
// a call stack, so that every selector term and rule kind has something to match.
#pragma once

#include "core/trace.h"

namespace moeprof::fuzz {

inline Trace sample_trace() {
  Trace t;
  t.meta.name = "sample";
  t.meta.backend = "cupti";
  uint64_t ts = 100, seq = 1;
  auto str = [&](const char* s) { return t.strings.intern(s); };
  const uint32_t f0 = t.stacks.intern_frame(StackFrame{str("forward"), str("model.py"), 12, FrameKind::kPython});
  const uint32_t f1 = t.stacks.intern_frame(StackFrame{str("cublasLtMatmul"), str("libcublasLt.so"), 0, FrameKind::kNative});
  const StackId stack = t.stacks.intern_stack({f0, f1});
  auto rec = [&](EventKind k, uint64_t addr, uint64_t bytes, uint16_t dev, Category c, const char* scope, const char* name) {
    TraceRecord& r = t.add(k, ts += 10, addr, bytes);
    r.seq = seq++;
    r.device = dev;
    r.category = c;
    r.scope_id = str(scope);
    r.name_id = str(name);
    if (k == EventKind::kUse) r.flags = kUseRead;
    if (k == EventKind::kAlloc) r.stack_id = stack;
    return r;
  };
  for (uint16_t dev = 0; dev < 2; ++dev) {
    rec(EventKind::kAlloc, 0x1000, 4096, dev, Category::kWeights, "model", "embed.weight");
    rec(EventKind::kMarkerBegin, 0, 0, dev, Category::kUnknown, "", "layer.0");
    for (int layer = 0; layer < 3; ++layer) {
      const uint64_t base = 0x10000 + 0x1000 * layer;
      const std::string scope = "layer." + std::to_string(layer) + "/mlp";
      rec(EventKind::kAlloc, base, 1000 + 24 * layer, dev, Category::kActivation, scope.c_str(), "gate_up");
      rec(EventKind::kAlloc, base + 0x800, 512, dev, Category::kActivation, scope.c_str(), "act");
      rec(EventKind::kUse, base, 0, dev, Category::kUnknown, "", "silu_and_mul");
      rec(EventKind::kUse, base + 0x800, 0, dev, Category::kUnknown, "", "down_proj");
      rec(EventKind::kFree, base, 0, dev, Category::kActivation, scope.c_str(), "gate_up");
      rec(EventKind::kFree, base + 0x800, 0, dev, Category::kActivation, scope.c_str(), "act");
    }
    rec(EventKind::kMarkerEnd, 0, 0, dev, Category::kUnknown, "", "layer.0");
    rec(EventKind::kFree, 0x1000, 0, dev, Category::kWeights, "model", "embed.weight");
  }
  return t;
}

}  // namespace moeprof::fuzz
