// The Catch2 runner of every test binary. A listener skips test cases tagged [gpu] (exit code
// kSkipReturnCode, which CTest reports as Skipped) when the CUDA driver lists no usable device.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/gpu_probe.h"
#include "tests/gpu_skip.h"

namespace {

struct GpuSkipListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    const bool gpu = std::find(info.tags.begin(), info.tags.end(), "gpu") != info.tags.end();
    if (!gpu) return;
    static const moeprof::GpuProbe probe = moeprof::probe_gpus();
    if (probe.usable().empty()) MOEPROF_SKIP("no usable GPU: " + probe.problem);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(GpuSkipListener)
