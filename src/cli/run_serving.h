// `moeprof run --workload ...`: the serving options of `run` (executor/serving.h), their checks,
// and the serving part of the run's printed summary. Used by cmd_run.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "executor/run.h"
#include "executor/serving.h"

namespace moeprof::cli {

struct ServingArgs {
  std::string workload;
  int64_t chunked_prefill_size = 8192;
  int64_t kv_tokens = 0;
  double mem_fraction_static = 0;
  int64_t page_size = 1;
  int64_t max_running_requests = 0;
  int64_t context_length = 0;
  std::string cuda_graph_bs;  // comma-separated sizes, parsed by serving_options (an empty item is refused)
  int64_t cuda_graph_max_bs = 0;
  bool disable_cuda_graph = false;
  // Which were given on the command line (filled by the callback).
  std::vector<std::string> given;
  bool workload_given = false;  // --workload given (even empty)
};

void add_serving_options(CLI::App* cmd, ServingArgs* a);
// Records which serving options were given (call from the command's callback).
void note_serving_options(const CLI::App* cmd, ServingArgs* a);
// The serving options, or none without --workload. Fails (bad input, one line) on a serving option
// without --workload, or a workload that does not parse.
Result<std::optional<ServingOptions>> serving_options(const ServingArgs& a);
// The serving lines of the printed summary: per mode the pool, the graphs, the steps and each step
// kind's activation peak.
std::string serving_summary(const RunPlanResult& r);

}  // namespace moeprof::cli
