// Native call stacks at allocation: captured in the calling thread, interned, symbolized once.
// (Python frames are tested by python_stack_test.py through a small shared library.)
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "profiler/stack_capture.h"

using namespace moeprof;
using namespace moeprof::profiler;

namespace {
StackCollector* g_collector = nullptr;
uint32_t g_captured = 0;

int compare_and_capture(const void* a, const void* b) {
  if (g_captured == 0) g_captured = g_collector->capture();
  return *static_cast<const int*>(a) - *static_cast<const int*>(b);
}
}  // namespace

TEST_CASE("native stacks: libc and the test binary appear, stacks are interned", "[profiler][stacks]") {
  StackCollector c(StackMode::kNative);
  g_collector = &c;
  g_captured = 0;
  std::vector<int> v = {5, 3, 9, 1, 7};
  std::qsort(v.data(), v.size(), sizeof(int), compare_and_capture);  // capture from inside libc
  REQUIRE(g_captured != 0);
  const std::vector<ResolvedFrame> frames = c.resolve(g_captured);
  REQUIRE(frames.size() >= 3);
  bool libc = false, self = false;
  for (const ResolvedFrame& f : frames) {
    CHECK(f.kind == FrameKind::kNative);
    CHECK_FALSE(f.function.empty());
    libc = libc || f.file.rfind("libc.so", 0) == 0;
    self = self || f.file == "profiler_test";
  }
  CHECK(libc);
  CHECK(self);
  // The same call site gives the same stack id; another one a different id.
  std::vector<uint32_t> ids;
  volatile int n = 2;  // a loop of unknown count: one call instruction, one return address
  for (int i = 0; i < n; ++i) ids.push_back(c.capture());
  CHECK(ids[0] == ids[1]);
  CHECK(ids[0] != g_captured);
  CHECK(c.captured() == 3);
  CHECK(c.python_captured() == 0);  // no interpreter in this process
  // Other threads capture too; resolve is stable.
  uint32_t t = 0;
  std::thread th([&] { t = c.capture(); });
  th.join();
  CHECK(t != 0);
  CHECK(c.resolve(g_captured).size() == frames.size());
  CHECK(c.resolve(999999).empty());
}

TEST_CASE("python stacks without an interpreter capture nothing, modes parse", "[profiler][stacks]") {
  StackCollector c(StackMode::kPython);
  CHECK(c.capture() == 0);
  StackMode m;
  CHECK(parse_stack_mode("both", &m));
  CHECK(m == StackMode::kBoth);
  CHECK(std::string(stack_mode_name(StackMode::kPython)) == "python");
  CHECK_FALSE(parse_stack_mode("all", &m));
}
