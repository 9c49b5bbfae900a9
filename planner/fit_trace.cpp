// The traces as the size laws read them (SizeTrace): from an analysis with lifetimes, or straight
// from the file frame by frame (planner/fit.h).
#include <algorithm>
#include <unordered_map>

#include "core/trace_io.h"
#include "planner/address_map.h"
#include "planner/fit.h"
#include "planner/stacks.h"

namespace moeprof::planner {

namespace {

bool replayed(EventKind k) {
  return k == EventKind::kAlloc || k == EventKind::kFree || k == EventKind::kUse || k == EventKind::kPoolReserve ||
         k == EventKind::kGraphMem;
}

}  // namespace

Result<SizeTrace> size_trace(const RunAnalysis& run) {
  if (!run.limit_error.empty()) return Status::bad_input(run.limit_error);
  if (run.streamed || !has_every_lifetime(run))
    return Status::bad_input("fit needs every allocation of each trace (analyse with keep_lifetimes)");
  SizeTrace st;
  st.meta = run.meta;
  st.strings = run.strings;
  st.peak_activation_bytes = run.peak_activation_bytes;
  st.peak_total_bytes = run.peak_total_bytes;
  const auto& lts = run.lifetimes;
  std::unordered_map<uint32_t, uint32_t> stack_names;
  st.allocs.reserve(lts.size());
  for (const Lifetime& l : lts) {
    SizeTrace::Alloc a;
    a.name = index_of(l.name_id);
    if (l.name_id == StrId::kNone && l.stack_id != StackId::kNone) {
      auto it = stack_names.find(index_of(l.stack_id));
      if (it == stack_names.end()) {
        std::string s;
        for (const auto& f : user_frames(run, l.stack_id, 3)) s += (s.empty() ? "" : " < ") + f;
        st.strings.push_back(std::move(s));
        it = stack_names.emplace(index_of(l.stack_id), static_cast<uint32_t>(st.strings.size() - 1)).first;
      }
      a.name = it->second;
    }
    a.scope = index_of(l.scope_id);
    a.device = l.device;
    a.category = l.category;
    a.bytes = l.bytes;
    a.address = l.address;
    a.data_dependent = l.data_dependent;
    st.allocs.push_back(a);
  }
  // Replay order from the positions: a position holds one event; an allocation over a live address
  // ends the old one at its own position, before it counts (as the replay does), so that free goes
  // first; a zero-length lifetime (malloc(0) returning null) ends right after it begins.
  uint32_t end = 0;
  for (const auto& l : lts) end = std::max(end, std::max(l.alloc_index, l.freed() ? l.free_index : 0u) + 1);
  std::vector<uint32_t> free_at(end, UINT32_MAX);
  for (uint32_t i = 0; i < lts.size(); ++i)
    if (lts[i].freed() && lts[i].free_index < end) free_at[lts[i].free_index] = i;
  st.events.reserve(2 * lts.size());
  size_t a = 0;
  for (uint32_t pos = 0; pos < end; ++pos) {
    const uint32_t f = free_at[pos];
    const bool zero_length = f != UINT32_MAX && lts[f].alloc_index == pos;
    if (f != UINT32_MAX && !zero_length) st.events.push_back((uint64_t{f} << 1) | 1);
    while (a < lts.size() && lts[a].alloc_index == pos) st.events.push_back(uint64_t{a++} << 1);
    if (zero_length) st.events.push_back((uint64_t{f} << 1) | 1);
  }
  return st;
}

Result<SizeTrace> read_size_trace(const std::string& path, bool* needs_analysis) {
  *needs_analysis = false;
  MOEPROF_ASSIGN_OR_RETURN(auto reader, TraceReader::open(path));
  SizeTrace st;
  PairMap live;  // (device, address) -> allocation index + 1 (0: none live there)
  struct Dev {
    uint16_t device;
    uint64_t act = 0, tot = 0;
  };
  std::vector<Dev> devs;
  auto dev = [&](uint16_t d) -> Dev& {
    for (auto& x : devs)
      if (x.device == d) return x;
    devs.push_back(Dev{d});
    return devs.back();
  };
  auto release = [&](uint32_t i) {
    const auto& a = st.allocs[i];
    Dev& d = dev(a.device);
    d.tot -= a.bytes;
    if (counts_as_activation(a.category)) d.act -= a.bytes;
    st.events.push_back((uint64_t{i} << 1) | 1);
  };
  std::vector<TraceRecord> batch;
  uint64_t prev_ts = 0, prev_seq = 0;
  bool first = true;
  for (;;) {
    MOEPROF_ASSIGN_OR_RETURN(bool more, reader->next(&batch));
    if (!more) break;
    for (const TraceRecord& r : batch) {
      if (!replayed(r.kind)) continue;
      if (!first && (r.timestamp_ns < prev_ts || (r.timestamp_ns == prev_ts && r.seq < prev_seq))) {
        *needs_analysis = true;  // out of replay order: analyze() sorts
        return SizeTrace{};
      }
      first = false;
      prev_ts = r.timestamp_ns;
      prev_seq = r.seq;
      if (r.kind == EventKind::kAlloc) {
        if (r.category == Category::kUnknown || (r.name_id == StrId::kNone && r.stack_id != StackId::kNone)) {
          *needs_analysis = true;  // categories to infer, or sites named by their call stacks
          return SizeTrace{};
        }
        if (st.allocs.size() >= (size_t{1} << 31)) return Status::bad_input(path + ": more than 2^31 allocations");
        const auto i = static_cast<uint32_t>(st.allocs.size());
        st.allocs.push_back(SizeTrace::Alloc{index_of(r.name_id), index_of(r.scope_id), r.device, r.category, r.bytes, r.address,
                                             (r.flags & kFlagDataDependent) != 0});
        if (r.address == 0 && r.bytes == 0) {  // malloc(0) returning null: begins and ends here
          st.events.push_back(uint64_t{i} << 1);
          st.events.push_back((uint64_t{i} << 1) | 1);
          continue;
        }
        uint32_t& slot = live[{r.device, r.address}];
        if (slot != 0) release(slot - 1);  // an allocation over a live one ends it
        slot = i + 1;
        st.events.push_back(uint64_t{i} << 1);
        Dev& d = dev(r.device);
        d.tot += r.bytes;
        st.peak_total_bytes = std::max(st.peak_total_bytes, d.tot);
        if (counts_as_activation(r.category)) {
          d.act += r.bytes;
          st.peak_activation_bytes = std::max(st.peak_activation_bytes, d.act);
        }
      } else if (r.kind == EventKind::kFree) {
        uint32_t* slot = live.find({r.device, r.address});
        if (slot == nullptr || *slot == 0) continue;  // unknown, null or already freed
        release(*slot - 1);
        *slot = 0;
      }
    }
  }
  st.meta = reader->meta();
  StringTable strings = reader->take_strings();
  st.strings = strings.all();
  return st;
}

}  // namespace moeprof::planner
