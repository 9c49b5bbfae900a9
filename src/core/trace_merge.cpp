#include "core/trace_merge.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "core/utf8.h"

namespace moeprof {

Result<std::vector<uint16_t>> rank_device_offsets(const std::vector<std::vector<uint16_t>>& devices) {
  std::vector<uint16_t> out(devices.size(), 0);
  bool distinct_singles = true;
  std::set<uint16_t> seen;
  for (const auto& d : devices) {
    std::set<uint16_t> mine(d.begin(), d.end());
    if (mine.size() > 1 || (mine.size() == 1 && !seen.insert(*mine.begin()).second)) distinct_singles = false;
  }
  if (distinct_singles) return out;
  uint32_t base = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    out[i] = static_cast<uint16_t>(base);
    uint32_t top = 0;
    for (uint16_t d : devices[i]) top = std::max<uint32_t>(top, d + 1u);
    base += devices[i].empty() ? 0 : top;
    if (base > 65536) return Status::bad_input("too many devices in the merged traces (device numbers above 65535)");
  }
  return out;
}

namespace {
// (EP size, EP rank) from an executor trace's metadata (ep_size, ep_rank); (1, 0) without EP.
std::pair<int, int> ep_of(const RunMeta& m) {
  auto num = [&](const char* key, int fallback) {
    auto it = m.extra.find(key);
    if (it == m.extra.end() || it->second.empty() || it->second.size() > 9 ||
        it->second.find_first_not_of("0123456789") != std::string::npos)
      return fallback;
    return std::stoi(it->second);
  };
  return {std::max(1, num("ep_size", 1)), num("ep_rank", 0)};
}
}  // namespace

Status check_rank_traces(const std::vector<RunMeta>& metas, const std::vector<std::string>& paths) {
  if (metas.size() < 2) return Status::ok();
  auto path = [&](size_t i) { return printable(i < paths.size() ? paths[i] : "input " + std::to_string(i), 120); };
  const std::string hint = metas.size() == 2 ? "; to compare two runs: moeprof compare " + path(0) + " " + path(1)
                                             : "; to compare runs: moeprof report A B ... (each run's rank traces joined by commas)";
  auto refuse = [&](size_t i, size_t j, const std::string& why) {
    return Status::bad_input(path(i) + " and " + path(j) + " are not ranks of one run: " + why + hint);
  };
  std::error_code ec;
  for (size_t i = 0; i < metas.size(); ++i) {
    if (auto r = metas[i].extra.find("ranks"); r != metas[i].extra.end())
      return Status::bad_input(path(i) + " already holds the " + printable(r->second, 12) + " ranks of its run (a merged trace): give it alone" + hint);
    for (size_t j = 0; j < i; ++j)
      if (i < paths.size() && std::filesystem::equivalent(paths[i], paths[j], ec))
        return Status::bad_input(path(i) + " is given twice" + hint);
  }
  const RunMeta& a = metas[0];
  auto shown = [](const std::string& s) { return s.empty() ? std::string("(none)") : printable(s, 60); };
  const bool executor = a.mode == "baseline" || a.mode == "reuse" || a.mode == "fixes";
  for (size_t i = 1; i < metas.size(); ++i) {
    const RunMeta& m = metas[i];
    if (m.model != a.model) return refuse(0, i, "models " + shown(a.model) + " and " + shown(m.model));
    if (m.mode != a.mode) return refuse(0, i, "modes " + shown(a.mode) + " and " + shown(m.mode));
    // With DP attention each rank's trace holds its own request's tokens: the batch must agree.
    auto batch = [](const RunMeta& x) {
      auto dp = x.extra.find("dp_attention");
      auto bt = x.extra.find("batch_tokens");
      return dp != x.extra.end() && dp->second == "true" && bt != x.extra.end() ? bt->second : std::to_string(x.tokens);
    };
    if (batch(m) != batch(a)) return refuse(0, i, printable(batch(a), 24) + " and " + printable(batch(m), 24) + " tokens");
    if (m.layers != a.layers) return refuse(0, i, std::to_string(a.layers) + " and " + std::to_string(m.layers) + " layers");
    if (m.tp_size != a.tp_size) return refuse(0, i, "TP sizes " + std::to_string(a.tp_size) + " and " + std::to_string(m.tp_size));
    if (ep_of(m).first != ep_of(a).first)
      return refuse(0, i, "EP sizes " + std::to_string(ep_of(a).first) + " and " + std::to_string(ep_of(m).first));
  }
  // An executor's rank: of TP, or of expert parallelism (whose ranks are each TP size 1).
  auto world = [&](const RunMeta& x) { return x.tp_size >= 2 ? x.tp_size : ep_of(x).first; };
  auto rank = [&](const RunMeta& x) { return x.tp_size >= 2 ? x.tp_rank : ep_of(x).second; };
  const char* kind = a.tp_size >= 2 ? "TP" : "EP";
  std::map<int, size_t> rank_of;       // TP rank -> input
  std::map<uint32_t, size_t> pid_of;   // process -> input
  auto command = [](const RunMeta& x) {
    auto c = x.extra.find("command");
    return c == x.extra.end() ? std::string() : c->second;
  };
  for (size_t i = 0; i < metas.size(); ++i) {
    const RunMeta& m = metas[i];
    if (executor) {
      if (world(m) < 2) return refuse(0, 1, "each is a run of one device (TP and EP size 1)");
      if (auto [it, fresh] = rank_of.emplace(rank(m), i); !fresh)
        return refuse(it->second, i, std::string("both are ") + kind + " rank " + std::to_string(rank(m)) + " of " + std::to_string(world(m)));
    } else {
      // A traced or imported program: the processes of one command (torchrun's ranks), each its own.
      if (command(m) != command(a)) return refuse(0, i, "they record different commands");
      if (m.pid == 0) continue;
      if (auto [it, fresh] = pid_of.emplace(m.pid, i); !fresh) return refuse(it->second, i, "both record process " + std::to_string(m.pid));
    }
  }
  if (executor && metas.size() > static_cast<size_t>(world(a)))
    return Status::bad_input(std::to_string(metas.size()) + " traces given for a run of " + std::to_string(world(a)) + " ranks" + hint);
  return Status::ok();
}

Status offset_rank_devices(std::vector<Trace>* traces) {
  std::vector<std::vector<uint16_t>> devs;
  for (const Trace& t : *traces) {
    std::set<uint16_t> s;
    for (const TraceRecord& r : t.records) s.insert(r.device);
    devs.emplace_back(s.begin(), s.end());
  }
  MOEPROF_ASSIGN_OR_RETURN(std::vector<uint16_t> off, rank_device_offsets(devs));
  for (size_t i = 0; i < traces->size(); ++i)
    if (off[i] != 0)
      for (TraceRecord& r : (*traces)[i].records) r.device = static_cast<uint16_t>(r.device + off[i]);
  return Status::ok();
}

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
