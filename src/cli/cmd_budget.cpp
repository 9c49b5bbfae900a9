// moeprof budget TRACE... | --backend meta --model M --tp N --tokens T, --gpu-memory BYTES|GPU: the
// memory budget of a serving engine on a device of that size (planner/budget.h, docs/budget.md).
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/run_routing.h"
#include "cli/run_serving.h"
#include "core/status.h"
#include "executor/backends.h"
#include "executor/run.h"
#include "executor/serving.h"
#include "executor/workload.h"
#include "model/config.h"
#include "planner/budget.h"
#include "planner/whatif.h"
#include "reports/budget_report.h"
#include "reports/report_file.h"
#include "reports/run_loader.h"

namespace moeprof::cli {

namespace {

struct BudgetArgs {
  std::vector<std::string> traces;
  std::string backend, model, mode = "all", weights = "auto", out, gpu_memory, out_json, out_md, out_html;
  int64_t tokens = 0, layers = 0;
  int tp = 1;
  uint64_t request_tokens = 0, kv_bytes_per_token = 0, margin = 0, granularity = 1;
  size_t fixes = 5;
  bool json = false;
  CategoryArgs categories;
  RoutingArgs routing;  // with --backend meta (cli/run_routing.h)
  std::vector<std::string> run_given;  // options of the meta run given (a trace says its own)
  ServingArgs serving;  // with --backend meta: a serving run (cli/run_serving.h); --page-size also for traces
};

int budget_command(const BudgetArgs& a) {
  if (a.json && (a.out_json == "-" || a.out_md == "-" || a.out_html == "-"))
    return fail("budget", Status::bad_input("--json prints on stdout: give the --out-* options a file, not \"-\""));
  for (const auto& [opt, path] : {std::pair<const char*, std::string>{"--out-json", a.out_json}, {"--out-md", a.out_md}, {"--out-html", a.out_html}})
    if (Status st = check_output_not_input(opt, path, a.traces); !st) return fail("budget", st);
  auto gpu = planner::parse_gpu_memory(a.gpu_memory);
  if (!gpu) return fail("budget", gpu.status());
  std::string gpu_name;
  for (const auto& g : planner::known_gpus())
    if (g.bytes == *gpu && a.gpu_memory.find_first_not_of("0123456789,_") != std::string::npos) gpu_name = std::string(g.name);
  std::vector<std::string> traces = a.traces;
  std::vector<std::string> names;
  std::string kv_check;
  uint64_t kv_cost = a.kv_bytes_per_token;
  // The meta run's folder when -o is not given: removed however the command ends.
  struct Scratch {
    std::optional<std::filesystem::path> dir;
    ~Scratch() {
      std::error_code ec;
      if (dir) std::filesystem::remove_all(*dir, ec);
    }
  } scratch_guard;
  std::optional<std::filesystem::path>& scratch = scratch_guard.dir;
  if (!a.backend.empty()) {
    // Run the meta backend for the model and read its traces.
    if (a.backend != "meta") return fail("budget", Status::bad_input("--backend " + a.backend + ": budget runs the meta backend only (give traces of other runs)"));
    if (!traces.empty()) return fail("budget", Status::bad_input("give traces or --backend meta, not both"));
    ServingArgs sa = a.serving;
    if (sa.workload.empty()) std::erase(sa.given, std::string("--page-size"));  // the budget's page for a prefill
    auto serving = serving_options(sa);
    if (!serving) return fail("budget", serving.status());
    if (a.model.empty() || (a.tokens <= 0) == !*serving)
      return fail("budget", Status::bad_input("--backend meta needs --model and either --tokens (one prefill) or --workload (a serving run)"));
    auto cfg = resolve_model_config(a.model);
    if (!cfg) return fail("budget", cfg.status());
    for (const auto& n : cfg->notes) note("budget", "{}: {}", cfg->name, n);
    RunPlan plan;
    plan.model = a.model;
    plan.tokens = a.tokens;
    plan.serving = *serving;
    plan.tp = a.tp;
    // The routing and EP options as `run` checks them (with the workload and TP set first: --ep
    // runs one prefill at TP 1).
    if (Status st = apply_routing_options(a.routing, *cfg, "meta", &plan); !st) return fail("budget", st);
    if (plan.serving) {
      // What the serving run would refuse before its first step (the meta device knows its memory).
      auto w = load_workload(plan.serving->workload);
      if (!w) return fail("budget", w.status());
      if (Status st = check_serving_plan(*plan.serving, *w, *cfg, true); !st) return fail("budget", st);
    }
    plan.weights = weights_mode_from_name(a.weights);
    plan.tp = a.tp;
    plan.layers = a.layers;
    if (a.mode == "both") plan.modes = {MemoryMode::kBaseline, MemoryMode::kReuse};
    else if (a.mode == "all") plan.modes = {MemoryMode::kBaseline, MemoryMode::kReuse, MemoryMode::kFixes};
    else if (a.mode == "baseline") plan.modes = {MemoryMode::kBaseline};
    else if (a.mode == "reuse") plan.modes = {MemoryMode::kReuse};
    else plan.modes = {MemoryMode::kFixes};
    if (a.out.empty()) {
      scratch = std::filesystem::temp_directory_path() / fmt::format("moeprof-budget-{}", ::getpid());
      plan.out_dir = scratch->string();
    } else {
      plan.out_dir = a.out;
    }
    // A serving run sizes by the device what an engine sizes by it (the --mem-fraction-static pool,
    // the default graph sizes, --weights auto): the meta backend reports --gpu-memory but does not
    // enforce it, so a workload that does not fit gets a budget with its shortfall.
    auto be = *serving ? make_meta_backend_of(*gpu, /*enforce=*/false) : make_meta_backend();
    auto res = execute_run_plan(*be, plan);
    if (!res) return fail("budget", res.status());
    for (const auto& m : res->modes) traces.push_back(m.trace_path);
    const int64_t layers = a.layers > 0 ? std::min(a.layers, cfg->num_hidden_layers) : cfg->num_hidden_layers;
    const uint64_t from_cfg = static_cast<uint64_t>((cfg->kv_lora_rank + cfg->qk_rope_head_dim) * layers * 2);
    kv_check = fmt::format("({} + {}) x {} layers x 2 B = {} B", cfg->kv_lora_rank, cfg->qk_rope_head_dim, layers, from_cfg);
    if (kv_cost == 0) kv_cost = from_cfg;
  }
  if (traces.empty()) return fail("budget", Status::bad_input("give the run's traces, or --backend meta --model M (--tokens T | --workload W)"));
  if (a.backend.empty()) {
    std::vector<std::string> given = a.serving.given;
    std::erase(given, std::string("--page-size"));
    if (!a.serving.workload.empty() || !given.empty())
      return fail("budget", Status::bad_input((a.serving.workload.empty() ? given.front() : std::string("--workload")) +
                                              " runs the meta backend (--backend meta): a trace says its own serving options"));
  }
  if (!a.run_given.empty() && a.backend.empty())
    return fail("budget", Status::bad_input(a.run_given.front() + " is an option of the meta run (--backend meta): a trace says its own " +
                                            (a.run_given.front() == "--routing" || a.run_given.front() == "--moe-rows" ? "routing" : "run")));
  reports::LoadOptions lo;
  lo.analyze.keep_lifetimes = true;
  lo.analyze.timeline_points = 0;
  auto cats = category_options(a.categories);
  if (!cats) return fail("budget", cats.status());
  lo.categories = *cats;
  lo.stream = reports::StreamMode::kOff;
  std::vector<reports::LoadedRun> runs;
  for (size_t i = 0; i < traces.size(); ++i) {
    lo.analyze.keep_event_index = i == 0 && a.fixes > 0;  // the ranked fixes of the first run
    auto r = reports::load_run(reports::split_run_argument(traces[i]), lo);
    if (!r) return fail("budget", r.status());
    r->trace = Trace();
    names.push_back(r->analysis.meta.name.empty() ? std::filesystem::path(traces[i]).stem().string() : r->analysis.meta.name);
    runs.push_back(std::move(r).value());
  }
  // The traces are the memory modes of one run: the same model and workload, each mode once
  // (traces of other programs would make up what a mode buys).
  for (size_t i = 1; i < runs.size(); ++i) {
    const RunMeta& m0 = runs[0].analysis.meta;
    const RunMeta& mi = runs[i].analysis.meta;
    auto extra = [](const RunMeta& m, const char* key) {
      auto it = m.extra.find(key);
      return it == m.extra.end() ? std::string() : it->second;
    };
    std::string differs;
    if (mi.model != m0.model) differs = "model " + m0.model + " vs " + mi.model;
    else if (mi.tokens != m0.tokens) differs = fmt::format("tokens {} vs {}", m0.tokens, mi.tokens);
    else if (mi.layers != m0.layers) differs = fmt::format("layers {} vs {}", m0.layers, mi.layers);
    else if (mi.tp_size != m0.tp_size) differs = fmt::format("TP {} vs {}", m0.tp_size, mi.tp_size);
    for (const char* key : {"serving_workload", "ep_size", "ep_rank", "dp_attention", "routing", "context_len", "chunked_prefill_size"})
      if (differs.empty() && extra(mi, key) != extra(m0, key))
        differs = fmt::format("{} {} vs {}", key, extra(m0, key).empty() ? "(none)" : extra(m0, key),
                              extra(mi, key).empty() ? "(none)" : extra(mi, key));
    if (!differs.empty())
      return fail("budget", Status::bad_input(fmt::format("{} and {} are not the modes of one run ({}): give one run's traces, one per "
                                                          "memory mode", traces[0], traces[i], differs)));
    for (size_t k = 0; k < i; ++k)
      if (!mi.mode.empty() && runs[k].analysis.meta.mode == mi.mode)
        return fail("budget", Status::bad_input(fmt::format("{} and {} are both mode {}: give one trace per memory mode", traces[k],
                                                            traces[i], mi.mode)));
  }
  if (scratch) {
    std::error_code ec;
    std::filesystem::remove_all(*scratch, ec);
    traces.assign(traces.size(), "");
    for (size_t i = 0; i < names.size(); ++i) traces[i] = "(meta run, " + names[i] + ")";
  }
  planner::BudgetOptions bo;
  bo.gpu_memory_bytes = *gpu;
  bo.kv_bytes_per_token = kv_cost;
  bo.kv_cost_source = a.kv_bytes_per_token ? "--kv-bytes-per-token" : "the model's config";
  // --page-size: as given, else the serving run's own page, else 1 (planner/budget.h).
  bool page_given = false;
  for (const auto& g : a.serving.given) page_given = page_given || g == "--page-size";
  bo.page_size = page_given ? static_cast<uint64_t>(a.serving.page_size) : 0;
  bo.request_tokens = a.request_tokens;
  bo.margin_bytes = a.margin;
  bo.granularity = a.granularity;
  reports::BudgetReportInput in;
  in.traces = traces;
  in.run_names = names;
  in.gpu_name = gpu_name;
  for (const auto& r : runs) {
    // The trace's own per-token cost must agree with the one used (the config's, or the first trace's).
    auto b = planner::memory_budget(r.analysis, bo);
    if (!b) return fail("budget", b.status());
    if (bo.kv_bytes_per_token == 0) {
      bo.kv_bytes_per_token = b->kv_bytes_per_token;
      bo.kv_cost_source = "the first trace: " + b->kv_cost_source;
    }
    if (bo.request_tokens == 0) bo.request_tokens = b->request_tokens;  // every run's requests of the same length
    in.budgets.push_back(std::move(b).value());
    in.runs.push_back(&r.analysis);
  }
  if (!kv_check.empty()) {
    const uint64_t own = in.budgets.front().trace_kv_bytes_per_token;
    if (own != kv_cost)
      return fail("budget", Status::run_failure(fmt::format("the trace's KV cache gives {} B per token, the config {} B", own, kv_cost)));
    kv_check += " (the trace's KV cache agrees)";
    in.kv_check = kv_check;
  }
  if (a.fixes > 0 && runs[0].analysis.devices.size() > 0) {
    planner::WhatIfOptions wo;
    wo.fixes = a.fixes;
    wo.timeline_points = 0;
    auto w = planner::what_if(runs[0].analysis, {}, wo);
    if (w) in.fixes = std::move(w).value();
  }
  const auto j = reports::budget_json(in);
  for (const auto& [path, text] : {std::pair<std::string, std::string>{a.out_json, reports::json_text(j, 2) + "\n"},
                                   {a.out_md, reports::budget_markdown(j)},
                                   {a.out_html, reports::budget_html(j)}}) {
    if (path.empty()) continue;
    if (Status st = reports::write_text_file(path, text); !st) return fail("budget", st);
    if (path != "-") note("budget", "wrote {}", path);
  }
  Status st = write_stdout(a.json ? reports::json_text(j, 2) + "\n" : reports::budget_text(j));
  if (!st) return fail("budget", st);
  return kExitOk;
}

}  // namespace

void register_budget(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<BudgetArgs>();
  auto* cmd = app.add_subcommand("budget", "The memory budget of a serving engine on a device: components, KV tokens, requests, engine settings");
  cmd->footer("Example: moeprof budget --backend meta --model kimi-k2.5 --tp 4 --tokens 16384 --gpu-memory B200\n"
              "Components sum to the device exactly; kv_tokens is the exact capacity (docs/budget.md).");
  cmd->add_option("traces", args->traces, "traces of the run, one per memory mode (the first is the reference); ranks joined by commas")
      ->type_name("TRACE...");
  cmd->add_option("--gpu-memory", args->gpu_memory, "the device's size in bytes, or H200, H100, A100, B200 (the CUDA driver's totals)")
      ->required()
      ->type_name("BYTES|GPU");
  cmd->add_option("--backend", args->backend, "meta: run the meta backend for --model instead of reading traces")->check(CLI::IsMember({"meta"}));
  cmd->add_option("--model", args->model, "with --backend meta: a built-in model or a config.json path")->type_name("NAME|PATH");
  cmd->add_option("--tokens", args->tokens, "with --backend meta: one prefill of N tokens (or a serving run: --workload)")->check(integer_range(1, int64_t{1} << 40))->type_name("N");
  cmd->add_option("--tp", args->tp, "with --backend meta: one rank's shapes of TP=N")->check(integer_range(1, 1 << 20))->type_name("N")->capture_default_str();
  cmd->add_option("--layers", args->layers, "with --backend meta: the first N layers only")->check(integer_range(1, int64_t{1} << 20))->type_name("N");
  cmd->add_option("--weights", args->weights,
                  "with --backend meta: shared (every MoE layer aliases one layer's experts, as the CUDA backend runs a model too large "
                  "for the device) or per-layer; auto: per-layer, or shared where a serving run's per-layer weights exceed --gpu-memory")
      ->check(CLI::IsMember({"auto", "shared", "per-layer"}))
      ->capture_default_str();
  cmd->add_option("--mode", args->mode, "with --backend meta: the memory modes to run")
      ->check(CLI::IsMember({"baseline", "reuse", "fixes", "both", "all"}))
      ->capture_default_str();
  cmd->add_option("--out,-o", args->out, "with --backend meta: keep the traces in this folder [default: a temporary one, removed]")->type_name("DIR");
  cmd->add_option("--request-tokens", args->request_tokens, "tokens of one request, for the concurrent requests [default: a serving run's largest request, else the prefill's tokens]")
      ->check(integer_range(1, int64_t{1} << 40))
      ->type_name("N");
  cmd->add_option("--kv-bytes-per-token", args->kv_bytes_per_token,
                  "KV bytes per token per rank [default: the config's (kv_lora_rank + qk_rope_head_dim) x layers x 2, else the trace's KV cache / tokens]")
      ->check(integer_range(1, int64_t{1} << 40))
      ->type_name("N");
  cmd->add_option("--margin", args->margin, "bytes kept free on purpose, a component of their own")->type_name("BYTES")->capture_default_str();
  cmd->add_option("--granularity", args->granularity, "an allocator's rounding of each live allocation in bytes (1 = the bytes as recorded)")
      ->check(integer_range(1, int64_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--fixes", args->fixes, "ranked fixes of the first run to translate into KV tokens (0 = none)")->capture_default_str();
  cmd->add_flag("--json", args->json, "print the budget as JSON on stdout");
  cmd->add_option("--out-json", args->out_json, "write the JSON to this file")->type_name("FILE");
  cmd->add_option("--out-md", args->out_md, "write the budget as Markdown to this file")->type_name("FILE");
  cmd->add_option("--out-html", args->out_html, "write the budget as a single-file HTML page")->type_name("FILE");
  add_category_options(cmd, &args->categories);
  add_routing_options(cmd, &args->routing, "MoE routing of the run, with --backend meta (docs/budget.md, \"Routing skew\")");
  // The serving run's options, with --backend meta; --page-size is also the budget's page for traces
  // [default: the serving run's page, else 1].
  add_serving_options(cmd, &args->serving);
  cmd->get_option("--page-size")
      ->description("tokens per KV page: the serving run's (with --backend meta --workload), and the budget's page [default: "
                    "a serving trace's own page, else 1]")
      ->default_str("");
  cmd->callback([args, exit_code, cmd] {
    note_serving_options(cmd, &args->serving);
    args->run_given.clear();
    for (const char* o : {"--routing", "--moe-rows", "--ep", "--ep-rank", "--ep-buffers", "--dp", "--model", "--tokens", "--tp", "--layers",
                          "--weights", "--mode", "--out"})
      if (cmd->count(o) > 0) args->run_given.emplace_back(o);
    *exit_code = budget_command(*args);
  });
}

}  // namespace moeprof::cli
