#include "cli/run_analysis.h"

#include <fmt/format.h>

#include "core/trace_io.h"

namespace moeprof::cli {

Result<std::vector<planner::RunAnalysis>> analyse_run_traces(const RunPlanResult& r) {
  std::vector<planner::RunAnalysis> analyses;
  for (const auto& m : r.modes) {
    auto tr = read_trace(m.trace_path);
    if (!tr.is_ok()) return Status::run_failure(tr.status().message());
    planner::AnalyzeOptions ao;
    ao.keep_event_index = m.mode == "baseline";
    ao.keep_lifetimes = true;  // the per-allocation timeline of the report
    analyses.push_back(planner::analyze(tr.value(), ao));
    const auto& an = analyses.back();
    if (!an.limit_error.empty()) return Status::run_failure(m.trace_path + ": " + an.limit_error);
    if (an.peak_total_bytes != m.accounting.peak_total || an.peak_activation_bytes != m.accounting.peak_activation)
      return Status::run_failure(fmt::format("{} trace disagrees with the executor's accounting (peak total {} vs {}, activation {} vs {})",
                                             m.mode, an.peak_total_bytes, m.accounting.peak_total, an.peak_activation_bytes,
                                             m.accounting.peak_activation));
  }
  return analyses;
}

std::string cupti_disagreement(const planner::RunAnalysis& c, const CategoryCounters& acc) {
  std::string diff;
  const auto& d = c.devices.at(0);
  for (int i = 0; i < kNumCategories; ++i) {
    const auto cat = static_cast<Category>(i);
    // The CUDA backend placed some tensors twice (once more after its pool grew for them): CUPTI
    // saw both placements, the executor's accounting one (executor/cuda_backend.cpp, do_allocate).
    // And it allocated some outside the trace (an emulated EP rank's copies of other ranks' rows):
    // CUPTI saw them, the executor's accounting did not.
    auto extra = [&](const std::string& key) -> uint64_t {
      auto it = c.meta.extra.find(key + std::string(category_name(cat)));
      if (it == c.meta.extra.end() || it->second.empty() || it->second.find_first_not_of("0123456789") != std::string::npos ||
          it->second.size() >= 20)
        return 0;
      return std::stoull(it->second);
    };
    const uint64_t settled = extra("cuda.pool_settle_bytes."), unrecorded = extra("cuda.unrecorded_bytes.");
    if (d.peak_by_category[cat] != acc.peak[i] || d.churn_by_category[cat] != acc.allocated[i] + settled + unrecorded)
      diff += fmt::format(" {}: CUPTI peak {} churn {} vs executor peak {} churn {} (+ {} placed twice, + {} outside the trace);",
                          category_name(cat), d.peak_by_category[cat], d.churn_by_category[cat], acc.peak[i], acc.allocated[i], settled,
                          unrecorded);
  }
  return diff;
}

}  // namespace moeprof::cli
