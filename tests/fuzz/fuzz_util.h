// Shared by the fuzz harnesses (tests/fuzz/*.cpp): each is a libFuzzer entry point
// LLVMFuzzerTestOneInput that asserts invariants beyond "no crash" with FUZZ_CHECK, which aborts
// with a message (libFuzzer then saves the input as a crash). Built with clang as fuzzers
// (MOEPROF_BUILD_FUZZERS) and with any compiler as corpus replayers (replay_main.cpp), which CTest
// runs over tests/fuzz/corpus/<harness>/.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/status.h"

#define FUZZ_CHECK(cond, ...)                                                                \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);    \
      std::fprintf(stderr, "  " __VA_ARGS__);                                                \
      std::fprintf(stderr, "\n");                                                            \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

namespace moeprof::fuzz {

// Every reader error is bad input (exit 2) with a one-line, non-empty message.
inline void check_reader_error(const Status& st, const char* reader) {
  FUZZ_CHECK(st.code() == ErrorCode::kBadInput, "%s: error with code %d: %s", reader, st.exit_code(), st.message().c_str());
  FUZZ_CHECK(!st.message().empty(), "%s: empty error message", reader);
  FUZZ_CHECK(st.message().find('\n') == std::string::npos, "%s: multi-line error: %s", reader, st.message().c_str());
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// A scratch file per process (round trips through the file writers).
inline std::string scratch_path(const char* stem) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/moeprof-fuzz-" + stem + "-" + std::to_string(::getpid());
}

}  // namespace moeprof::fuzz
