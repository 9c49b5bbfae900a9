// What-if predictions: a trace plus rules -> transformed lifetimes -> replay -> predicted peaks,
// the liveness bound, and ranked fixes. CPU only; knows only the trace model (through
// RunAnalysis, analysed with keep_lifetimes and keep_event_index). docs/planner.md ("What-if").
//
// Rule file (one rule per line, '#' starts a comment; selectors are key=value terms, all must hold):
//   free-at-last-use SELECTOR          free each selected allocation right after its last use
//   hand-off SELECTOR [from SELECTOR]  each selected allocation takes over a dead activation buffer
//                                      (last use before it, still allocated, at least its size:
//                                      the smallest, then the one dead longest) instead of new
//                                      memory; `from` limits which buffers may be taken over
//   free SELECTOR after op=GLOB        free right after the first use by a matching op that
//                                      follows the allocation (same device)
//   free SELECTOR after scope=GLOB     free right after the first end of a matching marker range
//   drop SELECTOR                      the allocation never happens
// Selector terms: name=GLOB scope=GLOB category=NAME[,NAME] size=N | size=LO..HI (bytes; either
// bound may be empty) stack=SUBSTRING device=N. GLOB: '*' any run of characters, '?' one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "planner/analysis.h"

namespace moeprof::planner {

struct Selector {
  std::string name, scope, stack;  // globs (name, scope) and a substring of any frame (stack); "" = any
  uint32_t categories = 0;         // bit i = Category i; 0 = any
  uint64_t min_bytes = 0, max_bytes = UINT64_MAX;
  int device = -1;                 // -1 = any

  bool matches(const Lifetime& l, const RunAnalysis& run) const;
  std::string text() const;  // canonical form, parseable again
};

enum class RuleKind { kFreeAtLastUse, kHandOff, kFreeAfterOp, kFreeAfterScope, kDrop };

struct Rule {
  RuleKind kind = RuleKind::kFreeAtLastUse;
  Selector target;
  std::optional<Selector> from;  // hand-off donors
  std::string anchor;            // op or marker glob of free ... after
  std::string origin;            // "FILE:LINE" (or "fix N") for messages
  std::string text() const;      // canonical rule text
};

// Parses a rule file's text; errors are kBadInput naming "<source>:<line>: ...".
Result<std::vector<Rule>> parse_rules(std::string_view text, const std::string& source);
Result<std::vector<Rule>> load_rules(const std::string& path);

bool glob_match(std::string_view pattern, std::string_view s);

struct RuleEffect {
  std::string rule, origin;
  uint64_t matched = 0;        // allocations the selector matched
  uint64_t applied = 0;        // ... whose lifetime the rule changed
  uint64_t no_uses = 0;        // skipped: no use recorded (free-at-last-use, hand-off)
  uint64_t no_anchor = 0;      // skipped: no matching op or marker after the allocation
  uint64_t no_donor = 0;       // hand-off: no dead buffer to take over
  uint64_t unsafe = 0;         // freed before a later use (free ... after)
  uint64_t bytes_removed = 0;  // churn the rule saves (hand-off, drop)
  // When the selector matched nothing: which of its parts matched no allocation of the run, with
  // the nearest names there ("no allocation is named 'moe_outptu'; did you mean 'moe_output'?").
  std::string unmatched;
};

// Why a selector matches no allocation of the run: its first part (name, scope, stack, category,
// size, device) that no lifetime satisfies on its own, with the nearest names or scopes of the
// run; or that the parts match separately but never together. "" when it matches something.
std::string explain_no_match(const Selector& sel, const RunAnalysis& run);

struct DevicePrediction {
  uint16_t device = 0;
  uint64_t measured_peak_activation_bytes = 0, measured_peak_total_bytes = 0;
  uint64_t predicted_peak_activation_bytes = 0, predicted_peak_total_bytes = 0;
  uint64_t liveness_bound_bytes = 0;
  uint32_t predicted_peak_index = 0;  // replay position of the predicted activation peak
  uint64_t predicted_peak_ts = 0;
  std::vector<LiveEntry> live_set_at_predicted_peak;  // activation categories; bytes desc
  std::vector<std::pair<uint64_t, uint64_t>> timeline_activation;  // (timestamp, predicted live bytes)
};

// A tensor a fix touches (one family: the same name and scope pattern across layers).
struct FixTensor {
  std::string role;                // "freed at last use", "handed off", "taken over" (a hand-off's donor)
  std::string name, scope, shape;  // scope with layer numbers as '*'
  uint64_t bytes = 0;              // of one member
  uint64_t count = 0;              // members changed
  std::vector<std::string> stack;  // innermost frames of user code, when the trace has stacks
};

struct Fix {
  std::string rule;                // the rule text that reproduces it (two lines when two rules act together)
  std::vector<std::string> rules;  // the same, one rule each
  uint64_t bytes_saved_at_peak = 0;
  uint64_t cumulative_peak_activation_bytes = 0;
  uint64_t churn_saved_bytes = 0;
  std::vector<FixTensor> tensors;
};

struct WhatIfResult {
  bool has_uses = false;
  std::string note;  // e.g. why no last-use-based prediction was made
  std::vector<RuleEffect> rules;
  std::vector<DevicePrediction> devices;  // sorted by device
  // Run level: the maximum over devices.
  uint64_t measured_peak_activation_bytes = 0, predicted_peak_activation_bytes = 0;
  uint64_t measured_peak_total_bytes = 0, predicted_peak_total_bytes = 0;
  uint64_t liveness_bound_bytes = 0;
  std::vector<Fix> fixes;
};

struct WhatIfOptions {
  size_t timeline_points = 2000;
  size_t live_set_limit = 50;
  size_t fixes = 0;                // ranked fixes to find (0 = none)
  double min_fix_gain = 0.005;     // stop when a step lowers the peak by less than this fraction
};

// Applies the rules in order to the run's lifetimes and predicts the peaks. `run` must come from
// analyze() with keep_lifetimes and keep_event_index; kBadInput otherwise.
Result<WhatIfResult> what_if(const RunAnalysis& run, const std::vector<Rule>& rules, const WhatIfOptions& opt = {});

// The family key of an allocation for ranked fixes: its scope with every digit run of a component
// such as "layer.17" replaced by '*', and its name (or, unnamed, its innermost user frame).
std::string family_scope(std::string_view scope);

}  // namespace moeprof::planner
