// A shared library for python_stack_test.py: captures the calling thread's stack with the
// profiler's StackCollector and returns it as text, one frame per line: "kind|function|file|line".
#include <cstring>
#include <string>

#include "profiler/stack_capture.h"

extern "C" __attribute__((visibility("default"))) int moeprof_test_capture(char* buf, int len, int mode) {
  using namespace moeprof::profiler;
  static StackCollector python(StackMode::kPython), both(StackMode::kBoth);
  StackCollector& c = mode == 0 ? python : both;
  const uint32_t id = c.capture();
  std::string out;
  for (const ResolvedFrame& f : c.resolve(id))
    out += std::string(f.kind == moeprof::FrameKind::kPython ? "py" : "native") + "|" + f.function + "|" + f.file + "|" +
           std::to_string(f.line) + "\n";
  if (static_cast<int>(out.size()) >= len) return -1;
  std::memcpy(buf, out.c_str(), out.size() + 1);
  return static_cast<int>(id);
}
