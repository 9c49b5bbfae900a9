// merge_traces: the per-rank traces of a multi-GPU run merged into one trace.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>

#include "core/trace_io.h"
#include "core/trace_merge.h"

using namespace moeprof;

namespace {

TraceRecord& alloc(Trace& t, uint64_t ts, uint64_t seq, uint64_t addr, uint64_t bytes, uint16_t dev,
                   const std::string& name, const std::string& scope, const std::string& shape) {
  TraceRecord& r = t.add(EventKind::kAlloc, ts, addr, bytes);
  r.seq = seq;
  r.device = dev;
  r.name_id = t.strings.intern(name);
  r.scope_id = t.strings.intern(scope);
  r.shape_id = t.strings.intern(shape);
  r.category = Category::kActivation;
  return r;
}

Trace rank_trace(int rank) {
  Trace t;
  t.meta.name = "baseline";
  t.meta.model = "tiny";
  t.meta.mode = "baseline";
  t.meta.backend = "cuda";
  t.meta.tp_rank = rank;
  t.meta.tp_size = 2;
  t.meta.extra["tp_emulated"] = "false";
  const uint16_t dev = static_cast<uint16_t>(rank);
  if (rank == 1) t.strings.intern("only_rank1");  // shifts rank 1's ids against rank 0's
  alloc(t, 10 + rank, 0, 0x1000, 100, dev, "x", "layer.0/attn", "4x8");
  alloc(t, 20 + rank, 1, 0x2000, 200, dev, "y", "layer.0/moe", "4x16");
  TraceRecord& f = t.add(EventKind::kFree, 30 + rank, 0x1000, 0);
  f.seq = 2;
  f.device = dev;
  return t;
}

}  // namespace

TEST_CASE("merge_traces: strings re-interned, devices kept, records interleaved by time", "[core][merge]") {
  std::vector<Trace> in = {rank_trace(0), rank_trace(1)};
  in[1].dropped_records = 3;
  in[0].dropped_records = 2;
  Trace m = merge_traces(in);

  REQUIRE(m.records.size() == 6);
  CHECK(m.dropped_records == 5);
  CHECK_FALSE(m.truncated);
  CHECK(m.meta.tp_rank == 0);
  CHECK(m.meta.tp_size == 2);
  CHECK(m.meta.mode == "baseline");
  CHECK(m.meta.extra.at("ranks") == "2");
  CHECK(m.meta.extra.at("tp_emulated") == "false");

  // Timestamps 10,11,20,21,30,31: rank 0, rank 1 alternately.
  for (size_t i = 0; i < m.records.size(); ++i) {
    CHECK(m.records[i].device == i % 2);
    if (i > 0) CHECK(m.records[i - 1].timestamp_ns <= m.records[i].timestamp_ns);
  }
  for (size_t i = 0; i < 4; ++i) {
    const TraceRecord& r = m.records[i];
    CHECK(m.str(r.name_id) == (i < 2 ? "x" : "y"));
    CHECK(m.str(r.scope_id) == (i < 2 ? "layer.0/attn" : "layer.0/moe"));
    CHECK(m.str(r.shape_id) == (i < 2 ? "4x8" : "4x16"));
  }
  CHECK(m.records[4].name_id == StrId::kNone);  // a free without names stays without
  // One table: equal strings share one id.
  CHECK(m.records[0].name_id == m.records[1].name_id);
  StrId id{};
  CHECK(m.strings.find("only_rank1", &id));
}

TEST_CASE("merge_traces: each input's order is kept, ties go to the earlier input", "[core][merge]") {
  Trace a, b;
  // Input a out of time order on purpose: its order must survive.
  alloc(a, 50, 0, 0x10, 1, 0, "a0", "s", "1");
  alloc(a, 5, 1, 0x20, 1, 0, "a1", "s", "1");
  alloc(b, 50, 0, 0x10, 1, 1, "b0", "s", "1");
  Trace m = merge_traces({a, b});
  REQUIRE(m.records.size() == 3);
  CHECK(m.str(m.records[0].name_id) == "a0");  // tie (50, seq 0) -> input 0 first
  CHECK(m.str(m.records[1].name_id) == "a1");
  CHECK(m.str(m.records[2].name_id) == "b0");
}

TEST_CASE("merge_traces: truncation ORed, notes kept, empty input, file round trip", "[core][merge]") {
  CHECK(merge_traces({}).records.empty());

  std::vector<Trace> in = {rank_trace(0), rank_trace(1)};
  in[1].truncated = true;
  in[1].truncation_note = "truncated at byte 42";
  Trace m = merge_traces(in);
  CHECK(m.truncated);
  CHECK(m.truncation_note.find("input 1") != std::string::npos);
  CHECK(m.truncation_note.find("byte 42") != std::string::npos);

  const auto dir = std::filesystem::temp_directory_path() / ("moeprof_merge_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "merged.mtrace").string();
  m.truncated = false;
  REQUIRE(write_trace(path, m).is_ok());
  auto back = read_trace(path);
  REQUIRE(back.is_ok());
  REQUIRE(back.value().records.size() == m.records.size());
  for (size_t i = 0; i < m.records.size(); ++i) {
    CHECK(back.value().records[i].device == m.records[i].device);
    CHECK(back.value().str(back.value().records[i].scope_id) == m.str(m.records[i].scope_id));
  }
  CHECK(back.value().meta.extra.at("ranks") == "2");
  std::filesystem::remove_all(dir);
}
