#include "executor/run.h"

#include <algorithm>
#include <chrono>
#include <new>
#include <stdexcept>
#include <cstring>
#include <filesystem>

#include "core/trace_io.h"
#include "core/version.h"
#include "model/config.h"

namespace moeprof {

bool same_forward_output(const ForwardOutput& a, const ForwardOutput& b) {
  if (a.hidden_hash != b.hidden_hash || a.logits_hash != b.logits_hash) return false;
  // Results read back from another process's trace carry the hashes only.
  if (a.logits.empty() || b.logits.empty()) return true;
  return a.logits.size() == b.logits.size() && std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)) == 0;
}

uint64_t symmetric_pool_bytes(const RankShape& shape, const ModelConfig& cfg) {
  const uint64_t one = static_cast<uint64_t>(shape.tokens) * static_cast<uint64_t>(cfg.hidden_size) * 2;
  const uint64_t align = 2ull << 20;  // the granularity ncclMemAlloc maps with
  const uint64_t per = (one + 4095) / 4096 * 4096;
  return (4 * per + align - 1) / align * align;
}

Result<ModeResult> run_rank_mode(Backend& backend, const ModelConfig& cfg, const RankShape& shape,
                                 const RunPlan& plan, MemoryMode mode, const RankModeOptions& opt) {
  ModeResult mr;
  mr.mode = std::string(memory_mode_name(mode));
  mr.trace_path = opt.trace_path;
  std::optional<Workload> workload;  // serving: parsed before anything is traced
  if (plan.serving) {
    MOEPROF_ASSIGN_OR_RETURN(Workload w, load_workload(plan.serving->workload));
    workload = std::move(w);
  }
  // Algorithm choices (cuBLASLt timing on the CUDA backend) before the trace opens: once per
  // backend and shape, so the first mode's trace and time hold no tuning and all modes run the
  // same algorithms (their outputs stay comparable bit for bit).
  MOEPROF_RETURN_IF_ERROR(prepare_model_linears(backend, cfg, shape).with_context(mr.mode + " run"));
  RunMeta meta;
  meta.name = mr.mode;
  meta.model = cfg.name;
  meta.mode = mr.mode;
  meta.backend = backend.name();
  meta.device_name = backend.device_name();
  meta.moeprof_version = kVersion;
  meta.tokens = shape.tokens;
  if (workload) {  // a serving run: the workload's prompt tokens (its steps take chunked_prefill_size at most)
    meta.tokens = 0;
    for (const RequestSpec& r : workload->requests) meta.tokens += r.prompt_len;
    meta.extra["chunked_prefill_size"] = std::to_string(shape.tokens);
  }
  meta.layers = shape.layers;
  meta.tp_rank = shape.tp_rank;
  meta.tp_size = shape.tp_size;
  meta.pid = static_cast<uint32_t>(::getpid());
  meta.extra["tp_emulated"] = opt.tp_emulated ? "true" : "false";
  meta.extra["moe_tile"] = std::to_string(shape.moe_tile);
  meta.extra["padded_rows"] = std::to_string(shape.padded_rows);
  meta.extra["config_source"] = cfg.source;
  // The run's identity (what `plan A B` checks to merge rank traces, read_trace_meta: the metadata
  // before the first records) goes into the first META frame: a run that outlasts the writer's
  // flush interval has records in the file before the final META.
  const bool ep_real = shape.ep_size > 1 && !opt.tp_emulated && backend.collectives_real();
  meta.extra["ep_size"] = std::to_string(shape.ep_size);
  if (shape.ep_size > 1) {
    meta.extra["ep_rank"] = std::to_string(shape.ep_rank);
    meta.extra["ep_emulated"] = ep_real ? "false" : "true";
    if (shape.dp_attention) {
      meta.extra["dp_attention"] = "true";
      meta.extra["batch_tokens"] = std::to_string(shape.batch_tokens);
      meta.extra["token_offset"] = std::to_string(shape.token_offset);
    }
    meta.extra["ep_buffers"] = std::string(ep_buffers_name(plan.ep_buffers));
  }
  // Records reach the file at least once a second, also while one op computes for long without
  // allocating: a run killed at any point leaves a trace that reads up to about then.
  TraceWriterOptions wo;
  wo.background_flush = true;
  MOEPROF_ASSIGN_OR_RETURN(auto writer, TraceWriter::open(mr.trace_path, meta, wo));
  TraceRecorder recorder(writer.get(), backend.device_index());
  MemoryAccounting accounting;
  backend.add_observer(&recorder);
  backend.add_observer(&accounting);
  struct Detach {
    Backend& b;
    AllocationObserver* r;
    AllocationObserver* a;
    ~Detach() {
      b.remove_observer(r);
      b.remove_observer(a);
    }
  } detach{backend, &recorder, &accounting};
  backend.announce_pools();  // the NCCL symmetric pool's backing, as the trace's first record
  meta.extra["symm_mem"] = plan.symm_mem ? "on" : "off";

  ModelOptions mo;
  mo.weights = plan.weights;
  mo.seed = plan.seed;
  mo.real_collectives = !opt.tp_emulated && shape.tp_size > 1;
  mo.symm_mem = plan.symm_mem;
  mo.symm_outside_layers = plan.symm_outside_layers;
  mo.routing = plan.routing;
  mo.moe_rows = plan.moe_rows;
  mo.ep_buffers = plan.ep_buffers;
  // Real EP ranks (`--ep N --gpus N`) move the rows through the backend's collectives. Emulated,
  // the CPU reference computes every rank's experts (the outputs are the model's); with real ranks
  // on it each rank holds its experts' values of the whole model (the same outputs again).
  mo.ep_compute_all = shape.ep_size > 1 && backend.name() == "cpu" && !ep_real && !shape.dp_attention;
  mo.ep_model_values = ep_real && backend.name() == "cpu";
  meta.extra["routing"] = plan.routing.text();
  meta.extra["moe_rows"] = std::string(moe_rows_name(plan.moe_rows));
  // Serving: the workload (parsed before any allocation), the device's memory before the weights
  // (--mem-fraction-static) and the per-step-kind peaks, attached before the model is built.
  DeviceMemory device_mem;
  StepPeakTracker step_peaks;
  if (plan.serving) {
    mo.paged_kv = true;
    mo.rope_positions = serving_context_len(*plan.serving, cfg);
    meta.extra["serving_workload"] = plan.serving->workload;
    size_t free_b = 0, total_b = 0;
    if (backend.memory_info(&free_b, &total_b)) {
      device_mem.known = true;
      device_mem.total = total_b;
      device_mem.free_before_weights = free_b;
    }
    backend.add_observer(&step_peaks);
  }
  struct DetachPeaks {
    Backend& b;
    AllocationObserver* o;
    ~DetachPeaks() { b.remove_observer(o); }
  } detach_peaks{backend, &step_peaks};
  if (opt.progress) {
    std::string label = mr.mode;
    mo.progress = [label](const char* phase, int64_t l, int64_t n) {
      std::fprintf(stderr, "\r\033[K[%s] %s: layer %lld of %lld", label.c_str(), phase, static_cast<long long>(l + 1),
                   static_cast<long long>(n));
      if (l + 1 == n && std::strcmp(phase, "forward") == 0) std::fprintf(stderr, "\n");
      std::fflush(stderr);
    };
  }
  const auto t0 = std::chrono::steady_clock::now();
  Status st;
  if (opt.hooks && plan.before_mode) st = plan.before_mode(mr.mode, meta);
  if (st.is_ok()) try {
    auto model = DeepseekModel::create(backend, cfg, shape, mode, mo);
    if (!model.is_ok()) {
      st = model.status();
    } else {
      if (model.value()->weights_shared()) {
        mr.weights_shared = true;
        mr.weights_note = model.value()->weights_note();
        meta.extra["weights"] = "shared";
        meta.extra["weights_note"] = mr.weights_note;
        // The expert weights the MoE layers alias (what per-layer weights would add on this rank,
        // exactly: every MoE layer's experts but the one held); a budget counts them.
        const WeightBytes wb = estimate_weight_bytes(cfg, shape);
        meta.extra["weights_aliased_bytes"] = std::to_string(wb.per_layer - wb.shared);
      } else {
        meta.extra["weights"] = "per-layer";
      }
      if (plan.log && opt.log_weights_note && !mr.weights_note.empty())
        std::fprintf(plan.log, "moeprof: %s\n", mr.weights_note.c_str());
      if (plan.op_times) backend.start_op_profile();
      const auto f0 = std::chrono::steady_clock::now();
      Result<ForwardOutput> out = Status::run_failure("not run");
      if (plan.serving) {
        size_t free_b = 0, total_b = 0;
        if (device_mem.known && backend.memory_info(&free_b, &total_b)) device_mem.free_after_weights = free_b;
        MoeRunnerStats moe;
        auto sr = run_serving(backend, *model.value(), *plan.serving, *workload, device_mem, accounting, step_peaks, plan.seed,
                              mo.real_collectives, &moe);
        if (sr.is_ok()) {
          ForwardOutput fo;
          fo.moe = moe;
          // The modes are compared by the tokens they generate (a serving run keeps no final hidden
          // state: both hashes are of the tokens, each request's count first so that requests'
          // boundaries count).
          uint64_t h = 1469598103934665603ull;
          auto mix = [&h](uint64_t v) {
            h ^= v;
            h *= 1099511628211ull;
          };
          for (const auto& req : sr.value().outputs) {
            mix(0x100000000ull | req.size());
            for (int32_t t : req) mix(static_cast<uint32_t>(t));
          }
          fo.hidden_hash = fo.logits_hash = h;
          fo.prefill_seconds = sr.value().prefill.seconds + sr.value().decode.seconds;
          meta.extra["serving"] = sr.value().summary_json();
          // Flat keys for the budget (planner/budget.cpp): the pool, its page, and the request
          // table with the rule that sized its rows.
          const ServingResult& s = sr.value();
          meta.extra["kv_pool_tokens"] = std::to_string(s.kv_pool_tokens);
          meta.extra["kv_pool_bytes"] = std::to_string(s.kv_pool_bytes);
          meta.extra["kv_page_size"] = std::to_string(s.page_size);
          meta.extra["req_to_token_bytes"] = std::to_string(s.req_to_token_bytes);
          meta.extra["req_to_token_row_bytes"] = std::to_string(s.req_to_token_row_bytes);
          meta.extra["context_len"] = std::to_string(s.context_len);
          meta.extra["max_running_requests"] = std::to_string(s.max_running_requests);
          meta.extra["max_running_requests_rule"] = s.max_running_requests_given ? "given" : "sglang";
          int64_t longest = 0;  // the KV tokens of the workload's largest request (its last token has none)
          for (const RequestSpec& q : workload->requests) longest = std::max(longest, q.prompt_len + q.output_len - 1);
          meta.extra["request_kv_tokens_max"] = std::to_string(longest);
          meta.extra["pool_held_requests"] = std::to_string(s.pool_held_requests);
          mr.serving = std::move(sr).value();
          out = std::move(fo);
        } else {
          out = sr.status();
        }
      } else {
        out = model.value()->forward();
      }
      mr.forward_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - f0).count();
      if (plan.op_times) {
        auto ops = backend.take_op_profile();
        if (ops.is_ok())
          mr.ops = std::move(ops).value();
        else if (out.is_ok())
          st = ops.status();
      }
      if (out.is_ok()) {
        mr.forward_seconds = out.value().prefill_seconds;  // without the hashing of the outputs
        mr.output = std::move(out).value();
        mr.moe = mr.output.moe;
      } else {
        st = out.status();
      }
    }
  }  // the model (weights, KV cache) is released here, inside the trace
  catch (const std::bad_alloc&) {
    st = Status::run_failure("out of host memory");
  } catch (const std::exception& e) {
    st = Status::run_failure(std::string("unexpected error: ") + e.what());
  }
  if (opt.progress && !st.is_ok()) std::fputc('\n', stderr);  // end an open "layer k of n" line
  Status sync = backend.synchronize();
  if (st.is_ok()) st = sync;
  for (auto& [k, v] : backend.run_extras()) meta.extra[k] = v;
  if (opt.hooks && plan.after_mode) {
    Status am = plan.after_mode(mr.mode, meta);
    if (st.is_ok()) st = am;
  }
  mr.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  mr.accounting = accounting.counters();
  // The executor's own accounting (bytes it asked for), per category, travels with the trace.
  for (int c = 0; c < kNumCategories; ++c) {
    if (mr.accounting.allocations[c] == 0) continue;
    const std::string cat(category_name(static_cast<Category>(c)));
    meta.extra["accounting.peak_bytes." + cat] = std::to_string(mr.accounting.peak[c]);
    meta.extra["accounting.allocated_bytes." + cat] = std::to_string(mr.accounting.allocated[c]);
    meta.extra["accounting.allocations." + cat] = std::to_string(mr.accounting.allocations[c]);
  }
  meta.extra["forward_seconds"] = std::to_string(mr.forward_seconds);
  meta.extra["moe_output_reused"] = std::to_string(mr.moe.reused);
  meta.extra["moe_output_fresh"] = std::to_string(mr.moe.fresh);
  meta.extra["moe_output_fallback"] = std::to_string(mr.moe.fallback);
  {
    std::string layers;
    for (int64_t l : mr.moe.fallback_layers) layers += (layers.empty() ? "" : ",") + std::to_string(l);
    meta.extra["moe_output_fallback_layers"] = layers;
  }
  // What a parent process needs to rebuild this rank's result from the trace alone (--launch
  // processes, tp_run.h): totals, timings and the outputs' hashes.
  meta.extra["accounting.peak_total_bytes"] = std::to_string(mr.accounting.peak_total);
  meta.extra["accounting.peak_activation_bytes"] = std::to_string(mr.accounting.peak_activation);
  // Routing skew (docs/budget.md): the peaks had every MoE call met the worst routing of the
  // router's capacity, and the runner's padded rows as allocated, at the bound and at that worst.
  meta.extra["routing.peak_activation_worst_bytes"] = std::to_string(mr.accounting.peak_activation_worst);
  meta.extra["routing.peak_total_worst_bytes"] = std::to_string(mr.accounting.peak_total_worst);
  meta.extra["routing.moe_calls"] = std::to_string(mr.moe.calls);
  meta.extra["routing.rows_allocated"] = std::to_string(mr.moe.rows_allocated);
  meta.extra["routing.rows_bound"] = std::to_string(mr.moe.rows_bound);
  meta.extra["routing.rows_worst"] = std::to_string(mr.moe.rows_worst);
  if (mr.moe.max_expert_tokens >= 0) {
    meta.extra["routing.max_expert_tokens"] = std::to_string(mr.moe.max_expert_tokens);
    meta.extra["routing.max_expert_capacity"] = std::to_string(mr.moe.max_expert_capacity);
  }
  if (shape.ep_size > 1) {
    meta.extra["ep.rows_received"] = std::to_string(mr.moe.ep_rows_received);
    meta.extra["ep.rows_buffered"] = std::to_string(mr.moe.ep_rows_buffered);
    meta.extra["ep.rows_worst"] = std::to_string(mr.moe.ep_rows_worst);
    meta.extra["ep.max_rows_received"] = std::to_string(mr.moe.ep_max_rows_received);
  }
  meta.extra["total_seconds"] = std::to_string(mr.total_seconds);
  meta.extra["output.hidden_hash"] = std::to_string(mr.output.hidden_hash);
  meta.extra["output.logits_hash"] = std::to_string(mr.output.logits_hash);
  if (!st.is_ok()) meta.extra["error"] = st.message();
  Status ms = writer->set_meta(meta);
  Status cs = writer->close();  // flush whatever was recorded, also after a failure
  if (!st.is_ok()) return st.with_context(mr.mode + " run (trace kept in " + mr.trace_path + ")");
  MOEPROF_RETURN_IF_ERROR(ms);
  MOEPROF_RETURN_IF_ERROR(cs);
  MOEPROF_RETURN_IF_ERROR(recorder.status());
  return mr;
}

Result<RankShape> ep_rank_shape(const ModelConfig& cfg, const RunPlan& plan, int rank) {
  const int64_t tokens = plan.serving ? plan.serving->chunked_prefill_size : plan.tokens;
  const EpSlice sl = ep_token_slice(tokens, plan.ep, rank);
  if (plan.dp_attention && tokens < plan.ep)  // every rank needs a request, whichever rank runs
    return Status::bad_input("--dp " + std::to_string(plan.ep) + " gives each rank a request of T/N tokens: --tokens must be at least " +
                             std::to_string(plan.ep) + " (got " + std::to_string(tokens) + ")");
  MOEPROF_ASSIGN_OR_RETURN(RankShape s, make_rank_shape(cfg, plan.dp_attention ? sl.size() : tokens, 1, 0, plan.layers));
  s.ep_size = plan.ep;
  s.ep_rank = rank;
  if (plan.dp_attention) {
    s.dp_attention = true;
    s.batch_tokens = tokens;
    s.token_offset = sl.begin;
  }
  return s;
}

Result<RunPlanResult> execute_run_plan(Backend& backend, const RunPlan& plan) {
  MOEPROF_ASSIGN_OR_RETURN(ModelConfig cfg, resolve_model_config(plan.model));
  const int64_t tokens = plan.serving ? plan.serving->chunked_prefill_size : plan.tokens;
  MOEPROF_ASSIGN_OR_RETURN(RankShape shape, make_rank_shape(cfg, tokens, plan.tp, 0, plan.layers));
  std::error_code ec;
  std::filesystem::create_directories(plan.out_dir, ec);
  if (ec) return Status::bad_input("cannot create output directory " + plan.out_dir + ": " + ec.message());

  RunPlanResult result;
  result.model = cfg.name;
  result.tokens = shape.tokens;
  result.tp = shape.tp_size;
  result.layers = shape.layers;
  result.tp_emulated = shape.tp_size > 1;  // one device runs one rank's shapes; collectives are no-ops

  if (plan.ep > 1) {
    MOEPROF_RETURN_IF_ERROR(check_ep_size(plan.ep, cfg.n_routed_experts, cfg.name));
    if (plan.ep_rank >= plan.ep) return Status::bad_input("--ep-rank " + std::to_string(plan.ep_rank) + " is not below --ep " + std::to_string(plan.ep));
    if (shape.tp_size != 1) return Status::bad_input("--ep runs with --tp 1 (attention over the whole batch on every rank)");
    result.ep = plan.ep;
    result.ep_buffers = plan.ep_buffers;
    result.dp_attention = plan.dp_attention;
    result.ep_worst_rows = ep_worst_rows(shape.tokens, cfg.num_experts_per_tok, cfg.n_routed_experts, plan.ep);
    if (plan.ep_rank >= 0)
      result.ep_ranks = {plan.ep_rank};
    else if (backend.name() == "meta")
      for (int r = 0; r < plan.ep; ++r) result.ep_ranks.push_back(r);
    else
      result.ep_ranks = {0};
    result.ep_rank_modes.resize(result.ep_ranks.size());
  }
  const bool several = result.ep_ranks.size() > 1;
  for (MemoryMode mode : plan.modes) {
    const std::string name(memory_mode_name(mode));
    const size_t n_ranks = std::max<size_t>(1, result.ep_ranks.size());
    std::optional<ModeResult> budget;
    int budget_rank = 0;
    for (size_t ri = 0; ri < n_ranks; ++ri) {
      RankShape rs = shape;
      if (plan.ep > 1) {
        MOEPROF_ASSIGN_OR_RETURN(rs, ep_rank_shape(cfg, plan, result.ep_ranks[ri]));
      }
      RankModeOptions opt;
      opt.trace_path = (std::filesystem::path(plan.out_dir) /
                        (name + (several ? ".ep" + std::to_string(rs.ep_rank) : std::string()) + ".mtrace"))
                           .string();
      opt.tp_emulated = result.tp_emulated;
      opt.progress = plan.progress;
      opt.log_weights_note = mode == plan.modes.front() && ri == 0;
      MOEPROF_ASSIGN_OR_RETURN(ModeResult mr, run_rank_mode(backend, cfg, rs, plan, mode, opt));
      if (mr.weights_shared) {
        result.weights_shared = true;
        result.weights_note = mr.weights_note;
      }
      if (plan.ep > 1) result.ep_rank_modes[ri].push_back(mr);
      // The rank that sets the budget: the largest peak under the worst routing (what a budget
      // reserves on every rank where the buffers follow the routing; else the peak itself).
      if (!budget || budget_order(mr.accounting, budget->accounting)) {
        budget_rank = rs.ep_rank;
        budget = std::move(mr);
      }
    }
    if (plan.ep > 1) result.budget_ranks.push_back(budget_rank);
    result.modes.push_back(std::move(*budget));
  }
  for (size_t i = 1; i < result.modes.size(); ++i)
    result.outputs_identical =
        result.outputs_identical && same_forward_output(result.modes[0].output, result.modes[i].output);
  return result;
}

}  // namespace moeprof
