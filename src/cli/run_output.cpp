#include "cli/run_output.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <vector>

namespace moeprof::cli {

namespace fs = std::filesystem;

bool is_run_output_name(const std::string& n) {
  auto ends = [&](std::string_view suffix) { return n.size() > suffix.size() && n.ends_with(suffix); };
  auto starts = [&](std::string_view prefix) { return n.starts_with(prefix); };
  if (n == "report.json" || n == "report.md" || n == "report.html") return true;
  const bool mode_file = starts("baseline.") || starts("reuse.") || starts("fixes.");
  if (mode_file && (ends(".mtrace") || ends(".ops.json"))) return true;
  // Rank processes (--launch processes): their logs and whole-process CUPTI traces.
  if (starts("rank") && (ends(".log") || ends(".cupti.mtrace"))) return true;
  return false;
}

size_t remove_run_outputs(const std::string& dir) {
  std::error_code ec;
  size_t removed = 0;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec) && is_run_output_name(e.path().filename().string()) && fs::remove(e.path(), ec)) ++removed;
  return removed;
}

Result<std::unique_ptr<RunOutput>> RunOutput::begin(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec)) return Status::bad_input("cannot create output directory " + dir + (ec ? ": " + ec.message() : ": not a directory"));
  std::unique_ptr<RunOutput> out(new RunOutput);
  out->dir_ = dir;
  out->stage_ = (fs::path(dir) / (".moeprof-run." + std::to_string(static_cast<long>(::getpid())))).string();
  const std::string prefix = ".moeprof-run.";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (!e.is_directory(ec) || !n.starts_with(prefix)) continue;
    char* end = nullptr;
    const long pid = std::strtol(n.c_str() + prefix.size(), &end, 10);
    if (pid <= 0 || *end != '\0' || pid == static_cast<long>(::getpid())) continue;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) out->orphans_.push_back(e.path().string());
  }
  fs::remove_all(out->stage_, ec);  // a folder of an earlier process with this pid
  fs::create_directory(out->stage_, ec);
  if (ec) return Status::bad_input("cannot create the staging folder " + out->stage_ + ": " + ec.message());
  return out;
}

RunOutput::~RunOutput() { (void)publish(); }

std::string RunOutput::final_path(const std::string& text) const {
  std::string s = text;
  for (size_t at = s.find(stage_); !stage_.empty() && at != std::string::npos; at = s.find(stage_, at + dir_.size()))
    s.replace(at, stage_.size(), dir_);
  return s;
}

Status RunOutput::publish(const std::string& drop) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return Status::ok();
  done_ = true;
  std::error_code ec;
  std::vector<fs::path> staged;
  for (const auto& e : fs::directory_iterator(stage_, ec)) {
    if (!drop.empty() && e.path().filename() == drop) {
      fs::remove(e.path(), ec);
      continue;
    }
    staged.push_back(e.path());
  }
  if (!staged.empty()) {
    // The earlier run's outputs go first, also those this run does not write again (a mode it
    // did not run, a report a failed run did not write): DIR then holds one run's results.
    replaced_ = remove_run_outputs(dir_);
  }
  Status st;
  for (const auto& p : staged) {
    fs::rename(p, fs::path(dir_) / p.filename(), ec);
    if (ec && st.is_ok()) st = Status::run_failure("cannot move " + p.string() + " into " + dir_ + ": " + ec.message());
    if (!ec) ++published_;
  }
  if (st.is_ok()) fs::remove_all(stage_, ec);
  return st;
}

}  // namespace moeprof::cli
