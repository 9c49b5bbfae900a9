// Traces of a chosen shape for the streaming benchmark (bench_stream generate --pattern window):
// what real traces carry (names, scopes, call stacks, uses) over a sliding window of live
// allocations per device, of any length, in either format version.
//
// Each step allocates on the next device (round robin) a buffer of 256 B to 8 MiB (a random
// multiple of 256 B), at an address recycled per power-of-two size class as a caching allocator
// does; when the device holds more than `live` allocations, a random one of them is freed. Every
// allocation is named (one of `names`), scoped (layer.L/attn, layer.L/moe or layer.L/moe/experts,
// the layer advancing every 64 steps) and given one of `stacks` call stacks (format 2) when those
// are not 0; with `uses`, it is written once when allocated and a random live one is read.
// Weights (16 x 64 MiB per device, never freed) come first. State is the live window only. With
// `traced`, categories are unknown and a kernel runs every 16 steps, as in a CUPTI trace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/trace.h"

namespace moeprof::bench {

struct TraceShape {
  int devices = 4;
  int live = 64;       // live allocations per device (the sliding window)
  int names = 10;      // distinct names; 0: unnamed
  int layers = 61;     // scopes are layers x 3; 0: unscoped
  int stacks = 0;      // distinct call stacks (format 2 only); 0: none
  bool uses = false;
  // As the CUPTI tracer records a program: no categories (the planner infers them, in a first
  // pass when streaming), a kernel every 16 steps; the caller marks the metadata (backend cupti).
  bool traced = false;
  uint32_t version = 2;
  uint64_t seed = 1;
};

inline uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// intern(std::string) -> StrId; intern_stack(std::vector<StackFrame>) -> StackId (called only when
// shape.stacks > 0); emit(const TraceRecord&) per record, `target_events` in all.
template <class Intern, class InternStack, class Emit>
void generate_shaped(size_t target_events, const TraceShape& shape, Intern&& intern, InternStack&& intern_stack,
                     Emit&& emit) {
  uint64_t rng = shape.seed;
  std::vector<StrId> names, scopes;
  for (int i = 0; i < shape.names; ++i) names.push_back(intern("tensor_" + std::to_string(i)));
  static const char* kScopes[3] = {"attn", "moe", "moe/experts"};
  for (int l = 0; l < shape.layers; ++l)
    for (const char* s : kScopes) scopes.push_back(intern("layer." + std::to_string(l) + "/" + s));
  std::vector<StackId> stacks;
  if (shape.stacks > 0) {
    // Frames from one pool: a model file's functions (Python) over torch's (native), 6 to 13 deep.
    std::vector<StackFrame> pool;
    const StrId py = intern("model.py"), native = intern("libtorch_cuda.so");
    for (int i = 0; i < 64; ++i)
      pool.push_back(StackFrame{intern("forward_" + std::to_string(i)), py, static_cast<uint32_t>(10 + 7 * i), FrameKind::kPython});
    for (int i = 0; i < 16; ++i)
      pool.push_back(StackFrame{intern("at::native::op_" + std::to_string(i)), native, 0, FrameKind::kNative});
    for (int s = 0; s < shape.stacks; ++s) {
      std::vector<StackFrame> frames;
      const int depth = 6 + static_cast<int>(splitmix64(rng) % 8);
      frames.push_back(pool[64 + splitmix64(rng) % 16]);
      for (int k = 1; k < depth; ++k) frames.push_back(pool[(static_cast<uint64_t>(s) * 7 + static_cast<uint64_t>(k) * 13 + splitmix64(rng) % 3) % 64]);
      stacks.push_back(intern_stack(frames));
    }
  }
  const StackId v1_pid = static_cast<StackId>(4242);  // version 1 kept the process id in this slot
  const StrId w_name = intern("weight");
  struct Live {
    uint64_t address, bytes;
    int size_class;
  };
  struct Dev {
    uint64_t bump = 0x7f0000000000ULL;
    std::vector<std::vector<uint64_t>> free_by_class = std::vector<std::vector<uint64_t>>(24);
    std::vector<Live> live;
  };
  std::vector<Dev> devs(static_cast<size_t>(shape.devices));
  uint64_t ts = 1000, seq = 1;
  size_t emitted = 0;
  auto push = [&](TraceRecord r) {
    if (emitted >= target_events) return;
    ts += 1 + splitmix64(rng) % 97;
    r.timestamp_ns = ts;
    r.seq = seq++;
    r.mem_kind = MemKind::kDevice;
    if (shape.version < 2) r.stack_id = v1_pid;
    emit(static_cast<const TraceRecord&>(r));
    ++emitted;
  };
  auto address_for = [](Dev& dv, int cls) {
    auto& fl = dv.free_by_class[static_cast<size_t>(cls)];
    if (!fl.empty()) {
      const uint64_t a = fl.back();
      fl.pop_back();
      return a;
    }
    const uint64_t a = dv.bump;
    dv.bump += uint64_t{256} << cls;
    return a;
  };
  for (int d = 0; d < shape.devices; ++d) {
    for (int w = 0; w < 16; ++w) {
      TraceRecord r;
      r.kind = EventKind::kAlloc;
      r.device = static_cast<uint16_t>(d);
      r.address = address_for(devs[static_cast<size_t>(d)], 18);
      r.bytes = uint64_t{64} << 20;
      r.category = shape.traced ? Category::kUnknown : Category::kWeights;
      if (!names.empty()) r.name_id = w_name;
      push(r);
    }
  }
  for (uint64_t step = 0; emitted < target_events; ++step) {
    const auto d = static_cast<uint16_t>(step % static_cast<uint64_t>(shape.devices));
    Dev& dv = devs[d];
    TraceRecord a;
    a.kind = EventKind::kAlloc;
    a.device = d;
    a.bytes = 256 * (1 + splitmix64(rng) % 32768);
    int cls = 0;
    while ((uint64_t{256} << cls) < a.bytes) ++cls;
    a.address = address_for(dv, cls);
    a.category = splitmix64(rng) % 8 == 0 ? Category::kWorkspace : Category::kActivation;
    if (shape.traced) a.category = Category::kUnknown;
    a.dtype = DType::kBF16;
    a.stream = 7;
    if (!names.empty()) a.name_id = names[splitmix64(rng) % names.size()];
    if (!scopes.empty()) a.scope_id = scopes[(step / 64 % static_cast<uint64_t>(shape.layers)) * 3 + splitmix64(rng) % 3];
    if (!stacks.empty() && shape.version >= 2) a.stack_id = stacks[splitmix64(rng) % stacks.size()];
    push(a);
    dv.live.push_back(Live{a.address, a.bytes, cls});
    if (shape.uses) {
      TraceRecord u;
      u.kind = EventKind::kUse;
      u.device = d;
      u.address = a.address;
      u.flags = kUseWrite;
      if (!names.empty()) u.name_id = a.name_id;
      push(u);
      u.address = dv.live[splitmix64(rng) % dv.live.size()].address;
      u.flags = kUseRead;
      push(u);
    }
    if (shape.traced && step % 16 == 15) {
      TraceRecord k;
      k.kind = EventKind::kKernel;
      k.device = d;
      k.bytes = 5000 + splitmix64(rng) % 20000;  // duration, ns
      if (!names.empty()) k.name_id = names[splitmix64(rng) % names.size()];
      push(k);
    }
    if (dv.live.size() > static_cast<size_t>(shape.live)) {
      const size_t k = splitmix64(rng) % dv.live.size();
      const Live l = dv.live[k];
      dv.live[k] = dv.live.back();
      dv.live.pop_back();
      TraceRecord f;
      f.kind = EventKind::kFree;
      f.device = d;
      f.address = l.address;
      f.bytes = l.bytes;
      push(f);
      dv.free_by_class[static_cast<size_t>(l.size_class)].push_back(l.address);
    }
  }
}

}  // namespace moeprof::bench
