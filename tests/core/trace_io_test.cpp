// .mtrace round trip, truncation, corruption and the golden file.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/trace_io.h"

using namespace moeprof;
namespace fs = std::filesystem;

namespace {

std::string tmp_path(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("moeprof_core_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

std::vector<char> read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const std::string& p, const std::vector<char>& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
}

// A random trace: random names/scopes, every field random within its valid range.
Trace random_trace(std::mt19937_64& rng, size_t n) {
  Trace t;
  t.meta.name = "rt";
  t.meta.model = "tiny";
  t.meta.mode = "baseline";
  t.meta.backend = "cpu";
  t.meta.tokens = 37;
  t.meta.layers = 3;
  t.meta.tp_size = 4;
  t.meta.tp_rank = 2;
  t.meta.extra["tp_emulated"] = "true";
  std::vector<StrId> ids;
  for (int i = 0; i < 23; ++i) ids.push_back(t.strings.intern("layer." + std::to_string(rng() % 61) + "/s" + std::to_string(i)));
  for (size_t i = 0; i < n; ++i) {
    TraceRecord r;
    r.kind = static_cast<EventKind>(1 + rng() % kMaxEventKind);
    r.timestamp_ns = rng();
    r.address = rng();
    r.bytes = rng() % (1ull << 40);
    r.seq = i;
    r.name_id = ids[rng() % ids.size()];
    r.scope_id = ids[rng() % ids.size()];
    r.shape_id = rng() % 2 ? ids[rng() % ids.size()] : StrId::kNone;
    r.stream = static_cast<uint32_t>(rng());
    r.tid = static_cast<uint32_t>(rng());
    r.device = static_cast<uint16_t>(rng() % 8);
    r.category = static_cast<Category>(rng() % kNumCategories);
    r.dtype = static_cast<DType>(rng() % kNumDTypes);
    r.mem_kind = static_cast<MemKind>(rng() % (kMaxMemKind + 1));
    r.flags = static_cast<uint16_t>(rng() % 8);
    t.records.push_back(r);
  }
  t.dropped_records = 17;
  return t;
}

// Appends t's records as a recorder would: the writer interns names in first-use order.
void append_records(TraceWriter& w, const Trace& t) {
  for (const auto& r : t.records) {
    TraceRecord c = r;
    c.name_id = w.intern(t.str(r.name_id));
    c.scope_id = w.intern(t.str(r.scope_id));
    c.shape_id = r.shape_id != StrId::kNone ? w.intern(t.str(r.shape_id)) : StrId::kNone;
    REQUIRE(w.append(c).is_ok());
  }
}

// Writes through the streaming writer with a small frame so the file has many frames.
void write_streamed(const std::string& path, const Trace& t, size_t per_frame) {
  auto w = TraceWriter::open(path, t.meta, TraceWriterOptions{per_frame, 0});
  REQUIRE(w.is_ok());
  append_records(*w.value(), t);
  w.value()->add_dropped(t.dropped_records);
  REQUIRE(w.value()->close().is_ok());
}

void require_same_records(const Trace& a, const Trace& b, size_t n) {
  REQUIRE(b.records.size() >= n);
  for (size_t i = 0; i < n; ++i) {
    const auto& x = a.records[i];
    const auto& y = b.records[i];
    REQUIRE(x.timestamp_ns == y.timestamp_ns);
    REQUIRE(x.address == y.address);
    REQUIRE(x.bytes == y.bytes);
    REQUIRE(x.kind == y.kind);
    REQUIRE(x.category == y.category);
    REQUIRE(x.device == y.device);
    REQUIRE(x.flags == y.flags);
    REQUIRE(a.str(x.name_id) == b.str(y.name_id));
    REQUIRE(a.str(x.scope_id) == b.str(y.scope_id));
    REQUIRE(a.str(x.shape_id) == b.str(y.shape_id));
  }
}

}  // namespace

TEST_CASE("mtrace round trip through the streaming writer", "[core][trace_io]") {
  std::mt19937_64 rng(20261130);
  for (size_t per_frame : {1u, 7u, 4096u}) {
    Trace t = random_trace(rng, 1009);
    const std::string p = tmp_path("rt.mtrace");
    write_streamed(p, t, per_frame);
    auto back = read_trace(p);
    REQUIRE(back.is_ok());
    CHECK_FALSE(back->truncated);
    REQUIRE(back->records.size() == t.records.size());
    require_same_records(t, back.value(), t.records.size());
    CHECK(back->dropped_records == 17);
    CHECK(back->meta.model == "tiny");
    CHECK(back->meta.tokens == 37);
    CHECK(back->meta.tp_size == 4);
    CHECK(back->meta.tp_rank == 2);
    CHECK(back->meta.extra.at("tp_emulated") == "true");
  }
}

TEST_CASE("write_trace and read_trace keep records byte for byte", "[core][trace_io]") {
  std::mt19937_64 rng(7);
  Trace t = random_trace(rng, 333);
  const std::string p = tmp_path("wt.mtrace");
  REQUIRE(write_trace(p, t).is_ok());
  auto back = read_trace(p);
  REQUIRE(back.is_ok());
  REQUIRE(back->records.size() == t.records.size());
  // Same string-id assignment (interned in id order), so records match to the byte.
  CHECK(std::memcmp(back->records.data(), t.records.data(), t.records.size() * sizeof(TraceRecord)) == 0);
}

TEST_CASE("a trace cut anywhere reads back up to the cut", "[core][trace_io]") {
  std::mt19937_64 rng(99);
  Trace t = random_trace(rng, 200);
  const std::string p = tmp_path("cut_src.mtrace");
  write_streamed(p, t, 13);
  const auto bytes = read_bytes(p);
  const std::string q = tmp_path("cut.mtrace");
  size_t prev = 0;
  // Every cut point after the header: the reader never fails, never invents records, and the
  // number of records read never decreases as the cut moves later.
  for (size_t cut = 32; cut < bytes.size(); cut += 1 + rng() % 97) {
    write_bytes(q, std::vector<char>(bytes.begin(), bytes.begin() + static_cast<long>(cut)));
    auto r = read_trace(q);
    REQUIRE(r.is_ok());
    CHECK(r->truncated);
    CHECK(r->truncation_note.find("byte offset") != std::string::npos);
    REQUIRE(r->records.size() <= t.records.size());
    CHECK((r->records.size() % 13 == 0 || r->records.size() == t.records.size()));
    CHECK(r->records.size() >= prev);
    prev = r->records.size();
    require_same_records(t, r.value(), r->records.size());
  }
}

TEST_CASE("a writer that was never closed leaves a readable, flagged trace", "[core][trace_io]") {
  std::mt19937_64 rng(5);
  Trace t = random_trace(rng, 50);
  const std::string p = tmp_path("open.mtrace");
  const std::string snap = tmp_path("open_snapshot.mtrace");
  {
    auto w = TraceWriter::open(p, t.meta, TraceWriterOptions{8, 0});
    REQUIRE(w.is_ok());
    append_records(*w.value(), t);
    REQUIRE(w.value()->flush().is_ok());
    fs::copy_file(p, snap, fs::copy_options::overwrite_existing);  // what a crash would leave
  }
  auto r = read_trace(snap);
  REQUIRE(r.is_ok());
  CHECK(r->truncated);
  CHECK(r->truncation_note.find("no end frame") != std::string::npos);
  CHECK(r->records.size() == 50);
}

TEST_CASE("corrupt, foreign and future traces are rejected with a byte offset", "[core][trace_io]") {
  std::mt19937_64 rng(11);
  Trace t = random_trace(rng, 64);
  const std::string p = tmp_path("good.mtrace");
  write_streamed(p, t, 16);
  const auto bytes = read_bytes(p);
  const std::string q = tmp_path("bad.mtrace");

  SECTION("flipped payload byte -> checksum mismatch") {
    auto b = bytes;
    b[b.size() / 2] ^= 0x5A;
    write_bytes(q, b);
    auto r = read_trace(q);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == ErrorCode::kBadInput);
    CHECK(r.status().message().find("byte offset") != std::string::npos);
  }
  SECTION("bad magic") {
    auto b = bytes;
    b[0] = 'X';
    write_bytes(q, b);
    auto r = read_trace(q);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message().find("not a moeprof trace") != std::string::npos);
  }
  SECTION("newer format version") {
    auto b = bytes;
    uint32_t v = kTraceFormatVersion + 1;
    std::memcpy(b.data() + 8, &v, 4);
    write_bytes(q, b);
    auto r = read_trace(q);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message().find("version " + std::to_string(v)) != std::string::npos);
  }
  SECTION("missing file") {
    auto r = read_trace(tmp_path("does_not_exist.mtrace"));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == ErrorCode::kBadInput);
  }
  SECTION("empty file") {
    write_bytes(q, {});
    auto r = read_trace(q);
    REQUIRE_FALSE(r.is_ok());
  }
}

TEST_CASE("crc32 matches the IEEE check value", "[core][trace_io]") {
  const char* s = "123456789";
  CHECK(crc32(s, 9) == 0xCBF43926u);
  // Incremental == one shot, on random data of odd length.
  std::mt19937 rng(3);
  std::vector<uint8_t> d(1001);
  for (auto& x : d) x = static_cast<uint8_t>(rng());
  CHECK(crc32(d.data() + 500, 501, crc32(d.data(), 500)) == crc32(d.data(), 1001));
  // The carry-less multiplication path (64-byte folds, then 16-byte ones, then a tail) equals the
  // tables and a bit-at-a-time reference at every length around its boundaries, odd offsets and
  // chained states.
  std::vector<uint8_t> buf(4099);
  for (auto& x : buf) x = static_cast<uint8_t>(rng());
  std::vector<size_t> lengths;
  for (size_t n = 0; n < 200; ++n) lengths.push_back(n);
  for (size_t n : {size_t(1023), size_t(1024), size_t(1025), size_t(4093)}) lengths.push_back(n);
  for (size_t n : lengths) {
    const size_t off = 1 + n % 5;
    const uint32_t init = static_cast<uint32_t>(rng());
    uint32_t ref = ~init;
    for (size_t i = 0; i < n; ++i) {
      ref ^= buf[off + i];
      for (int k = 0; k < 8; ++k) ref = (ref & 1) ? 0xEDB88320u ^ (ref >> 1) : ref >> 1;
    }
    INFO("length " << n);
    CHECK(crc32(buf.data() + off, n, init) == ~ref);
    CHECK(crc32_tables(buf.data() + off, n, init) == ~ref);
  }
}

namespace {
// The golden trace: a hand-made two-layer allocation sequence; with_stack adds a two-frame call
// stack (a Python frame over a native one) to the first allocation (format version 2).
Trace golden_trace(bool with_stack) {
  Trace t;
  t.meta.name = "golden";
  t.meta.model = "tiny";
  t.meta.mode = "baseline";
  t.meta.backend = "cpu";
  t.meta.moeprof_version = "golden";
  t.meta.tokens = 5;
  t.meta.layers = 2;
  StrId s0 = t.strings.intern("layer.0/attn"), s1 = t.strings.intern("layer.1/moe/experts");
  StrId n0 = t.strings.intern("post_norm"), n1 = t.strings.intern("gemm2_out"), sh = t.strings.intern("5x16");
  auto& a = t.add(EventKind::kAlloc, 100, 0x1000, 160);
  a.name_id = n0; a.scope_id = s0; a.shape_id = sh; a.category = Category::kActivation; a.dtype = DType::kBF16;
  if (with_stack) {
    const uint32_t py = t.stacks.intern_frame(
        StackFrame{t.strings.intern("forward"), t.strings.intern("modeling_deepseek.py"), 412, FrameKind::kPython});
    const uint32_t nat = t.stacks.intern_frame(
        StackFrame{t.strings.intern("at::empty_cuda"), t.strings.intern("libtorch_cuda.so"), 0, FrameKind::kNative});
    a.stack_id = t.stacks.intern_stack({nat, py});
  }
  auto& b = t.add(EventKind::kAlloc, 150, 0x2000, 333);
  b.name_id = n1; b.scope_id = s1; b.category = Category::kActivation; b.dtype = DType::kBF16;
  auto& u = t.add(EventKind::kUse, 160, 0x2000, 333);
  u.flags = kUseWrite;
  t.add(EventKind::kFree, 170, 0x1000, 160).category = Category::kActivation;
  t.add(EventKind::kFree, 180, 0x2000, 0);
  return t;
}

std::string jsonl_of(const Trace& t) {
  std::ostringstream os;
  write_jsonl(t, os);
  return os.str();
}
}  // namespace

TEST_CASE("golden .mtrace files of both format versions read as their JSON-lines exports", "[core][trace_io][golden]") {
  const std::string dir = std::string(MOEPROF_SOURCE_DIR) + "/tests/golden/core/";
  // small.mtrace: version 1 (CRC-32, a process id in the record), written by moeprof 0.1.0 and
  // kept as it was; it must keep reading.
  {
    if (std::getenv("MOEPROF_REGEN_GOLDEN")) std::ofstream(dir + "small.jsonl") << jsonl_of(golden_trace(false));
    auto r = read_trace(dir + "small.mtrace");
    REQUIRE(r.is_ok());
    CHECK(r->records.size() == 5);
    std::ifstream in(dir + "small.jsonl");
    CHECK(jsonl_of(r.value()) == std::string((std::istreambuf_iterator<char>(in)), {}));
  }
  // small.v2.mtrace: version 2 (CRC-32C, interned stacks), byte for byte what write_trace writes.
  {
    Trace t = golden_trace(true);
    if (std::getenv("MOEPROF_REGEN_GOLDEN")) {
      REQUIRE(write_trace(dir + "small.v2.mtrace", t).is_ok());
      std::ofstream(dir + "small.v2.jsonl") << jsonl_of(t);
    }
    auto r = read_trace(dir + "small.v2.mtrace");
    REQUIRE(r.is_ok());
    REQUIRE(r->stacks.stack_count() == 2);
    CHECK(format_stack(r.value(), r->records[0].stack_id) ==
          std::vector<std::string>{"at::empty_cuda (libtorch_cuda.so)", "forward (modeling_deepseek.py:412)"});
    std::ifstream in(dir + "small.v2.jsonl");
    CHECK(jsonl_of(r.value()) == std::string((std::istreambuf_iterator<char>(in)), {}));
    const std::string p = tmp_path("golden_again.mtrace");
    REQUIRE(write_trace(p, t).is_ok());
    CHECK(read_bytes(p) == read_bytes(dir + "small.v2.mtrace"));
  }
}

TEST_CASE("crc32c: known answers, hardware and software paths agree at every length", "[core][trace_io]") {
  // RFC 3720 (iSCSI) test vectors for CRC-32C.
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i);
  CHECK(crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);
  CHECK(crc32c(ones.data(), ones.size()) == 0x62A8AB43u);
  CHECK(crc32c(inc.data(), inc.size()) == 0x46DD794Eu);
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  CHECK(crc32("123456789", 9) == 0xCBF43926u);
  // Lengths around the 3-stream block boundary (3 x 8192): incremental == one shot, odd offsets.
  std::mt19937_64 rng(77);
  std::vector<uint8_t> buf(3 * 8192 * 2 + 37);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(8191), size_t(3 * 8192 - 1), size_t(3 * 8192),
                   size_t(3 * 8192 + 5), buf.size() - 3}) {
    const uint32_t whole = crc32c(buf.data() + 3, n);
    const size_t cut = n / 3;
    CHECK(crc32c(buf.data() + 3 + cut, n - cut, crc32c(buf.data() + 3, cut)) == whole);
    // Bit-at-a-time reference.
    uint32_t ref = ~0u;
    for (size_t i = 0; i < n; ++i) {
      ref ^= buf[3 + i];
      for (int k = 0; k < 8; ++k) ref = (ref & 1) ? 0x82F63B78u ^ (ref >> 1) : ref >> 1;
    }
    CHECK(~ref == whole);
  }
}

TEST_CASE("jsonl export has one line per record plus the header", "[core][trace_io]") {
  std::mt19937_64 rng(123);
  Trace t = random_trace(rng, 41);
  std::ostringstream os;
  write_jsonl(t, os);
  std::string s = os.str();
  CHECK(std::count(s.begin(), s.end(), '\n') == 42);
  CHECK(s.find("\"tp_emulated\":\"true\"") != std::string::npos);
}

TEST_CASE("hostile traces: invalid UTF-8, nested metadata, frames larger than the file", "[core][trace_io]") {
  SECTION("invalid UTF-8 in a string is replaced, so JSON export works") {
    Trace t;
    StrId bad = t.strings.intern(std::string("ok\xff\xfe-\xe2\x82", 7));
    StrId good = t.strings.intern("layer.1/\xc3\xa9");  // valid two-byte sequence kept
    auto& r = t.add(EventKind::kAlloc, 1, 0x10, 7);
    r.name_id = bad;
    r.scope_id = good;
    const std::string p = tmp_path("utf8.mtrace");
    REQUIRE(write_trace(p, t).is_ok());
    auto back = read_trace(p);
    REQUIRE(back.is_ok());
    CHECK(back->str(back->records[0].name_id) == "ok\xEF\xBF\xBD\xEF\xBF\xBD-\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK(back->str(back->records[0].scope_id) == "layer.1/\xc3\xa9");
    std::ostringstream os;
    write_jsonl(back.value(), os);  // must not throw
    CHECK(os.str().find("layer.1/") != std::string::npos);
  }
  SECTION("metadata with non-scalar extra values or out-of-range integers is corrupt") {
    RunMeta m;
    CHECK_FALSE(run_meta_from_json(R"({"extra":{"a":[[[1]]]}})", &m).is_ok());
    CHECK_FALSE(run_meta_from_json(R"({"tp_size":99999999999})", &m).is_ok());
    CHECK_FALSE(run_meta_from_json(R"({"tokens":-3})", &m).is_ok());
    CHECK_FALSE(run_meta_from_json(R"({"tp_size":"4"})", &m).is_ok());
    REQUIRE(run_meta_from_json(R"({"tokens":37,"tp_size":4,"tp_rank":3,"extra":{"n":5,"b":true,"s":"x"}})", &m).is_ok());
    CHECK(m.tokens == 37);
    CHECK(m.extra.at("n") == "5");
    CHECK(m.extra.at("b") == "true");
  }
  SECTION("a frame header claiming more bytes than the file holds is a truncation, read without allocating it") {
    std::mt19937_64 rng(77);
    Trace t = random_trace(rng, 20);
    const std::string p = tmp_path("huge_src.mtrace");
    std::vector<char> bytes;
    {
      auto w = TraceWriter::open(p, t.meta, TraceWriterOptions{8, 0});
      REQUIRE(w.is_ok());
      append_records(*w.value(), t);
      REQUIRE(w.value()->flush().is_ok());
      bytes = read_bytes(p);  // as a crashed recorder would leave it: no END frame
    }
    // Append a RECS frame header that claims 2^30 bytes of payload.
    const uint32_t fh[4] = {0x53434552u /* "RECS" */, 1u << 30, 0u, (1u << 30) / 64};
    const char* c = reinterpret_cast<const char*>(fh);
    bytes.insert(bytes.end(), c, c + sizeof(fh));
    const std::string q = tmp_path("huge.mtrace");
    write_bytes(q, bytes);
    auto r = read_trace(q);
    REQUIRE(r.is_ok());
    CHECK(r->truncated);
    CHECK(r->records.size() == 20);
  }
}
