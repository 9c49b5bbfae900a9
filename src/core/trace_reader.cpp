// TraceReader, read_trace and the JSON-lines export.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <new>
#include <ostream>

#include "core/checked.h"
#include "core/file_kind.h"
#include "core/huge_pages.h"
#include "core/trace_format.h"
#include "core/trace_io.h"
#include "core/utf8.h"

namespace moeprof {

using namespace trace_format;

// ---------------------------------------------------------------------------------------------
// Reader

namespace {

std::string at_offset(const std::string& path, uint64_t off) {
  return path + ": byte offset " + std::to_string(off) + ": ";
}

// A file that does not start with the trace magic: say what it is and what reads it.
Status not_a_trace(const std::string& path, std::string_view head) {
  const FileKind k = file_kind(head);
  if (k == FileKind::kUnknown) {
    std::string hex;
    static const char* kDigits = "0123456789abcdef";
    for (size_t i = 0; i < head.size() && i < 8; ++i) {
      const auto b = static_cast<unsigned char>(head[i]);
      hex += std::string(i ? " " : "") + kDigits[b >> 4] + kDigits[b & 15];
    }
    return Status::bad_input(path + ": not a moeprof trace (it starts with bytes " + hex + ", not the trace magic)");
  }
  const std::string advice = file_kind_advice(k, path);
  return Status::bad_input(path + ": not a moeprof trace: it is " + describe_file_kind(k) + (advice.empty() ? "" : "; " + advice));
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
  const bool sized = r.kind == EventKind::kAlloc || r.kind == EventKind::kFree || r.kind == EventKind::kPoolReserve ||
                     r.kind == EventKind::kGraphMem;
  if (sized && r.bytes > kMaxBytes)
    return Status::bad_input(at_offset(path, off) + "corrupt record: " + std::to_string(r.bytes) +
                             " bytes exceed the limit of 2^63-1 bytes");
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
  if (struct stat st {}; ::fstat(::fileno(f), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status::bad_input(path + ": not a moeprof trace: it is a directory");
    r->file_size_ = static_cast<uint64_t>(st.st_size);
  }
  MOEPROF_RETURN_IF_ERROR(r->read_header());
  return r;
}

Result<std::unique_ptr<TraceReader>> TraceReader::open_memory(std::string bytes, const std::string& name) {
  std::unique_ptr<TraceReader> r(new TraceReader());
  r->path_ = name;
  r->memory_ = std::move(bytes);
  r->file_size_ = r->memory_.size();
  if (r->memory_.empty()) return not_a_trace(name, "");
  r->f_ = ::fmemopen(r->memory_.data(), r->memory_.size(), "rb");
  if (!r->f_) return Status::run_failure("cannot read trace " + name + " from memory: " + std::strerror(errno));
  MOEPROF_RETURN_IF_ERROR(r->read_header());
  return r;
}

Status TraceReader::read_header() {
  std::FILE* f = f_;
  const std::string& path = path_;
  FileHeader h{};
  size_t got = std::fread(&h, 1, sizeof(h), f);
  // A file of 1 to 7 bytes that begin the magic is a trace cut short, not another file.
  if (got > 0 && got < 8 && std::memcmp(h.magic, kTraceMagic, got) == 0)
    return Status::bad_input(at_offset(path, got) + "truncated file header");
  if (got < 8 || std::memcmp(h.magic, kTraceMagic, 8) != 0) {
    std::string head(512, '\0');
    std::rewind(f);
    head.resize(std::fread(head.data(), 1, head.size(), f));
    return not_a_trace(path, head);
  }
  if (got < sizeof(h)) return Status::bad_input(at_offset(path, got) + "truncated file header");
  if (h.version < kOldestTraceFormatVersion || h.version > kTraceFormatVersion)
    return Status::bad_input(path + ": trace format version " + std::to_string(h.version) + ", this moeprof reads versions " +
                             std::to_string(kOldestTraceFormatVersion) + " to " + std::to_string(kTraceFormatVersion));
  if (h.record_size != sizeof(TraceRecord) || h.header_size != sizeof(FileHeader))
    return Status::bad_input(at_offset(path, 8) + "unexpected header or record size");
  version_ = h.version;
  off_ = sizeof(h);
  return Status::ok();
}

TraceReader::~TraceReader() {
  if (f_) std::fclose(f_);
}

void TraceReader::mark_truncated(std::string note) {
  truncated_ = true;
  truncation_note_ = std::move(note);
  done_ = true;
}

Status TraceReader::check_frame_header(uint32_t type, uint32_t bytes, uint32_t count) const {
  auto bad = [&](const char* what) { return Status::bad_input(at_offset(path_, off_) + what); };
  const uint64_t b = bytes, n = count;
  if (type == kFrameRecords && n * sizeof(TraceRecord) != b) return bad("corrupt record frame: size does not match count");
  if (type == kFrameFrames && n * 20 != b) return bad("corrupt frame table: size does not match count");
  if ((type == kFrameStrings || type == kFrameStacks) && n * 8 > b)
    return bad(type == kFrameStrings ? "corrupt string table: size smaller than its count" : "corrupt stack table: size smaller than its count");
  if (type == kFrameEnd && b != 0) return bad("corrupt end frame: not empty");
  return Status::ok();
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
        MOEPROF_RETURN_IF_ERROR(add_string(std::string_view(d + p + 8, len), id, poff + p));
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
      // Both counts are the writer's: a value of another type is corruption (a dropped count read
      // as 0 would let the gate pass a run that lost records), and a record count that differs
      // from the records read means a record frame is missing.
      for (const char* key : {"dropped_records", "records"})
        if (j.contains(key) && !j[key].is_number_unsigned())
          return Status::bad_input(at_offset(path_, poff) + "corrupt stats frame: '" + key + "' is not a non-negative integer");
      if (j.contains("dropped_records")) dropped_ = j["dropped_records"].get<uint64_t>();
      if (j.contains("records") && j["records"].get<uint64_t>() != records_read_)
        return Status::bad_input(at_offset(path_, poff) + "corrupt trace: the stats frame counts " +
                                 std::to_string(j["records"].get<uint64_t>()) + " records, " + std::to_string(records_read_) +
                                 " were read (a record frame is missing)");
      return Status::ok();
    }
    default:
      return Status::ok();
  }
}

// Writers intern raw bytes, so a string repeated byte for byte is corruption (a rewrite would
// renumber it). A string that is not UTF-8 is stored with U+FFFD in place of its bad bytes; if that
// (or a valid string after such a one) equals a string already in the table, " #<id>" is appended
// so ids stay distinct and write_trace reproduces the table as read.
Status TraceReader::add_string(std::string_view raw, uint32_t id, uint64_t at) {
  auto repeat = [&](StrId dup) {
    return Status::bad_input(at_offset(path_, at) + "corrupt string table: string " + std::to_string(id) + " repeats string " +
                             std::to_string(index_of(dup)));
  };
  const bool valid = is_valid_utf8(raw);
  StrId dup{};
  if (auto it = altered_raw_.find(std::string(raw)); it != altered_raw_.end()) return repeat(static_cast<StrId>(it->second));
  if (valid && strings_.find(raw, &dup) && !altered_ids_.count(index_of(dup))) return repeat(dup);
  std::string text = valid ? std::string(raw) : valid_utf8(raw);
  bool altered = !valid;
  while (strings_.find(text, &dup)) {
    text += " #" + std::to_string(id);
    altered = true;
  }
  if (altered) {
    altered_raw_.emplace(std::string(raw), id);
    altered_ids_.insert(id);
  }
  strings_.append(std::move(text));
  return Status::ok();
}

Result<bool> TraceReader::next(std::vector<TraceRecord>* out) {
  Result<bool> more = next_frame(out);
  if (!more || !*more) out->clear();
  return more;
}

// The records of a frame are read over *out's current elements: a vector that already holds a
// frame's worth (the streamed analysis recycles them) is not cleared and value-initialized again
// first, which cost as much as reading the file.
Result<bool> TraceReader::next_frame(std::vector<TraceRecord>* out) {
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
    // A header that contradicts itself is corruption, even when the frame also runs past the end
    // of the file (a damaged length field must not read as a truncation).
    MOEPROF_RETURN_IF_ERROR(check_frame_header(fh.type, fh.bytes, fh.count));
    if (off_ + sizeof(fh) + fh.bytes > file_size_) {  // cut short: do not allocate what is not there
      mark_truncated("truncated at byte offset " + std::to_string(off_) + " (frame of " + std::to_string(fh.bytes) +
                     " bytes cut short after " + std::to_string(file_size_ - off_ - sizeof(fh)) + ")");
      break;
    }
    const uint64_t poff = off_ + sizeof(fh);
    char* dst;
    if (fh.type == kFrameRecords) {
      out->resize(fh.count);
      dst = reinterpret_cast<char*>(out->data());
    } else {
      payload_.resize(fh.bytes);
      dst = payload_.data();
    }
    size_t pn = fh.bytes ? std::fread(dst, 1, fh.bytes, f_) : 0;
    if (pn < fh.bytes) {
      mark_truncated("truncated at byte offset " + std::to_string(off_) + " (frame of " + std::to_string(fh.bytes) +
                     " bytes cut short after " + std::to_string(pn) + ")");
      break;
    }
    const uint32_t sum = version_ >= 2 ? crc32c(dst, fh.bytes) : crc32(dst, fh.bytes);
    if (sum != fh.crc) {
      return Status::bad_input(at_offset(path_, off_) + "corrupt trace: checksum mismatch");
    }
    off_ += sizeof(fh) + fh.bytes;
    if (fh.type == kFrameEnd) {
      if (fh.count != static_cast<uint32_t>(records_read_ & 0xFFFFFFFFu))
        return Status::bad_input(at_offset(path_, off_ - sizeof(fh)) + "corrupt trace: the end frame counts " +
                                 std::to_string(fh.count) + " records (low 32 bits), " + std::to_string(records_read_) +
                                 " were read (a record frame is missing)");
      saw_end_ = true;
      done_ = true;
      // The end frame ends the file: bytes after it are another file joined on (two traces
      // concatenated), which would otherwise be dropped without a word.
      if (off_ < file_size_)
        return Status::bad_input(at_offset(path_, off_) + "corrupt trace: " + std::to_string(file_size_ - off_) +
                                 " bytes after the end frame (two files joined?)");
      break;
    }
    if (fh.type != kFrameRecords) {
      MOEPROF_RETURN_IF_ERROR(handle_table_frame(fh.type, fh.count, poff));
      continue;
    }
    records_read_ += fh.count;
    const size_t ns = strings_.size(), nst = stacks_.stack_count();
    for (uint32_t i = 0; i < fh.count; ++i) {
      TraceRecord& r = (*out)[i];
      if (version_ < 2) {  // v1: the stack id's slot held the process id
        if (pid_ == 0) pid_ = index_of(r.stack_id);
        r.stack_id = StackId::kNone;
      }
      Status st = validate_record(r, ns, nst, path_, poff + uint64_t(i) * sizeof(TraceRecord));
      if (!st.is_ok()) return st;
    }
    if (fh.count > 0) return true;
  }
  if (meta_.pid == 0) meta_.pid = pid_;
  return false;
}

namespace {
Result<Trace> read_all(std::unique_ptr<TraceReader> reader, const std::string& path) {
  Trace t;
  t.source_path = path;
  // Records take at most the file's bytes: reserved once, the vector never grows by copying (which
  // held the old and the new array at once: up to 2.5x the records at the peak).
  try {
    t.records.reserve(static_cast<size_t>(reader->file_bytes() / sizeof(TraceRecord)) + 1);
    advise_huge(t.records.data(), t.records.capacity() * sizeof(TraceRecord));
  } catch (const std::bad_alloc&) {  // larger than the address space allows: grow as read (and fail there)
  }
  std::vector<TraceRecord> batch;
  for (;;) {
    MOEPROF_ASSIGN_OR_RETURN(bool more, reader->next(&batch));
    if (!more) break;
    t.records.insert(t.records.end(), batch.begin(), batch.end());
  }
  t.meta = reader->meta();
  t.truncated = reader->truncated();
  t.truncation_note = reader->truncation_note();
  t.dropped_records = reader->dropped_records();
  t.strings = reader->take_strings();
  t.stacks = reader->take_stacks();
  return t;
}
}  // namespace

Result<Trace> read_trace(const std::string& path) {
  MOEPROF_ASSIGN_OR_RETURN(auto reader, TraceReader::open(path));
  return read_all(std::move(reader), path);
}

Result<RunMeta> read_trace_meta(const std::string& path) {
  MOEPROF_ASSIGN_OR_RETURN(auto reader, TraceReader::open(path));
  std::vector<TraceRecord> first;
  MOEPROF_RETURN_IF_ERROR(reader->next(&first).status());
  return reader->meta();
}

Result<Trace> read_trace_memory(std::string bytes, const std::string& name) {
  MOEPROF_ASSIGN_OR_RETURN(auto reader, TraceReader::open_memory(std::move(bytes), name));
  return read_all(std::move(reader), name);
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
  return head.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
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
  os << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << '\n';
}

}  // namespace

void write_jsonl(const Trace& trace, std::ostream& os) {
  os << jsonl_head(trace.meta, trace.dropped_records, trace.truncated, trace.truncation_note) << '\n';
  for (const auto& r : trace.records) jsonl_record(r, trace.strings, trace.stacks, os);
}

Result<uint64_t> write_jsonl_stream(const std::string& path, std::ostream& os, RunMeta* meta) {
  // Pass 1: the head line's figures (metadata, drops, truncation) are known only at the end.
  MOEPROF_ASSIGN_OR_RETURN(auto first, TraceReader::open(path));
  std::vector<TraceRecord> batch;
  for (;;) {
    MOEPROF_ASSIGN_OR_RETURN(bool more, first->next(&batch));
    if (!more) break;
  }
  os << jsonl_head(first->meta(), first->dropped_records(), first->truncated(), first->truncation_note()) << '\n';
  if (meta != nullptr) *meta = first->meta();
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