// Fuzz harness: the what-if rule-file reader (planner::parse_rules) and the prediction over a
// fixed trace. Invariants: a rejected file is bad input naming "<source>:<line>" in one line; each
// accepted rule's canonical text parses back to the same rule text (round trip); what_if over the
// sample trace either succeeds, with a predicted peak no higher than the trace's total churn, or
// fails with a Status.
#include "planner/analysis.h"
#include "planner/whatif.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/sample_trace.h"

using namespace moeprof;

namespace {
const planner::RunAnalysis& sample_run() {
  static const planner::RunAnalysis run = [] {
    planner::AnalyzeOptions o;
    o.keep_lifetimes = o.keep_event_index = true;
    return planner::analyze(fuzz::sample_trace(), o);
  }();
  return run;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto rules = planner::parse_rules(fuzz::as_text(data, size), "fuzz.rules");
  if (!rules.is_ok()) {
    fuzz::check_reader_error(rules.status(), "parse_rules");
    FUZZ_CHECK(rules.status().message().rfind("fuzz.rules", 0) == 0, "message does not name the file: %s",
               rules.status().message().c_str());
    return 0;
  }
  std::string canonical;
  for (const auto& r : rules.value()) canonical += r.text() + "\n";
  auto again = planner::parse_rules(canonical, "canonical.rules");
  FUZZ_CHECK(again.is_ok(), "canonical text does not parse: %s\n%s", again.status().message().c_str(), canonical.c_str());
  FUZZ_CHECK(again->size() == rules->size(), "rule count changed");
  for (size_t i = 0; i < again->size(); ++i)
    FUZZ_CHECK((*again)[i].text() == (*rules)[i].text(), "rule %zu: '%s' became '%s'", i, (*rules)[i].text().c_str(),
               (*again)[i].text().c_str());
  if (rules->size() > 16) return 0;  // keep the prediction cheap
  planner::WhatIfOptions wo;
  wo.timeline_points = 16;
  wo.fixes = size % 3;
  auto w = planner::what_if(sample_run(), *rules, wo);
  if (!w.is_ok()) {
    FUZZ_CHECK(!w.status().message().empty(), "empty what-if error");
    return 0;
  }
  uint64_t churn = 0;
  for (const auto& d : sample_run().devices) churn += d.churn_bytes;
  FUZZ_CHECK(w->predicted_peak_activation_bytes <= churn, "predicted peak %llu above the churn %llu",
             (unsigned long long)w->predicted_peak_activation_bytes, (unsigned long long)churn);
  return 0;
}
