// Asks the CUDA driver which GPUs are usable, without linking it: libcuda.so.1 is loaded at run
// time, so CPU-only builds and machines answer too ("no driver"). Used by `moeprof devices`,
// scripts/test.sh (through it) and the test runner, which skips [gpu] tests when none is usable.
#pragma once

#include <string>
#include <vector>

namespace moeprof {

struct GpuInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability
  unsigned long long memory_bytes = 0;
};

struct GpuProbe {
  std::vector<GpuInfo> devices;  // every device the driver lists
  std::string problem;           // why none is usable ("" when at least one is)
  // Devices of at least this compute capability (moeprof's kernels are built for sm_90).
  std::vector<GpuInfo> usable(int min_major = 9) const;
};

GpuProbe probe_gpus();

}  // namespace moeprof
