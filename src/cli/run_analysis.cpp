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
    if (d.peak_by_category[cat] != acc.peak[i] || d.churn_by_category[cat] != acc.allocated[i])
      diff += fmt::format(" {}: CUPTI peak {} churn {} vs executor peak {} churn {};", category_name(cat),
                          d.peak_by_category[cat], d.churn_by_category[cat], acc.peak[i], acc.allocated[i]);
  }
  return diff;
}

}  // namespace moeprof::cli
