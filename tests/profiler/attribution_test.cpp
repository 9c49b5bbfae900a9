#include <catch2/catch.hpp>

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
