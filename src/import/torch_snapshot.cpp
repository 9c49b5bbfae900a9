// The snapshot dict -> Trace conversion (the mapping is described in torch_snapshot.h).
#include "import/torch_snapshot.h"

#include "core/checked.h"
#include "core/utf8.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <new>
#include <unordered_map>
#include <unordered_set>

namespace moeprof::importer {

std::string_view free_on_name(FreeOn f) { return f == FreeOn::kRequested ? "requested" : "completed"; }

bool parse_free_on(std::string_view s, FreeOn* out) {
  if (s == "completed") *out = FreeOn::kCompleted;
  else if (s == "requested") *out = FreeOn::kRequested;
  else return false;
  return true;
}

// The one UTF-8 helper of moeprof (core/utf8.h): U+FFFD for every byte that does not start a
// well-formed sequence.
std::string sanitize_utf8(std::string_view s) { return valid_utf8(s); }

namespace {

enum class Action : uint8_t {
  kAlloc, kFreeRequested, kFreeCompleted, kSegmentAlloc, kSegmentFree, kSegmentMap, kSegmentUnmap,
  kSnapshot, kOom, kOther,
};

Action parse_action(std::string_view a) {
  if (a == "alloc") return Action::kAlloc;
  if (a == "free_requested") return Action::kFreeRequested;
  if (a == "free_completed") return Action::kFreeCompleted;
  if (a == "segment_alloc") return Action::kSegmentAlloc;
  if (a == "segment_free") return Action::kSegmentFree;
  if (a == "segment_map") return Action::kSegmentMap;
  if (a == "segment_unmap") return Action::kSegmentUnmap;
  if (a == "snapshot") return Action::kSnapshot;
  if (a == "oom") return Action::kOom;
  return Action::kOther;
}

bool is_segment(Action a) {
  return a == Action::kSegmentAlloc || a == Action::kSegmentFree || a == Action::kSegmentMap || a == Action::kSegmentUnmap;
}

// Typed access to one dict, with messages naming the field ("device_traces[0][3].size: ...").
class Fields {
 public:
  Fields(const PyValue& d, std::string where) : d_(d), where_(std::move(where)) {}

  Status check_dict() const {
    if (d_.kind == PyKind::kDict) return Status::ok();
    return Status::bad_input(where_ + ": expected dict, got " + std::string(py_kind_name(d_.kind)));
  }
  const PyValue* find(std::string_view key) const { return d_.get(key); }

  Status missing(std::string_view key) const {
    return Status::bad_input(where_ + ": no '" + std::string(key) + "'");
  }
  Status wrong(std::string_view key, const char* want, const PyValue& got) const {
    return Status::bad_input(where_ + "." + std::string(key) + ": expected " + want + ", got " +
                             std::string(py_kind_name(got.kind)));
  }

  // An int; absent -> `dflt` unless required.
  Status i64(std::string_view key, int64_t* out, bool required, int64_t dflt = 0) const {
    const PyValue* v = find(key);
    if (!v) {
      if (required) return missing(key);
      *out = dflt;
      return Status::ok();
    }
    if (v->kind != PyKind::kInt) return wrong(key, "int", *v);
    *out = v->i;
    return Status::ok();
  }
  // A non-negative int.
  Status u64(std::string_view key, uint64_t* out, bool required, uint64_t dflt = 0) const {
    int64_t x = 0;
    MOEPROF_RETURN_IF_ERROR(i64(key, &x, required, static_cast<int64_t>(dflt)));
    if (x < 0) return Status::bad_input(where_ + "." + std::string(key) + ": negative (" + std::to_string(x) + ")");
    *out = static_cast<uint64_t>(x);
    return Status::ok();
  }
  Status str(std::string_view key, std::string_view* out, bool required) const {
    const PyValue* v = find(key);
    if (!v) {
      if (required) return missing(key);
      *out = {};
      return Status::ok();
    }
    if (v->kind != PyKind::kStr) return wrong(key, "str", *v);
    *out = v->s();
    return Status::ok();
  }
  // A list (absent -> nullptr unless required).
  Status list(std::string_view key, const PyValue** out, bool required) const {
    const PyValue* v = find(key);
    if (!v) {
      if (required) return missing(key);
      *out = nullptr;
      return Status::ok();
    }
    if (v->kind != PyKind::kList) return wrong(key, "list", *v);
    *out = v;
    return Status::ok();
  }
  const std::string& where() const { return where_; }

 private:
  const PyValue& d_;
  std::string where_;
};

struct Entry {
  Action action = Action::kOther;
  uint64_t addr = 0, size = 0, device_free = 0, ts = 0;
  bool has_device_free = false;  // an oom entry recorded the device's free bytes
  uint32_t stream = 0;
  uint32_t index = 0;
  std::string_view action_name, user_metadata;
  const PyValue* frames = nullptr;
};

struct Block {
  uint64_t addr = 0, requested = 0;
  uint32_t stream = 0;
  uint32_t segment = 0, index = 0;  // segments[segment].blocks[index]
  const PyValue* frames = nullptr;
};

struct Synth {
  uint64_t addr = 0, bytes = 0;
  uint32_t stream = 0;
  const Block* block = nullptr;  // synthesized from a block of the segments (else from a free)
};

using WhereFn = std::function<std::string()>;  // builds a field path for a message, when needed

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

bool is_python_file(std::string_view f) {
  return (f.size() >= 3 && f.substr(f.size() - 3) == ".py") || (!f.empty() && f.front() == '<');
}

bool in_torch_package(std::string_view f) {
  return f.find("/torch/") != std::string_view::npos || f.rfind("torch/", 0) == 0;
}

std::string label_of(std::string_view function, std::string_view file, uint32_t line) {
  const size_t slash = file.find_last_of('/');
  std::string_view base = slash == std::string_view::npos ? file : file.substr(slash + 1);
  return std::string(function) + " (" + std::string(base) + ":" + std::to_string(line) + ")";
}

class Importer {
 public:
  Importer(const PyValue& root, const TorchImportOptions& opt) : root_(root), opt_(opt) {}

  Result<TorchImportResult> run() {
    if (root_.kind != PyKind::kDict)
      return Status::bad_input("not a PyTorch memory snapshot: the pickle holds a " + std::string(py_kind_name(root_.kind)) +
                               ", not a dict");
    const PyValue* traces = root_.get("device_traces");
    const PyValue* segments = root_.get("segments");
    if (!traces && !segments) {
      std::string keys;
      const auto& it = root_.items();
      for (size_t k = 0; k + 1 < it.size() && k < 16; k += 2) {
        if (!keys.empty()) keys += ", ";
        // Quoted as Python would (control characters escaped): the message stays one line.
        keys += it[k].kind == PyKind::kStr ? sanitize_utf8(py_repr(it[k], 1, 1)) : std::string(py_kind_name(it[k].kind));
      }
      return Status::bad_input("not a PyTorch memory snapshot: the dict has neither 'device_traces' nor 'segments' (keys: " +
                               (keys.empty() ? std::string("none") : keys) + ")");
    }
    if (traces && traces->kind != PyKind::kList)
      return Status::bad_input("device_traces: expected list, got " + std::string(py_kind_name(traces->kind)));
    if (segments && segments->kind != PyKind::kList)
      return Status::bad_input("segments: expected list, got " + std::string(py_kind_name(segments->kind)));

    size_t num_devices = traces ? traces->size() : 0;
    if (traces) {
      for (size_t d = 0; d < traces->size(); ++d) MOEPROF_RETURN_IF_ERROR(read_entries(traces->items()[d], d));
    }
    if (segments) MOEPROF_RETURN_IF_ERROR(read_segments(*segments, &num_devices));
    segments_listed_ = segments != nullptr;
    if (num_devices > 65536) return Status::bad_input("more than 65536 devices");
    entries_.resize(num_devices);
    blocks_.resize(num_devices);
    seg_bytes_.resize(num_devices, 0);
    has_segments_.resize(num_devices, false);

    res_.trace.meta.name = opt_.run_name.empty() ? "torch-snapshot" : opt_.run_name;
    res_.trace.meta.mode = "imported";
    res_.trace.meta.backend = "torch-snapshot";
    for (size_t d = 0; d < num_devices; ++d) {
      if (entries_[d].empty() && !has_segments_[d]) continue;
      MOEPROF_RETURN_IF_ERROR(convert_device(static_cast<uint16_t>(d)));
    }
    fill_meta(traces ? traces->size() : 0);
    return std::move(res_);
  }

 private:
  uint32_t stream_id(int64_t raw) {
    if (raw == 0) return 0;
    auto [it, fresh] = streams_.emplace(raw, static_cast<uint32_t>(stream_order_.size() + 1));
    if (fresh) stream_order_.push_back(raw);
    return it->second;
  }

  Status read_entries(const PyValue& list, size_t d) {
    const std::string where = "device_traces[" + std::to_string(d) + "]";
    if (list.kind != PyKind::kList)
      return Status::bad_input(where + ": expected list, got " + std::string(py_kind_name(list.kind)));
    if (entries_.size() <= d) entries_.resize(d + 1);
    auto& out = entries_[d];
    out.reserve(list.size());
    uint64_t prev_ts = 0;
    for (size_t k = 0; k < list.size(); ++k) {
      Fields f(list.items()[k], where + "[" + std::to_string(k) + "]");
      MOEPROF_RETURN_IF_ERROR(f.check_dict());
      Entry e;
      e.index = static_cast<uint32_t>(k);
      MOEPROF_RETURN_IF_ERROR(f.str("action", &e.action_name, true));
      e.action = parse_action(e.action_name);
      if (e.action == Action::kOther || e.action == Action::kSnapshot) {
        if (e.action == Action::kOther) ++res_.skipped_actions[sanitize_utf8(e.action_name)];
        e.ts = prev_ts;
        out.push_back(std::move(e));
        continue;
      }
      if (e.action == Action::kOom) {
        MOEPROF_RETURN_IF_ERROR(f.u64("device_free", &e.device_free, false));
        e.has_device_free = f.find("device_free") != nullptr;
      } else {
        MOEPROF_RETURN_IF_ERROR(f.u64("addr", &e.addr, true));
      }
      MOEPROF_RETURN_IF_ERROR(f.u64("size", &e.size, true));
      int64_t stream = 0;
      MOEPROF_RETURN_IF_ERROR(f.i64("stream", &stream, false));
      e.stream = stream_id(stream);
      uint64_t time_us = 0;
      const bool timed = f.find("time_us") != nullptr;
      MOEPROF_RETURN_IF_ERROR(f.u64("time_us", &time_us, false));
      if (time_us > std::numeric_limits<uint64_t>::max() / 1000)
        return Status::bad_input(f.where() + ".time_us: " + std::to_string(time_us) + " is out of range");
      // Entries are listed oldest first; timestamps are made non-decreasing so that the replay
      // order (by timestamp, then seq) is the entries' order.
      e.ts = timed ? std::max(prev_ts, time_us * 1000) : prev_ts;
      prev_ts = e.ts;
      MOEPROF_RETURN_IF_ERROR(f.list("frames", &e.frames, false));
      MOEPROF_RETURN_IF_ERROR(f.str("user_metadata", &e.user_metadata, false));
      out.push_back(std::move(e));
    }
    return Status::ok();
  }

  Status read_segments(const PyValue& segs, size_t* num_devices) {
    for (size_t k = 0; k < segs.size(); ++k) {
      Fields f(segs.items()[k], "segments[" + std::to_string(k) + "]");
      MOEPROF_RETURN_IF_ERROR(f.check_dict());
      uint64_t device = 0, address = 0, total = 0;
      int64_t stream = 0;
      MOEPROF_RETURN_IF_ERROR(f.u64("device", &device, true));
      MOEPROF_RETURN_IF_ERROR(f.u64("address", &address, true));
      MOEPROF_RETURN_IF_ERROR(f.u64("total_size", &total, true));
      MOEPROF_RETURN_IF_ERROR(f.i64("stream", &stream, false));
      if (device >= 65536) return Status::bad_input(f.where() + ".device: " + std::to_string(device) + " is out of range");
      const PyValue* blocks = nullptr;
      MOEPROF_RETURN_IF_ERROR(f.list("blocks", &blocks, false));
      const size_t d = static_cast<size_t>(device);
      *num_devices = std::max(*num_devices, d + 1);
      if (blocks_.size() <= d) blocks_.resize(d + 1);
      if (seg_bytes_.size() <= d) seg_bytes_.resize(d + 1, 0);
      if (has_segments_.size() <= d) has_segments_.resize(d + 1, false);
      has_segments_[d] = true;
      if (!add_bytes(seg_bytes_[d], total))
        return Status::bad_input(f.where() + ": the segments of device " + std::to_string(d) + " total more than 2^63-1 bytes");
      const uint32_t sid = stream_id(stream);
      uint64_t addr = address;  // blocks tile the segment in address order
      for (size_t b = 0; blocks && b < blocks->size(); ++b) {
        Fields bf(blocks->items()[b], f.where() + ".blocks[" + std::to_string(b) + "]");
        MOEPROF_RETURN_IF_ERROR(bf.check_dict());
        Block blk;
        uint64_t size = 0;
        std::string_view state;
        MOEPROF_RETURN_IF_ERROR(bf.u64("size", &size, true));
        MOEPROF_RETURN_IF_ERROR(bf.u64("requested_size", &blk.requested, false, size));
        MOEPROF_RETURN_IF_ERROR(bf.u64("address", &blk.addr, false, addr));
        MOEPROF_RETURN_IF_ERROR(bf.str("state", &state, true));
        MOEPROF_RETURN_IF_ERROR(bf.list("frames", &blk.frames, false));
        blk.stream = sid;
        blk.segment = static_cast<uint32_t>(k);
        blk.index = static_cast<uint32_t>(b);
        addr = blk.addr + size;
        // The blocks the policy counts as live: allocated, and (kCompleted) freed but still in
        // use by another stream.
        if (state == "active_allocated" || (opt_.free_on == FreeOn::kCompleted && state == "active_pending_free"))
          blocks_[d].push_back(blk);
        else if (state != "inactive" && state != "active_pending_free")  // counted, not guessed live
          ++res_.unknown_block_states[sanitize_utf8(state)];
      }
    }
    return Status::ok();
  }

  // Frame lists are shared (torch dedups them, the pickle memo keeps them shared): one stack per list.
  Result<StackId> stack_of(const PyValue* frames, const WhereFn& where) {
    if (!frames || frames->size() == 0) return StackId::kNone;
    auto it = stack_cache_.find(frames->container());
    if (it != stack_cache_.end()) return it->second;
    std::vector<uint32_t> ids;
    ids.reserve(frames->size());
    Trace& t = res_.trace;
    const std::string prefix = where() + ".frames[";
    for (size_t k = 0; k < frames->size(); ++k) {
      Fields f(frames->items()[k], prefix + std::to_string(k) + "]");
      MOEPROF_RETURN_IF_ERROR(f.check_dict());
      std::string_view file, name;
      int64_t line = 0;
      MOEPROF_RETURN_IF_ERROR(f.str("filename", &file, true));
      MOEPROF_RETURN_IF_ERROR(f.str("name", &name, true));
      MOEPROF_RETURN_IF_ERROR(f.i64("line", &line, true));
      StackFrame sf;
      sf.function = t.strings.intern(sanitize_utf8(name));
      sf.file = t.strings.intern(sanitize_utf8(file));
      sf.line = line < 0 || line > std::numeric_limits<uint32_t>::max() ? 0 : static_cast<uint32_t>(line);
      sf.kind = is_python_file(file) ? FrameKind::kPython : FrameKind::kNative;
      ids.push_back(t.stacks.intern_frame(sf));
    }
    const StackId id = t.stacks.intern_stack(ids);
    stack_cache_.emplace(frames->container(), id);
    return id;
  }

  StrId label_id(StackId stack, bool before_trace) {
    auto [it, fresh] = label_cache_.try_emplace(index_of(stack), StrId::kNone);
    if (fresh) it->second = res_.trace.strings.intern(python_frame_label(res_.trace, stack));
    if (it->second == StrId::kNone && before_trace) return res_.trace.strings.intern("(allocated before the trace)");
    return it->second;
  }

  TraceRecord& add(EventKind kind, uint16_t device, uint64_t ts, uint64_t seq, uint64_t address, uint64_t bytes,
                   uint32_t stream) {
    TraceRecord& r = res_.trace.add(kind, ts, address, bytes);
    r.device = device;
    r.seq = seq;
    r.stream = stream;
    r.mem_kind = MemKind::kOther;
    r.category = Category::kUnknown;
    return r;
  }

  Status convert_device(uint16_t d) {
    const auto& entries = entries_[d];
    TorchDeviceSummary sum;
    sum.device = d;
    sum.entries = entries.size();
    sum.has_segments = has_segments_[d];
    sum.end_state_checked = segments_listed_;
    sum.end_reserved_bytes = seg_bytes_[d];
    const Action free_action = opt_.free_on == FreeOn::kCompleted ? Action::kFreeCompleted : Action::kFreeRequested;

    // Pass 1: what the entries leave live, what they free without allocating, the reserved bytes'
    // net change and its lowest point.
    std::unordered_map<uint64_t, uint64_t> live;  // address -> bytes
    std::unordered_set<uint64_t> seen;             // addresses the trace allocated (or synthesized)
    std::vector<Synth> synth;
    int64_t net = 0, low = 0;  // the reserved bytes' change since the first entry, and its minimum
    bool segment_entries = false;
    const Status overflow = Status::bad_input("device_traces[" + std::to_string(d) + "]: segment sizes overflow 64 bits");
    for (const Entry& e : entries) {
      if (e.action == Action::kAlloc) {
        live[e.addr] = e.size;
        seen.insert(e.addr);
      } else if (e.action == free_action) {
        // A free of an address the trace never allocated: allocated before the history began.
        if (live.erase(e.addr) == 0 && seen.insert(e.addr).second) synth.push_back({e.addr, e.size, e.stream, nullptr});
      } else if (is_segment(e.action)) {
        const bool grow = e.action == Action::kSegmentAlloc || e.action == Action::kSegmentMap;
        const int64_t size = static_cast<int64_t>(e.size);  // < 2^63: read as a non-negative int64
        if (grow ? __builtin_add_overflow(net, size, &net) : __builtin_sub_overflow(net, size, &net)) return overflow;
        low = std::min(low, net);
        segment_entries = true;
      }
    }
    sum.synthesized_from_frees = synth.size();
    std::unordered_set<uint64_t> block_addrs;
    for (const Block& b : blocks_[d]) {
      sum.snapshot_live_bytes += b.requested;
      block_addrs.insert(b.addr);
      auto it = live.find(b.addr);
      if (it == live.end()) {
        synth.push_back({b.addr, b.requested, b.stream, &b});
      } else if (it->second != b.requested) {
        ++sum.end_state_mismatches;
      }
    }
    sum.synthesized_from_segments = synth.size() - sum.synthesized_from_frees;
    if (sum.end_state_checked) {
      for (const auto& [addr, bytes] : live) sum.end_state_mismatches += block_addrs.count(addr) == 0;
    }
    // Reserved bytes before the first entry: the segments' total less the entries' net change;
    // without segments (or if that would go negative somewhere), the least that keeps it >= 0.
    int64_t initial = 0;
    if (sum.has_segments) {
      if (sum.end_reserved_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return overflow;
      if (__builtin_sub_overflow(static_cast<int64_t>(sum.end_reserved_bytes), net, &initial)) return overflow;
    }
    if (low == std::numeric_limits<int64_t>::min()) return overflow;
    initial = std::max(initial, -low);
    sum.initial_reserved_bytes = static_cast<uint64_t>(initial);

    // Pass 2: records.
    const uint64_t ts0 = entries.empty() ? 0 : entries.front().ts;
    if (sum.has_segments || segment_entries) add(EventKind::kPoolReserve, d, ts0, 0, 0, sum.initial_reserved_bytes, 0);
    for (const Synth& s : synth) {
      StackId stack = StackId::kNone;
      if (s.block) {
        const Block* b = s.block;
        MOEPROF_ASSIGN_OR_RETURN(stack, stack_of(b->frames, [b] {
          return "segments[" + std::to_string(b->segment) + "].blocks[" + std::to_string(b->index) + "]";
        }));
      }
      TraceRecord& r = add(EventKind::kAlloc, d, ts0, 0, s.addr, s.bytes, s.stream);
      r.stack_id = stack;
      r.name_id = label_id(stack, true);
    }
    uint64_t reserved = sum.initial_reserved_bytes;
    for (const Entry& e : entries) {
      switch (e.action) {
        case Action::kAlloc: {
          MOEPROF_ASSIGN_OR_RETURN(StackId stack, stack_of(e.frames, [d, &e] {
            return "device_traces[" + std::to_string(d) + "][" + std::to_string(e.index) + "]";
          }));
          TraceRecord& r = add(EventKind::kAlloc, d, e.ts, e.index, e.addr, e.size, e.stream);
          r.stack_id = stack;
          r.name_id = label_id(stack, false);
          if (!e.user_metadata.empty()) r.scope_id = res_.trace.strings.intern(sanitize_utf8(e.user_metadata));
          ++sum.allocs;
          break;
        }
        case Action::kFreeRequested:
        case Action::kFreeCompleted:
          if (e.action != free_action) break;
          add(EventKind::kFree, d, e.ts, e.index, e.addr, e.size, e.stream);
          ++sum.frees;
          break;
        case Action::kSegmentAlloc:
        case Action::kSegmentMap:
        case Action::kSegmentFree:
        case Action::kSegmentUnmap: {
          const bool grow = e.action == Action::kSegmentAlloc || e.action == Action::kSegmentMap;
          reserved = grow ? reserved + e.size : reserved - e.size;  // never below 0: see `initial`
          add(EventKind::kPoolReserve, d, e.ts, e.index, 0, reserved, e.stream);
          ++sum.segment_events;
          break;
        }
        case Action::kOom: {
          const StrId name = res_.trace.strings.intern(
              "oom: " + std::to_string(e.size) + " B requested, " +
              (e.has_device_free ? std::to_string(e.device_free) + " B free on the device" : "the device's free bytes not recorded"));
          for (EventKind k : {EventKind::kMarkerBegin, EventKind::kMarkerEnd}) {
            TraceRecord& r = add(k, d, e.ts, e.index, 0, e.size, e.stream);
            r.name_id = name;
          }
          ++sum.oom_events;
          break;
        }
        case Action::kSnapshot: break;
        case Action::kOther: ++sum.skipped_entries; break;
      }
    }
    // Live bytes at the end: what pass 1 left live plus the synthesized blocks of the segments.
    sum.end_live_bytes = 0;
    for (const auto& [addr, bytes] : live) sum.end_live_bytes += bytes;
    for (size_t k = sum.synthesized_from_frees; k < synth.size(); ++k) sum.end_live_bytes += synth[k].bytes;
    res_.entries += sum.entries;
    res_.synthesized_allocs += sum.synthesized();
    res_.devices.push_back(sum);
    return Status::ok();
  }

  void fill_meta(size_t trace_devices) {
    RunMeta& m = res_.trace.meta;
    m.extra["source_format"] = "torch.cuda.memory._dump_snapshot";
    m.extra["free_on"] = std::string(free_on_name(opt_.free_on));
    m.extra["bytes"] = "requested sizes (before the caching allocator rounds them)";
    m.extra["devices"] = std::to_string(trace_devices);
    m.extra["entries"] = std::to_string(res_.entries);
    m.extra["synthesized_allocs"] = std::to_string(res_.synthesized_allocs);
    uint64_t ooms = 0;
    for (const auto& d : res_.devices) ooms += d.oom_events;
    if (ooms) m.extra["oom_events"] = std::to_string(ooms);
    if (!res_.unknown_block_states.empty()) {
      std::string s;
      for (const auto& [name, n] : res_.unknown_block_states) s += (s.empty() ? "" : ", ") + name + " x" + std::to_string(n);
      m.extra["unknown_block_states"] = s;
    }
    if (!res_.skipped_actions.empty()) {
      std::string s;
      for (const auto& [name, n] : res_.skipped_actions) s += (s.empty() ? "" : ", ") + name + " x" + std::to_string(n);
      m.extra["skipped_actions"] = s;
    }
    if (!stream_order_.empty()) {
      std::string s;
      for (size_t k = 0; k < stream_order_.size(); ++k)
        s += (k ? ", " : "") + std::to_string(k + 1) + "=" + hex(static_cast<uint64_t>(stream_order_[k]));
      m.extra["streams"] = s;
    }
    if (const PyValue* a = root_.get("allocator_settings"); a && a->kind == PyKind::kDict) {
      std::string s;
      const auto& it = a->items();
      for (size_t k = 0; k + 1 < it.size(); k += 2) {
        if (!it[k].is(PyKind::kStr)) continue;
        const PyValue& v = it[k + 1];
        std::string val = v.kind == PyKind::kStr ? std::string(v.s()) : py_repr(v, 2, 16);
        s += (s.empty() ? "" : "; ") + std::string(it[k].s()) + "=" + val;
      }
      m.extra["allocator_settings"] = sanitize_utf8(s);
    }
  }

  const PyValue& root_;
  const TorchImportOptions& opt_;
  TorchImportResult res_;
  std::vector<std::vector<Entry>> entries_;
  std::vector<std::vector<Block>> blocks_;
  std::vector<uint64_t> seg_bytes_;
  std::vector<bool> has_segments_;
  bool segments_listed_ = false;
  std::unordered_map<int64_t, uint32_t> streams_;
  std::vector<int64_t> stream_order_;
  std::unordered_map<const PyContainer*, StackId> stack_cache_;
  std::unordered_map<uint32_t, StrId> label_cache_;
};

}  // namespace

std::string python_frame_label(const Trace& trace, StackId id) {
  const StackFrame* first_python = nullptr;
  for (uint32_t fid : trace.stacks.stack(id)) {
    const StackFrame& f = trace.stacks.frame(fid);
    if (f.kind != FrameKind::kPython) continue;
    if (!first_python) first_python = &f;
    if (!in_torch_package(trace.str(f.file))) return label_of(trace.str(f.function), trace.str(f.file), f.line);
  }
  if (first_python) return label_of(trace.str(first_python->function), trace.str(first_python->file), first_python->line);
  return "";
}

Result<TorchImportResult> import_torch_snapshot(const PyValue& root, const TorchImportOptions& opt) {
  try {
    Importer imp(root, opt);
    return imp.run();
  } catch (const std::bad_alloc&) {
    return Status::run_failure("out of memory while importing the snapshot");
  }
}

Result<TorchImportResult> import_torch_snapshot_file(const std::string& path, TorchImportOptions opt) {
  auto doc = read_pickle_file(path);
  if (!doc) return doc.status();
  if (opt.run_name.empty()) opt.run_name = sanitize_utf8(std::filesystem::path(path).stem().string());
  auto res = import_torch_snapshot(doc->root(), opt);
  if (!res) return res.status().with_context(path);
  res->trace.source_path = path;
  res->trace.meta.extra["pickle_protocol"] = std::to_string(doc->protocol());
  return res;
}

}  // namespace moeprof::importer
