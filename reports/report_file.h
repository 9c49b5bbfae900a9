// The versioned JSON report file (docs/report.schema.json, docs/report.md): constants, reading
// and validation. Reading does not need the planner, so the gate links only this part.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace moeprof::reports {

// Bump when a key is removed or its meaning changes; adding keys keeps the version.
inline constexpr int kReportSchemaVersion = 1;

// Keys every run object carries (the reader rejects a report that lacks one).
inline constexpr const char* kRequiredRunKeys[] = {
    "name", "mode", "model", "tokens", "tp_size", "tp_rank", "backend", "device_name",
    "peak_activation_bytes", "peak_total_bytes", "churn_bytes", "allocations", "peak_by_category",
    "live_at_peak", "scopes", "anomalies", "dropped_records", "truncated", "extra"};

// The byte metrics a gate may check (all are non-negative integers in every run).
inline constexpr const char* kGateMetrics[] = {"peak_activation_bytes", "peak_total_bytes", "churn_bytes"};

struct ReportFile {
  std::string path;
  nlohmann::ordered_json doc;  // validated: schema_version == 1, required keys present

  const nlohmann::ordered_json& runs() const { return doc.at("runs"); }
  // The run named `name`, or nullptr.
  const nlohmann::ordered_json* find_run(std::string_view name) const;
};

// Checks schema_version, generator, runs and every run's required keys and types. The message
// names the first problem ("runs[1] (reuse): missing key churn_bytes").
Status validate_report(const nlohmann::ordered_json& doc);

// Reads and validates a report. Unreadable file, invalid JSON (with the byte offset), other
// schema versions and missing keys are kBadInput errors whose message starts with the path.
Result<ReportFile> read_report(const std::string& path);

// Parses and validates report text (`path` only names the source in messages).
Result<ReportFile> parse_report(std::string_view text, const std::string& path);

// The text of a report document as moeprof writes it: 2-space indentation, key order kept, an
// array of numbers and strings on one line (so timelines stay compact), a trailing newline.
std::string report_text(const nlohmann::ordered_json& doc);

// Writes `text` to `path` (truncates); kBadInput if it cannot be created ("-" = stdout).
Status write_text_file(const std::string& path, std::string_view text);

// Lenient accessors used by the renderers: a missing key or a value of another type reads as
// 0 / "" (reports are validated by validate_report before they are rendered).
inline uint64_t json_u64(const nlohmann::ordered_json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<uint64_t>() : 0;
}
// JSON text of a document whose strings may come from outside moeprof (paths, rule files, names):
// bytes that are not UTF-8 become U+FFFD instead of an exception (core/utf8.h). Every JSON that
// moeprof prints or writes goes through this.
template <class Json>
std::string json_text(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

inline int64_t json_i64(const nlohmann::ordered_json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<int64_t>() : 0;
}
inline std::string json_str(const nlohmann::ordered_json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

// What a streamed run (moeprof plan/report --stream on) lacks, said the same way everywhere.
inline std::string streamed_note() {
  return "analysed as a stream (--stream): no per-allocation timeline; --stream off draws it";
}

// The name a reader sees for a live entry, a diff row or an allocation group: its name, else its
// innermost user frame (programs traced without names: `stack`, or a group's `frame`), else "(unnamed)".
inline std::string entry_label(const nlohmann::ordered_json& e) {
  std::string n = json_str(e, "name");
  if (!n.empty()) return n;
  if (e.contains("stack") && e["stack"].is_array() && !e["stack"].empty() && e["stack"][0].is_string() &&
      !e["stack"][0].get<std::string>().empty())
    return e["stack"][0].get<std::string>();
  if (!json_str(e, "frame").empty()) return json_str(e, "frame");
  return "(unnamed)";
}

// "rank/size", with " (emulated)" when one device ran one rank's shapes (extra.tp_emulated), or
// "all N ranks of N" for a merged multi-GPU trace (extra.ranks).
// The run fields that define a workload: runs that differ in one are different workloads, and
// their difference is not a change of memory behaviour (the gate fails on it; compare says so).
inline constexpr const char* kWorkloadKeys[] = {"model", "tokens", "layers", "tp_size", "tp_rank"};

// "model tiny vs kimi-k2.5", one per workload key whose values differ (a run object each).
inline std::vector<std::string> workload_differences(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b) {
  std::vector<std::string> out;
  auto shown = [](const nlohmann::ordered_json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  for (const char* key : kWorkloadKeys)
    if (a.contains(key) && b.contains(key) && a[key] != b[key]) out.push_back(std::string(key) + " " + shown(a[key]) + " vs " + shown(b[key]));
  return out;
}

// "-" for a field the run does not have (tables).
inline std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }

// "" for a run of one device without TP (a traced or imported program, a TP=1 run): tables show
// "-", the text header leaves it out, never "0/1".
inline std::string run_tp_label(const nlohmann::ordered_json& run) {
  if (json_i64(run, "tp_size") <= 1) return "";
  std::string label = std::to_string(json_i64(run, "tp_rank")) + "/" + std::to_string(json_i64(run, "tp_size"));
  if (!run.contains("extra") || !run["extra"].is_object()) return label;
  const auto& x = run["extra"];
  if (json_str(x, "tp_emulated") == "true") return label + " (emulated)";
  // A merged multi-GPU trace (src/core/trace_merge.h): every rank, one device each.
  if (!json_str(x, "ranks").empty()) return "all " + json_str(x, "ranks") + " ranks of " + std::to_string(json_i64(run, "tp_size"));
  return label;
}

// Notes a reader must see next to a run's figures: TP emulation, shared expert weights, the
// allocator caveat of traced PyTorch programs. (A run error is a warning: text_report.h,
// run_warnings.)
inline std::vector<std::string> run_notes(const nlohmann::ordered_json& run) {
  std::vector<std::string> notes;
  if (!run.contains("extra") || !run["extra"].is_object()) return notes;
  const auto& x = run["extra"];
  if (json_str(x, "tp_emulated") == "true")
    notes.push_back("TP emulated: one device ran rank " + std::to_string(json_i64(run, "tp_rank")) + "'s shapes of TP=" +
                    std::to_string(json_i64(run, "tp_size")) + "; collectives were no-ops");
  if (json_str(x, "weights") == "shared")
    notes.push_back("weights: shared (" + (json_str(x, "weights_note").empty() ? std::string("--weights shared")
                                                                                  : json_str(x, "weights_note")) + ")");
  if (!json_str(x, "allocator_note").empty()) notes.push_back(json_str(x, "allocator_note"));
  return notes;
}

}  // namespace moeprof::reports
