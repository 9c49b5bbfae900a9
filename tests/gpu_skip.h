// GPU tests report SKIPPED to CTest (never passed) where no usable GPU exists: the test runner
// (tests/catch_main.cpp) exits with kSkipReturnCode before any test case tagged [gpu] when the
// driver lists no usable device, and a test that needs more (two GPUs, a built binary) calls
// MOEPROF_SKIP. tests/CMakeLists.txt gives every test SKIP_RETURN_CODE kSkipReturnCode.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace moeprof::testing {

inline constexpr int kSkipReturnCode = 77;

[[noreturn]] inline void skip_test(const std::string& why) {
  std::fprintf(stdout, "SKIPPED: %s\n", why.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(kSkipReturnCode);
}

}  // namespace moeprof::testing

#define MOEPROF_SKIP(why) ::moeprof::testing::skip_test(why)
