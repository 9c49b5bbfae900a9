#include "core/trace_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <type_traits>

#include "core/version.h"

namespace moeprof {

namespace {

constexpr uint32_t fourcc(char a, char b, char c, char d) {
  return static_cast<uint32_t>(static_cast<uint8_t>(a)) | (static_cast<uint32_t>(static_cast<uint8_t>(b)) << 8) |
         (static_cast<uint32_t>(static_cast<uint8_t>(c)) << 16) | (static_cast<uint32_t>(static_cast<uint8_t>(d)) << 24);
}
constexpr uint32_t kFrameStrings = fourcc('S', 'T', 'R', 'G');
constexpr uint32_t kFrameRecords = fourcc('R', 'E', 'C', 'S');
constexpr uint32_t kFrameMeta = fourcc('M', 'E', 'T', 'A');
constexpr uint32_t kFrameStats = fourcc('S', 'T', 'A', 'T');
constexpr uint32_t kFrameEnd = fourcc('E', 'N', 'D', ' ');

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_size;
  uint32_t record_size;
  uint32_t flags;
  uint64_t reserved;
};
static_assert(sizeof(FileHeader) == 32);

struct FrameHeader {
  uint32_t type;
  uint32_t bytes;
  uint32_t crc;
  uint32_t count;
};
static_assert(sizeof(FrameHeader) == 16);

constexpr uint32_t kMaxFrameBytes = 1u << 30;

std::array<uint32_t, 8 * 256> make_crc_tables() {
  std::array<uint32_t, 8 * 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (int s = 1; s < 8; ++s) t[s * 256 + i] = (t[(s - 1) * 256 + i] >> 8) ^ t[t[(s - 1) * 256 + i] & 0xFF];
  }
  return t;
}
const std::array<uint32_t, 8 * 256> kCrc = make_crc_tables();

}  // namespace

// CRC-32 (IEEE 802.3, reflected), slicing-by-8.
uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= crc;
    crc = kCrc[7 * 256 + (lo & 0xFF)] ^ kCrc[6 * 256 + ((lo >> 8) & 0xFF)] ^ kCrc[5 * 256 + ((lo >> 16) & 0xFF)] ^
          kCrc[4 * 256 + (lo >> 24)] ^ kCrc[3 * 256 + (hi & 0xFF)] ^ kCrc[2 * 256 + ((hi >> 8) & 0xFF)] ^
          kCrc[1 * 256 + ((hi >> 16) & 0xFF)] ^ kCrc[0 * 256 + (hi >> 24)];
    p += 8;
    n -= 8;
  }
  while (n--) crc = kCrc[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

// ---------------------------------------------------------------------------------------------
// RunMeta JSON

std::string run_meta_to_json(const RunMeta& m) {
  nlohmann::ordered_json j;
  j["name"] = m.name;
  j["model"] = m.model;
  j["mode"] = m.mode;
  j["backend"] = m.backend;
  j["device_name"] = m.device_name;
  j["moeprof_version"] = m.moeprof_version;
  j["tokens"] = m.tokens;
  j["layers"] = m.layers;
  j["tp_rank"] = m.tp_rank;
  j["tp_size"] = m.tp_size;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  for (const auto& [k, v] : m.extra) extra[k] = v;
  j["extra"] = extra;
  return j.dump();
}

Status run_meta_from_json(std::string_view text, RunMeta* m) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::bad_input("run metadata is not a JSON object");
  auto str = [&](const char* k, std::string* out) {
    if (j.contains(k) && j[k].is_string()) *out = j[k].get<std::string>();
  };
  // Integers must be present as integers within range; anything else is corrupt metadata.
  auto integer = [&](const char* k, int64_t lo, int64_t hi, auto* out) -> Status {
    if (!j.contains(k)) return Status::ok();
    const auto& v = j[k];
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      return Status::bad_input(std::string("run metadata: '") + k + "' must be an integer in [" + std::to_string(lo) +
                               ", " + std::to_string(hi) + "]");
    *out = static_cast<std::remove_pointer_t<decltype(out)>>(v.get<int64_t>());
    return Status::ok();
  };
  str("name", &m->name);
  str("model", &m->model);
  str("mode", &m->mode);
  str("backend", &m->backend);
  str("device_name", &m->device_name);
  str("moeprof_version", &m->moeprof_version);
  MOEPROF_RETURN_IF_ERROR(integer("tokens", 0, int64_t{1} << 40, &m->tokens));
  MOEPROF_RETURN_IF_ERROR(integer("layers", 0, 1 << 20, &m->layers));
  MOEPROF_RETURN_IF_ERROR(integer("tp_size", 1, 1 << 20, &m->tp_size));
  MOEPROF_RETURN_IF_ERROR(integer("tp_rank", 0, (1 << 20) - 1, &m->tp_rank));
  if (j.contains("extra")) {
    if (!j["extra"].is_object()) return Status::bad_input("run metadata: 'extra' must be an object");
    for (auto& [k, v] : j["extra"].items()) {
      if (v.is_string()) m->extra[k] = v.get<std::string>();
      else if (v.is_number() || v.is_boolean()) m->extra[k] = v.dump();
      else return Status::bad_input("run metadata: extra value '" + k + "' must be a string, number or boolean");
    }
  }
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------
// Writer

Result<std::unique_ptr<TraceWriter>> TraceWriter::open(const std::string& path, const RunMeta& meta,
                                                       size_t records_per_frame) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::bad_input("cannot create trace " + path + ": " + std::strerror(errno));
  std::unique_ptr<TraceWriter> w(new TraceWriter());
  w->fd_ = fd;
  w->path_ = path;
  w->records_per_frame_ = records_per_frame == 0 ? 1 : records_per_frame;
  w->pending_.reserve(w->records_per_frame_);
  FileHeader h{};
  std::memcpy(h.magic, kTraceMagic, 8);
  h.version = kTraceFormatVersion;
  h.header_size = sizeof(FileHeader);
  h.record_size = sizeof(TraceRecord);
  MOEPROF_RETURN_IF_ERROR(w->write_all(&h, sizeof(h)));
  MOEPROF_RETURN_IF_ERROR(w->set_meta(meta));
  return w;
}

TraceWriter::~TraceWriter() { (void)close(); }

Status TraceWriter::write_all(const void* p, size_t n) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t k = ::write(fd_, c, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return Status::run_failure("writing trace " + path_ + ": " + std::strerror(errno));
    }
    c += k;
    n -= static_cast<size_t>(k);
  }
  return Status::ok();
}

Status TraceWriter::write_frame(uint32_t type, const void* payload, size_t bytes, uint32_t count) {
  if (!error_.is_ok()) return error_;
  if (fd_ < 0) return error_ = Status::run_failure("trace " + path_ + " is closed");
  FrameHeader fh{type, static_cast<uint32_t>(bytes), crc32(payload, bytes), count};
  // One buffer per frame so the frame reaches the OS in a single write where possible.
  std::vector<char> buf(sizeof(fh) + bytes);
  std::memcpy(buf.data(), &fh, sizeof(fh));
  if (bytes) std::memcpy(buf.data() + sizeof(fh), payload, bytes);
  Status st = write_all(buf.data(), buf.size());
  if (!st.is_ok()) error_ = st;
  return st;
}

uint32_t TraceWriter::intern(std::string_view s) { return strings_.intern(s); }

Status TraceWriter::append(const TraceRecord& r) {
  pending_.push_back(r);
  ++records_total_;
  if (pending_.size() >= records_per_frame_) return flush();
  return error_;
}

Status TraceWriter::set_meta(const RunMeta& meta) {
  std::string text = run_meta_to_json(meta);
  return write_frame(kFrameMeta, text.data(), text.size(), 0);
}

Status TraceWriter::flush() {
  if (closed_) return error_;
  if (strings_written_ < strings_.size()) {
    std::vector<char> payload;
    uint32_t n = 0;
    for (uint32_t id = strings_written_; id < strings_.size(); ++id, ++n) {
      const std::string& s = strings_.get(id);
      uint32_t len = static_cast<uint32_t>(s.size());
      size_t at = payload.size();
      payload.resize(at + 8 + len);
      std::memcpy(payload.data() + at, &id, 4);
      std::memcpy(payload.data() + at + 4, &len, 4);
      std::memcpy(payload.data() + at + 8, s.data(), len);
    }
    MOEPROF_RETURN_IF_ERROR(write_frame(kFrameStrings, payload.data(), payload.size(), n));
    strings_written_ = static_cast<uint32_t>(strings_.size());
  }
  if (!pending_.empty()) {
    MOEPROF_RETURN_IF_ERROR(write_frame(kFrameRecords, pending_.data(), pending_.size() * sizeof(TraceRecord),
                                        static_cast<uint32_t>(pending_.size())));
    pending_.clear();
  }
  return error_;
}

Status TraceWriter::close() {
  if (closed_) return error_;
  Status st = flush();
  if (st.is_ok()) {
    nlohmann::ordered_json j;
    j["dropped_records"] = dropped_;
    j["records"] = records_total_;
    std::string text = j.dump();
    st = write_frame(kFrameStats, text.data(), text.size(), 0);
  }
  if (st.is_ok()) st = write_frame(kFrameEnd, nullptr, 0, static_cast<uint32_t>(records_total_ & 0xFFFFFFFFu));
  closed_ = true;
  if (fd_ >= 0) {
    if (::close(fd_) != 0 && st.is_ok()) st = Status::run_failure("closing trace " + path_ + ": " + std::strerror(errno));
    fd_ = -1;
  }
  if (!st.is_ok() && error_.is_ok()) error_ = st;
  return error_;
}

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

Status validate_record(const TraceRecord& r, size_t nstrings, const std::string& path, uint64_t off) {
  if (r.kind == 0 || r.kind > kMaxEventKind)
    return Status::bad_input(at_offset(path, off) + "corrupt record: event kind " + std::to_string(r.kind));
  if (r.category >= kNumCategories)
    return Status::bad_input(at_offset(path, off) + "corrupt record: category " + std::to_string(r.category));
  if (r.dtype >= kNumDTypes)
    return Status::bad_input(at_offset(path, off) + "corrupt record: dtype " + std::to_string(r.dtype));
  if (r.mem_kind > kMaxMemKind)
    return Status::bad_input(at_offset(path, off) + "corrupt record: memory kind " + std::to_string(r.mem_kind));
  if (r.name_id >= nstrings || r.scope_id >= nstrings || r.shape_id >= nstrings)
    return Status::bad_input(at_offset(path, off) + "corrupt record: string id not defined before use");
  return Status::ok();
}

}  // namespace

Result<Trace> read_trace(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Status::bad_input("cannot open trace " + path + ": " + std::strerror(errno));
  struct Closer {
    std::FILE* f;
    ~Closer() { std::fclose(f); }
  } closer{f};
  std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
  uint64_t file_size = 0;
  if (struct stat st {}; ::fstat(::fileno(f), &st) == 0) file_size = static_cast<uint64_t>(st.st_size);

  Trace t;
  t.source_path = path;
  FileHeader h{};
  size_t got = std::fread(&h, 1, sizeof(h), f);
  if (got < 8 || std::memcmp(h.magic, kTraceMagic, 8) != 0)
    return Status::bad_input(at_offset(path, 0) + "not a moeprof trace (bad magic)");
  if (got < sizeof(h)) return Status::bad_input(at_offset(path, got) + "truncated file header");
  if (h.version != kTraceFormatVersion)
    return Status::bad_input(path + ": trace format version " + std::to_string(h.version) +
                             ", this moeprof reads version " + std::to_string(kTraceFormatVersion));
  if (h.record_size != sizeof(TraceRecord) || h.header_size != sizeof(FileHeader))
    return Status::bad_input(at_offset(path, 8) + "unexpected header or record size");

  uint64_t off = sizeof(h);
  bool saw_end = false;
  std::vector<char> payload;
  for (;;) {
    FrameHeader fh{};
    size_t n = std::fread(&fh, 1, sizeof(fh), f);
    if (n == 0) break;
    if (n < sizeof(fh)) {
      t.truncated = true;
      t.truncation_note = "truncated at byte offset " + std::to_string(off) + " (frame header cut short)";
      break;
    }
    if (fh.type != kFrameStrings && fh.type != kFrameRecords && fh.type != kFrameMeta && fh.type != kFrameStats &&
        fh.type != kFrameEnd)
      return Status::bad_input(at_offset(path, off) + "corrupt trace: unknown frame type");
    if (fh.bytes > kMaxFrameBytes) return Status::bad_input(at_offset(path, off) + "corrupt trace: frame too large");
    if (off + sizeof(fh) + fh.bytes > file_size) {  // cut short: do not allocate what is not there
      t.truncated = true;
      t.truncation_note = "truncated at byte offset " + std::to_string(off) + " (frame of " + std::to_string(fh.bytes) +
                          " bytes cut short after " + std::to_string(file_size - off - sizeof(fh)) + ")";
      break;
    }
    payload.resize(fh.bytes);
    size_t pn = fh.bytes ? std::fread(payload.data(), 1, fh.bytes, f) : 0;
    if (pn < fh.bytes) {
      t.truncated = true;
      t.truncation_note = "truncated at byte offset " + std::to_string(off) + " (frame of " +
                          std::to_string(fh.bytes) + " bytes cut short after " + std::to_string(pn) + ")";
      break;
    }
    if (crc32(payload.data(), fh.bytes) != fh.crc)
      return Status::bad_input(at_offset(path, off) + "corrupt trace: checksum mismatch");
    const uint64_t poff = off + sizeof(fh);
    switch (fh.type) {
      case kFrameStrings: {
        size_t p = 0;
        for (uint32_t i = 0; i < fh.count; ++i) {
          uint32_t id, len;
          if (p + 8 > fh.bytes) return Status::bad_input(at_offset(path, poff + p) + "corrupt string table");
          std::memcpy(&id, payload.data() + p, 4);
          std::memcpy(&len, payload.data() + p + 4, 4);
          if (p + 8 + len > fh.bytes || id != t.strings.size())
            return Status::bad_input(at_offset(path, poff + p) + "corrupt string table");
          t.strings.append(valid_utf8(std::string(payload.data() + p + 8, len)));
          p += 8 + len;
        }
        break;
      }
      case kFrameRecords: {
        if (static_cast<uint64_t>(fh.count) * sizeof(TraceRecord) != fh.bytes)
          return Status::bad_input(at_offset(path, off) + "corrupt record frame: size does not match count");
        size_t base = t.records.size();
        t.records.resize(base + fh.count);
        std::memcpy(t.records.data() + base, payload.data(), fh.bytes);
        const size_t ns = t.strings.size();
        for (uint32_t i = 0; i < fh.count; ++i) {
          MOEPROF_RETURN_IF_ERROR(validate_record(t.records[base + i], ns, path, poff + uint64_t(i) * sizeof(TraceRecord)));
        }
        break;
      }
      case kFrameMeta:
        MOEPROF_RETURN_IF_ERROR(run_meta_from_json(std::string_view(payload.data(), fh.bytes), &t.meta)
                                    .with_context(at_offset(path, poff) + "corrupt metadata"));
        break;
      case kFrameStats: {
        auto j = nlohmann::json::parse(payload.begin(), payload.end(), nullptr, false);
        if (j.is_discarded() || !j.is_object()) return Status::bad_input(at_offset(path, poff) + "corrupt stats frame");
        if (j.contains("dropped_records") && j["dropped_records"].is_number_unsigned())
          t.dropped_records = j["dropped_records"].get<uint64_t>();
        break;
      }
      case kFrameEnd:
        saw_end = true;
        break;
    }
    off += sizeof(fh) + fh.bytes;
    if (saw_end) break;
  }
  if (!saw_end && !t.truncated) {
    t.truncated = true;
    t.truncation_note = "incomplete at byte offset " + std::to_string(off) +
                        " (no end frame: the recording process did not close the trace)";
  }
  return t;
}

Status write_trace(const std::string& path, const Trace& trace) {
  MOEPROF_ASSIGN_OR_RETURN(auto w, TraceWriter::open(path, trace.meta));
  for (uint32_t id = 1; id < trace.strings.size(); ++id) w->intern(trace.strings.get(id));
  for (const auto& r : trace.records) MOEPROF_RETURN_IF_ERROR(w->append(r));
  w->add_dropped(trace.dropped_records);
  return w->close();
}

void write_jsonl(const Trace& trace, std::ostream& os) {
  nlohmann::ordered_json head;
  head["meta"] = nlohmann::ordered_json::parse(run_meta_to_json(trace.meta));
  head["dropped_records"] = trace.dropped_records;
  head["truncated"] = trace.truncated;
  if (trace.truncated) head["truncation_note"] = trace.truncation_note;
  os << head.dump() << '\n';
  for (const auto& r : trace.records) {
    nlohmann::ordered_json j;
    j["ts"] = r.timestamp_ns;
    j["kind"] = event_kind_name(static_cast<EventKind>(r.kind));
    j["addr"] = r.address;
    j["bytes"] = r.bytes;
    j["seq"] = r.seq;
    j["device"] = r.device;
    if (r.name_id) j["name"] = trace.str(r.name_id);
    if (r.scope_id) j["scope"] = trace.str(r.scope_id);
    if (r.shape_id) j["shape"] = trace.str(r.shape_id);
    j["category"] = category_name(static_cast<Category>(r.category));
    if (r.dtype) j["dtype"] = dtype_name(static_cast<DType>(r.dtype));
    j["mem_kind"] = mem_kind_name(static_cast<MemKind>(r.mem_kind));
    j["stream"] = r.stream;
    j["pid"] = r.pid;
    j["tid"] = r.tid;
    if (r.flags) j["flags"] = r.flags;
    os << j.dump() << '\n';
  }
}

}  // namespace moeprof
