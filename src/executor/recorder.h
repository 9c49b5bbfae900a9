// Observers of a backend's allocations: the trace recorder (writes .mtrace through the streamed
// TraceWriter) and the executor's own memory accounting (bytes asked for, per category).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/trace_io.h"
#include "executor/backend.h"

namespace moeprof {

// Writes one record per allocation, release, use and marker. Names/scopes/shapes are interned
// once per distinct string; nothing else grows with the trace length.
class TraceRecorder : public AllocationObserver {
 public:
  explicit TraceRecorder(TraceWriter* writer, uint16_t device = 0);
  void on_alloc(const Storage& s, const AllocTag& tag, DType dtype, const std::string& shape) override;
  void on_free(const Storage& s) override;
  void on_marker(const std::string& name, bool begin) override;
  void on_use(const Storage& s, const std::string& op, bool write) override;
  void on_pool(uint64_t pool, uint64_t reserved_bytes, MemKind kind, const std::string& name) override;
  // A kCounter record: name, value (in the bytes field), step (in the address field).
  void on_counter(const std::string& name, uint64_t value, uint64_t step) override;
  // First write error, if any (recording never throws).
  const Status& status() const { return status_; }

 private:
  uint64_t now_ns() const;
  void append(TraceRecord r);
  struct Live {
    StrId name_id, scope_id, shape_id;
    Category category;
    DType dtype;
  };
  TraceWriter* writer_;
  uint16_t device_;
  uint64_t seq_ = 0;
  std::chrono::steady_clock::time_point t0_;
  std::unordered_map<uint64_t, Live> live_;  // storage id -> tags (for free records)
  std::vector<StrId> marker_scopes_;
  Status status_;
};

struct CategoryCounters {
  std::array<uint64_t, kNumCategories> current{};
  std::array<uint64_t, kNumCategories> peak{};         // each category's own high-water mark
  std::array<uint64_t, kNumCategories> allocated{};    // bytes allocated in total (churn)
  std::array<uint64_t, kNumCategories> allocations{};
  uint64_t current_total = 0, peak_total = 0;
  uint64_t current_activation = 0, peak_activation = 0;  // categories counted as activation
  // The same two peaks with every routed tensor at its worst_bytes (AllocTag): what the run would
  // reach if every MoE call met the worst routing of the router's capacity. Equal to the peaks
  // above when no allocation depends on the routing (--moe-rows bound).
  uint64_t current_total_worst = 0, peak_total_worst = 0;
  uint64_t current_activation_worst = 0, peak_activation_worst = 0;
};

// Whether rank a sets a budget before rank b: the larger activation peak under the worst routing
// (what a budget reserves on every rank when the buffers follow the routing; else the peak
// itself), then the larger peak measured.
inline bool budget_order(const CategoryCounters& a, const CategoryCounters& b) {
  if (a.peak_activation_worst != b.peak_activation_worst) return a.peak_activation_worst > b.peak_activation_worst;
  return a.peak_activation > b.peak_activation;
}

// The executor's own accounting of the bytes it asked for.
class MemoryAccounting : public AllocationObserver {
 public:
  void on_alloc(const Storage& s, const AllocTag& tag, DType dtype, const std::string& shape) override;
  void on_free(const Storage& s) override;
  bool wants_worst_only() const override { return true; }
  const CategoryCounters& counters() const { return c_; }

 private:
  CategoryCounters c_;
  std::unordered_map<uint64_t, uint64_t> worst_extra_;  // storage id -> worst_bytes - bytes
};

}  // namespace moeprof
