// The serving driver (executor/serving.h): pool sizing, the step loop, the per-step-kind peaks.
#include "executor/serving.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <cmath>
#include <memory>
#include <tuple>
#include <nlohmann/json.hpp>
#include <fmt/format.h>
#include <unordered_map>

#include "core/thousands.h"
#include "executor/graph_runner.h"
#include "executor/kv_pool.h"
#include "executor/scheduler.h"
#include "kernels/common/random.h"

namespace moeprof {

namespace {

std::string commas(uint64_t v) { return group_thousands(v); }
std::string signed_commas(int64_t v) { return v < 0 ? "-" + commas(static_cast<uint64_t>(0) - static_cast<uint64_t>(v)) : commas(static_cast<uint64_t>(v)); }


int32_t argmax_row(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;  // ties: the lower index
  return static_cast<int32_t>(best);
}

nlohmann::ordered_json kind_json(const StepKindStats& k) {
  nlohmann::ordered_json live = nlohmann::ordered_json::array();
  for (const LiveTensor& t : k.live_at_peak)
    live.push_back({{"name", t.name}, {"scope", t.scope}, {"shape", t.shape}, {"category", std::string(category_name(t.category))},
                    {"bytes", t.bytes}});
  return {{"steps", k.steps},
          {"graph_steps", k.graph_steps},
          {"rows", k.rows},
          {"max_rows", k.max_rows},
          {"peak_activation_bytes", k.peak_activation_bytes},
          {"peak_step", k.peak_step},
          {"peak_rows", k.peak_rows},
          {"peak_activation_worst_routing_bytes", k.peak_activation_worst_bytes},
          {"worst_routing_step", k.worst_step},
          {"seconds", k.seconds},
          {"max_seconds", k.max_seconds},
          {"reads", {{"steps", k.read_steps},
                     {"weight_bytes", k.read_weight_bytes},
                     {"expert_bytes", k.read_expert_bytes},
                     {"kv_bytes", k.read_kv_bytes},
                     {"experts_hit", k.experts_hit},
                     {"seconds", k.read_seconds}}},
          {"live_at_peak", live}};
}

}  // namespace

void StepPeakTracker::begin(StepKindStats* kind, int64_t step, int64_t rows) {
  kind_ = kind;
  step_ = step;
  rows_ = rows;
  check_peak();
}

void StepPeakTracker::on_alloc(const Storage& s, const AllocTag& tag, DType /*dtype*/, const std::string& shape) {
  if (!counts_as_activation(tag.category)) return;
  const uint64_t worst = std::max<uint64_t>(tag.worst_bytes, s.bytes());
  live_[s.id()] = LiveTensor{tag.name, tag.scope, shape, tag.category, s.bytes(), worst};
  live_bytes_ += s.bytes();
  live_worst_bytes_ += worst;
  check_peak();
}

void StepPeakTracker::on_free(const Storage& s) {
  auto it = live_.find(s.id());
  if (it == live_.end()) return;
  live_bytes_ -= it->second.bytes;
  live_worst_bytes_ -= it->second.worst_bytes;
  live_.erase(it);
}

void StepPeakTracker::check_peak() {
  if (kind_ == nullptr) return;
  if (live_worst_bytes_ > kind_->peak_activation_worst_bytes || kind_->worst_step < 0) {
    kind_->peak_activation_worst_bytes = live_worst_bytes_;
    kind_->worst_step = step_;
  }
  if (live_bytes_ <= kind_->peak_activation_bytes && kind_->peak_step >= 0) return;
  kind_->peak_activation_bytes = live_bytes_;
  kind_->peak_step = step_;
  kind_->peak_rows = rows_;
  kind_->live_at_peak.clear();
  for (const auto& [id, t] : live_) kind_->live_at_peak.push_back(t);
}

int64_t serving_context_len(const ServingOptions& opt, const ModelConfig& cfg) {
  return opt.context_len > 0 ? opt.context_len : cfg.max_position_embeddings;
}

Status check_prompt_ids(const Workload& workload, const ModelConfig& cfg) {
  for (const RequestSpec& r : workload.requests)
    for (int32_t id : r.prompt_ids)
      if (id >= cfg.vocab_size)
        return Status::bad_input(workload.source + " line " + std::to_string(r.line) + ": token id " + std::to_string(id) +
                                 " is outside the vocabulary (" + std::to_string(cfg.vocab_size) + ")");
  return Status::ok();
}

Result<int64_t> serving_pool_tokens(const ServingOptions& opt, const Workload& workload, const DeviceMemory* mem, uint64_t cell_bytes) {
  if (opt.page_size < 1) return Status::bad_input("--page-size must be >= 1");
  int64_t tokens = 0;
  if (opt.kv_tokens > 0) {
    tokens = opt.kv_tokens / opt.page_size * opt.page_size;
    if (tokens < opt.page_size)
      return Status::bad_input("--kv-tokens " + std::to_string(opt.kv_tokens) + " is less than one page (--page-size " +
                               std::to_string(opt.page_size) + ")");
  } else if (opt.mem_fraction_static > 0) {
    if (mem == nullptr) return int64_t{0};  // the weights not loaded yet: not known
    return kv_tokens_from_fraction(opt.mem_fraction_static, *mem, cell_bytes, opt.page_size);
  } else {
    for (const RequestSpec& r : workload.requests)
      tokens += (r.prompt_len + r.output_len - 1 + opt.page_size - 1) / opt.page_size * opt.page_size;
  }
  return tokens;
}

SchedulerConfig scheduler_config(const ServingOptions& opt, int64_t pool_tokens, int64_t context_len) {
  SchedulerConfig sc;
  sc.chunked_prefill_size = opt.chunked_prefill_size;
  sc.page_size = opt.page_size;
  sc.pool_tokens = pool_tokens;
  sc.context_len = context_len;
  // SGLang's request pool: --max-running-requests, else clamp(tokens / context * 512, 2048, 4096).
  // planner/budget.cpp's request_table_bytes_at() applies the same rule to the pool it budgets.
  sc.max_running_requests = opt.max_running_requests;
  if (sc.max_running_requests <= 0) {
    const double f = static_cast<double>(pool_tokens) / static_cast<double>(context_len) * 512.0;
    sc.max_running_requests = std::clamp<int64_t>(static_cast<int64_t>(f), 2048, 4096);
  }
  return sc;
}

Status check_serving_plan(const ServingOptions& opt, const Workload& workload, const ModelConfig& cfg, bool memory_known,
                          const DeviceMemory* estimated, int64_t layers) {
  MOEPROF_RETURN_IF_ERROR(check_prompt_ids(workload, cfg));
  if (opt.kv_tokens <= 0 && opt.mem_fraction_static > 0 && !memory_known)
    return kv_tokens_from_fraction(opt.mem_fraction_static, DeviceMemory{}, 1, 1).status();
  const bool from_device = opt.kv_tokens <= 0 && opt.mem_fraction_static > 0 && estimated != nullptr && estimated->known;
  MOEPROF_ASSIGN_OR_RETURN(int64_t pool, serving_pool_tokens(opt, workload, from_device ? estimated : nullptr,
                                                            from_device ? kv_cell_bytes(cfg, layers) : 1));
  // A pool sized from the device is known once the weights are loaded (pool 0): until then the
  // largest pool the slots address stands in, so that only the context length is checked.
  const int64_t largest = (int64_t{INT32_MAX} + 1 - opt.page_size) / opt.page_size * opt.page_size;
  Status st = Scheduler::create(scheduler_config(opt, pool > 0 ? pool : largest, serving_context_len(opt, cfg)), workload).status();
  if (!st && from_device)  // the pool is a bound here (the weights' estimate): exact on the meta backend
    return Status(st.code(), st.message() + " (--mem-fraction-static " + fmt::format("{:.4f}", opt.mem_fraction_static) +
                                 " gives a pool of at most " + commas(static_cast<uint64_t>(pool)) + " tokens on this device)");
  return st;
}

Result<int64_t> kv_tokens_from_fraction(double fraction, const DeviceMemory& mem, uint64_t cell_bytes, int64_t page_size) {
  if (!mem.known)
    return Status::bad_input("--mem-fraction-static needs the device's memory, which this backend does not report "
                             "(the meta backend: give --gpu-memory BYTES; or set the pool with --kv-tokens N)");
  const double rest = static_cast<double>(mem.free_after_weights) - static_cast<double>(mem.free_before_weights) * (1.0 - fraction);
  const double tokens = rest > 0 ? std::floor(rest / static_cast<double>(cell_bytes)) : 0.0;
  const int64_t t = static_cast<int64_t>(std::min(tokens, 9.0e15)) / page_size * page_size;
  if (t < page_size) {
    const uint64_t weights = mem.free_before_weights - std::min(mem.free_before_weights, mem.free_after_weights);
    return Status::bad_input(fmt::format(
        "Not enough memory for the KV pool: --mem-fraction-static {} of the {} B free gives {} B, the weights take {}{} B: "
        "{} B are left, less than one page ({} token(s) x {} B). Increase --mem-fraction-static or give --kv-tokens N",
        fraction, commas(mem.free_before_weights), commas(static_cast<uint64_t>(fraction * static_cast<double>(mem.free_before_weights))),
        mem.weights_estimated ? "at least " : "", commas(weights), signed_commas(static_cast<int64_t>(rest)), commas(page_size),
        commas(cell_bytes)));
  }
  return t;
}

std::string ServingResult::summary_json() const {
  nlohmann::ordered_json j;
  j["workload"] = workload;
  j["requests"] = requests;
  j["output_tokens"] = output_tokens;
  j["waited_requests"] = waited_requests;
  j["pool_held_requests"] = pool_held_requests;
  j["kv_pool_tokens"] = kv_pool_tokens;
  j["page_size"] = page_size;
  j["kv_cell_bytes"] = cell_bytes;
  j["kv_pool_bytes"] = kv_pool_bytes;
  j["req_to_token_bytes"] = req_to_token_bytes;
  j["context_len"] = context_len;
  j["max_running_requests"] = max_running_requests;
  j["chunked_prefill_size"] = chunked_prefill_size;
  j["pool_sizing"] = {{"method", pool_sizing}};
  if (pool_sizing == "mem-fraction-static") j["pool_sizing"]["mem_fraction_static"] = mem_fraction_static;
  if (device.known) {
    j["pool_sizing"]["free_before_weights_bytes"] = device.free_before_weights;
    j["pool_sizing"]["free_after_weights_bytes"] = device.free_after_weights;
  }
  j["graph_pool_bytes"] = graph_pool_bytes;
  nlohmann::ordered_json caps = nlohmann::ordered_json::array();
  for (const GraphCapture& c : graph_captures) {
    nlohmann::ordered_json live = nlohmann::ordered_json::array();
    for (size_t i = 0; i < c.live_at_peak.size() && i < 20; ++i)
      live.push_back({{"name", c.live_at_peak[i].name}, {"scope", c.live_at_peak[i].scope}, {"bytes", c.live_at_peak[i].bytes}});
    caps.push_back({{"bs", c.bs}, {"pool_bytes_after", c.pool_bytes_after}, {"output_bytes", c.output_bytes},
                    {"live_peak_bytes", c.live_peak_bytes}, {"own_peak_bytes", c.own_peak_bytes},
                    {"output_block_bytes", c.output_block_bytes}, {"live_at_peak", live}});
  }
  j["cuda_graphs"] = {{"enabled", graphs}, {"sizes", graph_sizes}, {"pool_bytes", graph_pool_bytes},
                      {"input_bytes", graph_input_bytes}, {"captures", caps}};
  if (auto need = shared_pool_need(graph_captures, graph_sizes); need.is_ok() && !graph_captures.empty())
    j["cuda_graphs"]["shared_pool"] = {{"need_bytes", need->need_bytes},
                                       {"at_bs", need->at_bs},
                                       {"at_own_bytes", need->at_own_bytes},
                                       {"at_outputs_bytes", need->at_outputs_bytes},
                                       {"separate_pools_bytes", need->separate_bytes},
                                       {"reserved_bytes", graph_pool_bytes}};
  j["steps"] = {{"prefill", prefill.steps}, {"decode", decode.steps}};
  j["step_kinds"] = {{"prefill", kind_json(prefill)}, {"decode", kind_json(decode)}};
  // A replayed decode step allocates nothing: its activations are the graph pool's blocks, whose
  // highest point is that of the largest capture.
  const GraphCapture* top = nullptr;
  for (const GraphCapture& c : graph_captures)
    if (top == nullptr || c.live_peak_bytes > top->live_peak_bytes) top = &c;
  j["step_kinds"]["decode"]["graph_live_peak_bytes"] = top ? top->live_peak_bytes : 0;
  j["step_kinds"]["decode"]["graph_live_peak_bs"] = top ? top->bs : 0;
  j["peak_tokens_used"] = peak_tokens_used;
  const uint64_t act = std::max(prefill.peak_activation_bytes, decode.peak_activation_bytes);
  const uint64_t total = weights_bytes + kv_pool_bytes + req_to_token_bytes + graph_pool_bytes + graph_input_bytes + act;
  nlohmann::ordered_json mem = {{"weights_bytes", weights_bytes},
                                {"weights_shared", weights_shared},
                                {"weights_per_layer_bytes", weights_per_layer_bytes},
                                {"kv_cache_bytes", kv_pool_bytes + req_to_token_bytes},
                                {"graph_bytes", graph_pool_bytes + graph_input_bytes},
                                {"peak_activation_bytes", act},
                                {"total_bytes", total}};
  if (device.known) {
    mem["device_bytes"] = device.total;
    mem["headroom_bytes"] = static_cast<int64_t>(device.total) - static_cast<int64_t>(total);
  }
  j["memory"] = mem;
  return j.dump();
}

Result<ServingResult> run_serving(Backend& backend, DeepseekModel& model, const ServingOptions& opt, const Workload& workload,
                                  const DeviceMemory& mem, const MemoryAccounting& accounting, StepPeakTracker& tracker,
                                  uint64_t seed, bool real_collectives, MoeRunnerStats* stats) {
  const ModelConfig& cfg = model.config();
  const RankShape& shape = model.shape();
  ServingResult res;
  res.workload = workload.source;
  res.requests = static_cast<int64_t>(workload.requests.size());
  res.page_size = opt.page_size;
  res.context_len = serving_context_len(opt, cfg);
  res.chunked_prefill_size = opt.chunked_prefill_size;
  res.device = mem;
  res.weights_bytes = accounting.counters().current[static_cast<size_t>(Category::kWeights)];
  res.weights_shared = model.weights_shared();
  res.moe_layers = static_cast<int64_t>(model.moe_layers().size());
  // What per-layer expert weights would take: the weights allocated (the rope table included; the
  // linear workspace is a workspace, not here), plus every MoE layer's experts that the shared
  // weights alias.
  {
    const WeightBytes wb = estimate_weight_bytes(cfg, shape);
    res.weights_per_layer_bytes = res.weights_bytes + (res.weights_shared ? wb.per_layer - wb.shared : 0);
  }
  res.cell_bytes = kv_cell_bytes(cfg, shape.layers);
  if (opt.page_size < 1) return Status::bad_input("--page-size must be >= 1");

  // The prompts' ids: the workload's, or drawn as the prefill draws its prompt (the rank's
  // vocabulary shard with emulated TP, the whole vocabulary with real collectives).
  MOEPROF_RETURN_IF_ERROR(check_prompt_ids(workload, cfg));
  const int64_t id_lo = real_collectives ? 0 : shape.vocab_start;
  const int64_t id_hi = real_collectives ? cfg.vocab_size : shape.vocab_start + std::min<int64_t>(shape.vocab, cfg.vocab_size - shape.vocab_start);
  std::vector<std::vector<int32_t>> prompts(workload.requests.size());
  for (size_t i = 0; i < workload.requests.size(); ++i) {
    const RequestSpec& r = workload.requests[i];
    if (!r.prompt_ids.empty()) {
      prompts[i] = r.prompt_ids;
      continue;
    }
    prompts[i].resize(static_cast<size_t>(r.prompt_len));
    for (int64_t p = 0; p < r.prompt_len; ++p)
      prompts[i][static_cast<size_t>(p)] = static_cast<int32_t>(
          id_lo + static_cast<int64_t>(kern::hash64(seed ^ 0x5E12F00Dull, (static_cast<uint64_t>(i) << 32) + static_cast<uint64_t>(p)) %
                                       static_cast<uint64_t>(id_hi - id_lo)));
  }

  // The pool's size.
  if (opt.kv_tokens > 0) {
    res.pool_sizing = "kv-tokens";
  } else if (opt.mem_fraction_static > 0) {
    res.pool_sizing = "mem-fraction-static";
    res.mem_fraction_static = opt.mem_fraction_static;
  } else {
    res.pool_sizing = "workload";
  }
  MOEPROF_ASSIGN_OR_RETURN(res.kv_pool_tokens, serving_pool_tokens(opt, workload, &mem, res.cell_bytes));
  const SchedulerConfig sc = scheduler_config(opt, res.kv_pool_tokens, res.context_len);
  res.max_running_requests_given = opt.max_running_requests > 0;
  const int64_t max_reqs = res.max_running_requests = sc.max_running_requests;
  MOEPROF_ASSIGN_OR_RETURN(Scheduler sched, Scheduler::create(sc, workload));

  KvPoolShape ps{res.kv_pool_tokens, opt.page_size, max_reqs, res.context_len};
  MOEPROF_ASSIGN_OR_RETURN(std::unique_ptr<KvPool> pool, KvPool::create(backend, cfg, shape.layers, ps));
  res.kv_pool_bytes = pool->kv_bytes();
  res.req_to_token_bytes = pool->table_bytes();
  res.req_to_token_row_bytes = pool->table_bytes() / static_cast<uint64_t>(max_reqs + 1);
  PagedKv kv = pool->paged();

  // CUDA graphs for decode.
  std::unique_ptr<DecodeGraphs> graphs;
  if (!opt.disable_cuda_graph) {
    const std::vector<int64_t> sizes = opt.cuda_graph_bs.empty()
                                           ? default_graph_sizes(mem.known ? mem.total : 0, opt.cuda_graph_max_bs, max_reqs)
                                           : graph_capture_sizes(opt.cuda_graph_bs, opt.cuda_graph_max_bs, max_reqs);
    if (!sizes.empty()) {
      MOEPROF_ASSIGN_OR_RETURN(graphs, DecodeGraphs::capture(backend, model, kv, sizes, static_cast<int32_t>(id_lo), stats));
      res.graphs = true;
      for (const GraphCapture& c : graphs->captures()) res.graph_sizes.push_back(c.bs);
      res.graph_captures = graphs->captures();
      res.graph_pool_bytes = graphs->pool_bytes();
      res.graph_input_bytes = graphs->input_bytes();
    }
  }

  auto sample = [&](int64_t step) {
    OccupancySample s{step, sched.tokens_used(), sched.pages_used(), sched.running(), sched.waiting()};
    res.occupancy.push_back(s);
    res.peak_tokens_used = std::max(res.peak_tokens_used, s.tokens_used);
    backend.counter("kv_pool.tokens_used", static_cast<uint64_t>(s.tokens_used), static_cast<uint64_t>(step));
    backend.counter("kv_pool.pages_used", static_cast<uint64_t>(s.pages_used), static_cast<uint64_t>(step));
    backend.counter("scheduler.running", static_cast<uint64_t>(s.running), static_cast<uint64_t>(step));
    backend.counter("scheduler.waiting", static_cast<uint64_t>(s.waiting), static_cast<uint64_t>(step));
  };  // once per step, after its slots are taken (an empty pool before the first needs no point)

  const int64_t vocab = shape.vocab;
  while (!sched.done()) {
    StepPlan plan = sched.next();
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t n = static_cast<int64_t>(plan.rows.size());
    std::vector<int32_t> ids(static_cast<size_t>(n)), pos(static_cast<size_t>(n)), rows(static_cast<size_t>(n)),
        slots(static_cast<size_t>(n));
    std::vector<uint64_t> keys(static_cast<size_t>(n));  // each row's token, for a drawn routing
    for (int64_t i = 0; i < n; ++i) {
      const StepRow& r = plan.rows[static_cast<size_t>(i)];
      const RequestState& st = sched.requests()[static_cast<size_t>(r.request)];
      ids[static_cast<size_t>(i)] = r.pos < st.prompt_len ? prompts[static_cast<size_t>(r.request)][static_cast<size_t>(r.pos)]
                                                          : st.output.back();
      pos[static_cast<size_t>(i)] = static_cast<int32_t>(r.pos);
      rows[static_cast<size_t>(i)] = static_cast<int32_t>(st.row);
      slots[static_cast<size_t>(i)] = r.slot;
      keys[static_cast<size_t>(i)] = routing_key(static_cast<uint64_t>(r.request), static_cast<uint64_t>(r.pos));
    }
    // The request-to-token table: each request's new positions, one contiguous run per request.
    for (int64_t i = 0; i < n;) {
      int64_t j = i + 1;
      while (j < n && plan.rows[static_cast<size_t>(j)].request == plan.rows[static_cast<size_t>(i)].request) ++j;
      MOEPROF_RETURN_IF_ERROR(pool->write_slots(rows[static_cast<size_t>(i)], pos[static_cast<size_t>(i)],
                                                std::vector<int32_t>(slots.begin() + i, slots.begin() + j)));
      i = j;
    }
    sample(plan.index);

    const bool prefill = plan.kind == StepKind::kPrefill;
    StepKindStats& kind = prefill ? res.prefill : res.decode;
    const std::string scope = "step." + std::to_string(plan.index) + "/" + std::string(step_kind_name(plan.kind));
    backend.marker(scope, true);
    tracker.begin(&kind, plan.index, n);
    std::vector<float> logits;
    int64_t logit_rows = 0;
    Status st;
    const int64_t graph_bs = (!prefill && graphs) ? graphs->size_for(n) : 0;
    std::optional<StepReads> reads;
    if (!prefill && model.routing_draw() != nullptr) {
      // What the step reads at least: a graph batch's padded rows are routed and computed too.
      std::vector<uint64_t> rk(keys);
      std::vector<int64_t> ctx(pos.begin(), pos.end());
      for (int64_t& c : ctx) ++c;
      rk.resize(static_cast<size_t>(std::max(graph_bs, n)), kPaddingRoutingKey);
      ctx.resize(rk.size(), 1);
      auto r = model.decode_reads(rk, ctx);
      if (!r.is_ok()) return r.status();
      reads = r.value();
    }
    if (graph_bs > 0) {
      auto host = graphs->replay(graph_bs, ids, pos, rows, slots, keys);
      if (host.is_ok()) {
        logits = std::move(host).value();
        logit_rows = n;
        ++kind.graph_steps;
      } else {
        st = host.status();
      }
    } else {
      StepInputs in;
      in.scope = scope;
      in.all_logits = !prefill;
      in.route_keys = keys;
      bool mha = prefill;
      for (const auto& seg : plan.segments) {
        if (seg.prefix > 0) mha = false;
        if (seg.completes) in.logit_rows.push_back(seg.begin + seg.len - 1);
      }
      if (mha)
        for (const auto& seg : plan.segments) in.mha_segments.emplace_back(seg.begin, seg.len);
      const std::string in_scope = scope + "/model/input";
      for (auto [t, name, v] : {std::tuple<Tensor*, const char*, const std::vector<int32_t>*>{&in.ids, "input_ids", &ids},
                                {&in.positions, "positions", &pos},
                                {&in.row_req, "req_pool_indices", &rows},
                                {&in.slots, "out_cache_loc", &slots}}) {
        auto t_or = backend.empty(DType::kI32, 1, n, AllocTag{name, in_scope, Category::kActivation});
        if (!t_or.is_ok()) {
          st = t_or.status();
          break;
        }
        *t = std::move(t_or).value();
        st = backend.copy_from_host(*t, v->data());
        if (!st.is_ok()) break;
      }
      if (st.is_ok()) {
        auto out = model.step(in, kv, stats);
        if (out.is_ok() && out.value().logits.defined()) {
          logit_rows = out.value().logits.rows();
          logits.resize(static_cast<size_t>(logit_rows * vocab));
          st = backend.copy_to_host(out.value().logits, logits.data());
        } else if (!out.is_ok()) {
          st = out.status();
        }
      }
    }
    if (st.is_ok()) st = backend.synchronize();
    tracker.end();
    backend.marker(scope, false);
    if (!st.is_ok()) return st.with_context(scope);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++kind.steps;
    kind.rows += n;
    kind.max_rows = std::max(kind.max_rows, n);
    kind.seconds += secs;
    kind.max_seconds = std::max(kind.max_seconds, secs);
    if (reads) {
      ++kind.read_steps;
      kind.read_weight_bytes += reads->weight_bytes;
      kind.read_expert_bytes += reads->expert_bytes;
      kind.read_kv_bytes += reads->kv_bytes;
      kind.experts_hit += reads->experts_hit;
      kind.read_seconds += secs;
    }
    std::vector<int32_t> tokens(static_cast<size_t>(logit_rows));
    for (int64_t i = 0; i < logit_rows; ++i)
      tokens[static_cast<size_t>(i)] =
          static_cast<int32_t>(shape.vocab_start + argmax_row(logits.data() + i * vocab, vocab));
    sched.finish(plan, tokens);
    sample(plan.index);
  }
  for (const RequestState& r : sched.requests()) {
    res.outputs.push_back(r.output);
    res.output_tokens += static_cast<int64_t>(r.output.size());
  }
  res.waited_requests = sched.waited_requests();
  res.pool_held_requests = sched.pool_held_requests();
  for (StepKindStats* k : {&res.prefill, &res.decode})
    std::sort(k->live_at_peak.begin(), k->live_at_peak.end(), [](const LiveTensor& a, const LiveTensor& b) {
      if (a.bytes != b.bytes) return a.bytes > b.bytes;
      return std::tie(a.scope, a.name) < std::tie(b.scope, b.name);
    });
  graphs.reset();  // the graphs and their pool before the KV pool
  pool.reset();
  return res;
}

}  // namespace moeprof
