// The one number formatter (docs/metrics.md, "Units").
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

#include "reports/format.h"

using namespace moeprof::reports;

TEST_CASE("format_bytes: B below 1 kB, kB below 1 MB, MB with separators above", "[reports][format]") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(999) == "999 B");
  CHECK(format_bytes(1000) == "1.0 kB");
  CHECK(format_bytes(124800) == "124.8 kB");
  CHECK(format_bytes(613460) == "613.5 kB");  // 613.46 rounds up
  CHECK(format_bytes(999949) == "999.9 kB");
  CHECK(format_bytes(999950) == "1.0 MB");    // would print as 1,000.0 kB
  CHECK(format_bytes(234881024) == "234.9 MB");
  CHECK(format_bytes(3876114688ull) == "3,876.1 MB");
  CHECK(format_bytes(3337146624ull) == "3,337.1 MB");
  CHECK(format_bytes(15500000000ull) == "15,500.0 MB");
  CHECK(format_bytes(1050000) == "1.1 MB");   // half up
  CHECK(format_bytes(std::numeric_limits<uint64_t>::max()) == "18,446,744,073,709.6 MB");
}

TEST_CASE("deltas: sign, exact at the extremes", "[reports][format]") {
  CHECK(format_delta_bytes(0) == "0 B");
  CHECK(format_delta_bytes(-124800) == "-124.8 kB");
  CHECK(format_delta_bytes(-538968064) == "-539.0 MB");
  CHECK(format_delta_bytes(std::numeric_limits<int64_t>::min()) == "-9,223,372,036,854.8 MB");
  CHECK(format_change_bytes(3876114688ull, 3337146624ull) == "-539.0 MB");
  CHECK(format_change_bytes(0, std::numeric_limits<uint64_t>::max()) == "+18,446,744,073,709.6 MB");
  CHECK(format_change_bytes(7, 7) == "0 B");
  CHECK(format_exact_bytes(538968064) == "538,968,064 B");
  CHECK(with_commas(-538968064) == "-538,968,064");
  CHECK(with_commas(std::numeric_limits<int64_t>::min()) == "-9,223,372,036,854,775,808");
  CHECK(with_commas_u(std::numeric_limits<uint64_t>::max()) == "18,446,744,073,709,551,615");
}

TEST_CASE("durations relative to a trace's start", "[reports][format]") {
  CHECK(format_duration_ns(0) == "0 ns");
  CHECK(format_duration_ns(812) == "812 ns");
  CHECK(format_duration_ns(812000) == "812 us");
  CHECK(format_duration_ns(41300000) == "41.3 ms");
  CHECK(format_duration_ns(3580000000ull) == "3.58 s");
  CHECK(format_duration_ns(999) == "999 ns");
  CHECK(format_duration_ns(1499) == "1 us");
  CHECK(format_duration_ns(1500) == "2 us");          // half up
  CHECK(format_duration_ns(999499) == "999 us");
  CHECK(format_duration_ns(999500) == "1.0 ms");      // not "1000 us"
  CHECK(format_duration_ns(999950000) == "1.00 s");   // not "1000.0 ms"
  CHECK(format_duration_ns(5449999999ull) == "5.45 s");
  CHECK(format_duration_ns(1234567890123ull) == "1,234.57 s");
  CHECK(format_duration_ns(3000000000ull) == "3.00 s");
  CHECK(format_duration_ns(std::numeric_limits<uint64_t>::max()) == "18,446,744,073.71 s");
}

TEST_CASE("percentages: a sign, one decimal, thousands separators", "[reports][format]") {
  CHECK(format_percent(0, 0) == "0.0%");
  CHECK(format_percent(5, 0) == "n/a");
  CHECK(format_percent(-124800, 613460) == "-20.3%");
  CHECK(format_percent(1, 3) == "+33.3%");
  CHECK(format_percent(1, 10000000) == "+0.0%");  // a change too small for a decimal keeps its sign
  CHECK(format_percent(-1, 10000000) == "-0.0%");
  CHECK(format_percent(123456789, 613460) == "+20,124.7%");
  CHECK(format_percent(std::numeric_limits<int64_t>::max(), 1) == "+922,337,203,685,477,580,800.0%");
}
