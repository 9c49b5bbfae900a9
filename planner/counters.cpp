#include "planner/counters.h"

namespace moeprof::planner {

void CounterCollector::add(const TraceRecord& r) {
  if (r.kind != EventKind::kCounter) return;
  const uint64_t key = (static_cast<uint64_t>(r.device) << 32) | index_of(r.name_id);
  auto [it, fresh] = index_.try_emplace(key, series_.size());
  if (fresh) {
    series_.emplace_back();
    series_.back().device = r.device;
    name_ids_.push_back(index_of(r.name_id));
  }
  CounterSeries& s = series_[it->second];
  s.points.push_back(CounterPoint{r.timestamp_ns, r.address, r.bytes});
  if (r.bytes > s.max_value) s.max_value = r.bytes;
}

std::vector<CounterSeries> CounterCollector::finish(const std::vector<std::string>& strings) {
  for (size_t i = 0; i < series_.size(); ++i)
    series_[i].name = name_ids_[i] < strings.size() ? strings[name_ids_[i]] : std::string();
  index_.clear();
  name_ids_.clear();
  return std::move(series_);
}

}  // namespace moeprof::planner
