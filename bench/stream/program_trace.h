// Traces of a real program's allocations for the streaming benchmark (bench_stream generate
// --pattern program --csv FILE): the buffers of an arena instance (a MiniMalloc CSV such as
// bench/arena/torch/instances/llama-generate.csv, traced from a PyTorch program) replayed again and
// again, on every device in lockstep, until the trace has the events asked for.
//
// Each buffer [lower, upper) becomes an allocation with a write use at `lower`, a read use halfway
// through its life (when it lives two steps or more: the CSV has no uses, and a last use before
// the end is what makes a buffer a candidate for a hand-off) and a free at `upper`; at each step
// the frees come first, then the allocations and their writes, then the reads. A repetition starts
// after the previous one's last free, at the same addresses (one block per buffer, blocks as large
// as the largest buffer rounded up to 2 MiB, so none overlap: an allocator that gives a buffer of
// the program the same block each iteration). Unnamed, unscoped, activations.
#pragma once

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "core/trace.h"
#include "planner/arena.h"

namespace moeprof::bench {

template <class Emit>
void generate_program(const std::vector<planner::Buffer>& bufs, size_t target_events, int devices, Emit&& emit) {
  struct Step {
    uint64_t t;
    int order;  // 0 free, 1 allocation + write, 2 read
    uint32_t b;
  };
  std::vector<Step> steps;
  uint64_t largest = 0;
  for (const planner::Buffer& b : bufs) largest = std::max(largest, b.size);
  constexpr uint64_t kBlock = uint64_t{2} << 20;
  const uint64_t stride = (largest + kBlock - 1) / kBlock * kBlock + kBlock;
  for (size_t i = 0; i < bufs.size(); ++i) {
    const auto b = static_cast<uint32_t>(i);
    steps.push_back({bufs[i].lower, 1, b});
    if (bufs[i].upper >= bufs[i].lower + 2) steps.push_back({bufs[i].lower + (bufs[i].upper - bufs[i].lower) / 2, 2, b});
    steps.push_back({bufs[i].upper, 0, b});
  }
  std::sort(steps.begin(), steps.end(), [](const Step& x, const Step& y) { return std::tie(x.t, x.order, x.b) < std::tie(y.t, y.order, y.b); });
  uint64_t seq = 1;
  size_t emitted = 0;
  auto push = [&](TraceRecord r) {
    if (emitted >= target_events) return;
    r.timestamp_ns = 1000 + 3 * seq;
    r.seq = seq++;
    r.mem_kind = MemKind::kDevice;
    r.category = Category::kActivation;
    emit(static_cast<const TraceRecord&>(r));
    ++emitted;
  };
  while (emitted < target_events && !steps.empty()) {
    for (const Step& s : steps) {
      for (int d = 0; d < devices; ++d) {
        TraceRecord r;
        r.device = static_cast<uint16_t>(d);
        r.address = 0x7f0000000000ULL + uint64_t{s.b} * stride;
        r.bytes = bufs[s.b].size;
        if (s.order == 0) {
          r.kind = EventKind::kFree;
          push(r);
        } else {
          r.kind = s.order == 1 ? EventKind::kAlloc : EventKind::kUse;
          r.flags = s.order == 1 ? 0 : kUseRead;
          push(r);
          if (s.order == 1) {
            r.kind = EventKind::kUse;
            r.flags = kUseWrite;
            push(r);
          }
        }
      }
      if (emitted >= target_events) break;
    }
  }
}

}  // namespace moeprof::bench
