// A run of a JSON report (docs/report.schema.json) with given byte figures and the rest fixed:
// the gate's tests build their baselines and current reports from it.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace moeprof::testing {

inline nlohmann::ordered_json synthetic_run(const std::string& name, uint64_t act, uint64_t total, uint64_t churn) {
  nlohmann::ordered_json r;
  r["name"] = name;
  r["mode"] = name;
  r["model"] = "tiny";
  r["tokens"] = 100;
  r["layers"] = 4;
  r["tp_size"] = 1;
  r["tp_rank"] = 0;
  r["backend"] = "cpu";
  r["device_name"] = "cpu";
  r["peak_activation_bytes"] = act;
  r["peak_total_bytes"] = total;
  r["churn_bytes"] = churn;
  r["allocations"] = 17;
  r["peak_by_category"] = nlohmann::ordered_json::object();
  r["live_at_peak"] = nlohmann::ordered_json::object();
  r["scopes"] = nlohmann::ordered_json::array();
  r["anomalies"] = nlohmann::ordered_json::object();
  r["dropped_records"] = 0;
  r["truncated"] = false;
  r["extra"] = nlohmann::ordered_json::object();
  return r;
}

}  // namespace moeprof::testing
