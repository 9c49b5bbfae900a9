#include "planner/budget.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "core/checked.h"

namespace moeprof::planner {

namespace {

using i128 = __int128;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string with_commas(uint64_t v) {
  std::string d = std::to_string(v), out;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0 && (d.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(d[i]);
  }
  return out;
}

bool live_at(const Lifetime& l, uint32_t pos) { return l.alloc_index <= pos && (!l.freed() || l.free_index > pos); }

// The step of a scope: "step.N/prefill" (or "step.N"), else "" for a trace without step scopes.
std::string step_of(const std::string& scope) {
  if (scope.rfind("step.", 0) != 0) return "";
  const size_t a = scope.find('/');
  if (a == std::string::npos) return scope;
  const size_t b = scope.find('/', a + 1);
  return scope.substr(0, b == std::string::npos ? scope.size() : b);
}

// The largest kv_tokens, a whole number of pages and at least one, with
// (kv_tokens + page) x cell + the request table at kv_tokens <= avail; 0 when none. The need
// grows with kv_tokens, so a binary search over the pages finds it.
uint64_t kv_slot_limit_pages(uint64_t p) { return p == 0 ? 0 : ((uint64_t{1} << 31) - p) / p; }

uint64_t kv_capacity(const BudgetResult& b, i128 avail) {
  const uint64_t cell = b.kv_bytes_per_token, p = b.page_size;
  if (avail <= 0 || cell == 0 || p == 0) return 0;
  auto fits = [&](uint64_t pages) {
    const i128 k = static_cast<i128>(pages) * p;
    return (k + p) * cell + static_cast<i128>(request_table_bytes_at(b, static_cast<uint64_t>(k))) <= avail;
  };
  uint64_t lo = 0, hi = static_cast<uint64_t>(avail / cell / p);  // lo fits (or is 0), hi + 1 does not
  // A pool's slots are int32 (SGLang's req_to_token; `moeprof run` refuses more): at most
  // 2^31 - p tokens, however much memory is left.
  hi = std::min<uint64_t>(hi, kv_slot_limit_pages(p));
  if (hi == 0 || !fits(1)) return 0;
  lo = 1;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo * p;
}

bool parse_extra_u64(const RunMeta& meta, const char* key, uint64_t* out, std::string* error) {
  auto it = meta.extra.find(key);
  if (it == meta.extra.end()) return false;
  const std::string& v = it->second;
  if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos) {
    *error = std::string("the trace's ") + key + " is not a byte or token count: " + v;
    return false;
  }
  *out = std::stoull(v);
  return true;
}

}  // namespace

uint64_t request_table_bytes_at(const BudgetResult& b, uint64_t kv_tokens) {
  if (b.table_context_len <= 0) return b.table_fixed_bytes;
  // executor/serving.cpp's rule (SGLang's ModelRunner), in the same double arithmetic.
  const double f = static_cast<double>(kv_tokens) / static_cast<double>(b.table_context_len) * 512.0;
  const int64_t rows = std::clamp<int64_t>(static_cast<int64_t>(f), 2048, 4096) + 1;
  return static_cast<uint64_t>(rows) * b.table_row_bytes;
}

const std::vector<GpuSize>& known_gpus() {
  static const std::vector<GpuSize> gpus = {
      {"H200", 150'754'820'096ull, "143,771 MiB: the total nvidia-smi and torch.cuda report for an H200 (141 GB HBM3e)"},
      {"H100", 85'520'809'984ull, "81,559 MiB: H100 80GB HBM3 (SXM), CUDA deviceQuery's global memory"},
      {"A100", 85'100'068'864ull, "81,158 MiB: A100-SXM4-80GB, CUDA deviceQuery's global memory"},
      {"B200", 192'265'846'784ull, "183,359 MiB: B200, nvidia-smi's total"},
  };
  return gpus;
}

Result<uint64_t> parse_gpu_memory(std::string_view text) {
  std::string digits;
  bool numeric = !text.empty();
  for (char c : text) {
    if (c == ',' || c == '_') continue;
    if (c < '0' || c > '9') numeric = false;
    digits.push_back(c);
  }
  if (numeric && !digits.empty()) {
    if (digits.size() > 19) return Status::bad_input("--gpu-memory " + std::string(text) + ": more than 2^63-1 bytes");
    const unsigned long long v = std::stoull(digits);
    if (v == 0 || v > static_cast<unsigned long long>(INT64_MAX))
      return Status::bad_input("--gpu-memory " + std::string(text) + ": must be 1 to 2^63-1 bytes");
    return static_cast<uint64_t>(v);
  }
  std::string names;
  for (const auto& g : known_gpus()) {
    if (lower(g.name) == lower(text)) return g.bytes;
    names += (names.empty() ? "" : ", ") + std::string(g.name);
  }
  return Status::bad_input("--gpu-memory " + std::string(text) + ": not a byte count or a known GPU (" + names + ")");
}

Result<BudgetResult> memory_budget(const RunAnalysis& run, const BudgetOptions& opt) {
  if (!run.limit_error.empty()) return Status::bad_input(run.limit_error);
  if (opt.gpu_memory_bytes == 0 || opt.gpu_memory_bytes > static_cast<uint64_t>(INT64_MAX))
    return Status::bad_input("the device size must be 1 to 2^63-1 bytes");
  if (opt.granularity == 0) return Status::bad_input("--granularity must be at least 1");
  if (run.devices.empty()) return Status::bad_input("the trace has no allocation: there is nothing to budget");
  if (!has_every_lifetime(run)) return Status::bad_input("the budget needs every allocation (analyse with keep_lifetimes)");
  BudgetResult b;
  b.gpu_memory_bytes = opt.gpu_memory_bytes;

  // Per device: the fixed needs; the device with the largest is the one budgeted.
  struct Needs {
    uint64_t weights = 0, activation = 0, workspace = 0, graph = 0, reserved_unused = 0, rounding = 0;
    uint64_t total() const { return weights + activation + workspace + graph + reserved_unused + rounding; }
  };
  const DeviceAnalysis* best = nullptr;
  Needs bn;
  for (const auto& d : run.devices) {
    Needs n;
    n.weights = d.peak_by_category[Category::kWeights];
    n.graph = std::max(d.peak_by_category[Category::kGraph], d.graph_mem_peak_bytes);
    const auto& at = d.live_at_activation_peak;
    n.activation = at[Category::kActivation] + at[Category::kUnknown];
    n.workspace = at[Category::kWorkspace] + at[Category::kCommunication];
    // Each kind of pool (kPoolReserve records) holds the tensors of its kind: what it reserved at
    // most, less its tensors live at the activation peak, is reserved beyond them. Symmetric
    // tensors without a symmetric pool (emulated) come from the stream-ordered pool.
    const auto& by_kind = d.pool_reserved_peak_by_kind;
    const bool symm_pool = by_kind[static_cast<size_t>(MemKind::kSymmetric)] > 0;
    std::array<uint64_t, kMaxMemKind + 1> pooled{};
    for (const auto& l : run.lifetimes) {
      if (l.device != d.device || !live_at(l, d.peak_activation_index) || d.peak_activation_bytes == 0) continue;
      const MemKind k = l.mem_kind == MemKind::kSymmetric && !symm_pool ? MemKind::kStreamOrdered : l.mem_kind;
      if (static_cast<uint8_t>(k) <= kMaxMemKind) pooled[static_cast<size_t>(k)] += l.bytes;
      if (l.category != Category::kKvCache && opt.granularity > 1)
        n.rounding += (l.bytes + opt.granularity - 1) / opt.granularity * opt.granularity - l.bytes;
    }
    for (size_t k = 0; k < by_kind.size(); ++k)
      if (by_kind[k] > pooled[k]) n.reserved_unused += by_kind[k] - pooled[k];
    if (best == nullptr || n.total() > bn.total()) {
      best = &d;
      bn = n;
    }
  }
  // A run whose MoE layers aliased one layer's expert weights (--weights shared, or auto where
  // per-layer weights did not fit the device running it): a deployment holds every layer's, so the
  // budget counts the bytes aliased as weights.
  if (auto it = run.meta.extra.find("weights"); it != run.meta.extra.end() && it->second == "shared") {
    uint64_t aliased = 0;
    std::string why;
    if (!parse_extra_u64(run.meta, "weights_aliased_bytes", &aliased, &why)) {
      if (!why.empty()) return Status::bad_input(why);
      return Status::bad_input("the trace's MoE layers share one layer's expert weights, and it does not say how many bytes they alias "
                               "(weights_aliased_bytes, recorded since 2026-12-06): record the run again with this moeprof");
    }
    if (!add_bytes(bn.weights, aliased)) return Status::bad_input("the weights add up to more than 2^63-1 bytes");
    b.weights_aliased_bytes = aliased;
  }
  const DeviceAnalysis& d = *best;
  b.device = d.device;
  b.weights_bytes = bn.weights;
  b.activation_bytes = bn.activation;
  b.workspace_bytes = bn.workspace;
  b.graph_bytes = bn.graph;
  b.rest_bytes = bn.reserved_unused + bn.rounding;
  b.activation_peak_bytes = bn.activation + bn.workspace;
  b.trace_kv_cache_bytes = d.peak_by_category[Category::kKvCache];

  // The pool and the request table of a serving run (the flat keys executor/run.cpp writes), else
  // the trace's KV cache over its tokens; the bytes per KV token given, or from either.
  std::string bad;
  uint64_t pool_tokens = 0, pool_bytes = 0, trace_page = 0, table_bytes = 0, table_row = 0, context_len = 0;
  const bool serving = parse_extra_u64(run.meta, "kv_pool_tokens", &pool_tokens, &bad) &&
                       parse_extra_u64(run.meta, "kv_pool_bytes", &pool_bytes, &bad);
  if (!bad.empty()) return Status::bad_input(bad);
  b.page_size = opt.page_size;
  uint64_t trace_cell = 0;
  std::string trace_cost_source;
  if (serving) {
    if (!parse_extra_u64(run.meta, "kv_page_size", &trace_page, &bad) || !parse_extra_u64(run.meta, "req_to_token_bytes", &table_bytes, &bad) ||
        !parse_extra_u64(run.meta, "req_to_token_row_bytes", &table_row, &bad) || !parse_extra_u64(run.meta, "context_len", &context_len, &bad))
      return Status::bad_input(bad.empty() ? std::string("the serving trace lacks its page size, request table or context length (kv_page_size, "
                                                         "req_to_token_bytes, req_to_token_row_bytes, context_len)")
                                           : bad);
    const uint64_t rows = pool_tokens + trace_page;
    if (trace_page > (uint64_t{1} << 20))  // run's --page-size limit
      return Status::bad_input("the trace's kv_page_size " + with_commas(trace_page) + " is above 2^20 tokens: not a page a run makes");
    if (trace_page == 0 || pool_bytes == 0 || pool_bytes % rows != 0)
      return Status::bad_input("the trace's KV pool (" + with_commas(pool_bytes) + " B) is not a whole number of bytes per row for " +
                               with_commas(pool_tokens) + " tokens + " + with_commas(trace_page) + " padding rows");
    if (b.trace_kv_cache_bytes != pool_bytes + table_bytes)
      return Status::bad_input("the trace's KV cache high-water (" + with_commas(b.trace_kv_cache_bytes) + " B) is not its pool's " +
                               with_commas(pool_bytes) + " B plus its request table's " + with_commas(table_bytes) + " B");
    trace_cell = pool_bytes / rows;
    trace_cost_source = "the trace's pool: " + with_commas(pool_bytes) + " B / (" + with_commas(pool_tokens) + " tokens + " +
                        with_commas(trace_page) + " padding)";
    if (b.page_size == 0) b.page_size = trace_page;
    std::string rule;
    auto it = run.meta.extra.find("max_running_requests_rule");
    if (it != run.meta.extra.end()) rule = it->second;
    if (rule == "sglang") {
      b.table_context_len = static_cast<int64_t>(context_len);
      b.table_row_bytes = table_row;
      if (context_len == 0 || table_row == 0 || table_bytes % table_row != 0)
        return Status::bad_input("the trace's request table (" + with_commas(table_bytes) + " B) is not whole rows of " + with_commas(table_row) + " B");
    } else if (rule == "given") {
      b.table_fixed_bytes = table_bytes;
      if (table_row > 0 && table_bytes % table_row == 0) b.table_fixed_rows = table_bytes / table_row;
    } else {
      return Status::bad_input("the trace's max_running_requests_rule is " + (rule.empty() ? std::string("missing") : rule) +
                               " (given or sglang)");
    }
  } else {
    int64_t tokens = run.meta.tokens;
    std::string what = "tokens";
    auto it = run.meta.extra.find("kv_tokens");
    if (it != run.meta.extra.end()) {
      try {
        tokens = std::stoll(it->second);
        what = "kv_tokens";
      } catch (...) {
        return Status::bad_input("the trace's kv_tokens is not a number: " + it->second);
      }
    }
    if (b.trace_kv_cache_bytes > 0 && tokens > 0 && b.trace_kv_cache_bytes % static_cast<uint64_t>(tokens) == 0) {
      trace_cell = b.trace_kv_cache_bytes / static_cast<uint64_t>(tokens);
      trace_cost_source = "the trace: " + with_commas(b.trace_kv_cache_bytes) + " B of KV cache / " + with_commas(static_cast<uint64_t>(tokens)) +
                          " " + what;
    } else if (opt.kv_bytes_per_token == 0) {
      if (b.trace_kv_cache_bytes == 0 || tokens <= 0)
        return Status::bad_input("the trace holds no KV cache with a token count: give --kv-bytes-per-token");
      return Status::bad_input("the trace's KV cache (" + with_commas(b.trace_kv_cache_bytes) + " B) is not a whole number of bytes per token for " +
                               with_commas(static_cast<uint64_t>(tokens)) + " tokens: give --kv-bytes-per-token");
    }
  }
  if (b.page_size == 0) b.page_size = 1;
  b.trace_kv_bytes_per_token = trace_cell;
  if (opt.kv_bytes_per_token > 0) {
    b.kv_bytes_per_token = opt.kv_bytes_per_token;
    b.kv_cost_source = opt.kv_cost_source;
  } else {
    b.kv_bytes_per_token = trace_cell;
    b.kv_cost_source = trace_cost_source;
  }
  const uint64_t cell = b.kv_bytes_per_token, p = b.page_size;

  // Routing skew: a runner that sizes its padded rows by the routing (moe_rows = routed) must have
  // room for the worst routing, whatever routing the run met (executor/run.cpp's routing.* keys).
  auto extra = [&](const char* key) -> std::string {
    auto it = run.meta.extra.find(key);
    return it == run.meta.extra.end() ? std::string() : it->second;
  };
  b.routing = extra("routing");
  b.moe_rows = extra("moe_rows");
  // Expert parallelism with exact buffers: a rank's dispatch and expert buffers are sized by the
  // rows the routing sends it, so they follow the routing as routed rows do.
  const std::string ep_size = extra("ep_size");
  const bool ep_exact = extra("ep_buffers") == "exact" && !ep_size.empty() && ep_size != "0" && ep_size != "1";
  b.routing_follows = b.moe_rows == "routed" || ep_exact;
  b.follows_text = b.moe_rows == "routed" ? (ep_exact ? "--moe-rows routed, --ep-buffers exact" : "--moe-rows routed")
                                          : "--ep-buffers exact";
  if (b.routing_follows) {
    const std::string w = extra("routing.peak_activation_worst_bytes");
    uint64_t v = 0;
    if (w.empty() || w.find_first_not_of("0123456789") != std::string::npos || w.size() > 19 ||
        (v = std::stoull(w)) > static_cast<uint64_t>(INT64_MAX))
      return Status::bad_input("the trace's buffers follow the routing (" + b.follows_text + ") but its routing.peak_activation_worst_bytes is " +
                               (w.empty() ? std::string("missing") : "not a byte count: " + w));
    b.worst_routing_peak_bytes = v;
    b.routing_reserve_bytes = v > b.activation_peak_bytes ? v - b.activation_peak_bytes : 0;
  }

  // What the device used beyond the trace's allocations (the CUDA backend's own measurement: the
  // CUDA context, kernel modules, libraries' state, the driver's rounding), at most.
  if (!parse_extra_u64(run.meta, "cuda.untraced_peak_bytes", &b.untraced_bytes, &bad) && !bad.empty()) return Status::bad_input(bad);
  b.untraced_measured = run.meta.extra.count("cuda.untraced_peak_bytes") > 0;

  // The fixed needs, then the pool: (N + p) x cell <= what is left, N a multiple of p.
  uint64_t fixed = 0;
  for (uint64_t v : {bn.weights, bn.activation, bn.workspace, bn.graph, b.rest_bytes, b.untraced_bytes, opt.margin_bytes, b.routing_reserve_bytes})
    if (!add_bytes(fixed, v)) return Status::bad_input("the budget's components add up to more than 2^63-1 bytes");
  const uint64_t G = opt.gpu_memory_bytes;
  // One page of usable tokens, its padding page, and the request table at that size.
  const i128 one_page = static_cast<i128>(2 * p) * cell + request_table_bytes_at(b, p);
  int64_t free_bytes = 0;
  if (fixed > G) {
    b.fits = false;
    b.shortfall_bytes = static_cast<uint64_t>(static_cast<i128>(fixed - G) + one_page);
    free_bytes = -static_cast<int64_t>(fixed - G);
  } else {
    b.available_for_kv_bytes = G - fixed;
    b.kv_tokens = kv_capacity(b, b.available_for_kv_bytes);
    b.kv_slots_capped = b.kv_tokens > 0 && b.kv_tokens == kv_slot_limit_pages(p) * p;
    if (b.kv_tokens == 0) {
      b.fits = false;
      b.shortfall_bytes = static_cast<uint64_t>(one_page - static_cast<i128>(b.available_for_kv_bytes));
      free_bytes = static_cast<int64_t>(b.available_for_kv_bytes);
    } else {
      b.fits = true;
      b.kv_pool_bytes = (b.kv_tokens + p) * cell;
      b.request_table_bytes = request_table_bytes_at(b, b.kv_tokens);
      free_bytes = static_cast<int64_t>(b.available_for_kv_bytes - b.kv_pool_bytes - b.request_table_bytes);
    }
  }
  // A request's tokens: given, else a serving run's largest request, else the prefill's tokens.
  uint64_t longest = 0;
  if (!parse_extra_u64(run.meta, "request_kv_tokens_max", &longest, &bad) && !bad.empty()) return Status::bad_input(bad);
  b.request_tokens = opt.request_tokens > 0 ? opt.request_tokens : longest > 0 ? longest : static_cast<uint64_t>(std::max<int64_t>(run.meta.tokens, 0));
  b.requests = requests_for(b, b.kv_tokens);
  if (!parse_extra_u64(run.meta, "pool_held_requests", &b.pool_held_requests, &bad) && !bad.empty()) return Status::bad_input(bad);
  if (!parse_extra_u64(run.meta, "kv_pool_tokens", &b.trace_pool_tokens, &bad) && !bad.empty()) return Status::bad_input(bad);
  b.schedule_unconfirmed = b.pool_held_requests > 0 && b.kv_tokens > b.trace_pool_tokens;

  // The worst step and what is live there.
  std::string peak_scope;
  for (const auto& e : d.live_set_at_activation_peak)
    if (e.alloc_index == d.peak_activation_index) peak_scope = e.scope;
  const std::string step = step_of(peak_scope);
  b.worst_step = step.empty() ? "prefill" : step;
  b.live_at_peak_count = d.live_set_entries;
  for (size_t i = 0; i < d.live_set_at_activation_peak.size() && i < opt.live_limit; ++i) b.live_at_peak.push_back(d.live_set_at_activation_peak[i]);
  for (const auto& s : d.scopes)
    if (s.depth == 1 && s.scope.rfind("step.", 0) == 0) b.steps.emplace_back(s.scope, s.activation_high_water_bytes);
  std::stable_sort(b.steps.begin(), b.steps.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  if (b.steps.size() > 10) b.steps.resize(10);

  const std::string step_text = step.empty() ? "the prefill (one prefill = one step; the trace has no step scopes)" : step;
  auto comp = [&](std::string name, int64_t bytes, std::string detail) { b.components.push_back({std::move(name), bytes, std::move(detail)}); };
  comp("weights", static_cast<int64_t>(bn.weights),
       b.weights_aliased_bytes == 0
           ? std::string("the weights category's high-water mark")
           : "per-layer weights: the weights category's high-water mark " + with_commas(bn.weights - b.weights_aliased_bytes) + " B + " +
                 with_commas(b.weights_aliased_bytes) + " B of expert weights the run's MoE layers aliased (--weights shared)");
  comp("kv_pool", static_cast<int64_t>(b.kv_pool_bytes),
       b.fits ? with_commas(b.kv_tokens) + " tokens + " + with_commas(p) + " padding token(s) (SGLang's MLA pool: size + page_size rows per layer) x " +
                    with_commas(cell) + " B"
              : "no page of KV fits");
  const bool has_table = serving;
  comp("request_table", static_cast<int64_t>(b.request_table_bytes),
       !has_table ? "none: a trace of one prefill has no request table"
       : b.table_context_len > 0
           ? "SGLang's req_to_token pool: (clamp(kv_tokens / " + with_commas(static_cast<uint64_t>(b.table_context_len)) +
                 " x 512, 2048, 4096) + 1) rows x " + with_commas(b.table_row_bytes) + " B, its rows follow the pool"
           : "SGLang's req_to_token pool as the run sized it (--max-running-requests)");
  comp("activation_peak", static_cast<int64_t>(bn.activation),
       "activation bytes live at the peak of " + step_text + (peak_scope.empty() ? "" : ", made by " + peak_scope));
  if (b.routing_follows)
    comp("routing_worst", static_cast<int64_t>(b.routing_reserve_bytes),
         std::string(b.moe_rows == "routed" ? "the MoE runner's padded rows" : "the expert-parallel buffers") + " follow the routing (" +
             b.follows_text + (b.routing.empty() ? "" : ", --routing " + b.routing) +
             "): under the worst routing of the router's capacity the activation peak is " + with_commas(b.worst_routing_peak_bytes) +
             " B, this much above the " + with_commas(b.activation_peak_bytes) + " B measured");
  comp("graph_pool", static_cast<int64_t>(bn.graph), bn.graph ? "CUDA graph memory (graph category, or the driver's figure)" : "no CUDA graph in the trace");
  comp("workspaces", static_cast<int64_t>(bn.workspace), "workspace and communication bytes (cuBLAS, cuDNN, NCCL) live at the same peak");
  comp("allocator_rest", static_cast<int64_t>(b.rest_bytes),
       "pools reserved beyond their tensors " + with_commas(bn.reserved_unused) + " B; rounding to " + with_commas(opt.granularity) + " B " +
           with_commas(bn.rounding) + " B");
  comp("untraced", static_cast<int64_t>(b.untraced_bytes),
       b.untraced_measured ? "the device's memory in use beyond the traced allocations, at most (the CUDA context, kernel modules, "
                             "libraries, the driver's rounding), as the CUDA backend measured it"
                           : "not measured (not the CUDA backend's trace): put the CUDA context and the like in --margin");
  comp("margin", static_cast<int64_t>(opt.margin_bytes), opt.margin_bytes ? "asked for (--margin)" : "none: the capacity is exact");
  comp("free", free_bytes,
       !b.fits             ? "negative: the fixed needs exceed the device"
       : b.kv_slots_capped ? "the pool is at the most tokens int32 slots address (2^31 - page): no more KV fits, whatever the memory"
                           : "less than one more page of KV needs");
  return b;
}

uint64_t kv_tokens_with_peak(const BudgetResult& b, uint64_t activation_peak_bytes) {
  const i128 fixed = static_cast<i128>(b.weights_bytes) + b.graph_bytes + b.rest_bytes + b.untraced_bytes + activation_peak_bytes +
                    b.routing_reserve_bytes;
  i128 margin = 0;
  for (const auto& c : b.components)
    if (c.name == "margin") margin = c.bytes;
  return kv_capacity(b, static_cast<i128>(b.gpu_memory_bytes) - fixed - margin);
}

uint64_t request_limit_at(const BudgetResult& b, uint64_t kv_tokens) {
  if (b.table_context_len > 0) {  // SGLang's rule (request_table_bytes_at): the table's rows less the padding row
    const double f = static_cast<double>(kv_tokens) / static_cast<double>(b.table_context_len) * 512.0;
    return static_cast<uint64_t>(std::clamp<int64_t>(static_cast<int64_t>(f), 2048, 4096));
  }
  return b.table_fixed_rows > 0 ? b.table_fixed_rows - 1 : 0;
}

uint64_t kv_tokens_for_bytes(const BudgetResult& b, uint64_t avail) { return kv_capacity(b, static_cast<i128>(avail)); }

uint64_t requests_for(const BudgetResult& b, uint64_t kv_tokens) {
  if (b.request_tokens == 0) return 0;
  const uint64_t per = (b.request_tokens + b.page_size - 1) / b.page_size * b.page_size;
  const uint64_t by_pool = kv_tokens / per, limit = request_limit_at(b, kv_tokens);
  return limit > 0 ? std::min(by_pool, limit) : by_pool;
}

std::string shortest_decimal(uint64_t lo_num, uint64_t hi_num, uint64_t den) {
  if (den == 0 || hi_num <= lo_num) return "";
  i128 scale = 1;
  for (int k = 0; k <= 12; ++k, scale *= 10) {
    const i128 c = (static_cast<i128>(lo_num) * scale + den - 1) / den;
    if (c * den >= static_cast<i128>(hi_num) * scale) continue;
    std::string ip = std::to_string(static_cast<uint64_t>(c / scale));
    if (k == 0) return ip;
    std::string fp = std::to_string(static_cast<uint64_t>(c % scale));
    fp.insert(0, static_cast<size_t>(k) - fp.size(), '0');
    return ip + "." + fp;
  }
  return "";
}

EngineSettings engine_settings(const BudgetResult& b) {
  EngineSettings e;
  if (!b.fits) return e;
  const uint64_t cell = b.kv_bytes_per_token, p = b.page_size, G = b.gpu_memory_bytes, N = b.kv_tokens;
  // SGLang: rest = f x G - weights; tokens = floor(floor(rest / cell) / p) x p. N needs
  // rest in [N cell, (N + p) cell).
  const uint64_t lo = b.weights_bytes + N * cell, hi = b.weights_bytes + (N + p) * cell;
  e.mem_fraction_static = shortest_decimal(lo, hi, G);
  const i128 f100 = static_cast<i128>(lo) * 100 / G;  // two decimals, rounded down
  e.mem_fraction_rounded = std::to_string(static_cast<uint64_t>(f100 / 100)) + "." + (f100 % 100 < 10 ? "0" : "") +
                           std::to_string(static_cast<uint64_t>(f100 % 100));
  const i128 rest = f100 * G / 100 - static_cast<i128>(b.weights_bytes);
  e.rounded_kv_tokens = rest <= 0 ? 0 : static_cast<uint64_t>(rest / cell) / p * p;
  // vLLM: KV cache = u x G - the non-KV memory it profiles; blocks of 16 tokens. The margin is
  // not memory vLLM profiles: u leaves it free (it is below 1 by the margin's share).
  uint64_t non_kv = 0;
  for (const auto& c : b.components)
    if (c.name != "kv_pool" && c.name != "free" && c.name != "margin") non_kv += static_cast<uint64_t>(c.bytes);
  e.gpu_memory_utilization = shortest_decimal(non_kv + N * cell, non_kv + (N + 16) * cell, G);
  return e;
}

}  // namespace moeprof::planner
