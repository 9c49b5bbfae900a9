#include "reports/gate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include <fmt/format.h>

#include "core/checked.h"
#include "reports/format.h"

namespace moeprof::reports {

const char* gate_status_name(GateStatus s) {
  switch (s) {
    case GateStatus::kPass: return "pass";
    case GateStatus::kRegression: return "regression";
    case GateStatus::kImprovement: return "improvement";
    case GateStatus::kMissing: return "missing";
    case GateStatus::kNew: return "new";
  }
  return "?";
}

Status validate_gate_options(const GateOptions& opts) {
  if (!(opts.rel_tol >= 0.0 && opts.rel_tol <= 1.0))
    return Status::bad_input(fmt::format("--rel-tol {}: must be a fraction of the baseline in [0, 1]", opts.rel_tol));
  if (opts.abs_tol > kMaxBytes)
    return Status::bad_input(fmt::format("--abs-tol {}: must be at most 2^63-1 bytes", opts.abs_tol));
  if (opts.metrics.empty()) return Status::bad_input("--metrics: no metric given");
  std::set<std::string> seen;
  for (const auto& m : opts.metrics) {
    bool known = false;
    for (const char* k : kGateMetrics) known = known || m == k;
    if (!known)
      return Status::bad_input("--metrics: unknown metric '" + m +
                               "' (supported: peak_activation_bytes, peak_total_bytes, churn_bytes)");
    if (!seen.insert(m).second) return Status::bad_input("--metrics: metric '" + m + "' given twice");
  }
  return Status::ok();
}

Status parse_rel_tol(std::string_view text, GateOptions* opts) {
  const Status bad = Status::bad_input("--rel-tol " + std::string(text) +
                                       ": must be a decimal fraction of the baseline from 0 to 1 with at most 18 decimal places");
  std::string digits;  // the significant digits, then `scale` places after the point
  int64_t scale = 0;
  size_t i = 0;
  bool point = false, any = false;
  for (; i < text.size(); ++i) {
    const char ch = text[i];
    if (ch == '.' && !point) {
      point = true;
    } else if (ch >= '0' && ch <= '9') {
      any = true;
      if (digits.empty() && ch == '0') {
        if (point) ++scale;
        continue;
      }
      if (digits.size() >= 19) return bad;
      digits += ch;
      if (point) ++scale;
    } else {
      break;
    }
  }
  if (!any) return bad;
  if (i < text.size()) {  // an exponent
    if (text[i] != 'e' && text[i] != 'E') return bad;
    ++i;
    bool neg = false;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) neg = text[i++] == '-';
    if (i == text.size() || text.size() - i > 4) return bad;
    int64_t e = 0;
    for (; i < text.size(); ++i) {
      if (text[i] < '0' || text[i] > '9') return bad;
      e = e * 10 + (text[i] - '0');
    }
    scale += neg ? e : -e;
  }
  uint64_t num = 0;
  for (char ch : digits) num = num * 10 + static_cast<uint64_t>(ch - '0');
  while (scale < 0 && num != 0) {  // 2.5e1: digits times ten
    if (num > UINT64_MAX / 10) return bad;
    num *= 10;
    ++scale;
  }
  if (num == 0) scale = 0;
  while (scale > 0 && num % 10 == 0) {  // trailing zeros after the point
    num /= 10;
    --scale;
  }
  if (scale > 18) return bad;
  uint64_t den = 1;
  for (int64_t k = 0; k < scale; ++k) den *= 10;
  if (num > den) return bad;  // above 1
  opts->rel_num = num;
  opts->rel_den = den;
  opts->rel_tol = static_cast<double>(num) / static_cast<double>(den);
  return Status::ok();
}

Result<uint64_t> parse_abs_tol(std::string_view text) {
  uint64_t v = 0;
  bool ok = !text.empty() && text.size() <= 19;
  for (char ch : text) {
    if (!ok || ch < '0' || ch > '9') {
      ok = false;
      break;
    }
    v = v * 10 + static_cast<uint64_t>(ch - '0');  // at most 19 digits: no wrap
  }
  if (!ok || v > kMaxBytes)
    return Status::bad_input("--abs-tol " + std::string(text) + ": must be a whole number of bytes in [0, 2^63-1]");
  return v;
}

namespace {

// rel_tol is in [0, 1] and baseline <= 2^63-1 (validated), so the product is below 2^63 and the
// conversion is exact enough and in range.
uint64_t allowed_delta(uint64_t baseline, const GateOptions& opts) {
  if (opts.rel_den > 0) {  // exact: floor(baseline * num / den), below 2^63 as num <= den
    const unsigned __int128 q = static_cast<unsigned __int128>(baseline) * opts.rel_num / opts.rel_den;
    return std::max(opts.abs_tol, static_cast<uint64_t>(q));
  }
  const double rel = std::floor(opts.rel_tol * static_cast<double>(baseline));
  const uint64_t rel_bytes = rel >= 9.2e18 ? kMaxBytes : static_cast<uint64_t>(rel);
  return std::max(opts.abs_tol, rel_bytes);
}

std::string show_value(const nlohmann::ordered_json& v) {
  return v.is_null() ? std::string("(none)") : v.is_string() ? v.get<std::string>() : v.dump();
}

// Workload keys (a change fails unless allow_config_change) and descriptive ones (notes).
void check_meta_differences(const nlohmann::ordered_json& b, const nlohmann::ordered_json& c, const std::string& run,
                            const GateOptions& opts, GateResult* res) {
  auto differs = [&](const std::string& key, const nlohmann::ordered_json& bv, const nlohmann::ordered_json& cv) {
    ++res->config_changes;
    if (!opts.allow_config_change) ++res->failures;
    res->notes.push_back(fmt::format("run {}: {} differs (baseline {}, current {}): another workload{}", run, key, show_value(bv),
                                     show_value(cv), opts.allow_config_change ? " (allowed by --allow-config-change)" : ", the gate fails"));
    res->issues.push_back({run, "workload_change", res->notes.back(), !opts.allow_config_change});
  };
  const nlohmann::ordered_json none;
  // A key's value, or null where the object lacks it (or is no object).
  auto at = [&none](const nlohmann::ordered_json& o, const char* key) -> const nlohmann::ordered_json& {
    return o.is_object() && o.contains(key) ? o[key] : none;
  };
  for (const char* key : kWorkloadKeys) {
    if (!b.contains(key) && !c.contains(key)) continue;
    if (at(b, key) != at(c, key)) differs(key, at(b, key), at(c, key));  // one without the key: not the same workload either
  }
  // The executor's parallel layout and routing (extra): absent means its default where it has one
  // (no EP: size 1, rank 0; no DP attention), else compared only where both reports say it.
  struct ExtraKey {
    const char* key;
    const char* absent;  // nullptr: compared only where both have it
  };
  static constexpr ExtraKey kExtra[] = {{"ep_size", "1"}, {"ep_rank", "0"}, {"dp_attention", "false"},
                                        {"routing", nullptr}, {"ep_buffers", nullptr}, {"weights", nullptr}};
  const auto &be = at(b, "extra"), &ce = at(c, "extra");
  for (const ExtraKey& k : kExtra) {
    const bool bh = !at(be, k.key).is_null(), ch = !at(ce, k.key).is_null();
    if (!bh && !ch) continue;
    if ((!bh || !ch) && k.absent == nullptr) continue;
    const nlohmann::ordered_json bv = bh ? be[k.key] : nlohmann::ordered_json(k.absent);
    const nlohmann::ordered_json cv = ch ? ce[k.key] : nlohmann::ordered_json(k.absent);
    if (bv != cv) differs(std::string("extra.") + k.key, bv, cv);
  }
  // A serving run's workload: its requests, output tokens, chunk, page and pool (a prefill has none).
  const auto &bs = at(b, "serving"), &cs = at(c, "serving");
  auto compare = [&](const std::string& what, const nlohmann::ordered_json& bv, const nlohmann::ordered_json& cv) {
    if (bv != cv) differs(what, bv, cv);
  };
  if (bs.is_object() != cs.is_object()) {
    differs("serving", bs.is_object() ? "a serving run" : "one prefill", cs.is_object() ? "a serving run" : "one prefill");
  } else if (bs.is_object()) {
    for (const char* key : {"requests", "output_tokens", "chunked_prefill_size", "page_size"})
      compare(std::string("serving.") + key, at(bs, key), at(cs, key));
    // The pool: its sizing, and its tokens where they are given (--kv-tokens, the workload's need);
    // a pool from --mem-fraction-static follows the device's free memory, so its fraction counts.
    const auto &bp = at(bs, "pool_sizing"), &cp = at(cs, "pool_sizing");
    const auto &bm = at(bp, "method"), &cm = at(cp, "method");
    if (bm != cm)
      differs("serving.pool_sizing.method", bm, cm);
    else if (bm == "mem-fraction-static")
      compare("serving.pool_sizing.mem_fraction_static", at(bp, "mem_fraction_static"), at(cp, "mem_fraction_static"));
    else
      compare("serving.kv_pool_tokens", at(bs, "kv_pool_tokens"), at(cs, "kv_pool_tokens"));
  }
  for (const char* key : {"mode", "backend", "device_name"}) {
    if (b.contains(key) && c.contains(key) && b[key] != c[key])
      res->notes.push_back(fmt::format("run {}: {} differs (baseline {}, current {})", run, key, show_value(b[key]), show_value(c[key])));
  }
}

// A run that failed (extra.error) measured a partial workload, whichever report holds it.
void check_failed_run(const nlohmann::ordered_json& run, const char* which, GateResult* res) {
  const std::string error = run.contains("extra") ? json_str(run["extra"], "error") : "";
  if (error.empty()) return;
  ++res->failed_runs;
  ++res->failures;
  res->notes.push_back(fmt::format("{} run {} failed ({}): its figures are not evidence", which, json_str(run, "name"), error));
  res->issues.push_back({json_str(run, "name"), "failed_run", res->notes.back(), true});
}

}  // namespace

GateResult run_gate(const ReportFile& baseline, const ReportFile& current, const GateOptions& opts) {
  GateResult res;
  for (const auto& brun : baseline.runs()) check_failed_run(brun, "baseline", &res);
  for (const auto& crun : current.runs()) check_failed_run(crun, "current", &res);
  for (const auto& brun : baseline.runs()) {
    std::string name = brun["name"].get<std::string>();
    const auto* crun = current.find_run(name);
    if (crun) check_meta_differences(brun, *crun, name, opts, &res);
    for (const auto& metric : opts.metrics) {
      GateCheck c;
      c.run = name;
      c.metric = metric;
      c.has_baseline = true;
      c.baseline = brun[metric].get<uint64_t>();
      c.allowed = allowed_delta(c.baseline, opts);
      if (!crun) {
        c.status = GateStatus::kMissing;
        c.failed = true;
        ++res.missing;
      } else {
        c.has_current = true;
        c.current = (*crun)[metric].get<uint64_t>();
        c.delta = bytes_delta(c.baseline, c.current);  // exact: both within 2^63-1 (validated)
        uint64_t mag = c.current >= c.baseline ? c.current - c.baseline : c.baseline - c.current;
        if (mag <= c.allowed) {
          c.status = GateStatus::kPass;
        } else if (c.current > c.baseline) {
          c.status = GateStatus::kRegression;
          c.failed = true;
          ++res.regressions;
        } else {
          c.status = GateStatus::kImprovement;
          c.failed = !opts.allow_improvement;
          ++res.improvements;
        }
      }
      if (c.failed) ++res.failures;
      res.checks.push_back(c);
    }
  }
  for (const auto& crun : current.runs()) {
    const uint64_t dropped = json_u64(crun, "dropped_records");
    if (crun.value("truncated", false) || dropped > 0) {
      ++res.incomplete;
      if (!opts.allow_incomplete) ++res.failures;
      res.notes.push_back("run " + crun["name"].get<std::string>() + ": trace incomplete (" +
                          (crun.value("truncated", false) ? std::string("truncated") : std::string("not truncated")) +
                          ", " + std::to_string(dropped) + " dropped records): its figures are lower bounds" +
                          (opts.allow_incomplete ? " (allowed by --allow-incomplete)" : ""));
      res.issues.push_back({crun["name"].get<std::string>(), "incomplete_trace", res.notes.back(), !opts.allow_incomplete});
    }
  }
  for (const auto& crun : current.runs()) {
    std::string name = crun["name"].get<std::string>();
    if (baseline.find_run(name)) continue;
    for (const auto& metric : opts.metrics) {
      GateCheck c;
      c.run = name;
      c.metric = metric;
      c.has_current = true;
      c.current = crun[metric].get<uint64_t>();
      c.status = GateStatus::kNew;
      c.failed = true;
      ++res.new_runs;
      ++res.failures;
      res.checks.push_back(c);
    }
  }
  return res;
}

namespace {

std::string tolerance_text(const GateOptions& opts) {
  std::string rel = fmt::format("{:g}", opts.rel_tol);
  if (opts.rel_den > 0) {  // the decimal as given, exactly
    rel = std::to_string(opts.rel_num / opts.rel_den);
    if (opts.rel_den > 1) {
      std::string frac = std::to_string(opts.rel_num % opts.rel_den);
      frac = std::string(std::to_string(opts.rel_den).size() - 1 - frac.size(), '0') + frac;
      rel += "." + frac;
    }
  }
  return fmt::format("rel-tol {}, abs-tol {}", rel, format_bytes(opts.abs_tol));
}

size_t count_runs(const GateResult& r) {
  std::set<std::string> runs;
  for (const auto& c : r.checks) runs.insert(c.run);
  return runs.size();
}

std::string check_message(const GateCheck& c) {
  switch (c.status) {
    case GateStatus::kPass:
      return c.delta == 0 ? "equal" : fmt::format("within tolerance ({} allowed)", format_bytes(c.allowed));
    case GateStatus::kRegression:
      return fmt::format("regression: {} grew by {} ({}) from {} to {} bytes, {} allowed", c.metric,
                         with_commas(c.delta), format_percent(c.delta, c.baseline), with_commas_u(c.baseline),
                         with_commas_u(c.current), with_commas_u(c.allowed));
    case GateStatus::kImprovement:
      return fmt::format("{}improvement: {} shrank by {} ({}) from {} to {} bytes; update the baseline",
                         c.failed ? "unexpected " : "", c.metric, with_commas_u(magnitude(c.delta)),
                         format_percent(c.delta, c.baseline), with_commas_u(c.baseline), with_commas_u(c.current));
    case GateStatus::kMissing:
      return "run " + c.run + " is in the baseline but not in the current report";
    case GateStatus::kNew:
      return "run " + c.run + " is not in the baseline; add it (--out-baseline)";
  }
  return "";
}

}  // namespace

std::string gate_verdict(const GateResult& r, const GateOptions& opts) {
  std::string scope = fmt::format("{} checks, {} runs; {}", r.checks.size(), count_runs(r), tolerance_text(opts));
  if (r.passed()) {
    std::string extra = r.improvements ? fmt::format(", {} allowed improvement(s)", r.improvements) : "";
    return fmt::format("moeprof gate: PASS ({}{})", scope, extra);
  }
  std::vector<std::string> parts;
  if (r.regressions) parts.push_back(fmt::format("{} regression{}", r.regressions, r.regressions == 1 ? "" : "s"));
  int unexpected = 0;
  for (const auto& c : r.checks) unexpected += c.status == GateStatus::kImprovement && c.failed;
  if (unexpected) parts.push_back(fmt::format("{} unexpected improvement{}", unexpected, unexpected == 1 ? "" : "s"));
  if (r.missing) parts.push_back(fmt::format("{} check{} of missing runs", r.missing, r.missing == 1 ? "" : "s"));
  if (r.new_runs) parts.push_back(fmt::format("{} check{} of runs not in the baseline", r.new_runs, r.new_runs == 1 ? "" : "s"));
  if (r.incomplete && !opts.allow_incomplete)
    parts.push_back(fmt::format("{} run{} with an incomplete trace", r.incomplete, r.incomplete == 1 ? "" : "s"));
  if (r.failed_runs) parts.push_back(fmt::format("{} failed run{}", r.failed_runs, r.failed_runs == 1 ? "" : "s"));
  if (r.config_changes && !opts.allow_config_change)
    parts.push_back(fmt::format("{} workload difference{}", r.config_changes, r.config_changes == 1 ? "" : "s"));
  return fmt::format("moeprof gate: FAIL: {} ({})", fmt::join(parts, ", "), scope);
}

std::string gate_markdown(const GateResult& r, const GateOptions& opts) {
  std::string out = "### " + gate_verdict(r, opts) + "\n\n";
  out += "| run | metric | baseline | current | delta | delta % | allowed | status |\n";
  out += "|---|---|---:|---:|---:|---:|---:|---|\n";
  for (const auto& c : r.checks) {
    std::string status = gate_status_name(c.status);
    if (c.status == GateStatus::kImprovement && c.failed) status = "unexpected improvement";
    std::string mark = c.failed ? "❌ " : "✅ ";
    // Every byte column in exact bytes (the gate compares to the byte).
    const uint64_t mag = c.current >= c.baseline ? c.current - c.baseline : c.baseline - c.current;
    const std::string delta = mag == 0 ? "0 B" : (c.current > c.baseline ? "+" : "-") + format_exact_bytes(mag);
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {}{} |\n", md_cell(c.run), c.metric,
                       c.has_baseline ? format_exact_bytes(c.baseline) : "-",
                       c.has_current ? format_exact_bytes(c.current) : "-",
                       c.has_baseline && c.has_current ? delta : "-",
                       c.has_baseline && c.has_current ? format_percent(c.delta, c.baseline) : "-",
                       c.has_baseline ? format_exact_bytes(c.allowed) : "-", mark, status);
  }
  if (!r.notes.empty()) {
    out += "\nNotes:\n";
    for (const auto& n : r.notes) out += "- " + md_cell(n) + "\n";
  }
  return out;
}

nlohmann::ordered_json gate_json(const GateResult& r, const GateOptions& opts) {
  nlohmann::ordered_json j;
  j["passed"] = r.passed();
  j["verdict"] = gate_verdict(r, opts);
  j["rel_tol"] = opts.rel_tol;
  j["abs_tol_bytes"] = opts.abs_tol;
  j["allow_improvement"] = opts.allow_improvement;
  j["allow_incomplete"] = opts.allow_incomplete;
  j["metrics"] = opts.metrics;
  j["failures"] = r.failures;
  j["regressions"] = r.regressions;
  j["improvements"] = r.improvements;
  j["missing"] = r.missing;
  j["new_runs"] = r.new_runs;
  j["incomplete_runs"] = r.incomplete;
  j["failed_runs"] = r.failed_runs;
  j["workload_changes"] = r.config_changes;
  j["allow_config_change"] = opts.allow_config_change;
  nlohmann::ordered_json checks = nlohmann::ordered_json::array();
  for (const auto& c : r.checks) {
    nlohmann::ordered_json e;
    e["run"] = c.run;
    e["metric"] = c.metric;
    e["baseline"] = c.has_baseline ? nlohmann::ordered_json(c.baseline) : nlohmann::ordered_json(nullptr);
    e["current"] = c.has_current ? nlohmann::ordered_json(c.current) : nlohmann::ordered_json(nullptr);
    e["delta"] = c.has_baseline && c.has_current ? nlohmann::ordered_json(c.delta) : nlohmann::ordered_json(nullptr);
    e["allowed"] = c.allowed;
    e["status"] = c.status == GateStatus::kImprovement && c.failed ? "unexpected improvement" : gate_status_name(c.status);
    e["failed"] = c.failed;
    checks.push_back(std::move(e));
  }
  j["checks"] = checks;
  nlohmann::ordered_json issues = nlohmann::ordered_json::array();
  for (const auto& i : r.issues) issues.push_back({{"run", i.run}, {"kind", i.kind}, {"message", i.message}, {"failed", i.failed}});
  j["issues"] = issues;
  j["notes"] = r.notes;
  return j;
}

std::string gate_junit(const GateResult& r, const GateOptions& opts) {
  // One testcase per run and metric, plus one per evidence issue (a failed run, an incomplete
  // trace, another workload): a CI that reads only the JUnit file sees every reason the gate failed.
  int failures = 0;
  for (const auto& c : r.checks) failures += c.failed;
  for (const auto& i : r.issues) failures += i.failed;
  const size_t tests = r.checks.size() + r.issues.size();
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format("<testsuites name=\"moeprof-gate\" tests=\"{}\" failures=\"{}\" errors=\"0\">\n", tests, failures);
  out += fmt::format("  <testsuite name=\"moeprof-gate\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\">\n",
                     tests, failures);
  out += fmt::format("    <properties><property name=\"tolerance\" value=\"{}\"/></properties>\n",
                     xml_escape(tolerance_text(opts)));
  for (const auto& c : r.checks) {
    out += fmt::format("    <testcase classname=\"moeprof.gate.{}\" name=\"{}\" time=\"0\"", xml_escape(c.run), c.metric);
    std::string msg = check_message(c);
    if (c.failed) {
      out += fmt::format(">\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    </testcase>\n",
                         xml_escape(msg), gate_status_name(c.status), xml_escape(msg));
    } else {
      out += fmt::format(">\n      <system-out>{}</system-out>\n    </testcase>\n", xml_escape(msg));
    }
  }
  for (const auto& i : r.issues) {
    out += fmt::format("    <testcase classname=\"moeprof.gate.{}\" name=\"{}\" time=\"0\"", xml_escape(i.run), i.kind);
    if (i.failed)
      out += fmt::format(">\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    </testcase>\n", xml_escape(i.message), i.kind,
                         xml_escape(i.message));
    else
      out += fmt::format(">\n      <system-out>{}</system-out>\n    </testcase>\n", xml_escape(i.message));
  }
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

std::string proposed_baseline(const ReportFile& current) {
  // The figures the gate reads, without the per-allocation timelines.
  nlohmann::ordered_json doc = current.doc;
  for (auto& r : doc["runs"]) {
    r.erase("memory_timeline");
    r.erase("timeline");
  }
  return report_text(doc);
}

}  // namespace moeprof::reports
