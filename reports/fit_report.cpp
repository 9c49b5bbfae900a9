#include "reports/fit_report.h"

#include <fmt/format.h>

#include <array>
#include <map>
#include <unordered_map>

#include "core/version.h"
#include "planner/whatif.h"
#include "reports/format.h"
#include "reports/report_file.h"

namespace moeprof::reports {

using nlohmann::ordered_json;
using planner::exact::i128;

namespace {

ordered_json int_json(i128 v) {
  if (v >= INT64_MIN && v <= INT64_MAX) return static_cast<int64_t>(v);
  return planner::exact::to_string(v);
}

std::string monomial_name(const planner::exact::Monomial& m, const std::vector<planner::FitVariable>& vars) {
  std::string out;
  for (size_t v = 0; v < vars.size(); ++v)
    for (int e = 0; e < m.exp[v]; ++e) out += (out.empty() ? "" : "*") + vars[v].symbol;
  return out.empty() ? "1" : out;
}

ordered_json values_json(const std::vector<planner::FitVariable>& vars, const std::vector<int64_t>& at) {
  ordered_json o = ordered_json::object();
  for (size_t v = 0; v < vars.size() && v < at.size(); ++v) o[vars[v].name] = at[v];
  return o;
}

ordered_json prediction_json(const planner::SizePrediction& p, const std::vector<planner::FitVariable>& vars) {
  ordered_json o;
  o["variables"] = values_json(vars, p.at);
  o["peak_activation_bytes"] = p.peak_activation_bytes;
  o["peak_total_bytes"] = p.peak_total_bytes;
  o["peak_site"] = p.peak_site;
  o["device"] = p.peak_device;
  o["unconfirmed"] = p.unconfirmed;
  o["unconfirmed_sites_at_peak"] = p.unconfirmed_sites_at_peak;
  o["bounded"] = p.bounded;
  o["bounded_sites_at_peak"] = p.bounded_sites_at_peak;
  o["total_unconfirmed"] = p.total_unconfirmed;
  o["total_unconfirmed_sites_at_peak"] = p.total_unconfirmed_sites_at_peak;
  o["total_bounded"] = p.total_bounded;
  o["total_bounded_sites_at_peak"] = p.total_bounded_sites_at_peak;
  o["fractional"] = p.fractional;
  return o;
}

ordered_json solution_json(const planner::BudgetSolution& s, const std::vector<planner::FitVariable>& vars, uint64_t budget) {
  ordered_json o;
  o["budget_bytes"] = budget;
  o["variable"] = vars[static_cast<size_t>(s.var)].name;
  o["unbounded"] = s.unbounded;
  o["none_fits"] = s.none_fits;
  o["largest"] = s.largest;
  if (!s.none_fits) o["at_largest"] = prediction_json(s.at_largest, vars);
  if (!s.unbounded) o["above"] = prediction_json(s.above, vars);
  return o;
}

std::string state_word(planner::LawState s) {
  return s == planner::LawState::kNone ? "data-dependent" : std::string(planner::law_state_name(s));
}

}  // namespace

ordered_json fit_json(const FitReportInput& in) {
  const planner::FitResult& f = *in.fit;
  const auto& vars = f.variables;
  ordered_json j;
  j["generator"] = std::string("moeprof ") + kVersion;
  ordered_json traces = ordered_json::array();
  for (size_t t = 0; t < in.traces.size(); ++t) {
    ordered_json o;
    o["path"] = in.traces[t];
    o["label"] = t < in.trace_labels.size() ? in.trace_labels[t] : "";
    std::vector<int64_t> at;
    for (const auto& v : vars) at.push_back(v.values[t]);
    o["variables"] = values_json(vars, at);
    o["peak_activation_bytes"] = f.measured_peak_activation[t];
    o["peak_total_bytes"] = f.measured_peak_total[t];
    if (t < in.reproduced.size() && in.reproduced[t]) {
      o["predicted_peak_activation_bytes"] = in.reproduced[t]->peak_activation_bytes;
      o["predicted_peak_total_bytes"] = in.reproduced[t]->peak_total_bytes;
    } else {
      o["predicted_peak_activation_bytes"] = nullptr;
      o["predicted_peak_total_bytes"] = nullptr;
    }
    traces.push_back(o);
  }
  j["traces"] = traces;
  ordered_json jv = ordered_json::array();
  for (const auto& v : vars) jv.push_back({{"name", v.name}, {"symbol", v.symbol}, {"values", v.values}});
  j["variables"] = jv;
  j["allocator"] = {{"sizes", "the bytes each allocation recorded (the executor and torch-async traces: the bytes requested)"},
                    {"size_granularity_bytes", f.size_granularity},
                    {"address_alignment_bytes", f.address_alignment}};
  j["sites"] = {{"common", f.sites.size()},
                {"confirmed", f.confirmed_sites},
                {"unconfirmed", f.unconfirmed_sites},
                {"data_dependent", f.none_sites},
                {"partial", f.partial.size()}};
  j["same_event_sequence"] = f.same_sequence;
  j["sequence_note"] = f.sequence_note;
  j["events_per_trace"] = f.events_per_trace;
  j["peak_positions"] = {{"candidates", f.candidate_positions},
                         {"kept_activation", f.activation_candidates.size()},
                         {"kept_total", f.total_candidates.size()}};

  // Families for reading (layer numbers as '*'): one per (scope pattern, name, law). The laws
  // per site are written by fit_json_text (there may be millions).
  struct Family {
    uint32_t family = 0, name = 0, law = 0;
    size_t sites = 0;
  };
  std::vector<Family> families;
  std::vector<std::string> family_text;                // family scope patterns
  std::unordered_map<uint32_t, uint32_t> family_of;     // scope string id -> family_text index
  std::unordered_map<std::string, uint32_t> family_id;
  struct Key3Hash {
    size_t operator()(const std::array<uint32_t, 3>& k) const {
      return std::hash<uint64_t>()((uint64_t{k[0]} << 32 | k[1]) * 0x9E3779B97F4A7C15ull ^ k[2]);
    }
  };
  std::unordered_map<std::array<uint32_t, 3>, size_t, Key3Hash> fam_index;  // (family, name, law)
  int context_var = -1;
  for (size_t v = 0; v < vars.size(); ++v)
    if (vars[v].name == "context") context_var = static_cast<int>(v);
  for (const auto& st : f.sites) {
    auto fo = family_of.find(st.scope);
    if (fo == family_of.end()) {
      const std::string pattern = planner::family_scope(f.scope_of(st));
      auto [fi, fresh] = family_id.emplace(pattern, static_cast<uint32_t>(family_text.size()));
      if (fresh) family_text.push_back(pattern);
      fo = family_of.emplace(st.scope, fi->second).first;
    }
    const std::array<uint32_t, 3> key = {fo->second, st.name, st.law};
    auto it = fam_index.find(key);
    if (it == fam_index.end()) {
      it = fam_index.emplace(key, families.size()).first;
      families.push_back(Family{fo->second, st.name, st.law, 0});
    }
    ++families[it->second].sites;
  }
  ordered_json fams = ordered_json::array();
  ordered_json quadratic = ordered_json::array(), context = ordered_json::array(), none = ordered_json::array(),
               regime = ordered_json::array();
  std::vector<int64_t> largest(vars.size(), 0);
  for (size_t v = 0; v < vars.size(); ++v)
    for (int64_t x : vars[v].values) largest[v] = std::max(largest[v], x);
  for (const auto& fam : families) {
    const planner::SizeLaw& law = f.laws[fam.law];
    const std::string& scope = family_text[fam.family];
    const std::string& name = f.strings[fam.name];
    const std::string site = scope.empty() ? name : scope + "/" + name;
    ordered_json o = {{"family", site}, {"scope", scope}, {"sites", fam.sites}, {"state", state_word(law.state)},
                      {"text", name + " = " + planner::law_formula(law, vars) + " B"}, {"note", law.note}};
    fams.push_back(o);
    if (law.degree == 2 && law.state != planner::LawState::kNone) quadratic.push_back(site);
    if (law.regime_var >= 0) regime.push_back(site);
    if (law.state == planner::LawState::kNone)
      none.push_back({{"family", site}, {"min_bytes", law.min_bytes}, {"max_bytes", law.max_bytes},
                      {"bound", planner::law_formula(law, vars)}});
    if (context_var >= 0 && law.state != planner::LawState::kNone && law.uses(context_var)) {
      ordered_json c = {{"family", site}, {"formula", planner::law_formula(law, vars)}};
      if (in.budget) {
        const int64_t at = planner::law_exceeds_at(law, largest, context_var, *in.budget);
        c["exceeds_budget_alone_at"] = at > 0 ? ordered_json(at) : ordered_json(nullptr);
      }
      context.push_back(c);
    }
  }
  j["families"] = fams;
  ordered_json flags;
  flags["quadratic"] = quadratic;
  flags["context_growing"] = context;
  flags["context_variable"] = context_var >= 0;
  if (in.context_solution && in.budget) flags["context_exhausts_budget"] = solution_json(*in.context_solution, vars, *in.budget);
  flags["data_dependent"] = none;
  flags["regime"] = regime;
  ordered_json partial = ordered_json::array();
  for (const auto& p : f.partial)
    partial.push_back({{"site", p.scope.empty() ? p.name : p.scope + "/" + p.name}, {"ordinal", p.ordinal}, {"device", p.device},
                       {"traces", p.traces}});
  flags["partial"] = partial;
  j["flags"] = flags;
  ordered_json preds = ordered_json::array();
  for (const auto& p : in.predictions) preds.push_back(prediction_json(p, vars));
  j["predictions"] = preds;
  j["budget"] = in.solution && in.budget ? solution_json(*in.solution, vars, *in.budget) : ordered_json(nullptr);
  return j;
}

std::string fit_json_text(const FitReportInput& in, const ordered_json& doc) {
  const planner::FitResult& f = *in.fit;
  const auto& vars = f.variables;
  // Each law's part shared by its sites, serialized once.
  std::vector<std::string> shared(f.laws.size());
  ordered_json details = ordered_json::array();
  for (size_t k = 0; k < f.laws.size(); ++k) {
    const planner::SizeLaw& law = f.laws[k];
    ordered_json o;
    o["formula"] = planner::law_formula(law, vars);
    ordered_json coefs = ordered_json::array();
    for (const auto& term : law.terms) {
      ordered_json e = ordered_json::object();
      for (size_t v = 0; v < vars.size(); ++v)
        if (term.monomial.exp[v]) e[vars[v].name] = term.monomial.exp[v];
      coefs.push_back({{"monomial", monomial_name(term.monomial, vars)},
                       {"exponents", e},
                       {"value", planner::exact::to_string(term.coefficient)},
                       {"numerator", int_json(term.coefficient.num)},
                       {"denominator", int_json(term.coefficient.den)}});
    }
    o["coefficients"] = coefs;
    o["confirmed"] = law.state == planner::LawState::kConfirmed;
    o["state"] = state_word(law.state);
    if (law.regime_var >= 0)
      o["regime"] = {{"variable", vars[static_cast<size_t>(law.regime_var)].name}, {"min", law.regime_min}};
    else
      o["regime"] = nullptr;
    o["law"] = k;
    // What every site of the law shares beyond that: once, in law_details.
    ordered_json d;
    d["law"] = k;
    d["formula"] = planner::law_formula(law, vars);
    d["state"] = state_word(law.state);
    d["degree"] = law.degree;
    d["sizes_used"] = law.sizes_used;
    if (law.state == planner::LawState::kNone)
      d["range"] = {{"min_bytes", law.min_bytes}, {"max_bytes", law.max_bytes}, {"bound_per_unit", int_json(law.bound_per_unit)}};
    d["bytes"] = law.values;
    d["note"] = law.note;
    details.push_back(d);
    const std::string t = json_text(o);
    shared[k] = t.substr(1, t.size() - 2);  // without the braces
  }
  std::vector<std::string> formulas(f.laws.size());
  for (size_t k = 0; k < f.laws.size(); ++k) formulas[k] = json_text(nlohmann::json(planner::law_formula(f.laws[k], vars)));
  std::vector<std::string> quoted(f.strings.size());
  for (size_t i = 0; i < f.strings.size(); ++i) quoted[i] = json_text(nlohmann::json(f.strings[i]));
  auto unquoted = [](const std::string& q) { return std::string_view(q).substr(1, q.size() - 2); };
  std::string laws;
  laws.reserve(f.sites.size() * 256);
  for (size_t i = 0; i < f.sites.size(); ++i) {
    const auto& st = f.sites[i];
    const std::string &name = quoted[st.name], &scope = quoted[st.scope];
    const bool unscoped = f.strings[st.scope].empty();
    laws += i ? ",\n    {\"site\": \"" : "    {\"site\": \"";
    if (!unscoped) {
      laws += unquoted(scope);
      laws += '/';
    }
    laws += unquoted(name);
    laws += "\", \"name\": " + name + ", \"scope\": " + scope + ", \"ordinal\": " + std::to_string(st.ordinal) +
            ", \"device\": " + std::to_string(st.device) + ", \"category\": \"" + std::string(category_name(st.category)) +
            "\", \"text\": \"";
    laws += unquoted(name);
    laws += " = ";
    laws += unquoted(formulas[st.law]);
    laws += " B\", " + shared[st.law] + "}";
  }
  std::string text = json_text(doc, 2);
  const size_t close = text.rfind('}');
  text.erase(close);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  text += ",\n  \"law_details\": " + json_text(details) + ",\n  \"laws\": [\n" + laws + (laws.empty() ? "]\n}\n" : "\n  ]\n}\n");
  return text;
}

namespace {

std::string vars_text(const ordered_json& vars_obj, const ordered_json& variables) {
  std::string out;
  for (const auto& v : variables) {
    const std::string name = v["name"];
    if (!vars_obj.contains(name)) continue;
    out += (out.empty() ? "" : ", ") + v["symbol"].get<std::string>() + " = " + with_commas(vars_obj[name].get<int64_t>());
  }
  return out;
}

std::string prediction_line(const ordered_json& p, const ordered_json& variables) {
  std::string s = fmt::format("{}: peak activation {} ({}), peak total {}", vars_text(p["variables"], variables),
                              format_exact_bytes(p["peak_activation_bytes"]), format_bytes(p["peak_activation_bytes"]),
                              format_exact_bytes(p["peak_total_bytes"]));
  if (!json_str(p, "peak_site").empty()) s += ", at " + json_str(p, "peak_site");
  if (p["unconfirmed"].get<bool>())
    s += fmt::format("; rests on unconfirmed laws ({} such sites live at the peak)", json_u64(p, "unconfirmed_sites_at_peak"));
  if (p["bounded"].get<bool>())
    s += fmt::format("; data-dependent sites ({} live at the peak) count at their largest measured bytes per unit: an upper bound only "
                     "where they grow no faster than at the measured sizes (a tile or padding that changes between or below them "
                     "breaks it)",
                     json_u64(p, "bounded_sites_at_peak"));
  if (p.value("total_unconfirmed", false) && !p["unconfirmed"].get<bool>())
    s += fmt::format("; the peak total rests on unconfirmed laws of other categories ({} such sites live at its peak)",
                     json_u64(p, "total_unconfirmed_sites_at_peak"));
  if (p.value("total_bounded", false) && !p["bounded"].get<bool>())
    s += fmt::format("; the peak total counts data-dependent sites of other categories at their bound ({} live at its peak)",
                     json_u64(p, "total_bounded_sites_at_peak"));
  if (p["fractional"].get<bool>()) s += "; a law gives a fraction of a byte there (rounded up)";
  return s;
}

std::string solution_text(const ordered_json& s, const ordered_json& variables, const std::string& what) {
  const std::string var = s["variable"];
  std::string sym = var;
  for (const auto& v : variables)
    if (v["name"] == var) sym = v["symbol"];
  const std::string budget = format_exact_bytes(s["budget_bytes"]);
  if (s["none_fits"].get<bool>())
    return fmt::format("{} {}: no {} fits: at {} = {} the peak is already {}\n", what, budget, sym, sym,
                       with_commas(s["above"]["variables"][var].get<int64_t>()), format_exact_bytes(s["above"]["peak_activation_bytes"]));
  if (s["unbounded"].get<bool>())
    return fmt::format("{} {}: the peak does not grow with {}: any {} >= {} fits ({})\n", what, budget, sym, sym,
                       with_commas(s["largest"].get<int64_t>()), format_exact_bytes(s["at_largest"]["peak_activation_bytes"]));
  return fmt::format("{} {}: largest {} = {} (peak {}); {} = {} needs {}{}\n", what, budget, sym, with_commas(s["largest"].get<int64_t>()),
                     format_exact_bytes(s["at_largest"]["peak_activation_bytes"]), sym,
                     with_commas(s["above"]["variables"][var].get<int64_t>()), format_exact_bytes(s["above"]["peak_activation_bytes"]),
                     s["at_largest"]["unconfirmed"].get<bool>() ? " (rests on unconfirmed laws)" : "");
}

}  // namespace

std::string fit_text(const ordered_json& j) {
  std::string out;
  const auto& vars = j["variables"];
  std::string vline;
  for (const auto& v : vars) {
    std::string vals;
    for (const auto& x : v["values"]) vals += (vals.empty() ? "" : ", ") + with_commas(x.get<int64_t>());
    vline += fmt::format("{}{} = {}: {}", vline.empty() ? "" : "; ", v["symbol"].get<std::string>(), v["name"].get<std::string>(), vals);
  }
  out += fmt::format("moeprof fit: {} traces of {}; {}\n", j["traces"].size(), json_str(j["traces"][0], "label"), vline);
  const auto& al = j["allocator"];
  out += fmt::format("sizes fitted: {}; every size is a multiple of {} B, every address of {} B (the allocator's alignment)\n",
                     json_str(al, "sizes"), with_commas_u(json_u64(al, "size_granularity_bytes")),
                     with_commas_u(json_u64(al, "address_alignment_bytes")));
  const auto& s = j["sites"];
  out += fmt::format("sites: {} in every trace ({} confirmed, {} unconfirmed, {} data-dependent), {} in some traces only\n",
                     with_commas_u(json_u64(s, "common")), with_commas_u(json_u64(s, "confirmed")),
                     with_commas_u(json_u64(s, "unconfirmed")), with_commas_u(json_u64(s, "data_dependent")),
                     with_commas_u(json_u64(s, "partial")));
  if (j["same_event_sequence"].get<bool>())
    out += fmt::format("event sequence: the same in every trace ({} allocations and frees; {} positions can hold a peak, {} kept)\n",
                       with_commas_u(json_u64(j, "events_per_trace")), with_commas_u(json_u64(j["peak_positions"], "candidates")),
                       with_commas_u(json_u64(j["peak_positions"], "kept_activation")));
  else
    out += "event sequence: NOT the same program at different sizes (" + json_str(j, "sequence_note") + "): no peak is predicted\n";
  out += "\nlaws (sites grouped by family, layer numbers as *):\n";
  for (const auto& fam : j["families"]) {
    out += fmt::format("  {:<14} {:>5} x  {}: {}\n", fam["state"].get<std::string>(), fam["sites"].get<uint64_t>(),
                       json_str(fam, "scope").empty() ? "(no scope)" : json_str(fam, "scope"), json_str(fam, "text"));
    if (!json_str(fam, "note").empty()) out += "        " + json_str(fam, "note") + "\n";
  }
  const auto& fl = j["flags"];
  auto list = [&](const ordered_json& a) {
    std::string r;
    for (const auto& x : a) r += (r.empty() ? "" : ", ") + (x.is_string() ? x.get<std::string>() : json_str(x, "family"));
    return r.empty() ? std::string("none") : r;
  };
  out += "\nflags:\n";
  out += "  quadratic: " + list(fl["quadratic"]) + "\n";
  if (fl["context_variable"].get<bool>()) {
    out += "  grow with the context: " + list(fl["context_growing"]) + "\n";
    for (const auto& c : fl["context_growing"])
      if (c.contains("exceeds_budget_alone_at") && !c["exceeds_budget_alone_at"].is_null())
        out += fmt::format("    {} alone exceeds the budget at L = {}\n", json_str(c, "family"),
                           with_commas(c["exceeds_budget_alone_at"].get<int64_t>()));
    if (fl.contains("context_exhausts_budget"))
      out += "    " + solution_text(fl["context_exhausts_budget"], vars, "the whole peak within the budget");
  } else {
    out += "  grow with the context: not known (no variable named context)\n";
  }
  out += "  data-dependent: " + list(fl["data_dependent"]) + "\n";
  for (const auto& d : fl["data_dependent"])
    out += fmt::format("    {}: measured {} to {}; bound {} B\n", json_str(d, "family"), format_exact_bytes(json_u64(d, "min_bytes")),
                       format_exact_bytes(json_u64(d, "max_bytes")), json_str(d, "bound"));
  out += "  regime (holds above a size only): " + list(fl["regime"]) + "\n";
  if (!fl["partial"].empty()) out += fmt::format("  in some traces only: {} sites, e.g. {}\n", fl["partial"].size(), json_str(fl["partial"][0], "site"));

  out += "\nmeasured peaks, predicted back from the laws:\n";
  for (const auto& t : j["traces"]) {
    const std::string at = vars_text(t["variables"], vars);
    if (t["predicted_peak_activation_bytes"].is_null()) {
      out += fmt::format("  {}: measured {}; not predicted (below a regime's floor, or no common event sequence)\n", at,
                         format_exact_bytes(json_u64(t, "peak_activation_bytes")));
      continue;
    }
    const bool same = json_u64(t, "predicted_peak_activation_bytes") == json_u64(t, "peak_activation_bytes") &&
                      json_u64(t, "predicted_peak_total_bytes") == json_u64(t, "peak_total_bytes");
    out += fmt::format("  {}: peak activation {} predicted, {} measured; peak total {} / {}{}\n", at,
                       format_exact_bytes(json_u64(t, "predicted_peak_activation_bytes")), format_exact_bytes(json_u64(t, "peak_activation_bytes")),
                       format_exact_bytes(json_u64(t, "predicted_peak_total_bytes")), format_exact_bytes(json_u64(t, "peak_total_bytes")),
                       same ? " (equal)" : " (DIFFERENT)");
  }
  if (!j["predictions"].empty()) {
    out += "\npredictions:\n";
    for (const auto& p : j["predictions"]) out += "  " + prediction_line(p, vars) + "\n";
  }
  if (!j["budget"].is_null()) out += "\n" + solution_text(j["budget"], vars, "budget");
  return out;
}

std::string fit_markdown(const ordered_json& j) {
  std::string out = "# Size laws (moeprof fit)\n\n";
  const auto& vars = j["variables"];
  out += "| trace | sizes | peak activation (measured) | predicted back |\n|---|---|---:|---:|\n";
  for (const auto& t : j["traces"])
    out += fmt::format("| {} | {} | {} | {} |\n", md_cell(json_str(t, "path")), vars_text(t["variables"], vars),
                       format_exact_bytes(json_u64(t, "peak_activation_bytes")),
                       t["predicted_peak_activation_bytes"].is_null() ? "-" : format_exact_bytes(json_u64(t, "predicted_peak_activation_bytes")));
  out += fmt::format("\nSites: {} in every trace ({} confirmed, {} unconfirmed, {} data-dependent), {} in some traces only. "
                     "Every size is a multiple of {} B.\n\n",
                     json_u64(j["sites"], "common"), json_u64(j["sites"], "confirmed"), json_u64(j["sites"], "unconfirmed"),
                     json_u64(j["sites"], "data_dependent"), json_u64(j["sites"], "partial"),
                     json_u64(j["allocator"], "size_granularity_bytes"));
  out += "| law | sites | state | note |\n|---|---:|---|---|\n";
  for (const auto& fam : j["families"])
    out += fmt::format("| `{}`: `{}` | {} | {} | {} |\n", md_cell(json_str(fam, "scope")), md_cell(json_str(fam, "text")),
                       fam["sites"].get<uint64_t>(), json_str(fam, "state"), md_cell(json_str(fam, "note")));
  if (!j["predictions"].empty()) {
    out += "\n## Predictions\n\n";
    for (const auto& p : j["predictions"]) out += "- " + md_cell(prediction_line(p, vars)) + "\n";
  }
  if (!j["budget"].is_null()) out += "\n" + solution_text(j["budget"], vars, "Budget");
  return out;
}

}  // namespace moeprof::reports
