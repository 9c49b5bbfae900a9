// `moeprof run --op-times`: the forward's ops by family (executor/op_profile.h) as a text table
// and as JSON (<out>/<mode>.ops.json, the format in docs/performance.md).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "executor/op_profile.h"

namespace moeprof::cli {

// Peaks for the floors: `peak_tflops` / `peak_gbps` when > 0, else the device's published ones.
DevicePeaks resolve_peaks(const std::string& device_name, double peak_tflops, double peak_gbps);

// One table: family, calls, time, share, TFLOP/s, GB/s, the floors, what bounds it, time / floor;
// then the sum of the op times against the forward's wall time and the gap to the floor.
std::string op_times_table(const std::string& mode, const OpProfile& p, const DevicePeaks& peaks, double forward_seconds);

nlohmann::json op_times_json(const std::string& mode, const std::string& device, const OpProfile& p,
                             const DevicePeaks& peaks, double forward_seconds);

}  // namespace moeprof::cli
