// moeprof plan TRACE [--json] [--top N]: the memory analysis of one trace.
#include <cstdio>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/status.h"
#include "reports/format.h"
#include "reports/json_report.h"
#include "reports/run_loader.h"

namespace moeprof::cli {

namespace {

struct PlanArgs {
  std::string trace;
  bool json = false;
  size_t top = 10;
};

void print_plan_text(const nlohmann::ordered_json& r) {
  using reports::format_bytes;
  using reports::with_commas;
  auto bytes = [](const nlohmann::ordered_json& v) {
    uint64_t b = v.get<uint64_t>();
    return fmt::format("{:>15} B  ({})", with_commas(static_cast<int64_t>(b)), format_bytes(b));
  };
  fmt::print("run {}: mode {}, model {}, {} tokens, TP rank {}/{}, backend {}{}\n", r["name"].get<std::string>(),
             r["mode"].get<std::string>(), r["model"].get<std::string>(), r["tokens"].get<int64_t>(),
             r["tp_rank"].get<int>(), r["tp_size"].get<int>(), r["backend"].get<std::string>(),
             r["device_name"].get<std::string>().empty() ? "" : " (" + r["device_name"].get<std::string>() + ")");
  fmt::print("  peak activation  {}\n", bytes(r["peak_activation_bytes"]));
  fmt::print("  peak total       {}\n", bytes(r["peak_total_bytes"]));
  fmt::print("  churn            {}\n", bytes(r["churn_bytes"]));
  fmt::print("  allocations      {:>15}\n", with_commas(r["allocations"].get<int64_t>()));
  const auto& live = r["live_at_peak"];
  fmt::print("\nlive at the activation peak (device {}, t={} ns):\n", live["device"].dump(), live["timestamp_ns"].dump());
  for (const auto& [cat, v] : live["by_category"].items()) {
    if (v.get<uint64_t>()) fmt::print("  {:<14} {}\n", cat, bytes(v));
  }
  if (!live["top"].empty()) {
    fmt::print("\nlargest live allocations at the peak:\n");
    for (const auto& e : live["top"]) {
      fmt::print("  {:>12}  {:<12} {:<28} {:<40} {}{}\n", format_bytes(e["bytes"].get<uint64_t>()), e["category"].get<std::string>(),
                 e["name"].get<std::string>(), e["scope"].get<std::string>(), e["shape"].get<std::string>(),
                 e["held_after_last_use"].get<bool>() ? "  [held after last use]" : "");
    }
    if (live["omitted_entries"].get<uint64_t>())
      fmt::print("  ... {} more ({})\n", live["omitted_entries"].get<uint64_t>(), format_bytes(live["omitted_bytes"].get<uint64_t>()));
  }
  if (!r["scopes"].empty()) {
    fmt::print("\nscopes by activation high-water:\n");
    for (const auto& s : r["scopes"]) {
      std::string name = s["scope"].get<std::string>();
      fmt::print("  {:>12}  {:<48} at peak {}, churn {}, {} allocs\n", format_bytes(s["activation_high_water_bytes"].get<uint64_t>()),
                 name.empty() ? "(unscoped)" : name, format_bytes(s["live_at_activation_peak_bytes"].get<uint64_t>()),
                 format_bytes(s["allocated_bytes"].get<uint64_t>()), s["allocations"].get<uint64_t>());
    }
  }
  if (r["reuse"].is_object() && (r["reuse"]["has_uses"].get<bool>() || r["reuse"]["handoff_count"].get<uint64_t>())) {
    const auto& u = r["reuse"];
    fmt::print("\nreuse findings:\n");
    fmt::print("  held after last use at the peak: {}\n", format_bytes(u["held_after_last_use_bytes"].get<uint64_t>()));
    fmt::print("  never used, live at the peak:    {}\n", format_bytes(u["never_used_at_peak_bytes"].get<uint64_t>()));
    fmt::print("  hand-off opportunities: {} ({} in total, {} at the peak)\n", u["handoff_count"].get<uint64_t>(),
               format_bytes(u["handoff_bytes"].get<uint64_t>()), format_bytes(u["handoff_bytes_at_activation_peak"].get<uint64_t>()));
  }
  const auto& a = r["anomalies"];
  std::vector<std::string> notes;
  for (const auto& [k, v] : a.items()) {
    if (k != "total" && k != "never_freed_bytes" && v.get<uint64_t>()) notes.push_back(fmt::format("{} {}", v.get<uint64_t>(), k));
  }
  if (r["dropped_records"].get<uint64_t>()) notes.push_back(fmt::format("{} dropped records", r["dropped_records"].get<uint64_t>()));
  if (r["truncated"].get<bool>()) notes.push_back("trace truncated: " + r["truncation_note"].get<std::string>());
  fmt::print("\nanomalies: {}\n", notes.empty() ? "none" : fmt::format("{}", fmt::join(notes, "; ")));
}

}  // namespace

void register_plan(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand("plan", "Analyse one trace: peaks, live set at the peak, scopes, churn, anomalies");
  cmd->add_option("trace", args->trace, "trace file (.mtrace)")->required();
  cmd->add_flag("--json", args->json, "print the run as JSON (the element of a report's runs array)");
  cmd->add_option("--top", args->top, "entries listed in the live set and scope tables")->check(CLI::PositiveNumber);
  cmd->callback([args, exit_code] {
    planner::AnalyzeOptions aopts;
    aopts.keep_lifetimes = false;
    auto run = reports::load_run(args->trace, aopts);
    if (!run) {
      fmt::print(stderr, "moeprof plan: error: {}\n", run.status().message());
      *exit_code = run.status().exit_code();
      return;
    }
    reports::ReportOptions ropts;
    ropts.top_entries = args->top;
    ropts.top_scopes = args->top;
    ropts.include_timeline = false;
    auto j = reports::make_run_json(run->analysis, run->analysis.meta.name, ropts);
    if (args->json) std::cout << j.dump(2) << "\n";
    else print_plan_text(j);
    *exit_code = kExitOk;
  });
}

}  // namespace moeprof::cli
