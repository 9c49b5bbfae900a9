#include "core/trace_merge.h"

#include <string>

namespace moeprof {

Trace merge_traces(const std::vector<Trace>& traces) {
  Trace out;
  if (traces.empty()) return out;
  out.meta = traces.front().meta;
  out.meta.tp_rank = 0;
  out.meta.extra["ranks"] = std::to_string(traces.size());

  // Re-intern each input's strings and stacks: remap[i][old id] = new id.
  std::vector<std::vector<StrId>> remap(traces.size());
  std::vector<std::vector<StackId>> stack_remap(traces.size());
  size_t total = 0;
  for (size_t i = 0; i < traces.size(); ++i) {
    const Trace& t = traces[i];
    remap[i].resize(t.strings.size());
    for (uint32_t id = 0; id < t.strings.size(); ++id) remap[i][id] = out.strings.intern(t.strings.get(static_cast<StrId>(id)));
    std::vector<uint32_t> frame_remap(t.stacks.frame_count());
    for (uint32_t f = 0; f < t.stacks.frame_count(); ++f) {
      StackFrame fr = t.stacks.frame(f);
      fr.function = remap[i][index_of(fr.function)];
      fr.file = remap[i][index_of(fr.file)];
      frame_remap[f] = out.stacks.intern_frame(fr);
    }
    stack_remap[i].resize(t.stacks.stack_count());
    for (uint32_t s = 1; s < t.stacks.stack_count(); ++s) {
      std::vector<uint32_t> frames;
      for (uint32_t f : t.stacks.stack(static_cast<StackId>(s))) frames.push_back(frame_remap[f]);
      stack_remap[i][s] = out.stacks.intern_stack(frames);
    }
    total += t.records.size();
    out.dropped_records += t.dropped_records;
    if (t.truncated) {
      out.truncated = true;
      if (!out.truncation_note.empty()) out.truncation_note += "; ";
      out.truncation_note += "input " + std::to_string(i) + ": " + t.truncation_note;
    }
  }
  auto map_id = [&](size_t i, StrId id) -> StrId {
    // An id outside the input's table reads as "" there (StringTable::get); keep that meaning.
    return index_of(id) < remap[i].size() ? remap[i][index_of(id)] : StrId::kNone;
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
    r.stack_id = index_of(r.stack_id) < stack_remap[best].size() ? stack_remap[best][index_of(r.stack_id)] : StackId::kNone;
    out.records.push_back(r);
  }
  return out;
}

}  // namespace moeprof
