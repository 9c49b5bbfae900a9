#include <catch2/catch.hpp>

#include <filesystem>

#include "core/trace_io.h"
#include "profiler/activity_decode.h"
#include "profiler/attribution.h"

using namespace moeprof;
using namespace moeprof::profiler;

TEST_CASE("attribution table: partners, take once, intern", "[profiler][attribution]") {
  AttributionTable t;
  CHECK(t.intern("") == 0);
  uint32_t a = t.intern("layer.0");
  CHECK(t.intern("layer.0") == a);
  CHECK(t.str(a) == "layer.0");
  CHECK(t.str(12345).empty());

  Attribution x;
  x.tid = 5;
  x.scope = a;
  t.put(100, 101, x);
  CHECK(t.pending() == 2);
  Attribution got;
  REQUIRE(t.take(101, &got));
  CHECK(got.tid == 5);
  CHECK(got.scope == a);
  CHECK(t.pending() == 0);
  CHECK_FALSE(t.take(100, &got));
  CHECK_FALSE(t.take(0, &got));
  t.put(0, 0, x);  // ignored
  CHECK(t.pending() == 0);
}

TEST_CASE("attribution table prunes the oldest entries when full", "[profiler][attribution]") {
  AttributionTable t(100);
  Attribution x;
  for (uint32_t c = 1; c <= 101; ++c) t.put(c, 0, x);
  CHECK(t.pending() < 101);
  CHECK(t.pruned() > 0);
  Attribution got;
  CHECK_FALSE(t.take(1, &got));  // the oldest went first
  CHECK(t.take(101, &got));
}

TEST_CASE("a join keeps the decoder's graph category unless the allocation was tagged", "[profiler][attribution]") {
  const std::string path = (std::filesystem::temp_directory_path() / "moeprof_attr_graph.mtrace").string();
  auto w = TraceWriter::open(path, RunMeta{});
  REQUIRE(w.is_ok());
  AttributionTable table;
  TraceAssembler asmb(w->get(), &table);
  auto graph_alloc = [](uint32_t corr) {
    DecodedRecord d;
    d.record.kind = EventKind::kAlloc;
    d.record.address = 0;
    d.record.bytes = 33554432;
    d.record.category = Category::kGraph;
    d.record.timestamp_ns = corr;
    d.correlation_id = corr;
    return d;
  };
  Attribution untagged;
  untagged.tid = 11;
  untagged.scope = table.intern("phase2");
  table.put(21, 0, untagged);
  asmb.on_record(graph_alloc(21));
  Attribution tagged;
  tagged.tid = 12;
  tagged.name = table.intern("pool");
  tagged.category = Category::kWorkspace;
  table.put(22, 0, tagged);
  asmb.on_record(graph_alloc(22));
  REQUIRE(w.value()->close().is_ok());
  auto t = read_trace(path);
  REQUIRE(t.is_ok());
  REQUIRE(t->records.size() == 2);
  CHECK(t->records[0].category == Category::kGraph);  // scope joined, category kept
  CHECK(t->str(t->records[0].scope_id) == "phase2");
  CHECK(t->records[0].tid == 11);
  CHECK(t->records[1].category == Category::kWorkspace);  // an explicit tag wins
}
