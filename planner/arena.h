// Offline arena planning: give every buffer an offset in one arena so that no two buffers whose
// lifetimes overlap share an address. Lower bound: LOAD = max over time of live bytes. The
// planner is a greedy best-fit (each buffer, in a chosen order, goes into the smallest gap among
// already-placed, time-overlapping buffers that fits it, else on top of them); plan_arena_best()
// runs several orders and keeps the smallest arena. See docs/planner.md.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "planner/analysis.h"

namespace moeprof::planner {

// A buffer of `size` bytes live during [lower, upper) (any monotone time unit; replay positions
// when built from a trace). Buffers with lower >= upper or size 0 overlap nothing.
struct Buffer {
  uint64_t id = 0;  // caller's id (e.g. a lifetime index); not used by the planner
  uint64_t size = 0;
  uint64_t lower = 0;
  uint64_t upper = 0;
  uint64_t alignment = 1;  // the offset must be a multiple of this (and of ArenaOptions::alignment)
};

enum class ArenaOrder : uint8_t {
  kSizeDesc = 0,      // size desc, then duration desc, then lower asc (greedy by size)
  kDurationDesc = 1,  // duration desc, then size desc, then lower asc (XLA "temporal")
  kAreaDesc = 2,      // size*duration desc, then size desc, then lower asc
  kLowerAsc = 3,      // lower asc, then size desc (the order an online allocator sees)
};
inline constexpr int kNumArenaOrders = 4;
std::string_view arena_order_name(ArenaOrder o);

struct ArenaPlan {
  std::vector<uint64_t> offsets;  // offsets[i] for buffers[i]
  uint64_t arena_size = 0;        // max over buffers of offset + size (aligned sizes)
  uint64_t load = 0;              // LOAD lower bound (aligned sizes)
  uint64_t fragmentation_bytes = 0;  // arena_size - load
  double gap_pct = 0.0;           // 100 * (arena_size - load) / load; 0 when load == 0
  ArenaOrder order = ArenaOrder::kSizeDesc;
};

struct ArenaOptions {
  uint64_t alignment = 1;  // offsets and sizes are rounded up to this (power of two not required)
  uint64_t capacity = 0;   // validate_plan: the arena must not exceed this (0: no limit)
};

// The alignment a buffer's offset needs: lcm(global, buffer.alignment); 0 if that overflows.
uint64_t offset_alignment(const Buffer& b, uint64_t global_alignment);

// LOAD: max over time of the summed sizes of live buffers ([lower, upper) half-open, so a buffer
// ending at t and one starting at t do not overlap).
uint64_t arena_load(const std::vector<Buffer>& buffers, uint64_t alignment = 1);

// Greedy best-fit in one order. Ties between equal gaps: the lowest offset.
ArenaPlan plan_arena(const std::vector<Buffer>& buffers, ArenaOrder order, const ArenaOptions& opt = {});

// Every order; the smallest arena wins (ties: the earlier order in the enum).
ArenaPlan plan_arena_best(const std::vector<Buffer>& buffers, const ArenaOptions& opt = {});

// The independent checker: one offset per buffer, alignment (global and per buffer), everything
// inside arena_size, arena_size within opt.capacity (when set), and no two buffers overlapping in
// both time and address. Returns kBadInput naming the first conflict. O(n log n + overlapping pairs).
Status validate_plan(const std::vector<Buffer>& buffers, const ArenaPlan& plan, const ArenaOptions& opt = {});

// Buffers from a run's lifetimes on one device (needs AnalyzeOptions::keep_lifetimes). Time is the
// replay position: [alloc_index, free_index), never-freed buffers live to the end.
// activation_only keeps the categories for which counts_as_activation() is true.
std::vector<Buffer> buffers_from_lifetimes(const RunAnalysis& run, uint16_t device, bool activation_only);

}  // namespace moeprof::planner
