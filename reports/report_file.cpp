#include "reports/report_file.h"

#include "core/utf8.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "core/checked.h"

namespace moeprof::reports {

namespace {

bool is_count(const nlohmann::ordered_json& v) {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
}

Status check_run(const nlohmann::ordered_json& run, size_t index) {
  std::string where = "runs[" + std::to_string(index) + "]";
  if (!run.is_object()) return Status::bad_input(where + " is not an object");
  if (run.contains("name") && run["name"].is_string()) where += " (" + run["name"].get<std::string>() + ")";
  for (const char* key : kRequiredRunKeys) {
    if (!run.contains(key)) return Status::bad_input(where + ": missing key " + key);
  }
  for (const char* key : {"name", "mode", "model", "backend", "device_name"}) {
    if (!run[key].is_string()) return Status::bad_input(where + ": " + key + " is not a string");
  }
  for (const char* key : {"peak_activation_bytes", "peak_total_bytes", "churn_bytes", "allocations",
                          "dropped_records", "tokens", "tp_size"}) {
    if (!is_count(run[key])) return Status::bad_input(where + ": " + key + " is not a non-negative integer");
  }
  // The byte limit of every figure (core/checked.h): the gate's deltas are then exact.
  for (const char* key : kGateMetrics) {
    if (run[key].get<uint64_t>() > kMaxBytes)
      return Status::bad_input(where + ": " + key + " " + run[key].dump() + " exceeds the limit of 2^63-1 bytes");
  }
  if (run.contains("truncation_note") && !run["truncation_note"].is_string())
    return Status::bad_input(where + ": truncation_note is not a string");
  for (const auto& [k, v] : run["extra"].items()) {
    if (!v.is_string()) return Status::bad_input(where + ": extra." + k + " is not a string");
  }
  if (!run["tp_rank"].is_number_integer()) return Status::bad_input(where + ": tp_rank is not an integer");
  if (!run["truncated"].is_boolean()) return Status::bad_input(where + ": truncated is not a boolean");
  for (const char* key : {"peak_by_category", "live_at_peak", "anomalies", "extra"}) {
    if (!run[key].is_object()) return Status::bad_input(where + ": " + key + " is not an object");
  }
  if (!run["scopes"].is_array()) return Status::bad_input(where + ": scopes is not an array");
  if (run["name"].get<std::string>().empty()) return Status::bad_input(where + ": empty run name");
  return Status::ok();
}

}  // namespace

const nlohmann::ordered_json* ReportFile::find_run(std::string_view name) const {
  for (const auto& r : runs()) {
    if (r["name"].get<std::string>() == name) return &r;
  }
  return nullptr;
}

namespace {

// Deeper documents are refused: rendering and dumping JSON recurse once per level.
constexpr size_t kMaxReportDepth = 128;

size_t nesting_depth(const nlohmann::ordered_json& doc) {
  size_t deepest = 0;
  std::vector<std::pair<const nlohmann::ordered_json*, size_t>> todo = {{&doc, 1}};
  while (!todo.empty()) {
    auto [j, d] = todo.back();
    todo.pop_back();
    deepest = std::max(deepest, d);
    if (d > kMaxReportDepth) break;
    if (j->is_structured())
      for (const auto& v : *j) todo.emplace_back(&v, d + 1);
  }
  return deepest;
}

}  // namespace

Status validate_report(const nlohmann::ordered_json& doc) {
  if (!doc.is_object()) return Status::bad_input("report is not a JSON object");
  if (nesting_depth(doc) > kMaxReportDepth)
    return Status::bad_input("report nests deeper than " + std::to_string(kMaxReportDepth) + " levels");
  if (!doc.contains("schema_version")) return Status::bad_input("missing schema_version: not a moeprof report");
  const auto& v = doc["schema_version"];
  if (!v.is_number_integer()) return Status::bad_input("schema_version is not an integer");
  if (v.get<int64_t>() != kReportSchemaVersion)
    return Status::bad_input("report schema version " + std::to_string(v.get<int64_t>()) +
                             ", this moeprof reads version " + std::to_string(kReportSchemaVersion));
  if (!doc.contains("generator") || !doc["generator"].is_string())
    return Status::bad_input("missing or non-string generator");
  if (doc["generator"].get<std::string>().rfind("moeprof ", 0) != 0)
    return Status::bad_input("generator \"" + valid_utf8(doc["generator"].get<std::string>().substr(0, 40)) +
                             "\" does not start with \"moeprof \": not a moeprof report");
  if (!doc.contains("runs") || !doc["runs"].is_array()) return Status::bad_input("missing runs array");
  if (doc["runs"].empty()) return Status::bad_input("report has no runs");
  std::set<std::string> names;
  for (size_t i = 0; i < doc["runs"].size(); ++i) {
    MOEPROF_RETURN_IF_ERROR(check_run(doc["runs"][i], i));
    auto name = doc["runs"][i]["name"].get<std::string>();
    if (!names.insert(name).second)
      return Status::bad_input("runs[" + std::to_string(i) + "]: duplicate run name " + name);
  }
  if (!doc.contains("comparison")) return Status::bad_input("missing comparison (an object, or null)");
  if (!doc["comparison"].is_null() && !doc["comparison"].is_object())
    return Status::bad_input("comparison is neither an object nor null");
  return Status::ok();
}

Result<ReportFile> parse_report(std::string_view text, const std::string& path) {
  ReportFile f;
  f.path = path;
  // The reader's one exception boundary: whatever nlohmann throws on this text (a syntax error,
  // a number out of range such as 1e400, nesting too deep) is bad input naming the file.
  try {
    f.doc = nlohmann::ordered_json::parse(text.begin(), text.end());
    Status st = validate_report(f.doc);
    if (!st) return st.with_context(path);
  } catch (const nlohmann::json::parse_error& e) {
    return Status::bad_input(path + ": byte offset " + std::to_string(e.byte) + ": not valid JSON");
  } catch (const nlohmann::json::out_of_range& e) {
    return Status::bad_input(path + ": not a valid report: a number out of range (" + std::string(e.what()) + ")");
  } catch (const nlohmann::json::exception& e) {
    return Status::bad_input(path + ": not a valid report (" + std::string(e.what()) + ")");
  }
  return f;
}

Result<ReportFile> read_report(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return Status::bad_input("cannot read report " + path + ": it is a directory");
  if (std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) == 0 && !ec)
    return Status::bad_input("report " + path + " is an empty file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::bad_input("cannot open report " + path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::bad_input("cannot read report " + path);
  return parse_report(ss.str(), path);
}

namespace {

bool is_leaf_array(const nlohmann::ordered_json& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const auto& e : v)
    if (e.is_structured() && !(e.is_array() && !e.empty() && std::all_of(e.begin(), e.end(), [](const auto& x) { return !x.is_structured(); })))
      return false;
  return true;
}

void write_pretty(const nlohmann::ordered_json& v, int indent, std::string* out) {
  const std::string pad(static_cast<size_t>(indent) * 2, ' ');
  if (v.is_object() && !v.empty()) {
    *out += "{\n";
    size_t i = 0;
    for (auto it = v.begin(); it != v.end(); ++it, ++i) {
      *out += pad + "  " + json_text(nlohmann::ordered_json(it.key())) + ": ";
      write_pretty(it.value(), indent + 1, out);
      *out += i + 1 < v.size() ? ",\n" : "\n";
    }
    *out += pad + "}";
  } else if (v.is_array() && !v.empty() && !is_leaf_array(v)) {
    *out += "[\n";
    for (size_t i = 0; i < v.size(); ++i) {
      *out += pad + "  ";
      write_pretty(v[i], indent + 1, out);
      *out += i + 1 < v.size() ? ",\n" : "\n";
    }
    *out += pad + "]";
  } else if (is_leaf_array(v)) {
    // Scalars, or short arrays of scalars (timeline points, allocation rows): one line.
    *out += "[";
    for (size_t i = 0; i < v.size(); ++i) *out += (i ? ", " : "") + json_text(v[i]);
    *out += "]";
  } else {
    *out += json_text(v);
  }
}

}  // namespace

std::string report_text(const nlohmann::ordered_json& doc) {
  std::string out;
  write_pretty(doc, 0, &out);
  return out + "\n";
}

Status write_text_file(const std::string& path, std::string_view text) {
  if (path == "-") {  // checked like every write to stdout: a full disk or a closed pipe is an error
    std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
    std::cout.flush();
    if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout)) {
      const int e = errno;
      std::cout.clear();
      std::clearerr(stdout);
      return Status::run_failure(std::string("writing to standard output failed") + (e ? std::string(": ") + std::strerror(e) : ""));
    }
    return Status::ok();
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::bad_input("cannot create " + path + ": " + std::strerror(errno));
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) return Status::run_failure("writing " + path + " failed");
  return Status::ok();
}

}  // namespace moeprof::reports
