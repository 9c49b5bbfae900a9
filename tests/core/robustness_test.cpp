// Hostile input at the core level (issue 14): checked arithmetic, UTF-8, the reader's limits and
// its string table, corrupt lengths versus truncation, and the writer's time-based flush and
// close_all_open (what `moeprof run` does on SIGTERM).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "core/checked.h"
#include "core/trace_io.h"
#include "core/utf8.h"

using namespace moeprof;
namespace fs = std::filesystem;

namespace {

std::string tmp_path(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("moeprof_robustness_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TraceRecord alloc(uint64_t ts, uint64_t addr, uint64_t bytes, StrId name = StrId::kNone) {
  TraceRecord r;
  r.kind = EventKind::kAlloc;
  r.timestamp_ns = ts;
  r.address = addr;
  r.bytes = bytes;
  r.seq = ts;
  r.name_id = name;
  r.category = Category::kActivation;
  return r;
}

// The file's frames: (offset, type, payload bytes, count).
struct FrameAt {
  size_t off;
  std::string type;
  uint32_t bytes, count;
};
std::vector<FrameAt> frames_of(const std::string& file) {
  std::vector<FrameAt> out;
  for (size_t off = 32; off + 16 <= file.size();) {
    uint32_t h[4];
    std::memcpy(h, file.data() + off, 16);
    out.push_back(FrameAt{off, std::string(file.data() + off, 4), h[1], h[3]});
    off += 16 + h[1];
  }
  return out;
}

}  // namespace

TEST_CASE("checked arithmetic reports overflow instead of wrapping", "[core][checked]") {
  CHECK(checked_mul<int64_t>(int64_t{1} << 31, int64_t{1} << 31) == int64_t{1} << 62);
  CHECK_FALSE(checked_mul<int64_t>(int64_t{1} << 32, int64_t{1} << 31));
  CHECK_FALSE(checked_add<uint64_t>(UINT64_MAX, 1));
  CHECK(checked_sub<uint64_t>(5, 7) == std::nullopt);
  // rows x cols x element size: vocab 2^62 x hidden 7168 x 2 bytes wraps in size_t, not here.
  CHECK_FALSE(checked_product({int64_t{1} << 62, 7168, 2}));
  CHECK(checked_product({163840, 7168, 2}) == int64_t{2348810240});
  CHECK_FALSE(checked_product({3, -1}));
  CHECK_FALSE(checked_product({int64_t{1} << 31, 4}, int64_t{1} << 32));
  uint64_t total = kMaxBytes - 10;
  CHECK(add_bytes(total, 10));
  CHECK(total == kMaxBytes);
  CHECK_FALSE(add_bytes(total, 1));
  CHECK(total == kMaxBytes);
  uint64_t z = 0;
  CHECK_FALSE(add_bytes(z, kMaxBytes + 1));
  CHECK(checked_align_up(1000, 256) == 1024u);
  CHECK(checked_align_up(1024, 256) == 1024u);
  CHECK(checked_align_up(7, 3) == 9u);
  CHECK_FALSE(checked_align_up(UINT64_MAX - 10, 256));  // the arena's align_up used to wrap to 0 here
  CHECK(checked_align_up(UINT64_MAX, 1) == UINT64_MAX);
  CHECK(bytes_delta(0, kMaxBytes) == std::numeric_limits<int64_t>::max());
  CHECK(bytes_delta(kMaxBytes, 0) == -std::numeric_limits<int64_t>::max());
  CHECK(magnitude(std::numeric_limits<int64_t>::min()) == uint64_t{1} << 63);
  CHECK(magnitude(-5) == 5u);
}

TEST_CASE("utf8: validity and replacement", "[core][utf8]") {
  CHECK(is_valid_utf8("layer.3/moe"));
  CHECK(is_valid_utf8("\xE2\x82\xAC \xF0\x9F\x98\x80"));
  CHECK_FALSE(is_valid_utf8("\xff"));
  CHECK_FALSE(is_valid_utf8("\xC0\xAF"));          // overlong
  CHECK_FALSE(is_valid_utf8("\xED\xA0\x80"));      // surrogate
  CHECK_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  CHECK_FALSE(is_valid_utf8("\xE2\x82"));          // cut short
  CHECK(valid_utf8("a\xff" "b") == "a\xEF\xBF\xBD" "b");
  CHECK(valid_utf8("\xE2\x82") == "\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(valid_utf8("ok") == "ok");
}

TEST_CASE("utf8: printable keeps a value read from input on one line", "[core][utf8]") {
  CHECK(printable("deepseek_v2") == "deepseek_v2");
  CHECK(printable("a\nb\tc\x7f") == "a\\x0ab\\x09c\\x7f");
  CHECK(printable("\xff\xE2\x82\xAC") == "\xEF\xBF\xBD\xE2\x82\xAC");
  CHECK(printable("abcdef", 3) == "abc...");
  CHECK(printable("abc", 3) == "abc");
  CHECK(printable(std::string(1000, 'x')).size() == 83);
}

TEST_CASE("reader: strings that are not UTF-8 stay distinct and round-trip", "[core][trace_io][utf8]") {
  // A recorder interns raw bytes: "\xff" and "\xfe" are two strings that both read as U+FFFD, and
  // a later valid U+FFFD collides with them. All three keep their own id and a distinct text.
  const std::string p = tmp_path("utf8.mtrace");
  {
    auto w = TraceWriter::open(p, RunMeta{});
    REQUIRE(w.is_ok());
    const StrId a = w.value()->intern("\xff"), b = w.value()->intern("\xfe"), c = w.value()->intern("\xEF\xBF\xBD");
    REQUIRE(w.value()->append(alloc(1, 16, 8, a)).is_ok());
    REQUIRE(w.value()->append(alloc(2, 32, 8, b)).is_ok());
    REQUIRE(w.value()->append(alloc(3, 48, 8, c)).is_ok());
    REQUIRE(w.value()->close().is_ok());
  }
  auto t = read_trace(p);
  REQUIRE(t.is_ok());
  REQUIRE(t->strings.size() == 4);
  CHECK(t->str(StrId{1}) == "\xEF\xBF\xBD");
  CHECK(t->str(StrId{2}) == "\xEF\xBF\xBD #2");
  CHECK(t->str(StrId{3}) == "\xEF\xBF\xBD #3");
  for (const auto& s : t->strings.all()) CHECK(is_valid_utf8(s));
  // Rewritten, the table reads back as it was read (ids and texts).
  const std::string p2 = tmp_path("utf8-again.mtrace");
  REQUIRE(write_trace(p2, t.value()).is_ok());
  auto t2 = read_trace(p2);
  REQUIRE(t2.is_ok());
  CHECK(t2->strings.all() == t->strings.all());
  CHECK(std::memcmp(t2->records.data(), t->records.data(), 3 * sizeof(TraceRecord)) == 0);
}

TEST_CASE("reader: a repeated or empty string is corruption naming its offset", "[core][trace_io]") {
  const std::string p = tmp_path("dup.mtrace");
  for (const char* second : {"a", "", "\xff"}) {
    std::string file;
    {
      auto w = TraceWriter::open(p, RunMeta{});
      REQUIRE(w.is_ok());
      w.value()->intern(second[0] == '\xff' ? "\xff" : "a");
      REQUIRE(w.value()->flush().is_ok());
      REQUIRE(w.value()->close().is_ok());
    }
    file = slurp(p);
    // Append a second STRG frame whose only string (id 2) repeats the first byte for byte ("a",
    // "\xff") or is empty (which repeats id 0).
    const std::string text = second;
    std::string payload(8 + text.size(), '\0');
    const uint32_t id = 2, len = static_cast<uint32_t>(text.size());
    std::memcpy(&payload[0], &id, 4);
    std::memcpy(&payload[4], &len, 4);
    std::memcpy(&payload[8], text.data(), text.size());
    const uint32_t hdr[4] = {0x47525453u /* "STRG" */, static_cast<uint32_t>(payload.size()), crc32c(payload.data(), payload.size()), 1};
    auto end = frames_of(file).back();
    REQUIRE(end.type == "END ");
    std::string out = file.substr(0, end.off) + std::string(reinterpret_cast<const char*>(hdr), 16) + payload + file.substr(end.off);
    std::ofstream(p, std::ios::binary | std::ios::trunc) << out;
    auto t = read_trace(p);
    REQUIRE_FALSE(t.is_ok());
    CHECK(t.status().code() == ErrorCode::kBadInput);
    CHECK(t.status().message() == p + ": byte offset " + std::to_string(end.off + 16) + ": corrupt string table: string 2 repeats string " +
                                      (text.empty() ? "0" : "1"));
  }
}

TEST_CASE("reader: a damaged length field is corruption, a cut is a truncation", "[core][trace_io]") {
  const std::string p = tmp_path("len.mtrace");
  {
    auto w = TraceWriter::open(p, RunMeta{}, TraceWriterOptions{3, 0});
    REQUIRE(w.is_ok());
    for (uint64_t i = 1; i <= 7; ++i) REQUIRE(w.value()->append(alloc(i, 64 * i, 100 + i)).is_ok());
    REQUIRE(w.value()->close().is_ok());
  }
  const std::string file = slurp(p);
  const auto frames = frames_of(file);
  const auto recs = std::find_if(frames.begin(), frames.end(), [](const FrameAt& f) { return f.type == "RECS"; });
  REQUIRE(recs != frames.end());
  REQUIRE(recs->count == 3);

  // The length field says more bytes than the file has: it contradicts the count (3 x 64), so it
  // is corruption, not a truncation (before the fix the trace read as truncated with 0 records).
  std::string damaged = file;
  const uint32_t huge = 0x3FFFFFC0u;  // below the frame size limit, past the end of the file
  std::memcpy(&damaged[recs->off + 4], &huge, 4);
  std::ofstream(p, std::ios::binary | std::ios::trunc) << damaged;
  auto t = read_trace(p);
  REQUIRE_FALSE(t.is_ok());
  CHECK(t.status().message() == p + ": byte offset " + std::to_string(recs->off) + ": corrupt record frame: size does not match count");

  // The same file cut inside that frame is a truncation: it reads up to the cut.
  std::ofstream(p, std::ios::binary | std::ios::trunc) << file.substr(0, recs->off + 16 + 100);
  auto cut = read_trace(p);
  REQUIRE(cut.is_ok());
  CHECK(cut->truncated);
  CHECK(cut->records.empty());
  CHECK(cut->truncation_note == "truncated at byte offset " + std::to_string(recs->off) + " (frame of 192 bytes cut short after 100)");
}

// A frame removed whole leaves every checksum right; the STAT and END frames' record counts are
// what catches it (before, the trace read with its figures short and no word). A STAT count of
// another type is corruption too: a dropped count read as 0 let the gate pass.
TEST_CASE("reader: a missing record frame or a mistyped stats count is corruption", "[core][trace_io]") {
  const std::string p = tmp_path("counts.mtrace");
  {
    auto w = TraceWriter::open(p, RunMeta{}, TraceWriterOptions{5, 0});
    REQUIRE(w.is_ok());
    for (uint64_t i = 1; i <= 13; ++i) REQUIRE(w.value()->append(alloc(i, 4096 * i, 97 * i + 3)).is_ok());
    w.value()->add_dropped(3);
    REQUIRE(w.value()->close().is_ok());
  }
  const std::string file = slurp(p);
  auto whole = read_trace(p);
  REQUIRE(whole.is_ok());
  CHECK(whole->records.size() == 13);
  CHECK(whole->dropped_records == 3);
  const auto frames = frames_of(file);
  std::vector<FrameAt> recs;
  for (const auto& f : frames)
    if (f.type == "RECS") recs.push_back(f);
  REQUIRE(recs.size() == 3);  // 5 + 5 + 3
  const FrameAt stat = frames.at(frames.size() - 2), end = frames.back();
  REQUIRE(stat.type == "STAT");
  REQUIRE(end.type == "END ");
  CHECK(end.count == 13);

  auto expect_error = [&](const std::string& bytes, const std::string& message) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
    auto t = read_trace(p);
    REQUIRE_FALSE(t.is_ok());
    CHECK(t.status().code() == ErrorCode::kBadInput);
    CHECK(t.status().message() == p + ": " + message);
    auto streamed = TraceReader::open(p);  // the streamed path reads the same frames
    if (!streamed.is_ok()) {                // (a bad header fails at open)
      CHECK(streamed.status().message() == t.status().message());
      return;
    }
    std::vector<TraceRecord> batch;
    Result<bool> more = true;
    while (more.is_ok() && *more) more = streamed.value()->next(&batch);
    REQUIRE_FALSE(more.is_ok());
    CHECK(more.status().message() == t.status().message());
  };
  // The middle record frame removed.
  const std::string dropped = file.substr(0, recs[1].off) + file.substr(recs[1].off + 16 + recs[1].bytes);
  expect_error(dropped, "byte offset " + std::to_string(stat.off - recs[1].bytes) +  // the STAT payload's
                            ": corrupt trace: the stats frame counts 13 records, 8 were read (a record frame is missing)");

  // A STAT frame rewritten (checksum right) with other values.
  auto with_stat = [&](const std::string& json) {
    const uint32_t hdr[4] = {0x54415453u /* "STAT" */, static_cast<uint32_t>(json.size()), crc32c(json.data(), json.size()), 0};
    return file.substr(0, stat.off) + std::string(reinterpret_cast<const char*>(hdr), 16) + json + file.substr(end.off);
  };
  for (const std::string v : {"\"5\"", "5.0", "-1", "true", "1e30", "null"})
    expect_error(with_stat("{\"dropped_records\":" + v + ",\"records\":13}"),
                 "byte offset " + std::to_string(stat.off + 16) + ": corrupt stats frame: 'dropped_records' is not a non-negative integer");
  expect_error(with_stat("{\"dropped_records\":3,\"records\":\"13\"}"),
               "byte offset " + std::to_string(stat.off + 16) + ": corrupt stats frame: 'records' is not a non-negative integer");
  // Without a STAT frame, the END frame's count catches it.
  const std::string no_stat = dropped.substr(0, stat.off - 16 - recs[1].bytes) + dropped.substr(end.off - 16 - recs[1].bytes);
  expect_error(no_stat, "byte offset " + std::to_string(stat.off - 16 - recs[1].bytes) +
                            ": corrupt trace: the end frame counts 13 records (low 32 bits), 8 were read (a record frame is missing)");
  // Every prefix shorter than the 32-byte header is a cut header (1 to 7 bytes had read as "not a
  // moeprof trace": they are the start of the magic).
  for (size_t n = 1; n < 32; ++n) {
    INFO(n);
    expect_error(file.substr(0, n), "byte offset " + std::to_string(n) + ": truncated file header");
  }
  // The STAT frame is optional, and both counts right read as before.
  std::ofstream(p, std::ios::binary | std::ios::trunc) << with_stat("{}");
  auto no_counts = read_trace(p);
  REQUIRE(no_counts.is_ok());
  CHECK(no_counts->records.size() == 13);
  CHECK(no_counts->dropped_records == 0);
}

TEST_CASE("reader: allocation sizes above 2^63-1 bytes are corrupt records", "[core][trace_io]") {
  const std::string p = tmp_path("big.mtrace");
  for (uint64_t bytes : {kMaxBytes, kMaxBytes + 1, UINT64_MAX}) {
    Trace t;
    t.records.push_back(alloc(5, 4096, bytes));
    REQUIRE(write_trace(p, t).is_ok());
    auto r = read_trace(p);
    if (bytes <= kMaxBytes) {
      REQUIRE(r.is_ok());
      CHECK(r->records.at(0).bytes == kMaxBytes);
    } else {
      REQUIRE_FALSE(r.is_ok());
      CHECK(r.status().message().find(": corrupt record: " + std::to_string(bytes) + " bytes exceed the limit of 2^63-1 bytes") !=
            std::string::npos);
    }
  }
  // A kernel's duration travels in the same field and is not a size.
  Trace k;
  k.records.push_back(alloc(5, 4096, 1));
  k.records.back().kind = EventKind::kKernel;
  k.records.back().bytes = UINT64_MAX;
  REQUIRE(write_trace(p, k).is_ok());
  CHECK(read_trace(p).is_ok());
}

TEST_CASE("reader: bytes in memory read exactly as the file", "[core][trace_io]") {
  const std::string p = tmp_path("mem.mtrace");
  Trace t;
  t.meta.name = "m";
  for (uint64_t i = 1; i <= 5; ++i) t.records.push_back(alloc(i, 64 * i, i));
  REQUIRE(write_trace(p, t).is_ok());
  const std::string bytes = slurp(p);
  auto a = read_trace(p);
  auto b = read_trace_memory(bytes, "mem");
  REQUIRE(a.is_ok());
  REQUIRE(b.is_ok());
  CHECK(b->records.size() == 5);
  CHECK(std::memcmp(a->records.data(), b->records.data(), 5 * sizeof(TraceRecord)) == 0);
  CHECK(b->meta.name == "m");
  auto cut = read_trace_memory(bytes.substr(0, bytes.size() - 16), "mem");
  REQUIRE(cut.is_ok());
  CHECK(cut->truncated);
  auto empty = read_trace_memory("", "nothing");
  REQUIRE_FALSE(empty.is_ok());
  CHECK(empty.status().message() == "nothing: not a moeprof trace: it is an empty file");
}

TEST_CASE("reader: bytes after the end frame and a directory are errors, not a shorter trace", "[core][trace_io]") {
  const std::string p = tmp_path("joined.mtrace");
  Trace t;
  t.meta.name = "first";
  for (uint64_t i = 1; i <= 7; ++i) t.records.push_back(alloc(i, 96 * i + 5, i));
  REQUIRE(write_trace(p, t).is_ok());
  const std::string one = slurp(p);
  // Two traces joined: the first alone would read as complete and drop the second.
  for (const std::string& tail : {one, std::string("x"), std::string(3, '\0')}) {
    const std::string joined = one + tail;
    auto m = read_trace_memory(joined, "joined");
    REQUIRE_FALSE(m.is_ok());
    CHECK(m.status().code() == ErrorCode::kBadInput);
    CHECK(m.status().message() == "joined: byte offset " + std::to_string(one.size()) + ": corrupt trace: " +
                                      std::to_string(tail.size()) + " bytes after the end frame (two files joined?)");
    {
      std::ofstream out(p, std::ios::binary | std::ios::trunc);
      out << joined;
    }
    auto f = read_trace(p);
    REQUIRE_FALSE(f.is_ok());
    CHECK(f.status().message().find(std::to_string(tail.size()) + " bytes after the end frame") != std::string::npos);
  }
  CHECK(read_trace_memory(one, "one").is_ok());
  const std::string dir = tmp_path("a_directory");
  std::filesystem::create_directories(dir);
  auto d = read_trace(dir);
  REQUIRE_FALSE(d.is_ok());
  CHECK(d.status().code() == ErrorCode::kBadInput);
  CHECK(d.status().message() == dir + ": not a moeprof trace: it is a directory");
}

TEST_CASE("writer: the background flush puts records on disk while the recorder is idle", "[core][trace_io][flush]") {
  const std::string p = tmp_path("flush.mtrace");
  TraceWriterOptions o;
  o.flush_interval_ms = 50;
  o.background_flush = true;
  auto w = TraceWriter::open(p, RunMeta{}, o);
  REQUIRE(w.is_ok());
  REQUIRE(w.value()->append(alloc(1, 64, 10)).is_ok());
  REQUIRE(w.value()->append(alloc(2, 128, 20)).is_ok());
  // No further append: only the writer's own thread can write the frame. Read the file as a
  // killed process would leave it.
  std::vector<TraceRecord> seen;
  for (int i = 0; i < 200 && seen.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto t = read_trace(p);
    REQUIRE(t.is_ok());
    CHECK(t->truncated);
    seen = t->records;
  }
  REQUIRE(seen.size() == 2);
  CHECK(seen[1].bytes == 20);
  REQUIRE(w.value()->close().is_ok());
  auto t = read_trace(p);
  REQUIRE(t.is_ok());
  CHECK_FALSE(t->truncated);
  CHECK(t->records.size() == 2);
}

TEST_CASE("writer: close_all_open closes every open trace as failed", "[core][trace_io][signal]") {
  const std::string a = tmp_path("open-a.mtrace"), b = tmp_path("open-b.mtrace"), c = tmp_path("closed.mtrace");
  RunMeta m;
  m.name = "interrupted";
  auto wa = TraceWriter::open(a, m);
  auto wb = TraceWriter::open(b, m);
  auto wc = TraceWriter::open(c, m);
  REQUIRE((wa.is_ok() && wb.is_ok() && wc.is_ok()));
  REQUIRE(wa.value()->append(alloc(1, 64, 1000)).is_ok());
  REQUIRE(wc.value()->close().is_ok());
  const auto paths = TraceWriter::close_all_open("interrupted by SIGTERM");
  REQUIRE(paths.size() == 2);
  CHECK(std::find(paths.begin(), paths.end(), a) != paths.end());
  CHECK(std::find(paths.begin(), paths.end(), b) != paths.end());
  // After it, appends fail and close() returns without writing again.
  CHECK_FALSE(wa.value()->append(alloc(2, 128, 1)).is_ok());
  wa.value().reset();
  auto t = read_trace(a);
  REQUIRE(t.is_ok());
  CHECK_FALSE(t->truncated);
  REQUIRE(t->records.size() == 1);
  CHECK(t->records[0].bytes == 1000);
  CHECK(t->meta.name == "interrupted");
  CHECK(t->meta.extra.at("error") == "interrupted by SIGTERM");
  CHECK(TraceWriter::close_all_open("again").empty());
}

TEST_CASE("writer: names that are not UTF-8 in the metadata become U+FFFD", "[core][trace_io][utf8]") {
  RunMeta m;
  m.name = "run\xff";
  m.model = "\xc0model";
  const std::string json = run_meta_to_json(m);  // threw nlohmann type_error 316 before
  CHECK(json.find("\"name\":\"run\xEF\xBF\xBD\"") != std::string::npos);
  const std::string p = tmp_path("meta-utf8.mtrace");
  Trace t;
  t.meta = m;
  REQUIRE(write_trace(p, t).is_ok());
  auto r = read_trace(p);
  REQUIRE(r.is_ok());
  CHECK(r->meta.name == "run\xEF\xBF\xBD");
  CHECK(r->meta.model == "\xEF\xBF\xBDmodel");
}
