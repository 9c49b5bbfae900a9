// Small helpers of the analysis types; the replay itself is in replay.cpp, live_set.cpp and
// handoffs.cpp, the comparison in compare.cpp.
#include "planner/analysis.h"

namespace moeprof::planner {

uint64_t CategoryBytes::total() const {
  uint64_t t = 0;
  for (uint64_t b : bytes) t += b;
  return t;
}

uint64_t CategoryBytes::activation() const {
  uint64_t t = 0;
  for (int i = 0; i < kNumCategories; ++i) {
    if (counts_as_activation(static_cast<Category>(i))) t += bytes[static_cast<size_t>(i)];
  }
  return t;
}

std::vector<AllocGroup> AllocGroups::expand() const {
  std::vector<AllocGroup> out;
  out.reserve(groups.size());
  for (const AllocGroupCount& g : groups) {
    const AllocLabel& l = labels.at(g.label);
    out.push_back(AllocGroup{l.scope, l.name, l.frame, g.bytes, g.count});
  }
  return out;
}

const DeviceAnalysis* RunAnalysis::device(uint16_t id) const {
  for (const auto& d : devices) {
    if (d.device == id) return &d;
  }
  return nullptr;
}

}  // namespace moeprof::planner
