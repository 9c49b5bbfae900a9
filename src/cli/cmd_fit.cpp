// moeprof fit TRACE... [--var NAME=V1,V2,...] [--at NAME=V[,NAME2=V2]]... [--budget BYTES]: exact size
// laws per allocation site from traces of one program at different sizes, the peak at sizes never
// run, and the largest size within a budget (planner/fit.h, docs/budget.md).
#include <atomic>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/status.h"
#include "planner/fit.h"
#include "reports/fit_report.h"
#include "reports/report_file.h"
#include "reports/run_loader.h"

namespace moeprof::cli {

namespace {

struct FitArgs {
  std::vector<std::string> traces, vars, at;
  std::string budget, solve, out_json, out_md;
  bool json = false, no_regimes = false;
  int max_degree = 2;
  CategoryArgs categories;
};

Result<int64_t> parse_int(const std::string& s, const std::string& what) {
  std::string digits;
  for (char c : s)
    if (c != '_' && c != ',') digits.push_back(c);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
    return Status::bad_input(what + ": '" + s + "' is not a non-negative integer");
  if (digits.size() > 18) return Status::bad_input(what + ": '" + s + "' is above the largest size a fit takes, 10^18 - 1");
  return static_cast<int64_t>(std::stoll(digits));
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(b, i - b));
      b = i + 1;
    }
  return out;
}

// tokens from the trace's metadata, chunk/context/batch from its extra keys (as the executor's
// serving runs write them: chunked_prefill_size, context_len; or under the variable's own name).
std::optional<int64_t> meta_value(const RunMeta& m, const std::string& name) {
  if (name == "tokens") return m.tokens > 0 ? std::optional<int64_t>(m.tokens) : std::nullopt;
  auto it = m.extra.find(name);
  if (it == m.extra.end() && name == "chunk") it = m.extra.find("chunked_prefill_size");
  if (it == m.extra.end() && name == "context") it = m.extra.find("context_len");
  if (it == m.extra.end()) return std::nullopt;
  auto v = parse_int(it->second, name);
  return v ? std::optional<int64_t>(*v) : std::nullopt;
}

int fit_command(const FitArgs& a) {
  auto cats = category_options(a.categories);
  if (!cats) return fail("fit", cats.status());
  if (a.traces.size() < 2) return fail("fit", Status::bad_input("give at least two traces of one program at different sizes"));
  for (const auto& [opt, path] : {std::pair<const char*, std::string>{"--out-json", a.out_json}, {"--out-md", a.out_md}})
    if (Status st = check_output_not_input(opt, path, a.traces); !st) return fail("fit", st);
  if (a.json && (a.out_json == "-" || a.out_md == "-"))
    return fail("fit", Status::bad_input("--json prints on stdout: give the --out-* options a file, not \"-\""));
  // Variables: --var, else the metadata keys that every trace has and that differ.
  std::vector<planner::FitVariable> vars;
  for (const auto& v : a.vars) {
    const size_t eq = v.find('=');
    if (eq == std::string::npos || eq == 0) return fail("fit", Status::bad_input("--var " + v + ": expected NAME=V1,V2,..."));
    planner::FitVariable fv;
    fv.name = v.substr(0, eq);
    for (const auto& x : split(v.substr(eq + 1), ',')) {
      auto n = parse_int(x, "--var " + fv.name);
      if (!n) return fail("fit", n.status());
      fv.values.push_back(*n);
    }
    if (fv.values.size() != a.traces.size())
      return fail("fit", Status::bad_input(fmt::format("--var {}: {} values for {} traces (one per trace, in order)", fv.name,
                                                       fv.values.size(), a.traces.size())));
    for (const auto& other : vars)
      if (other.name == fv.name) return fail("fit", Status::bad_input("--var " + fv.name + " is given twice"));
    vars.push_back(std::move(fv));
  }
  // Every allocation of every trace, in memory (the laws need each site).
  reports::LoadOptions lo;
  lo.analyze.keep_lifetimes = true;
  lo.analyze.findings = false;
  lo.analyze.timeline_points = 0;
  lo.categories = *cats;
  lo.stream = reports::StreamMode::kOff;
  // Read on every core, a trace per worker: straight from the file where the trace allows it,
  // else read whole and analysed (records out of order, categories to infer, sites named by
  // their call stacks).
  std::vector<std::optional<Result<planner::SizeTrace>>> loaded(a.traces.size());
  {
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i = next++; i < a.traces.size(); i = next++) {
        bool full = false;
        auto st = planner::read_size_trace(a.traces[i], &full);
        if (st && full) {
          auto r = reports::load_run(std::vector<std::string>{a.traces[i]}, lo);
          st = r ? planner::size_trace(r->analysis) : Result<planner::SizeTrace>(r.status());
        }
        loaded[i].emplace(std::move(st));
      }
    };
    const size_t workers = std::min<size_t>(a.traces.size(), std::max(2u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (size_t w = 1; w < workers; ++w) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
  }
  std::vector<planner::SizeTrace> runs;
  for (size_t i = 0; i < loaded.size(); ++i) {
    auto& r = *loaded[i];
    if (!r) return fail("fit", r.status());
    runs.push_back(std::move(r).value());
  }
  // One program: the same model, mode, TP size and layers wherever the traces say.
  const RunMeta& m0 = runs[0].meta;
  for (size_t t = 1; t < runs.size(); ++t) {
    const RunMeta& m = runs[t].meta;
    auto differs = [&](const std::string& what, const std::string& x, const std::string& y) -> std::optional<std::string> {
      if (x.empty() || y.empty() || x == y) return std::nullopt;
      return fmt::format("{} and {} are not one program ({} {} vs {})", a.traces[0], a.traces[t], what, x, y);
    };
    auto extra = [](const RunMeta& x, const char* key) {
      auto it = x.extra.find(key);
      return it == x.extra.end() ? std::string() : it->second;
    };
    for (auto d : {differs("model", m0.model, m.model), differs("mode", m0.mode, m.mode),
                   differs("TP size", std::to_string(m0.tp_size), std::to_string(m.tp_size)),
                   differs("TP rank", std::to_string(m0.tp_rank), std::to_string(m.tp_rank)),
                   differs("layers", m0.layers ? std::to_string(m0.layers) : "", m.layers ? std::to_string(m.layers) : ""),
                   differs("MoE rows", extra(m0, "moe_rows"), extra(m, "moe_rows")),
                   differs("routing", extra(m0, "routing"), extra(m, "routing")),
                   differs("EP size", extra(m0, "ep_size"), extra(m, "ep_size")),
                   differs("EP rank", extra(m0, "ep_rank"), extra(m, "ep_rank")),
                   differs("EP buffers", extra(m0, "ep_buffers"), extra(m, "ep_buffers"))})
      if (d) return fail("fit", Status::bad_input(*d));
  }
  if (vars.empty()) {
    for (const char* name : {"tokens", "chunk", "context", "batch"}) {
      planner::FitVariable fv;
      fv.name = name;
      for (const auto& r : runs)
        if (auto v = meta_value(r.meta, name)) fv.values.push_back(*v);
      if (fv.values.size() != runs.size()) continue;
      if (std::all_of(fv.values.begin(), fv.values.end(), [&](int64_t x) { return x == fv.values[0]; })) continue;
      vars.push_back(std::move(fv));
    }
    if (vars.empty())
      return fail("fit", Status::bad_input("the traces' metadata give no size that differs between them (tokens, chunk, context, batch): "
                                           "give --var NAME=V1,V2,..."));
  }
  // Each size once: a size given twice would count as one more size agreeing with every law.
  // (Every trace at one size is the fit's own "nothing to fit".)
  const bool varies = std::any_of(vars.begin(), vars.end(), [](const planner::FitVariable& v) {
    return std::any_of(v.values.begin(), v.values.end(), [&](int64_t x) { return x != v.values[0]; });
  });
  for (size_t t = 1; varies && t < runs.size(); ++t)
    for (size_t u = 0; u < t; ++u) {
      bool same = true;
      for (const auto& v : vars) same = same && v.values[t] == v.values[u];
      if (!same) continue;
      std::string at;
      for (const auto& v : vars) at += (at.empty() ? "" : ", ") + v.name + " = " + std::to_string(v.values[t]);
      return fail("fit", Status::bad_input(fmt::format("{} and {} are at the same size ({}): give each size once", a.traces[u],
                                                       a.traces[t], at)));
    }
  std::vector<const planner::SizeTrace*> ptrs;
  for (const auto& r : runs) ptrs.push_back(&r);
  planner::FitOptions fo;
  fo.max_degree = a.max_degree;
  fo.regimes = !a.no_regimes;
  auto fit = planner::fit_size_laws(ptrs, vars, fo);
  if (!fit) return fail("fit", fit.status());
  if (fit->sites.empty())
    return fail("fit", Status::bad_input("the traces have no allocation site in common: not one program at different sizes"));
  const auto& fv = fit->variables;
  auto var_index = [&](const std::string& name) -> int {
    for (size_t v = 0; v < fv.size(); ++v)
      if (fv[v].name == name || fv[v].symbol == name) return static_cast<int>(v);
    return -1;
  };

  reports::FitReportInput in;
  in.fit = &fit.value();
  in.traces = a.traces;
  for (const auto& r : runs) {
    const RunMeta& m = r.meta;
    in.trace_labels.push_back(fmt::format("{} {} ({}{})", m.model.empty() ? m.name : m.model, m.mode, m.backend.empty() ? "?" : m.backend,
                                          m.tp_size > 1 ? fmt::format(", TP={}", m.tp_size) : ""));
  }
  std::vector<int64_t> last_at;
  for (const auto& spec : a.at) {
    std::vector<int64_t> at(fv.size(), -1);
    for (const auto& part : split(spec, ',')) {
      const size_t eq = part.find('=');
      const int v = eq == std::string::npos ? -1 : var_index(part.substr(0, eq));
      if (v < 0) return fail("fit", Status::bad_input("--at " + spec + ": expected NAME=V for the variables fitted"));
      auto n = parse_int(part.substr(eq + 1), "--at " + part.substr(0, eq));
      if (!n) return fail("fit", n.status());
      if (*n < 1) return fail("fit", Status::bad_input("--at " + part + ": a size is at least 1"));
      at[static_cast<size_t>(v)] = *n;
    }
    for (size_t v = 0; v < fv.size(); ++v)
      if (at[v] < 0) return fail("fit", Status::bad_input("--at " + spec + ": no value for " + fv[v].name));
    auto p = planner::predict_peak(*fit, at);
    if (!p) return fail("fit", p.status());
    in.predictions.push_back(*p);
    last_at = at;
  }
  for (size_t t = 0; t < runs.size(); ++t) {
    std::vector<int64_t> at;
    for (const auto& v : fv) at.push_back(v.values[t]);
    auto p = fit->same_sequence ? planner::predict_peak(*fit, at) : Result<planner::SizePrediction>(Status::bad_input(""));
    in.reproduced.push_back(p ? std::optional<planner::SizePrediction>(*p) : std::nullopt);
  }
  std::vector<int64_t> largest(fv.size(), 0);
  for (size_t v = 0; v < fv.size(); ++v)
    for (int64_t x : fv[v].values) largest[v] = std::max(largest[v], x);
  if (!a.budget.empty()) {
    auto b = parse_int(a.budget, "--budget");
    if (!b) return fail("fit", b.status());
    in.budget = static_cast<uint64_t>(*b);
    const int var = a.solve.empty() ? 0 : var_index(a.solve);
    if (var < 0) return fail("fit", Status::bad_input("--solve " + a.solve + ": not a variable of the fit"));
    auto s = planner::solve_budget(*fit, *in.budget, var, last_at.empty() ? largest : last_at);
    if (!s) return fail("fit", s.status());
    in.solution = *s;
    if (const int c = var_index("context"); c >= 0) {
      auto cs = planner::solve_budget(*fit, *in.budget, c, largest);
      if (cs) in.context_solution = *cs;
    }
  } else if (!a.solve.empty()) {
    return fail("fit", Status::bad_input("--solve needs --budget BYTES"));
  }
  const auto j = reports::fit_json(in);
  const std::string json = a.json || !a.out_json.empty() ? reports::fit_json_text(in, j) : std::string();
  if (!a.out_json.empty()) {
    if (Status st = reports::write_text_file(a.out_json, json); !st) return fail("fit", st);
    if (a.out_json != "-") note("fit", "wrote {}", a.out_json);
  }
  if (!a.out_md.empty()) {
    if (Status st = reports::write_text_file(a.out_md, reports::fit_markdown(j)); !st) return fail("fit", st);
    if (a.out_md != "-") note("fit", "wrote {}", a.out_md);
  }
  Status st = write_stdout(a.json ? json : reports::fit_text(j));
  if (!st) return fail("fit", st);
  return kExitOk;
}

}  // namespace

void register_fit(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<FitArgs>();
  auto* cmd = app.add_subcommand("fit", "Exact size laws per allocation site from traces at different sizes; the peak at sizes never run");
  cmd->footer("Example: moeprof fit t1024/baseline.mtrace t2048/baseline.mtrace t4096/baseline.mtrace t8192/baseline.mtrace "
              "--at tokens=131072 --budget 80000000000\n"
              "Laws: exact integer polynomials of degree <= 2, confirmed when more sizes than coefficients agree (docs/budget.md).");
  cmd->add_option("traces", args->traces, "traces of one program at different sizes (.mtrace), at least two")->required()->type_name("TRACE...");
  cmd->add_option("--var", args->vars,
                  "a variable and its value in each trace, in order (repeatable) [default: tokens, and chunk, context, batch "
                  "from the traces' metadata where they differ]")
      ->type_name("NAME=V1,V2,...");
  cmd->add_option("--at", args->at, "predict the peak at these sizes (repeatable)")->type_name("NAME=V[,NAME2=V2]");
  cmd->add_option("--budget", args->budget, "the largest size whose predicted activation peak fits in this many bytes")->type_name("BYTES");
  cmd->add_option("--solve", args->solve, "with --budget: the variable to solve for, the others at the last --at [default: the first]")
      ->type_name("NAME");
  cmd->add_option("--max-degree", args->max_degree, "highest degree of a law (1: linear, 2: quadratic)")->check(integer_range(1, 2))->capture_default_str();
  cmd->add_flag("--no-regimes", args->no_regimes, "do not fit laws that hold above a size only");
  cmd->add_flag("--json", args->json, "print the result as JSON on stdout (laws, predictions, budget)");
  cmd->add_option("--out-json", args->out_json, "write the JSON to this file")->type_name("FILE");
  cmd->add_option("--out-md", args->out_md, "write the laws and predictions as Markdown to this file")->type_name("FILE");
  add_category_options(cmd, &args->categories);
  cmd->callback([args, exit_code] { *exit_code = fit_command(*args); });
}

}  // namespace moeprof::cli
