#include "cli/cli_util.h"

#include <cerrno>
#include <cstring>

namespace moeprof::cli {

int fail(std::string_view cmd, const Status& st) {
  std::fflush(stdout);
  fmt::print(stderr, "moeprof {}: error: {}\n", cmd, st.message());
  return st.is_ok() ? kExitRunFailure : st.exit_code();
}

Status write_stdout(std::string_view text) {
  errno = 0;
  const size_t n = std::fwrite(text.data(), 1, text.size(), stdout);
  if (n != text.size() || std::fflush(stdout) != 0 || std::ferror(stdout)) {
    const int e = errno;
    std::clearerr(stdout);
    return Status::run_failure(std::string("writing to standard output failed: ") + (e ? std::strerror(e) : "short write"));
  }
  return Status::ok();
}

}  // namespace moeprof::cli
