// The lifetimes a what-if works on (internal to the planner): one block of memory per allocation,
// rules change blocks' ends or hand one allocation's use over to another's block. Shared by the
// rule engine (whatif.cpp) and the ranked fixes (fixes.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "planner/analysis.h"
#include "planner/whatif.h"

namespace moeprof::planner {

inline constexpr uint32_t kNoBlock = UINT32_MAX;

struct Block {
  uint32_t lifetime = 0;       // the allocation that made the block (index into RunAnalysis::lifetimes)
  uint16_t device = 0;
  bool act = false;            // counts as activation
  uint64_t bytes = 0;          // 0 once dropped or handed off
  uint32_t start = 0, end = 0;  // live at positions [start, end)
  uint32_t last_use = 0;       // of whatever occupies the block last; meaningful iff uses > 0
  uint32_t uses = 0;
  uint32_t merged_into = kNoBlock;  // this allocation was handed off onto that block
  std::vector<uint32_t> occupants;  // later allocations that took the block over, in start order
};

struct Change {
  uint32_t block;
  Block before;
};

struct WhatIfState {
  const RunAnalysis* run = nullptr;
  uint32_t num_events = 0;
  std::vector<Block> blocks;  // one per lifetime, same index
  mutable std::map<std::string, std::vector<uint32_t>> select_cache;

  explicit WhatIfState(const RunAnalysis& r);
  uint32_t holder(uint32_t b) const {  // the block that holds allocation b's memory
    while (blocks[b].merged_into != kNoBlock) b = blocks[b].merged_into;
    return b;
  }
  // The allocations a selector matches, in index order (cached per selector: what a selector
  // matches never changes).
  const std::vector<uint32_t>& select(const Selector& sel) const;
  // Applies one rule; records every block it changes (before the change) when `changes` is set.
  void apply(const Rule& rule, RuleEffect* effect, std::vector<Change>* changes);
  void revert(const std::vector<Change>& changes);
};

// Peak of the activation (act = true) or total live bytes of one device's blocks: first position
// of the maximum. `blocks_override` lets the liveness bound pass its own ends.
struct PeakAt {
  uint64_t bytes = 0;
  uint32_t pos = 0;
};

}  // namespace moeprof::planner
