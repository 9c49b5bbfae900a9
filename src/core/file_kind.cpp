#include "core/file_kind.h"

#include <cstdio>
#include <cstring>

#include "core/trace_io.h"

namespace moeprof {

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

}  // namespace

FileKind file_kind(std::string_view head) {
  if (head.empty()) return FileKind::kEmpty;
  if (head.size() >= 8 && std::memcmp(head.data(), kTraceMagic, 8) == 0) return FileKind::kTrace;
  const auto b0 = static_cast<unsigned char>(head[0]);
  if (b0 == 0x80 && head.size() >= 2 && head[1] >= 2 && head[1] <= 5) return FileKind::kPickle;  // PROTO n
  if (starts_with(head, "PK\x03\x04")) return FileKind::kZip;
  if (b0 == 0x1f && head.size() >= 2 && static_cast<unsigned char>(head[1]) == 0x8b) return FileKind::kGzip;
  if (starts_with(head, "\x7f" "ELF")) return FileKind::kElf;
  size_t i = 0;
  if (starts_with(head, "\xEF\xBB\xBF")) i = 3;  // UTF-8 byte order mark
  while (i < head.size() && (head[i] == ' ' || head[i] == '\t' || head[i] == '\r' || head[i] == '\n')) ++i;
  const std::string_view text = head.substr(i);
  if (starts_with(text, "{") || starts_with(text, "[")) {
    if (text.find("\"schema_version\"") != std::string_view::npos && text.find("\"runs\"") != std::string_view::npos)
      return FileKind::kReportJson;
    if (text.find("\"traceEvents\"") != std::string_view::npos) return FileKind::kPerfettoJson;
    return FileKind::kJson;
  }
  if (starts_with(text, "<!DOCTYPE") || starts_with(text, "<!doctype") || starts_with(text, "<html")) return FileKind::kHtml;
  if (starts_with(text, "id,lower,upper,size")) return FileKind::kArenaCsv;
  return FileKind::kUnknown;
}

std::string describe_file_kind(FileKind k) {
  switch (k) {
    case FileKind::kEmpty: return "an empty file";
    case FileKind::kTrace: return "a moeprof trace (.mtrace)";
    case FileKind::kReportJson: return "a moeprof JSON report";
    case FileKind::kPerfettoJson: return "a Perfetto (Chrome trace event) JSON file";
    case FileKind::kJson: return "a JSON file";
    case FileKind::kPickle: return "a Python pickle (a PyTorch memory snapshot?)";
    case FileKind::kZip: return "a zip archive (a torch.save file?)";
    case FileKind::kGzip: return "a gzip-compressed file";
    case FileKind::kArenaCsv: return "an arena instance (MiniMalloc CSV)";
    case FileKind::kHtml: return "an HTML page";
    case FileKind::kElf: return "an executable";
    case FileKind::kUnknown: break;
  }
  return "of a kind moeprof does not know";
}

std::string file_kind_advice(FileKind k, const std::string& path) {
  switch (k) {
    case FileKind::kTrace: return "plan, compare, report and export read traces: moeprof plan " + path;
    case FileKind::kReportJson: return "moeprof gate reads reports: moeprof gate --baseline BASE.json --current " + path;
    case FileKind::kPickle:
      return "convert a torch.cuda.memory._dump_snapshot pickle with moeprof import " + path + " --out " + path + ".mtrace";
    case FileKind::kGzip: return "decompress it first (gunzip)";
    case FileKind::kArenaCsv: return "moeprof arena reads it: moeprof arena " + path;
    case FileKind::kElf: return "to trace a program: moeprof trace -- " + path;
    default: return "";
  }
}

std::string read_file_head(const std::string& path, size_t n) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return "";
  std::string head(n, '\0');
  head.resize(std::fread(head.data(), 1, n, f));
  std::fclose(f);
  return head;
}

}  // namespace moeprof
