// Merges the traces of several devices of one run (e.g. the TP ranks of `moeprof run --gpus N`,
// one trace per rank thread) into one trace, so the planner's per-device analysis sees every rank.
#pragma once

#include <vector>

#include "core/status.h"
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

// Device numbers when the traces of several ranks are read as one run (`moeprof plan A B ...`):
// given the device numbers each input records, the offset added to input i's devices. When every
// input records exactly one device and no two record the same one (rank traces that name their
// GPU, as `moeprof run --launch processes` and torchrun programs write), every offset is 0 and
// the devices keep their numbers; otherwise input i's devices start after the largest device of
// the inputs before it (rank traces that all record device 0 become devices 0, 1, 2, ...).
// Fails (kBadInput) when the numbers would exceed 65535.
Result<std::vector<uint16_t>> rank_device_offsets(const std::vector<std::vector<uint16_t>>& devices);

// Whether traces given together (`moeprof plan A B`, `report A,B`) are the ranks of one run, by
// their metadata: never the same file twice, never a trace that already merges ranks; the same
// model, mode, tokens and layers; executor runs (modes baseline, reuse, fixes) must be ranks of
// one TP size with distinct ranks; traced and imported programs must be distinct processes of one
// command. Fails (kBadInput) with one line naming the first difference; `paths` name the inputs.
Status check_rank_traces(const std::vector<RunMeta>& metas, const std::vector<std::string>& paths);

// rank_device_offsets applied to whole traces (each input's records on their device + offset).
Status offset_rank_devices(std::vector<Trace>* traces);

}  // namespace moeprof
