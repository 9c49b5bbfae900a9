// Per-op timing of a forward pass (`moeprof run --op-times`): every public Backend op that runs
// while profiling is on is bracketed by two clock marks (CUDA events on the backend's stream,
// host steady_clock on the CPU reference and the meta backend) and charged to its op family
// (the op's name) with the work it had to do: the FLOPs of its multiply-adds and the bytes it
// must move at least (every operand read once, every result written once). The totals give each
// family's achieved TFLOP/s or GB/s and its two floors: FLOPs / peak rate and bytes / bandwidth.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace moeprof {

// The work of one op call. flops counts 2 per multiply-add of the op's matrix products only
// (0 for element-wise ops); bytes is the compulsory traffic.
struct OpCost {
  double flops = 0;
  double bytes = 0;
  std::string detail;  // optional sub-family, e.g. a GEMM's "N x K -> dtype" (OpFamilyStats::parts)
};

// A clock whose marks are ordered with the ops (stream-ordered on a GPU). mark() returns an
// index; seconds() is called once, after the device is idle, for every consecutive pair.
class OpClock {
 public:
  virtual ~OpClock() = default;
  virtual std::string name() const = 0;  // "cuda events" | "host steady_clock"
  virtual Result<int64_t> mark() = 0;
  // Seconds from mark a to mark b (a < b), valid once the device reached b.
  virtual Result<double> seconds(int64_t a, int64_t b) = 0;
};

std::unique_ptr<OpClock> make_host_op_clock();

struct OpFamilyStats {
  std::string op;
  int64_t calls = 0;
  double seconds = 0;
  double flops = 0;
  double bytes = 0;
  std::vector<OpFamilyStats> parts;  // by OpCost::detail (op = the detail), largest time first
};

// Peak rates of a device: the bf16 dense tensor-core rate and the memory bandwidth.
struct DevicePeaks {
  double flops_per_s = 0;  // 0: unknown
  double bytes_per_s = 0;  // 0: unknown
  std::string source;      // where the figures come from
};
// Published peaks of the devices moeprof knows by name (CUDA device name substring), else zeros.
DevicePeaks known_device_peaks(const std::string& device_name);

struct OpProfile {
  std::string clock;                    // OpClock::name()
  std::vector<OpFamilyStats> families;  // by time, largest first
  double op_seconds = 0;                // sum over families
  int64_t calls = 0;
};

// One family's derived figures under `peaks`: achieved rates and floors (0 where unknown).
struct OpFamilyFigures {
  double tflops = 0;          // achieved, FLOPs / time / 1e12
  double gbps = 0;            // achieved, bytes / time / 1e9
  double share = 0;           // of the profile's op_seconds
  double flop_floor_s = 0;    // flops / peak flops rate
  double byte_floor_s = 0;    // bytes / bandwidth
  double floor_s = 0;         // the larger of the two
  const char* bound = "";     // "compute" | "memory" | "" (no peak known)
  double of_floor = 0;        // seconds / floor_s (1 = at the floor)
};
OpFamilyFigures op_family_figures(const OpFamilyStats& f, const OpProfile& p, const DevicePeaks& peaks);

// Collects marks while a forward runs; Backend owns one while profiling is on.
class OpProfiler {
 public:
  explicit OpProfiler(std::unique_ptr<OpClock> clock) : clock_(std::move(clock)) {}
  // Around one op call: begin() before it, end() after it (also when it failed).
  void begin();
  void end(const char* op, const OpCost& cost);
  // Reads the clock for every call (the device must be idle) and sums per family.
  Result<OpProfile> finish();

 private:
  struct Call {
    const char* op;
    OpCost cost;
    int64_t a, b;
  };
  std::unique_ptr<OpClock> clock_;
  std::vector<Call> calls_;
  int64_t open_ = -1;
  int depth_ = 0;
  Status error_;
};

}  // namespace moeprof
