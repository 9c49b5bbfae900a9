// What a file is, told from its first bytes, for errors that name the right command when a user
// gives one command another command's file (`plan report.json`, `plan x.pickle`,
// `import baseline.mtrace`).
#pragma once

#include <string>
#include <string_view>

namespace moeprof {

enum class FileKind {
  kUnknown,
  kEmpty,
  kTrace,          // a moeprof .mtrace
  kReportJson,     // a moeprof JSON report ("schema_version" and "runs")
  kPerfettoJson,   // a Chrome/Perfetto trace ("traceEvents")
  kJson,           // other JSON
  kPickle,         // a Python pickle (protocol 2 to 5): a PyTorch memory snapshot
  kZip,            // a zip archive (torch.save)
  kGzip,
  kArenaCsv,       // a MiniMalloc CSV (id,lower,upper,size)
  kHtml,
  kElf,            // an executable
};

// `head`: the first bytes of the file (512 are enough).
FileKind file_kind(std::string_view head);

// "a Python pickle (a PyTorch memory snapshot?)", "a moeprof JSON report", ...
std::string describe_file_kind(FileKind k);

// What reads a file of this kind, for a message to a user who gave it to something else:
// "convert it with moeprof import FILE --out FILE.mtrace". `path` stands for FILE. "" when
// nothing in moeprof reads it.
std::string file_kind_advice(FileKind k, const std::string& path);

// The first `n` bytes of a file ("" when it cannot be read).
std::string read_file_head(const std::string& path, size_t n = 512);

}  // namespace moeprof
