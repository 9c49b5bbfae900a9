#include "cli/cli_util.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "reports/format.h"

namespace moeprof::cli {

int fail(std::string_view cmd, const Status& st) {
  std::fflush(stdout);
  // One line whatever the message holds (readers quote what they read; this is the last guard).
  std::string line = st.message();
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  fmt::print(stderr, "moeprof {}: error: {}\n", cmd, line);
  return st.is_ok() ? kExitRunFailure : st.exit_code();
}

Status write_stdout(std::string_view text) {
  // An earlier write that failed (std::cout shares stdout) left its errno: keep it for the message.
  if (!std::ferror(stdout)) errno = 0;
  const size_t n = std::fwrite(text.data(), 1, text.size(), stdout);
  if (n != text.size() || std::fflush(stdout) != 0 || std::ferror(stdout)) {
    const int e = errno;
    std::clearerr(stdout);
    return Status::run_failure(std::string("writing to standard output failed: ") + (e ? std::strerror(e) : "short write"));
  }
  return Status::ok();
}

Status check_output_not_input(std::string_view option, const std::string& out, const std::vector<std::string>& inputs, bool comma_lists) {
  namespace fs = std::filesystem;
  if (out.empty() || out == "-") return Status::ok();
  std::error_code ec;
  if (!fs::exists(out, ec)) return Status::ok();
  for (const std::string& list : inputs) {
    // A comma-joined list of rank traces as the commands read it (a file whose name has a comma
    // is that file).
    for (const std::string& in : comma_lists ? reports::split_run_argument(list) : std::vector<std::string>{list}) {
      if (in.empty() || in == "-") continue;
      std::error_code e2;
      if (fs::equivalent(out, in, e2))
        return Status::bad_input(std::string(option) + " " + out + " is the input " + in + ": it would be replaced; write elsewhere");
    }
  }
  return Status::ok();
}

Status check_output_writable(std::string_view option, const std::string& out) {
  namespace fs = std::filesystem;
  if (out.empty() || out == "-") return Status::ok();
  std::error_code ec;
  if (fs::is_directory(out, ec)) return Status::bad_input(std::string(option) + " " + out + " is a directory");
  fs::path parent = fs::path(out).parent_path();
  if (parent.empty()) parent = ".";
  if (!fs::is_directory(parent, ec)) return Status::bad_input("cannot create " + out + ": " + std::strerror(ENOENT));
  if (::access(parent.c_str(), W_OK) != 0 && !(fs::exists(out, ec) && ::access(out.c_str(), W_OK) == 0))
    return Status::bad_input("cannot create " + out + ": " + std::strerror(errno));
  return Status::ok();
}

Status write_file_replacing(const std::string& path, const std::function<Status(std::ostream&)>& body) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // A link is followed: the file it names is replaced, beside itself, and keeps its permissions.
  fs::path target = path;
  if (fs::exists(path, ec)) {
    const fs::path real = fs::canonical(path, ec);
    if (!ec) target = real;
  }
  const auto st = fs::status(target, ec);
  const bool exists = !ec && fs::exists(st);
  bool direct = exists && !fs::is_regular_file(st);  // a device or a pipe: written as it is
  const std::string tmp = target.string() + ".moeprof-" + std::to_string(::getpid()) + ".tmp";
  std::ofstream out;
  if (!direct) {
    out.open(tmp, std::ios::binary | std::ios::trunc);
    if (!out) direct = true;  // no file can be made beside it (a read-only folder): write in place
  }
  if (direct) out.open(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::bad_input("cannot create " + path + ": " + std::strerror(errno));
  Status s = body(out);
  out.close();
  if (s && !out) s = Status::run_failure("writing " + path + " failed");
  if (s && !direct) {
    if (exists) fs::permissions(tmp, st.permissions(), fs::perm_options::replace, ec);
    fs::rename(tmp, target, ec);
    if (ec) s = Status::run_failure("writing " + path + " failed: " + ec.message());
  }
  if (!s && !direct) fs::remove(tmp, ec);
  return s;
}

namespace {

std::string shown_value(const std::string& v) { return v.size() > 40 ? v.substr(0, 40) + "..." : v; }

// A whole number with commas, else decimals without an exponent (0.000001, not 1e-06).
std::string plain_number(double x) {
  if (x == static_cast<double>(static_cast<int64_t>(x)) && std::fabs(x) < 1e15) return reports::with_commas(static_cast<int64_t>(x));
  std::string t = fmt::format("{:.12f}", x);
  while (t.back() == '0') t.pop_back();
  return t;
}

}  // namespace

CLI::Validator integer_range(int64_t lo, int64_t hi) {
  const std::string range = "must be an integer from " + reports::with_commas(lo) + " to " + reports::with_commas(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& v) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long x = std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || errno == ERANGE || x < lo || x > hi) return range + " (got " + shown_value(v) + ")";
        return "";
      },
      "");
}

// A finite number in [lo, hi], else "RANGE (got V)": NaN and infinities never pass.
static CLI::Validator finite_range(double lo, double hi, std::string range) {
  return CLI::Validator(
      [lo, hi, range](std::string& v) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (v.empty() || *end != '\0' || !std::isfinite(x) || x < lo || x > hi) return range + " (got " + shown_value(v) + ")";
        return "";
      },
      "");
}

CLI::Validator seconds_range(double lo, double hi) {
  return finite_range(lo, hi, "must be a number of seconds from " + plain_number(lo) + " to " + plain_number(hi));
}

CLI::Validator number_range(double lo, double hi) {
  return finite_range(lo, hi, "must be a number from " + plain_number(lo) + " to " + plain_number(hi));
}

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (v.empty() || *end != '\0' || !std::isfinite(x) || !(x > 0)) return "must be a number greater than 0 (got " + shown_value(v) + ")";
        return "";
      },
      "");
}

void add_category_options(CLI::App* cmd, CategoryArgs* a) {
  cmd->add_option("--categories", a->mode,
                  "auto: infer the categories of traced and imported programs (persistent, workspace, communication, "
                  "transient; docs/metrics.md); infer: always; keep: the trace's own")
      ->check(CLI::IsMember({"auto", "infer", "keep"}))
      ->capture_default_str();
  cmd->add_option("--category-rules", a->rules,
                  "a file of rules that override the inference, one per line: <category> SELECTOR (selectors as in what-if "
                  "rules); they apply to every allocation they match, whatever its recorded category")
      ->type_name("FILE");
}

Result<reports::CategoryOptions> category_options(const CategoryArgs& a) {
  reports::CategoryOptions o;
  o.mode = a.mode == "infer" ? planner::CategoryInference::kInfer
                             : (a.mode == "keep" ? planner::CategoryInference::kKeep : planner::CategoryInference::kAuto);
  if (!a.rules.empty()) {
    auto r = planner::load_category_rules(a.rules);
    if (!r) return r.status();
    o.rules = std::move(r).value();
    if (o.mode == planner::CategoryInference::kKeep)
      return Status::bad_input("--category-rules with --categories keep: keep leaves every recorded category, so the rules would not apply");
  }
  return o;
}

void add_stream_option(CLI::App* cmd, std::string* mode) {
  cmd->add_option("--stream", *mode,
                  "read the traces as a stream, in memory that grows with what is live rather than with the trace, "
                  "with the same figures: auto streams unless the command needs every lifetime in memory (the "
                  "report's per-allocation timeline: below 1 GiB); streamed runs have no per-allocation timeline "
                  "(docs/planner.md, \"Streaming\")")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->type_name("MODE")
      ->capture_default_str();
}

reports::StreamMode stream_mode(const std::string& mode) {
  return mode == "on" ? reports::StreamMode::kOn : (mode == "off" ? reports::StreamMode::kOff : reports::StreamMode::kAuto);
}

}  // namespace moeprof::cli
