// Kernel-argument scanning (profiler/kernel_args.h), CPU only: the live-allocation map and the
// scan of a fake kernel parameter buffer with its layout.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "profiler/kernel_args.h"

using namespace moeprof::profiler;

namespace {

std::set<uint64_t> bases(const std::vector<LiveRange>& hits) {
  std::set<uint64_t> s;
  for (const LiveRange& h : hits) s.insert(h.base);
  return s;
}

}  // namespace

TEST_CASE("LiveAllocationMap finds the allocation containing an address", "[profiler][uses]") {
  LiveAllocationMap m;
  m.insert(0x10000, 0x1000, 0);  // [0x10000, 0x11000)
  m.insert(0x11000, 0x200, 1);   // adjacent: [0x11000, 0x11200)
  m.insert(0x20000, 1, 0);       // one byte
  REQUIRE(m.size() == 3);

  REQUIRE(m.find(0x10000) != nullptr);  // at base
  CHECK(m.find(0x10000)->base == 0x10000);
  CHECK(m.find(0x10000)->size == 0x1000);
  CHECK(m.find(0x10800)->base == 0x10000);  // inside (offset pointer)
  CHECK(m.find(0x10fff)->base == 0x10000);  // end - 1
  REQUIRE(m.find(0x11000) != nullptr);      // end of the first = base of the next
  CHECK(m.find(0x11000)->base == 0x11000);
  CHECK(m.find(0x11000)->device == 1);
  CHECK(m.find(0x111ff)->base == 0x11000);
  CHECK(m.find(0x11200) == nullptr);  // past the end
  CHECK(m.find(0xffff) == nullptr);   // before the first
  CHECK(m.find(0) == nullptr);
  CHECK(m.find(0x20000) != nullptr);
  CHECK(m.find(0x20001) == nullptr);
  CHECK(m.find(UINT64_MAX) == nullptr);

  CHECK(m.erase(0x11000));
  CHECK_FALSE(m.erase(0x11000));
  CHECK_FALSE(m.erase(0x10800));  // not a base
  CHECK(m.find(0x11000) == nullptr);
  CHECK(m.find(0x10fff) != nullptr);

  // Ignored: base 0, size 0.
  m.insert(0, 100, 0);
  m.insert(0x30000, 0, 0);
  CHECK(m.size() == 2);
}

TEST_CASE("LiveAllocationMap drops stale ranges an allocation overlaps", "[profiler][uses]") {
  LiveAllocationMap m;
  m.insert(0x1000, 0x1000, 0);  // [0x1000, 0x2000), its free never seen
  m.insert(0x3000, 0x100, 0);
  m.insert(0x1800, 0x1000, 0);  // [0x1800, 0x2800) overlaps the first
  CHECK(m.size() == 2);
  CHECK(m.find(0x1000) == nullptr);
  CHECK(m.find(0x1800)->base == 0x1800);
  m.insert(0x1800, 0x2000, 1);  // same base again (runtime and nested driver callbacks), larger
  CHECK(m.size() == 1);         // [0x1800, 0x3800) swallowed 0x3000 too
  CHECK(m.find(0x37ff)->base == 0x1800);
  CHECK(m.find(0x37ff)->device == 1);
}

TEST_CASE("kernel argument words hit exactly the allocations they point into", "[profiler][uses]") {
  LiveAllocationMap m;
  const uint64_t a = 0x7f0000000000, b = 0x7f0000100000, c = 0x7f0000200000, d = 0x7f0000300000,
                 e = 0x7f0000400000;
  m.insert(a, 4096, 0);
  m.insert(b, 4096, 0);
  m.insert(c, 4096, 0);
  m.insert(d, 1 << 20, 0);
  m.insert(e, 4096, 0);  // passed to no argument

  // kernel(float* p, struct { float* x; float* y; } s, float* q /* d + offset */, int n,
  //        unsigned long long garbage, char tag, double scale)
  struct TwoPtrs {
    uint64_t x, y;
  };
  uint64_t p = a;
  TwoPtrs s{b, c + 100};
  uint64_t q = d + 4 * 1000;
  int32_t n = 12345;
  uint64_t garbage = 0x1234;  // inside no allocation
  char tag = 'x';
  double scale = 2.5;
  void* params[] = {&p, &s, &q, &n, &garbage, &tag, &scale};
  const ParamSlot layout[] = {{0, 8}, {8, 16}, {24, 8}, {32, 4}, {40, 8}, {48, 1}, {56, 8}};

  std::vector<uint64_t> words;
  collect_param_words(params, layout, 7, &words);
  // p, s.x, s.y, q, garbage, scale (n and tag are narrower than a word).
  CHECK(words.size() == 6);
  std::vector<LiveRange> hits;
  CHECK(match_words(m, words, &hits) == 4);
  CHECK(bases(hits) == std::set<uint64_t>{a, b, c, d});
  for (const LiveRange& h : hits)
    if (h.base == d) CHECK(h.size == (1u << 20));

  // Several words into one allocation count once per launch.
  uint64_t p2 = a + 8;
  TwoPtrs s2{a + 16, a};
  void* params2[] = {&p2, &s2};
  words.clear();
  hits.clear();
  collect_param_words(params2, layout, 2, &words);
  CHECK(words.size() == 3);
  CHECK(match_words(m, words, &hits) == 1);
  REQUIRE(hits.size() == 1);
  CHECK(hits[0].base == a);
  // ... and a second call does not add an allocation already hit.
  CHECK(match_words(m, words, &hits) == 0);
  CHECK(hits.size() == 1);

  // Zero words and null parameter pointers are skipped.
  uint64_t zero = 0;
  void* params3[] = {&zero, nullptr};
  words.clear();
  collect_param_words(params3, layout, 2, &words);
  CHECK(words.empty());
  collect_param_words(nullptr, layout, 2, &words);
  CHECK(words.empty());
}

TEST_CASE("only 8-byte-aligned words of a parameter are read", "[profiler][uses]") {
  const uint64_t inside = 0x500000000040;
  // A 24-byte parameter at buffer offset 4 (a struct of 4-byte fields): words are read at buffer
  // offsets 8 and 16, i.e. parameter bytes 4..11 and 12..19; bytes 20..23 are no whole word.
  unsigned char buf[24] = {};
  std::memcpy(buf + 4, &inside, 8);
  std::memset(buf + 20, 0x7f, 4);
  void* params[] = {buf};
  const ParamSlot layout[] = {{4, 24}};
  std::vector<uint64_t> words;
  collect_param_words(params, layout, 1, &words);
  CHECK(words == std::vector<uint64_t>{inside});
  // An 8-byte parameter at buffer offset 4 holds no aligned word: nothing is read.
  unsigned char buf2[8];
  std::memcpy(buf2, &inside, 8);
  void* params2[] = {buf2};
  const ParamSlot layout2[] = {{4, 8}};
  words.clear();
  collect_param_words(params2, layout2, 1, &words);
  CHECK(words.empty());
}

TEST_CASE("a packed parameter buffer from cuLaunchKernel's extra is found and scanned", "[profiler][uses]") {
  LiveAllocationMap m;
  const uint64_t a = 0x600000000000, b = 0x600000010000;
  m.insert(a, 256, 0);
  m.insert(b, 256, 0);
  uint64_t packed[4] = {a + 8, 42, 0, b};
  size_t size = sizeof(packed);
  void* extra[] = {reinterpret_cast<void*>(kLaunchParamBufferPointer), packed,
                   reinterpret_cast<void*>(kLaunchParamBufferSize), &size,
                   reinterpret_cast<void*>(kLaunchParamEnd)};
  const void* buf = nullptr;
  size_t got = 0;
  REQUIRE(find_packed_buffer(extra, &buf, &got));
  CHECK(buf == packed);
  CHECK(got == sizeof(packed));
  std::vector<uint64_t> words;
  collect_buffer_words(buf, got, &words);
  CHECK(words.size() == 3);
  std::vector<LiveRange> hits;
  CHECK(match_words(m, words, &hits) == 2);
  CHECK(bases(hits) == std::set<uint64_t>{a, b});

  void* no_size[] = {reinterpret_cast<void*>(kLaunchParamBufferPointer), packed,
                     reinterpret_cast<void*>(kLaunchParamEnd)};
  CHECK_FALSE(find_packed_buffer(no_size, &buf, &got));
  CHECK_FALSE(find_packed_buffer(nullptr, &buf, &got));
}
