// Where `moeprof run` writes its results. A run never deletes a user's results before it has
// produced its own: it writes into a staging folder inside --out (DIR/.moeprof-run.<pid>), and
// publish() then replaces the outputs of an earlier run in DIR with what the stage holds, file by
// file (a rename within one file system). A run that stops before writing anything (a bad option,
// an unknown model, no GPU) leaves DIR as it was. One that fails after writing a trace publishes
// that trace (closed and marked failed, so it stays readable) and drops the earlier run's report,
// which no longer describes what DIR holds.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"

namespace moeprof::cli {

// A file name that `moeprof run` writes into --out (report.json/.md/.html, <mode>.*.mtrace,
// <mode>.ops.json, rank<r>.log, rank<r>.cupti.mtrace): what publish() replaces.
bool is_run_output_name(const std::string& file_name);

// Removes the outputs of an earlier run from DIR (is_run_output_name); returns how many.
size_t remove_run_outputs(const std::string& dir);

class RunOutput {
 public:
  // Creates DIR when needed and the stage inside it; bad input when either cannot be created.
  static Result<std::unique_ptr<RunOutput>> begin(const std::string& dir);
  // Stages in DIR left by runs whose process no longer exists (killed by SIGKILL, so nothing
  // published their files): kept as they are, for the caller to name.
  const std::vector<std::string>& orphaned_stages() const { return orphans_; }
  ~RunOutput();  // publishes what was not published yet
  RunOutput(const RunOutput&) = delete;
  RunOutput& operator=(const RunOutput&) = delete;

  const std::string& dir() const { return dir_; }
  const std::string& stage() const { return stage_; }
  // The path a staged file will have once published (stage/x -> DIR/x); other text unchanged.
  std::string final_path(const std::string& text) const;

  // When the stage holds any file: removes the earlier run's outputs from DIR, moves the stage's
  // files there, removes the stage. When it holds none, DIR is left as it was. Idempotent and
  // safe to call from another thread (the interrupt handler). `drop` names a staged file that is
  // not a result (the NCCL id file) and is deleted instead.
  Status publish(const std::string& drop = "");
  // Earlier outputs removed or replaced by publish(); files moved into DIR.
  size_t replaced() const { return replaced_; }
  size_t published() const { return published_; }

 private:
  RunOutput() = default;
  std::string dir_, stage_;
  std::vector<std::string> orphans_;
  std::mutex mu_;
  bool done_ = false;
  size_t replaced_ = 0, published_ = 0;
};

}  // namespace moeprof::cli
