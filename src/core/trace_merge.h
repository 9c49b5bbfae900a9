// Merges the traces of several devices of one run (e.g. the TP ranks of `moeprof run --gpus N`,
// one trace per rank thread) into one trace, so the planner's per-device analysis sees every rank.
#pragma once

#include <vector>

#include "core/trace.h"

namespace moeprof {

// One trace holding every input's records, each with its strings re-interned into one table and
// its `device` kept as is (callers give each input its own device index, e.g. the TP rank).
// Records are interleaved by (timestamp_ns, seq), ties to the earlier input; each input's own
// order is always kept, so every device replays exactly as in its own trace.
// Metadata: the first input's, with tp_rank 0 and extra["ranks"] = number of inputs; dropped
// records are summed, `truncated` is true when any input was (the notes are joined, each
// prefixed with the input's index). An empty input gives an empty trace.
Trace merge_traces(const std::vector<Trace>& traces);

}  // namespace moeprof
