// Raw CUPTI activity buffers captured on an H200 (tests/golden/cupti) decode to exactly the
// allocations the executor itself recorded in the same run (tests/golden/cupti/seed.expected.json).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "profiler/activity_decode.h"

using namespace moeprof;
using namespace moeprof::profiler;

namespace {
struct Keep : RecordSink {
  std::vector<DecodedRecord> recs;
  void on_record(const DecodedRecord& r) override { recs.push_back(r); }
};
}  // namespace

TEST_CASE("captured H200 CUPTI buffers decode to the executor's own allocation count and bytes",
          "[profiler][decode][golden]") {
  const auto dir = std::filesystem::path(MOEPROF_SOURCE_DIR) / "tests/golden/cupti";
  std::ifstream in(dir / "seed.expected.json");
  REQUIRE(in.good());
  const auto expected = nlohmann::json::parse(in);
  int files = 0;
  for (const auto& [name, want] : expected.items()) {
    if (name.front() == '_') continue;
    ++files;
    INFO(name);
    std::vector<uint8_t> buf(std::filesystem::file_size(dir / name));
    std::FILE* f = std::fopen((dir / name).c_str(), "rb");
    REQUIRE(f != nullptr);
    REQUIRE(std::fread(buf.data(), 1, buf.size(), f) == buf.size());
    std::fclose(f);
    Keep sink;
    DecodeStats st;
    decode_activity_buffer(buf.data(), buf.size(), sink, &st);
    CHECK_FALSE(st.error);
    uint64_t allocs = 0, bytes = 0, releases = 0, driver = 0;
    // Replay: live bytes of the allocations made through an API call (correlation id != 0).
    std::vector<const DecodedRecord*> mem;
    for (const auto& r : sink.recs) {
      const auto kind = static_cast<EventKind>(r.record.kind);
      if (kind == EventKind::kAlloc) {
        if (r.correlation_id == 0) {
          ++driver;
          continue;
        }
        ++allocs;
        bytes += r.record.bytes;
        mem.push_back(&r);
      } else if (kind == EventKind::kFree) {
        ++releases;
        mem.push_back(&r);
      }
    }
    std::stable_sort(mem.begin(), mem.end(), [](const DecodedRecord* a, const DecodedRecord* b) {
      return a->record.timestamp_ns < b->record.timestamp_ns;
    });
    std::map<uint64_t, uint64_t> live;
    uint64_t cur = 0, peak = 0;
    for (const DecodedRecord* r : mem) {
      if (r->record.kind == EventKind::kAlloc) {
        live[r->record.address] = r->record.bytes;
        cur += r->record.bytes;
        peak = std::max(peak, cur);
      } else if (auto it = live.find(r->record.address); it != live.end()) {
        cur -= it->second;
        live.erase(it);
      }
    }
    CHECK(allocs == want["api_allocations"].get<uint64_t>());
    CHECK(bytes == want["api_alloc_bytes"].get<uint64_t>());
    CHECK(releases == want["releases"].get<uint64_t>());
    CHECK(peak == want["peak_total_bytes"].get<uint64_t>());
    CHECK(live.empty());  // everything the executor allocated was released inside the buffer
    WARN(name << ": " << allocs << " API allocations, " << driver << " driver-internal");
  }
  CHECK(files == 2);
}
