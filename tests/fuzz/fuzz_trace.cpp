// Fuzz harness: the .mtrace reader, and everything moeprof does with a trace it accepted.
// Invariants: a rejected trace is bad input with a one-line message; an accepted one analyses
// (or is refused by the byte limit as bad input), its report passes moeprof's own validator and
// renders, the trace rewritten by write_trace reads back identical (records byte for byte,
// strings, stacks, metadata), a run compared with itself differs by nothing, and the zero-tolerance
// gate of its report against itself passes every check with equal figures (the run fails the
// gate only as a failed or incomplete run), and the streamed analysis (planner/stream.h, a small
// reordering window so that the external sort runs too) accepts and refuses the same traces and
// gives the same figures, warnings and limits.
#include <cstring>

#include "core/trace_io.h"
#include "planner/analysis.h"
#include "planner/categories.h"
#include "planner/stream.h"
#include "reports/gate.h"
#include "reports/html_report.h"
#include "reports/json_report.h"
#include "reports/markdown_report.h"
#include "reports/report_file.h"
#include "tests/fuzz/fuzz_util.h"

using namespace moeprof;

namespace {

void check_round_trip(const Trace& t) {
  const std::string path = fuzz::scratch_path("trace");
  Status st = write_trace(path, t);
  FUZZ_CHECK(st.is_ok(), "write_trace failed: %s", st.message().c_str());
  auto back = read_trace(path);
  std::remove(path.c_str());
  FUZZ_CHECK(back.is_ok(), "rewritten trace does not read: %s", back.status().message().c_str());
  const Trace& b = back.value();
  FUZZ_CHECK(!b.truncated, "rewritten trace is truncated");
  FUZZ_CHECK(b.dropped_records == t.dropped_records, "dropped records changed");
  FUZZ_CHECK(run_meta_to_json(b.meta) == run_meta_to_json(t.meta), "metadata changed: %s vs %s",
             run_meta_to_json(b.meta).c_str(), run_meta_to_json(t.meta).c_str());
  FUZZ_CHECK(b.strings.all() == t.strings.all(), "string table changed (%zu vs %zu strings)", b.strings.size(), t.strings.size());
  FUZZ_CHECK(b.stacks.frame_count() == t.stacks.frame_count() && b.stacks.stack_count() == t.stacks.stack_count(),
             "stack table changed");
  for (uint32_t i = 0; i < t.stacks.frame_count(); ++i) FUZZ_CHECK(b.stacks.frame(i) == t.stacks.frame(i), "frame %u changed", i);
  for (uint32_t i = 0; i < t.stacks.stack_count(); ++i)
    FUZZ_CHECK(b.stacks.stack(static_cast<StackId>(i)) == t.stacks.stack(static_cast<StackId>(i)), "stack %u changed", i);
  FUZZ_CHECK(b.records.size() == t.records.size(), "record count changed");
  FUZZ_CHECK(t.records.empty() || std::memcmp(b.records.data(), t.records.data(), t.records.size() * sizeof(TraceRecord)) == 0,
             "records changed");
}

// The streamed analysis of the same bytes: the same verdict (accepted or bad input), and for an
// accepted trace the same figures, truncation, drops, metadata and limit error.
void check_stream(std::string_view bytes, const Trace* t, const planner::RunAnalysis* run) {
  const std::string path = fuzz::scratch_path("stream");
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    FUZZ_CHECK(f != nullptr, "cannot write %s", path.c_str());
    FUZZ_CHECK(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fclose(f) == 0, "cannot write %s", path.c_str());
  }
  planner::StreamOptions so;
  so.reorder_window = 4;  // small: late records take the window's insertion and the external sort
  so.parallel = false;
  so.categories = planner::CategoryInference::kAuto;
  auto s = planner::analyze_stream({path}, so);
  std::remove(path.c_str());
  if (t == nullptr) {
    FUZZ_CHECK(!s.is_ok(), "the stream accepts a trace that read_trace refuses");
    fuzz::check_reader_error(s.status(), "analyze_stream");
    return;
  }
  FUZZ_CHECK(s.is_ok(), "the stream refuses a trace that read_trace accepts: %s", s.status().message().c_str());
  const planner::RunAnalysis& a = s.value();
  FUZZ_CHECK(a.limit_error.empty() == run->limit_error.empty(), "limit error streamed '%s', in memory '%s'", a.limit_error.c_str(),
             run->limit_error.c_str());
  if (!run->limit_error.empty()) return;
  FUZZ_CHECK(a.truncated == t->truncated && a.truncation_note == t->truncation_note, "truncation differs: '%s' vs '%s'",
             a.truncation_note.c_str(), t->truncation_note.c_str());
  FUZZ_CHECK(a.dropped_records == t->dropped_records, "dropped records differ");
  RunMeta streamed_meta = a.meta;  // a run without a name is named after its file when streamed
  if (t->meta.name.empty()) streamed_meta.name.clear();
  FUZZ_CHECK(run_meta_to_json(streamed_meta) == run_meta_to_json(t->meta), "metadata differs");
  FUZZ_CHECK(a.allocations == run->allocations, "allocations %llu streamed, %llu in memory", (unsigned long long)a.allocations,
             (unsigned long long)run->allocations);
  FUZZ_CHECK(a.peak_activation_bytes == run->peak_activation_bytes && a.peak_total_bytes == run->peak_total_bytes &&
                 a.churn_bytes == run->churn_bytes,
             "figures differ: activation %llu/%llu total %llu/%llu churn %llu/%llu", (unsigned long long)a.peak_activation_bytes,
             (unsigned long long)run->peak_activation_bytes, (unsigned long long)a.peak_total_bytes,
             (unsigned long long)run->peak_total_bytes, (unsigned long long)a.churn_bytes, (unsigned long long)run->churn_bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto tr = read_trace_memory(std::string(fuzz::as_text(data, size)), "fuzz.mtrace");
  if (!tr.is_ok()) {
    fuzz::check_reader_error(tr.status(), "read_trace");
    check_stream(fuzz::as_text(data, size), nullptr, nullptr);
    return 0;
  }
  const Trace& t = tr.value();
  check_round_trip(t);

  // As `moeprof report` loads it (reports/run_loader.cpp): categories inferred for traced programs.
  planner::AnalyzeOptions opt;
  opt.timeline_points = 64;
  planner::InferredCategories inferred;
  if (planner::should_infer_categories(t, planner::CategoryInference::kAuto)) {
    inferred = planner::infer_categories(t, {});
    opt.record_categories = &inferred.by_record;
  }
  planner::RunAnalysis run = planner::analyze(t, opt);
  check_stream(fuzz::as_text(data, size), &t, &run);
  if (!run.limit_error.empty()) return 0;  // refused as bad input by every front end
  if (run.meta.name.empty()) run.meta.name = "fuzz";

  const planner::Comparison self = planner::compare(run, run);
  FUZZ_CHECK(self.peak_activation_delta == 0 && self.peak_total_delta == 0 && self.churn_delta == 0 &&
                 self.allocations_delta == 0 && self.only_in_baseline.empty() && self.only_in_candidate.empty(),
             "a run compared with itself differs");
  for (const auto& s : self.scope_deltas) FUZZ_CHECK(s.delta == 0, "scope %s differs from itself", s.scope.c_str());

  auto doc = reports::make_report({run}, {});
  FUZZ_CHECK(doc.is_ok(), "make_report failed: %s", doc.status().message().c_str());
  Status valid = reports::validate_report(*doc);
  FUZZ_CHECK(valid.is_ok(), "moeprof's own report fails its validator: %s", valid.message().c_str());
  const std::string text = doc->dump(2);
  (void)reports::report_markdown(*doc);
  (void)reports::report_html(*doc);

  auto rf = reports::parse_report(text, "fuzz.json");
  FUZZ_CHECK(rf.is_ok(), "moeprof's own report does not parse: %s", rf.status().message().c_str());
  const reports::GateResult g = reports::run_gate(*rf, *rf, reports::GateOptions{});
  for (const auto& c : g.checks)
    FUZZ_CHECK(c.status == reports::GateStatus::kPass && c.delta == 0 && c.baseline == c.current,
               "self gate: %s %s is not an equal pass", c.run.c_str(), c.metric.c_str());
  const bool failed_run = run.meta.extra.count("error") && !run.meta.extra.at("error").empty();
  const bool incomplete = run.truncated || run.dropped_records > 0;
  FUZZ_CHECK(g.passed() == !(failed_run || incomplete), "self gate verdict %d for a run failed=%d incomplete=%d", g.passed(),
             failed_run, incomplete);
  (void)reports::gate_markdown(g, reports::GateOptions{});
  (void)reports::gate_junit(g, reports::GateOptions{});
  return 0;
}
