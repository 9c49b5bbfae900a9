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
#include <time.h>
#include <type_traits>

#include "core/version.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

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
constexpr uint32_t kFrameFrames = fourcc('F', 'R', 'M', 'S');
constexpr uint32_t kFrameStacks = fourcc('S', 'T', 'C', 'K');

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

std::array<uint32_t, 8 * 256> make_crc_tables(uint32_t poly) {
  std::array<uint32_t, 8 * 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? poly ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (int s = 1; s < 8; ++s) t[s * 256 + i] = (t[(s - 1) * 256 + i] >> 8) ^ t[t[(s - 1) * 256 + i] & 0xFF];
  }
  return t;
}
const std::array<uint32_t, 8 * 256> kCrc = make_crc_tables(0xEDB88320u);   // IEEE 802.3, reflected
const std::array<uint32_t, 8 * 256> kCrcC = make_crc_tables(0x82F63B78u);  // Castagnoli, reflected

// Slicing-by-8 over a reflected table set.
uint32_t crc_sliced(const std::array<uint32_t, 8 * 256>& T, const uint8_t* p, size_t n, uint32_t crc) {
  crc = ~crc;
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= crc;
    crc = T[7 * 256 + (lo & 0xFF)] ^ T[6 * 256 + ((lo >> 8) & 0xFF)] ^ T[5 * 256 + ((lo >> 16) & 0xFF)] ^
          T[4 * 256 + (lo >> 24)] ^ T[3 * 256 + (hi & 0xFF)] ^ T[2 * 256 + ((hi >> 8) & 0xFF)] ^
          T[1 * 256 + ((hi >> 16) & 0xFF)] ^ T[0 * 256 + (hi >> 24)];
    p += 8;
    n -= 8;
  }
  while (n--) crc = T[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

#if defined(__x86_64__)
// SSE4.2's crc32 instruction computes CRC-32C. Three independent streams hide its 3-cycle latency;
// they are combined by shifting the partial CRCs over the bytes that follow them (a shift by N
// zero bytes is a linear map, applied here with the software tables, once per block).
__attribute__((target("sse4.2"))) uint32_t crc32c_hw_serial(const uint8_t* p, size_t n, uint32_t c) {
  uint64_t crc = c;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    crc = _mm_crc32_u64(crc, v);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<uint32_t>(crc);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

// Multiplies a CRC state by x^(8*len) mod P (advances it over `len` zero bytes) with a matrix
// built once per block length.
struct CrcShift {
  uint32_t table[4][256];
  explicit CrcShift(size_t len) {
    // Column i = the state after shifting the single bit i over len zero bytes.
    uint32_t col[32];
    for (int i = 0; i < 32; ++i) {
      uint32_t v = 1u << i;
      for (size_t k = 0; k < len; ++k) v = kCrcC[v & 0xFF] ^ (v >> 8);
      col[i] = v;
    }
    for (int b = 0; b < 4; ++b)
      for (uint32_t x = 0; x < 256; ++x) {
        uint32_t r = 0;
        for (int i = 0; i < 8; ++i)
          if (x & (1u << i)) r ^= col[b * 8 + i];
        table[b][x] = r;
      }
  }
  uint32_t apply(uint32_t v) const {
    return table[0][v & 0xFF] ^ table[1][(v >> 8) & 0xFF] ^ table[2][(v >> 16) & 0xFF] ^ table[3][v >> 24];
  }
};

constexpr size_t kCrcBlock = 8192;  // bytes per stream per round
const CrcShift& crc_shift_block() {
  static const CrcShift s(kCrcBlock);
  return s;
}

__attribute__((target("sse4.2"))) uint32_t crc32c_hw(const uint8_t* p, size_t n, uint32_t crc) {
  crc = ~crc;
  const CrcShift& shift = crc_shift_block();
  while (n >= 3 * kCrcBlock) {
    uint64_t a = crc, b = 0, c = 0;
    const uint8_t* pa = p;
    const uint8_t* pb = p + kCrcBlock;
    const uint8_t* pc = p + 2 * kCrcBlock;
    for (size_t i = 0; i < kCrcBlock; i += 8) {
      uint64_t va, vb, vc;
      std::memcpy(&va, pa + i, 8);
      std::memcpy(&vb, pb + i, 8);
      std::memcpy(&vc, pc + i, 8);
      a = _mm_crc32_u64(a, va);
      b = _mm_crc32_u64(b, vb);
      c = _mm_crc32_u64(c, vc);
    }
    // crc(A||B||C) = shift(shift(a) ^ b) ^ c for raw (non-inverted) states starting at 0 for B, C.
    uint32_t s = shift.apply(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b);
    crc = shift.apply(s) ^ static_cast<uint32_t>(c);
    p += 3 * kCrcBlock;
    n -= 3 * kCrcBlock;
  }
  return ~crc32c_hw_serial(p, n, crc);
}

const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
#endif

}  // namespace

// CRC-32 (IEEE 802.3, reflected), slicing-by-8: the checksum of format version 1.
uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  return crc_sliced(kCrc, static_cast<const uint8_t*>(data), n, crc);
}

// CRC-32C (Castagnoli): the checksum of format version 2.
uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
#if defined(__x86_64__)
  if (kHaveSse42) return crc32c_hw(static_cast<const uint8_t*>(data), n, crc);
#endif
  return crc_sliced(kCrcC, static_cast<const uint8_t*>(data), n, crc);
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
  if (m.pid) j["pid"] = m.pid;
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
  MOEPROF_RETURN_IF_ERROR(integer("pid", 0, 0xFFFFFFFFll, &m->pid));
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

namespace {
uint64_t coarse_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}
}  // namespace

Result<std::unique_ptr<TraceWriter>> TraceWriter::open(const std::string& path, const RunMeta& meta,
                                                       const TraceWriterOptions& opt) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::bad_input("cannot create trace " + path + ": " + std::strerror(errno));
  std::unique_ptr<TraceWriter> w(new TraceWriter());
  w->fd_ = fd;
  w->path_ = path;
  w->opt_ = opt;
  if (w->opt_.records_per_frame == 0) w->opt_.records_per_frame = 1;
  w->pending_.reserve(w->opt_.records_per_frame);
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
  FrameHeader fh{type, static_cast<uint32_t>(bytes), crc32c(payload, bytes), count};
  // One buffer per frame so the frame reaches the OS in a single write where possible.
  std::vector<char> buf(sizeof(fh) + bytes);
  std::memcpy(buf.data(), &fh, sizeof(fh));
  if (bytes) std::memcpy(buf.data() + sizeof(fh), payload, bytes);
  Status st = write_all(buf.data(), buf.size());
  if (!st.is_ok()) error_ = st;
  return st;
}

StrId TraceWriter::intern(std::string_view s) { return strings_.intern(s); }

Status TraceWriter::append(const TraceRecord& r) {
  if (pending_.empty() && opt_.flush_interval_ms) pending_since_ns_ = coarse_now_ns();
  pending_.push_back(r);
  ++records_total_;
  if (pending_.size() >= opt_.records_per_frame) return flush();
  if (opt_.flush_interval_ms && coarse_now_ns() - pending_since_ns_ >= opt_.flush_interval_ms * 1000000ull)
    return flush();
  return error_;
}

Status TraceWriter::set_meta(const RunMeta& meta) {
  std::string text = run_meta_to_json(meta);
  return write_frame(kFrameMeta, text.data(), text.size(), 0);
}

namespace {
void put_u32(std::vector<char>& b, uint32_t v) {
  size_t at = b.size();
  b.resize(at + 4);
  std::memcpy(b.data() + at, &v, 4);
}
}  // namespace

Status TraceWriter::flush() {
  if (closed_) return error_;
  if (strings_written_ < strings_.size()) {
    std::vector<char> payload;
    uint32_t n = 0;
    for (uint32_t id = strings_written_; id < strings_.size(); ++id, ++n) {
      const std::string& s = strings_.get(static_cast<StrId>(id));
      put_u32(payload, id);
      put_u32(payload, static_cast<uint32_t>(s.size()));
      payload.insert(payload.end(), s.begin(), s.end());
    }
    MOEPROF_RETURN_IF_ERROR(write_frame(kFrameStrings, payload.data(), payload.size(), n));
    strings_written_ = static_cast<uint32_t>(strings_.size());
  }
  if (frames_written_ < stacks_.frame_count()) {
    std::vector<char> payload;
    uint32_t n = 0;
    for (uint32_t id = frames_written_; id < stacks_.frame_count(); ++id, ++n) {
      const StackFrame& f = stacks_.frame(id);
      for (uint32_t v : {id, index_of(f.function), index_of(f.file), f.line, uint32_t(f.kind)}) put_u32(payload, v);
    }
    MOEPROF_RETURN_IF_ERROR(write_frame(kFrameFrames, payload.data(), payload.size(), n));
    frames_written_ = static_cast<uint32_t>(stacks_.frame_count());
  }
  if (stacks_written_ < stacks_.stack_count()) {
    std::vector<char> payload;
    uint32_t n = 0;
    for (uint32_t id = stacks_written_; id < stacks_.stack_count(); ++id, ++n) {
      const auto& st = stacks_.stack(static_cast<StackId>(id));
      put_u32(payload, id);
      put_u32(payload, static_cast<uint32_t>(st.size()));
      for (uint32_t fid : st) put_u32(payload, fid);
    }
    MOEPROF_RETURN_IF_ERROR(write_frame(kFrameStacks, payload.data(), payload.size(), n));
    stacks_written_ = static_cast<uint32_t>(stacks_.stack_count());
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

Status write_trace(const std::string& path, const Trace& trace) {
  MOEPROF_ASSIGN_OR_RETURN(auto w, TraceWriter::open(path, trace.meta, TraceWriterOptions{4096, 0}));
  for (uint32_t id = 1; id < trace.strings.size(); ++id) w->intern(trace.strings.get(static_cast<StrId>(id)));
  for (uint32_t id = 0; id < trace.stacks.frame_count(); ++id) w->intern_frame(trace.stacks.frame(id));
  for (uint32_t id = 1; id < trace.stacks.stack_count(); ++id) w->intern_stack(trace.stacks.stack(static_cast<StackId>(id)));
  for (const auto& r : trace.records) MOEPROF_RETURN_IF_ERROR(w->append(r));
  w->add_dropped(trace.dropped_records);
  return w->close();
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
    j["kind"] = event_kind_name(r.kind);
    j["addr"] = r.address;
    j["bytes"] = r.bytes;
    j["seq"] = r.seq;
    j["device"] = r.device;
    if (r.name_id != StrId::kNone) j["name"] = trace.str(r.name_id);
    if (r.scope_id != StrId::kNone) j["scope"] = trace.str(r.scope_id);
    if (r.shape_id != StrId::kNone) j["shape"] = trace.str(r.shape_id);
    j["category"] = category_name(r.category);
    if (r.dtype != DType::kUnknown) j["dtype"] = dtype_name(r.dtype);
    j["mem_kind"] = mem_kind_name(r.mem_kind);
    j["stream"] = r.stream;
    j["tid"] = r.tid;
    if (r.flags) j["flags"] = r.flags;
    if (r.stack_id != StackId::kNone) j["stack"] = format_stack(trace, r.stack_id);
    os << j.dump() << '\n';
  }
}

}  // namespace moeprof
