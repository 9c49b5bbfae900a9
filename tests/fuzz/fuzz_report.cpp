// Fuzz harness: the JSON report reader (read_report / parse_report) and the gate over what it
// accepts. Invariants: a rejected report is bad input with a one-line message (never an
// exception: 1e400, deep nesting, bad UTF-8); an accepted one gates against itself with every
// check an equal pass, fails only for a failed or incomplete run; a copy with one figure changed
// by one byte never passes at zero tolerance (a PASS means equal figures); the proposed baseline
// parses back to the same document (round trip); every rendering of the verdict works.
#include "core/checked.h"
#include "reports/gate.h"
#include "reports/report_file.h"
#include "tests/fuzz/fuzz_util.h"

using namespace moeprof;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto rf = reports::parse_report(fuzz::as_text(data, size), "fuzz.json");
  if (!rf.is_ok()) {
    fuzz::check_reader_error(rf.status(), "parse_report");
    return 0;
  }
  const reports::ReportFile& r = rf.value();
  const reports::GateOptions zero;
  const reports::GateResult self = reports::run_gate(r, r, zero);
  bool failed_or_incomplete = false;
  for (const auto& run : r.runs()) {
    failed_or_incomplete = failed_or_incomplete || !reports::json_str(run["extra"], "error").empty() ||
                           run["truncated"].get<bool>() || reports::json_u64(run, "dropped_records") > 0;
  }
  for (const auto& c : self.checks)
    FUZZ_CHECK(c.status == reports::GateStatus::kPass && c.baseline == c.current && c.delta == 0, "self gate: %s %s",
               c.run.c_str(), c.metric.c_str());
  FUZZ_CHECK(self.passed() == !failed_or_incomplete, "self gate verdict");
  (void)reports::gate_verdict(self, zero);
  (void)reports::gate_markdown(self, zero);
  (void)reports::gate_junit(self, zero);

  // A PASS means equal figures: one byte more or less in one figure fails.
  reports::ReportFile changed = r;
  auto& figure = changed.doc["runs"][0]["peak_activation_bytes"];
  const uint64_t v = figure.get<uint64_t>();
  figure = v < kMaxBytes ? v + 1 : v - 1;
  const reports::GateResult g = reports::run_gate(r, changed, zero);
  FUZZ_CHECK(!g.passed(), "a changed figure passed the zero-tolerance gate");
  int unequal = 0;
  for (const auto& c : g.checks) {
    if (c.status == reports::GateStatus::kPass) FUZZ_CHECK(c.baseline == c.current, "PASS with unequal figures");
    unequal += c.baseline != c.current;
  }
  FUZZ_CHECK(unequal == 1, "%d unequal checks for one changed figure", unequal);
  (void)reports::gate_markdown(g, zero);

  auto back = reports::parse_report(reports::proposed_baseline(r), "proposed.json");
  FUZZ_CHECK(back.is_ok(), "the proposed baseline does not parse: %s", back.status().message().c_str());
  // The proposed baseline is the report without its timelines (reports/gate.h, proposed_baseline).
  nlohmann::ordered_json expected = r.doc;
  for (auto& run : expected["runs"]) {
    run.erase("memory_timeline");
    run.erase("timeline");
  }
  FUZZ_CHECK(back->doc == expected, "the proposed baseline differs from the report without its timelines");
  return 0;
}
