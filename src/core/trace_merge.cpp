#include "core/trace_merge.h"

#include <string>

namespace moeprof {

Trace merge_traces(const std::vector<Trace>& traces) {
  Trace out;
  if (traces.empty()) return out;
  out.meta = traces.front().meta;
  out.meta.tp_rank = 0;
  out.meta.extra["ranks"] = std::to_string(traces.size());

  // Re-intern each input's strings: remap[i][old id] = new id.
  std::vector<std::vector<uint32_t>> remap(traces.size());
  size_t total = 0;
  for (size_t i = 0; i < traces.size(); ++i) {
    const Trace& t = traces[i];
    remap[i].resize(t.strings.size());
    for (uint32_t id = 0; id < t.strings.size(); ++id) remap[i][id] = out.strings.intern(t.strings.get(id));
    total += t.records.size();
    out.dropped_records += t.dropped_records;
    if (t.truncated) {
      out.truncated = true;
      if (!out.truncation_note.empty()) out.truncation_note += "; ";
      out.truncation_note += "input " + std::to_string(i) + ": " + t.truncation_note;
    }
  }
  auto map_id = [&](size_t i, uint32_t id) -> uint32_t {
    // An id outside the input's table reads as "" there (StringTable::get); keep that meaning.
    return id < remap[i].size() ? remap[i][id] : 0;
  };

  // K-way merge by (timestamp, seq), ties to the lower input index; each input advances in its
  // own order, so its relative order is never changed.
  out.records.reserve(total);
  std::vector<size_t> pos(traces.size(), 0);
  for (size_t n = 0; n < total; ++n) {
    size_t best = traces.size();
    for (size_t i = 0; i < traces.size(); ++i) {
      if (pos[i] >= traces[i].records.size()) continue;
      if (best == traces.size()) {
        best = i;
        continue;
      }
      const TraceRecord& a = traces[i].records[pos[i]];
      const TraceRecord& b = traces[best].records[pos[best]];
      if (a.timestamp_ns < b.timestamp_ns || (a.timestamp_ns == b.timestamp_ns && a.seq < b.seq)) best = i;
    }
    TraceRecord r = traces[best].records[pos[best]++];
    r.name_id = map_id(best, r.name_id);
    r.scope_id = map_id(best, r.scope_id);
    r.shape_id = map_id(best, r.shape_id);
    out.records.push_back(r);
  }
  return out;
}

}  // namespace moeprof
