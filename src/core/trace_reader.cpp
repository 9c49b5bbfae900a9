// TraceReader, read_trace and the JSON-lines export.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <ostream>

#include "core/trace_format.h"
#include "core/trace_io.h"

namespace moeprof {

using namespace trace_format;

// ---------------------------------------------------------------------------------------------
// Reader

namespace {

// Replaces bytes that are not valid UTF-8 with U+FFFD, so names from arbitrary programs (NVTX
// ranges) can always be written into JSON reports.
std::string valid_utf8(std::string s) {
  auto cont = [&](size_t i) { return i < s.size() && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80; };
  std::string out;
  bool changed = false;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<uint8_t>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
    bool ok = n > 0;
    for (size_t k = 1; ok && k < n; ++k) ok = cont(i + k);
    if (ok && n == 3) {
      const auto c1 = static_cast<uint8_t>(s[i + 1]);
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);  // overlong, surrogates
    }
    if (ok && n == 4) {
      const auto c1 = static_cast<uint8_t>(s[i + 1]);
      ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);  // overlong, > U+10FFFF
    }
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      changed = true;
      ++i;
    }
  }
  return changed ? out : s;
}

std::string at_offset(const std::string& path, uint64_t off) {
  return path + ": byte offset " + std::to_string(off) + ": ";
}

Status validate_record(const TraceRecord& r, size_t nstrings, size_t nstacks, const std::string& path, uint64_t off) {
  const auto kind = static_cast<uint8_t>(r.kind);
  if (kind == 0 || kind > kMaxEventKind)
    return Status::bad_input(at_offset(path, off) + "corrupt record: event kind " + std::to_string(kind));
  if (static_cast<uint8_t>(r.category) >= kNumCategories)
    return Status::bad_input(at_offset(path, off) + "corrupt record: category " +
                             std::to_string(static_cast<uint8_t>(r.category)));
  if (static_cast<uint8_t>(r.dtype) >= kNumDTypes)
    return Status::bad_input(at_offset(path, off) + "corrupt record: dtype " +
                             std::to_string(static_cast<uint8_t>(r.dtype)));
  if (static_cast<uint8_t>(r.mem_kind) > kMaxMemKind)
    return Status::bad_input(at_offset(path, off) + "corrupt record: memory kind " +
                             std::to_string(static_cast<uint8_t>(r.mem_kind)));
  if (index_of(r.name_id) >= nstrings || index_of(r.scope_id) >= nstrings || index_of(r.shape_id) >= nstrings)
    return Status::bad_input(at_offset(path, off) + "corrupt record: string id not defined before use");
  if (index_of(r.stack_id) >= nstacks)
    return Status::bad_input(at_offset(path, off) + "corrupt record: stack id not defined before use");
  return Status::ok();
}

bool known_frame_type(uint32_t t, uint32_t version) {
  if (t == kFrameStrings || t == kFrameRecords || t == kFrameMeta || t == kFrameStats || t == kFrameEnd) return true;
  return version >= 2 && (t == kFrameFrames || t == kFrameStacks);
}

}  // namespace

Result<std::unique_ptr<TraceReader>> TraceReader::open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Status::bad_input("cannot open trace " + path + ": " + std::strerror(errno));
  std::unique_ptr<TraceReader> r(new TraceReader());
  r->f_ = f;
  r->path_ = path;
  std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
  if (struct stat st {}; ::fstat(::fileno(f), &st) == 0) r->file_size_ = static_cast<uint64_t>(st.st_size);
  FileHeader h{};
  size_t got = std::fread(&h, 1, sizeof(h), f);
  if (got < 8 || std::memcmp(h.magic, kTraceMagic, 8) != 0)
    return Status::bad_input(at_offset(path, 0) + "not a moeprof trace (bad magic)");
  if (got < sizeof(h)) return Status::bad_input(at_offset(path, got) + "truncated file header");
  if (h.version < kOldestTraceFormatVersion || h.version > kTraceFormatVersion)
    return Status::bad_input(path + ": trace format version " + std::to_string(h.version) + ", this moeprof reads versions " +
                             std::to_string(kOldestTraceFormatVersion) + " to " + std::to_string(kTraceFormatVersion));
  if (h.record_size != sizeof(TraceRecord) || h.header_size != sizeof(FileHeader))
    return Status::bad_input(at_offset(path, 8) + "unexpected header or record size");
  r->version_ = h.version;
  r->off_ = sizeof(h);
  return r;
}

TraceReader::~TraceReader() {
  if (f_) std::fclose(f_);
}

void TraceReader::mark_truncated(std::string note) {
  truncated_ = true;
  truncation_note_ = std::move(note);
  done_ = true;
}

Status TraceReader::handle_table_frame(uint32_t type, uint32_t count, uint64_t poff) {
  const size_t bytes = payload_.size();
  const char* d = payload_.data();
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, d + at, 4);
    return v;
  };
  size_t p = 0;
  switch (type) {
    case kFrameStrings:
      for (uint32_t i = 0; i < count; ++i) {
        if (p + 8 > bytes) return Status::bad_input(at_offset(path_, poff + p) + "corrupt string table");
        const uint32_t id = u32(p), len = u32(p + 4);
        if (len > bytes - p - 8 || id != strings_.size())
          return Status::bad_input(at_offset(path_, poff + p) + "corrupt string table");
        std::string text = valid_utf8(std::string(d + p + 8, len));
        StrId dup;
        if (strings_.find(text, &dup))  // writers intern: a repeated string would be renumbered on rewrite
          return Status::bad_input(at_offset(path_, poff + p) + "corrupt string table: string " + std::to_string(id) +
                                   " repeats string " + std::to_string(index_of(dup)));
        strings_.append(std::move(text));
        p += 8 + size_t(len);
      }
      return Status::ok();
    case kFrameFrames:
      if (uint64_t(count) * 20 != bytes) return Status::bad_input(at_offset(path_, poff) + "corrupt frame table");
      for (uint32_t i = 0; i < count; ++i, p += 20) {
        StackFrame f;
        const uint32_t id = u32(p), fn = u32(p + 4), file = u32(p + 8), kind = u32(p + 16);
        if (id != stacks_.frame_count() || fn >= strings_.size() || file >= strings_.size() || kind > kMaxFrameKind)
          return Status::bad_input(at_offset(path_, poff + p) + "corrupt frame table");
        f.function = static_cast<StrId>(fn);
        f.file = static_cast<StrId>(file);
        f.line = u32(p + 12);
        f.kind = static_cast<FrameKind>(kind);
        if (stacks_.has_frame(f)) return Status::bad_input(at_offset(path_, poff + p) + "corrupt frame table: repeated frame");
        stacks_.append_frame(f);
      }
      return Status::ok();
    case kFrameStacks:
      for (uint32_t i = 0; i < count; ++i) {
        if (p + 8 > bytes) return Status::bad_input(at_offset(path_, poff + p) + "corrupt stack table");
        const uint32_t id = u32(p), n = u32(p + 4);
        if (id != stacks_.stack_count() || n == 0 || n > (bytes - p - 8) / 4)
          return Status::bad_input(at_offset(path_, poff + p) + "corrupt stack table");
        std::vector<uint32_t> frames(n);
        for (uint32_t k = 0; k < n; ++k) {
          frames[k] = u32(p + 8 + 4 * size_t(k));
          if (frames[k] >= stacks_.frame_count())
            return Status::bad_input(at_offset(path_, poff + p) + "corrupt stack table: undefined frame");
        }
        if (stacks_.has_stack(frames)) return Status::bad_input(at_offset(path_, poff + p) + "corrupt stack table: repeated stack");
        stacks_.append_stack(std::move(frames));
        p += 8 + 4 * size_t(n);
      }
      return Status::ok();
    case kFrameMeta:
      return run_meta_from_json(std::string_view(d, bytes), &meta_).with_context(at_offset(path_, poff) + "corrupt metadata");
    case kFrameStats: {
      auto j = nlohmann::json::parse(payload_.begin(), payload_.end(), nullptr, false);
      if (j.is_discarded() || !j.is_object()) return Status::bad_input(at_offset(path_, poff) + "corrupt stats frame");
      if (j.contains("dropped_records") && j["dropped_records"].is_number_unsigned())
        dropped_ = j["dropped_records"].get<uint64_t>();
      return Status::ok();
    }
    default:
      return Status::ok();
  }
}

Result<bool> TraceReader::next(std::vector<TraceRecord>* out) {
  out->clear();
  while (!done_) {
    FrameHeader fh{};
    size_t n = std::fread(&fh, 1, sizeof(fh), f_);
    if (n == 0) {
      if (!saw_end_)
        mark_truncated("incomplete at byte offset " + std::to_string(off_) +
                       " (no end frame: the recording process did not close the trace)");
      done_ = true;
      break;
    }
    if (n < sizeof(fh)) {
      mark_truncated("truncated at byte offset " + std::to_string(off_) + " (frame header cut short)");
      break;
    }
    if (!known_frame_type(fh.type, version_))
      return Status::bad_input(at_offset(path_, off_) + "corrupt trace: unknown frame type");
    if (fh.bytes > kMaxFrameBytes) return Status::bad_input(at_offset(path_, off_) + "corrupt trace: frame too large");
    if (off_ + sizeof(fh) + fh.bytes > file_size_) {  // cut short: do not allocate what is not there
      mark_truncated("truncated at byte offset " + std::to_string(off_) + " (frame of " + std::to_string(fh.bytes) +
                     " bytes cut short after " + std::to_string(file_size_ - off_ - sizeof(fh)) + ")");
      break;
    }
    const uint64_t poff = off_ + sizeof(fh);
    char* dst;
    if (fh.type == kFrameRecords) {
      if (static_cast<uint64_t>(fh.count) * sizeof(TraceRecord) != fh.bytes)
        return Status::bad_input(at_offset(path_, off_) + "corrupt record frame: size does not match count");
      out->resize(fh.count);
      dst = reinterpret_cast<char*>(out->data());
    } else {
      payload_.resize(fh.bytes);
      dst = payload_.data();
    }
    size_t pn = fh.bytes ? std::fread(dst, 1, fh.bytes, f_) : 0;
    if (pn < fh.bytes) {
      out->clear();
      mark_truncated("truncated at byte offset " + std::to_string(off_) + " (frame of " + std::to_string(fh.bytes) +
                     " bytes cut short after " + std::to_string(pn) + ")");
      break;
    }
    const uint32_t sum = version_ >= 2 ? crc32c(dst, fh.bytes) : crc32(dst, fh.bytes);
    if (sum != fh.crc) {
      out->clear();
      return Status::bad_input(at_offset(path_, off_) + "corrupt trace: checksum mismatch");
    }
    off_ += sizeof(fh) + fh.bytes;
    if (fh.type == kFrameEnd) {
      saw_end_ = true;
      done_ = true;
      break;
    }
    if (fh.type != kFrameRecords) {
      MOEPROF_RETURN_IF_ERROR(handle_table_frame(fh.type, fh.count, poff));
      continue;
    }
    const size_t ns = strings_.size(), nst = stacks_.stack_count();
    for (uint32_t i = 0; i < fh.count; ++i) {
      TraceRecord& r = (*out)[i];
      if (version_ < 2) {  // v1: the stack id's slot held the process id
        if (pid_ == 0) pid_ = index_of(r.stack_id);
        r.stack_id = StackId::kNone;
      }
      Status st = validate_record(r, ns, nst, path_, poff + uint64_t(i) * sizeof(TraceRecord));
      if (!st.is_ok()) {
        out->clear();
        return st;
      }
    }
    if (fh.count > 0) return true;
  }
  if (meta_.pid == 0) meta_.pid = pid_;
  return false;
}

Result<Trace> read_trace(const std::string& path) {
  MOEPROF_ASSIGN_OR_RETURN(auto reader, TraceReader::open(path));
  Trace t;
  t.source_path = path;
  std::vector<TraceRecord> batch;
  for (;;) {
    MOEPROF_ASSIGN_OR_RETURN(bool more, reader->next(&batch));
    if (!more) break;
    if (t.records.empty()) t.records.swap(batch);
    else t.records.insert(t.records.end(), batch.begin(), batch.end());
  }
  t.meta = reader->meta();
  t.truncated = reader->truncated();
  t.truncation_note = reader->truncation_note();
  t.dropped_records = reader->dropped_records();
  t.strings = reader->take_strings();
  t.stacks = reader->take_stacks();
  return t;
}

std::string format_frame(const StringTable& strings, const StackFrame& f) {
  std::string s = strings.get(f.function);
  if (s.empty()) s = "??";
  const std::string& file = strings.get(f.file);
  if (!file.empty()) {
    s += " (" + file;
    if (f.line) s += ":" + std::to_string(f.line);
    s += ")";
  }
  return s;
}

std::vector<std::string> format_stack(const Trace& trace, StackId id) {
  std::vector<std::string> out;
  for (uint32_t fid : trace.stacks.stack(id)) out.push_back(format_frame(trace.strings, trace.stacks.frame(fid)));
  return out;
}

namespace {

std::string jsonl_head(const RunMeta& meta, uint64_t dropped, bool truncated, const std::string& note) {
  nlohmann::ordered_json head;
  head["meta"] = nlohmann::ordered_json::parse(run_meta_to_json(meta));
  head["dropped_records"] = dropped;
  head["truncated"] = truncated;
  if (truncated) head["truncation_note"] = note;
  return head.dump();
}

void jsonl_record(const TraceRecord& r, const StringTable& strings, const StackTable& stacks, std::ostream& os) {
  nlohmann::ordered_json j;
  j["ts"] = r.timestamp_ns;
  j["kind"] = event_kind_name(r.kind);
  j["addr"] = r.address;
  j["bytes"] = r.bytes;
  j["seq"] = r.seq;
  j["device"] = r.device;
  if (r.name_id != StrId::kNone) j["name"] = strings.get(r.name_id);
  if (r.scope_id != StrId::kNone) j["scope"] = strings.get(r.scope_id);
  if (r.shape_id != StrId::kNone) j["shape"] = strings.get(r.shape_id);
  j["category"] = category_name(r.category);
  if (r.dtype != DType::kUnknown) j["dtype"] = dtype_name(r.dtype);
  j["mem_kind"] = mem_kind_name(r.mem_kind);
  j["stream"] = r.stream;
  j["tid"] = r.tid;
  if (r.flags) j["flags"] = r.flags;
  if (r.stack_id != StackId::kNone) {
    std::vector<std::string> frames;
    for (uint32_t fid : stacks.stack(r.stack_id)) frames.push_back(format_frame(strings, stacks.frame(fid)));
    j["stack"] = frames;
  }
  os << j.dump() << '\n';
}

}  // namespace

void write_jsonl(const Trace& trace, std::ostream& os) {
  os << jsonl_head(trace.meta, trace.dropped_records, trace.truncated, trace.truncation_note) << '\n';
  for (const auto& r : trace.records) jsonl_record(r, trace.strings, trace.stacks, os);
}

Result<uint64_t> write_jsonl_stream(const std::string& path, std::ostream& os) {
  // Pass 1: the head line's figures (metadata, drops, truncation) are known only at the end.
  MOEPROF_ASSIGN_OR_RETURN(auto first, TraceReader::open(path));
  std::vector<TraceRecord> batch;
  for (;;) {
    MOEPROF_ASSIGN_OR_RETURN(bool more, first->next(&batch));
    if (!more) break;
  }
  os << jsonl_head(first->meta(), first->dropped_records(), first->truncated(), first->truncation_note()) << '\n';
  MOEPROF_ASSIGN_OR_RETURN(auto reader, TraceReader::open(path));
  uint64_t n = 0;
  for (;;) {
    MOEPROF_ASSIGN_OR_RETURN(bool more, reader->next(&batch));
    if (!more) break;
    for (const TraceRecord& r : batch) jsonl_record(r, reader->strings(), reader->stacks(), os);
    n += batch.size();
    if (!os) return Status::run_failure("writing the JSON lines failed");
  }
  return n;
}

}  // namespace moeprof