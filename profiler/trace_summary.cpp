#include "profiler/trace_summary.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

namespace moeprof::profiler {

namespace {
struct LiveKey {
  uint16_t device;
  uint64_t address;
  bool operator==(const LiveKey& o) const { return device == o.device && address == o.address; }
};
struct LiveKeyHash {
  size_t operator()(const LiveKey& k) const { return std::hash<uint64_t>()(k.address * 31 + k.device); }
};
}  // namespace

TraceSummary summarize_trace(const Trace& trace, const SummaryOptions& opt) {
  TraceSummary s;
  s.records = trace.records.size();
  std::vector<size_t> order(trace.records.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const TraceRecord& x = trace.records[a];
    const TraceRecord& y = trace.records[b];
    if (x.timestamp_ns != y.timestamp_ns) return x.timestamp_ns < y.timestamp_ns;
    return x.seq < y.seq;
  });

  std::map<uint16_t, DeviceSummary> dev;
  std::map<uint16_t, uint64_t> live;
  std::map<uint16_t, std::map<uint64_t, uint64_t>> pools;  // device -> pool address -> size
  std::unordered_map<LiveKey, uint64_t, LiveKeyHash> live_allocs;

  for (size_t i : order) {
    const TraceRecord& r = trace.records[i];
    auto kind = static_cast<EventKind>(r.kind);
    if ((kind == EventKind::kAlloc || kind == EventKind::kFree) && opt.mem_kind >= 0 &&
        r.mem_kind != opt.mem_kind)
      continue;
    DeviceSummary& d = dev[r.device];
    d.device = r.device;
    switch (kind) {
      case EventKind::kAlloc: {
        ++s.allocs;
        ++d.allocs;
        d.alloc_bytes += r.bytes;
        if (r.tid != 0) ++s.allocs_with_tid;
        if (r.scope_id != 0 || r.name_id != 0) ++s.allocs_with_scope;
        std::string scope(trace.str(r.scope_id));
        s.scope_alloc_bytes[scope] += r.bytes;
        s.scope_allocs[scope] += 1;
        if (r.name_id != 0) {
          s.named.push_back(TaggedAlloc{scope, std::string(trace.str(r.name_id)),
                                        static_cast<Category>(r.category), r.bytes, r.device,
                                        (r.flags & kFlagInferredScope) != 0});
        }
        LiveKey key{r.device, r.address};
        auto it = live_allocs.find(key);
        if (it != live_allocs.end()) live[r.device] -= it->second;  // alloc over a live address
        live_allocs[key] = r.bytes;
        live[r.device] += r.bytes;
        if (live[r.device] > d.peak_bytes) {
          d.peak_bytes = live[r.device];
          d.peak_ts = r.timestamp_ns;
        }
        break;
      }
      case EventKind::kFree: {
        ++s.frees;
        ++d.frees;
        auto it = live_allocs.find(LiveKey{r.device, r.address});
        if (it == live_allocs.end()) {
          ++s.unknown_frees;
        } else {
          live[r.device] -= it->second;
          live_allocs.erase(it);
        }
        break;
      }
      case EventKind::kKernel:
        ++s.kernels;
        break;
      case EventKind::kPoolReserve: {
        ++s.pool_records;
        auto& p = pools[r.device];
        if (r.bytes == 0) p.erase(r.address); else p[r.address] = r.bytes;
        uint64_t total = 0;
        for (const auto& [addr, size] : p) total += size;
        d.pool_reserved_peak_bytes = std::max(d.pool_reserved_peak_bytes, total);
        break;
      }
      case EventKind::kGraphMem:
        ++s.graph_records;
        d.graph_mem_bytes = r.bytes;
        break;
      default:
        break;
    }
  }
  for (auto& [id, d] : dev) {
    d.live_end_bytes = live[id];
    s.peak_bytes = std::max(s.peak_bytes, d.peak_bytes);
    s.devices.push_back(d);
  }
  return s;
}

}  // namespace moeprof::profiler
