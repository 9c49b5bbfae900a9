#include "planner/budget.h"

#include <algorithm>
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

}  // namespace

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
  if (opt.page_size == 0) return Status::bad_input("--page-size must be at least 1");
  if (opt.granularity == 0) return Status::bad_input("--granularity must be at least 1");
  if (run.devices.empty()) return Status::bad_input("the trace has no allocation: there is nothing to budget");
  if (!has_every_lifetime(run)) return Status::bad_input("the budget needs every allocation (analyse with keep_lifetimes)");
  BudgetResult b;
  b.gpu_memory_bytes = opt.gpu_memory_bytes;
  b.page_size = opt.page_size;

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
    uint64_t symmetric = 0;
    for (const auto& l : run.lifetimes) {
      if (l.device != d.device || !live_at(l, d.peak_activation_index) || d.peak_activation_bytes == 0) continue;
      if (l.mem_kind == MemKind::kSymmetric) symmetric += l.bytes;
      if (l.category != Category::kKvCache && opt.granularity > 1)
        n.rounding += (l.bytes + opt.granularity - 1) / opt.granularity * opt.granularity - l.bytes;
    }
    n.reserved_unused = d.pool_reserved_peak_bytes > symmetric ? d.pool_reserved_peak_bytes - symmetric : 0;
    if (best == nullptr || n.total() > bn.total()) {
      best = &d;
      bn = n;
    }
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

  // Bytes per KV token: given, or the trace's KV cache over its tokens.
  if (opt.kv_bytes_per_token > 0) {
    b.kv_bytes_per_token = opt.kv_bytes_per_token;
    b.kv_cost_source = opt.kv_cost_source;
  } else {
    int64_t tokens = run.meta.tokens;
    std::string what = "tokens";
    for (const char* key : {"kv_pool_tokens", "kv_tokens"}) {
      auto it = run.meta.extra.find(key);
      if (it == run.meta.extra.end()) continue;
      try {
        tokens = std::stoll(it->second);
        what = key;
      } catch (...) {
        return Status::bad_input(std::string("the trace's ") + key + " is not a number: " + it->second);
      }
      break;
    }
    if (b.trace_kv_cache_bytes == 0 || tokens <= 0)
      return Status::bad_input("the trace holds no KV cache with a token count: give --kv-bytes-per-token");
    if (b.trace_kv_cache_bytes % static_cast<uint64_t>(tokens) != 0)
      return Status::bad_input("the trace's KV cache (" + with_commas(b.trace_kv_cache_bytes) + " B) is not a whole number of bytes per token for " +
                               with_commas(static_cast<uint64_t>(tokens)) + " tokens: give --kv-bytes-per-token");
    b.kv_bytes_per_token = b.trace_kv_cache_bytes / static_cast<uint64_t>(tokens);
    b.kv_cost_source = "the trace: " + with_commas(b.trace_kv_cache_bytes) + " B of KV cache / " + with_commas(static_cast<uint64_t>(tokens)) + " " +
                       what;
  }
  const uint64_t cell = b.kv_bytes_per_token, p = opt.page_size;

  // Routing skew: a runner that sizes its padded rows by the routing (moe_rows = routed) must have
  // room for the worst routing, whatever routing the run met (executor/run.cpp's routing.* keys).
  auto extra = [&](const char* key) -> std::string {
    auto it = run.meta.extra.find(key);
    return it == run.meta.extra.end() ? std::string() : it->second;
  };
  b.routing = extra("routing");
  b.moe_rows = extra("moe_rows");
  if (b.moe_rows == "routed") {
    const std::string w = extra("routing.peak_activation_worst_bytes");
    uint64_t v = 0;
    if (w.empty() || w.find_first_not_of("0123456789") != std::string::npos || w.size() > 19 ||
        (v = std::stoull(w)) > static_cast<uint64_t>(INT64_MAX))
      return Status::bad_input("the trace's MoE rows follow the routing (moe_rows = routed) but its routing.peak_activation_worst_bytes is " +
                               (w.empty() ? std::string("missing") : "not a byte count: " + w));
    b.worst_routing_peak_bytes = v;
    b.routing_reserve_bytes = v > b.activation_peak_bytes ? v - b.activation_peak_bytes : 0;
  }

  // The fixed needs, then the pool: (N + p) x cell <= what is left, N a multiple of p.
  uint64_t fixed = 0;
  for (uint64_t v : {bn.weights, bn.activation, bn.workspace, bn.graph, b.rest_bytes, opt.margin_bytes, b.routing_reserve_bytes})
    if (!add_bytes(fixed, v)) return Status::bad_input("the budget's components add up to more than 2^63-1 bytes");
  const uint64_t G = opt.gpu_memory_bytes;
  const i128 one_page = static_cast<i128>(2 * p) * cell;  // p usable tokens + p padding rows
  int64_t free_bytes = 0;
  if (fixed > G) {
    b.fits = false;
    b.shortfall_bytes = static_cast<uint64_t>(static_cast<i128>(fixed - G) + one_page);
    free_bytes = -static_cast<int64_t>(fixed - G);
  } else {
    b.available_for_kv_bytes = G - fixed;
    const uint64_t slots = b.available_for_kv_bytes / cell;
    if (slots < 2 * p) {
      b.fits = false;
      b.shortfall_bytes = static_cast<uint64_t>(one_page - static_cast<i128>(b.available_for_kv_bytes));
      free_bytes = static_cast<int64_t>(b.available_for_kv_bytes);
    } else {
      b.fits = true;
      b.kv_tokens = (slots - p) / p * p;
      b.kv_pool_bytes = (b.kv_tokens + p) * cell;
      free_bytes = static_cast<int64_t>(b.available_for_kv_bytes - b.kv_pool_bytes);
    }
  }
  b.request_tokens = opt.request_tokens > 0 ? opt.request_tokens : static_cast<uint64_t>(std::max<int64_t>(run.meta.tokens, 0));
  b.requests = requests_for(b, b.kv_tokens);

  // The worst step and what is live there.
  std::string peak_scope;
  for (const auto& e : d.live_set_at_activation_peak)
    if (e.alloc_index == d.peak_activation_index) peak_scope = e.scope;
  const std::string step = step_of(peak_scope);
  b.worst_step = step.empty() ? "prefill" : step;
  b.live_at_peak_count = d.live_set_at_activation_peak.size();
  for (size_t i = 0; i < d.live_set_at_activation_peak.size() && i < opt.live_limit; ++i) b.live_at_peak.push_back(d.live_set_at_activation_peak[i]);
  for (const auto& s : d.scopes)
    if (s.depth == 1 && s.scope.rfind("step.", 0) == 0) b.steps.emplace_back(s.scope, s.activation_high_water_bytes);
  std::stable_sort(b.steps.begin(), b.steps.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  if (b.steps.size() > 10) b.steps.resize(10);

  const std::string step_text = step.empty() ? "the prefill (one prefill = one step; the trace has no step scopes)" : step;
  auto comp = [&](std::string name, int64_t bytes, std::string detail) { b.components.push_back({std::move(name), bytes, std::move(detail)}); };
  comp("weights", static_cast<int64_t>(bn.weights), "the weights category's high-water mark");
  comp("kv_pool", static_cast<int64_t>(b.kv_pool_bytes),
       b.fits ? with_commas(b.kv_tokens) + " tokens + " + with_commas(p) + " padding token(s) (SGLang's MLA pool: size + page_size rows per layer) x " +
                    with_commas(cell) + " B"
              : "no page of KV fits");
  comp("activation_peak", static_cast<int64_t>(bn.activation),
       "activation bytes live at the peak of " + step_text + (peak_scope.empty() ? "" : ", made by " + peak_scope));
  if (b.moe_rows == "routed")
    comp("routing_worst", static_cast<int64_t>(b.routing_reserve_bytes),
         "the MoE runner's padded rows follow the routing (--moe-rows routed" + (b.routing.empty() ? "" : ", --routing " + b.routing) +
             "): under the worst routing of the router's capacity the activation peak is " + with_commas(b.worst_routing_peak_bytes) +
             " B, this much above the " + with_commas(b.activation_peak_bytes) + " B measured");
  comp("graph_pool", static_cast<int64_t>(bn.graph), bn.graph ? "CUDA graph memory (graph category, or the driver's figure)" : "no CUDA graph in the trace");
  comp("workspaces", static_cast<int64_t>(bn.workspace), "workspace and communication bytes (cuBLAS, cuDNN, NCCL) live at the same peak");
  comp("allocator_rest", static_cast<int64_t>(b.rest_bytes),
       "pools reserved beyond their tensors " + with_commas(bn.reserved_unused) + " B; rounding to " + with_commas(opt.granularity) + " B " +
           with_commas(bn.rounding) + " B");
  comp("margin", static_cast<int64_t>(opt.margin_bytes), opt.margin_bytes ? "asked for (--margin)" : "none: the capacity is exact");
  comp("free", free_bytes, b.fits ? "less than one page of KV" : "negative: the fixed needs exceed the device");
  return b;
}

uint64_t kv_tokens_with_peak(const BudgetResult& b, uint64_t activation_peak_bytes) {
  const i128 fixed = static_cast<i128>(b.weights_bytes) + b.graph_bytes + b.rest_bytes + activation_peak_bytes + b.routing_reserve_bytes;
  i128 margin = 0;
  for (const auto& c : b.components)
    if (c.name == "margin") margin = c.bytes;
  const i128 avail = static_cast<i128>(b.gpu_memory_bytes) - fixed - margin;
  if (avail <= 0 || b.kv_bytes_per_token == 0) return 0;
  const uint64_t slots = static_cast<uint64_t>(avail / b.kv_bytes_per_token), p = b.page_size;
  if (slots < 2 * p) return 0;
  return (slots - p) / p * p;
}

uint64_t requests_for(const BudgetResult& b, uint64_t kv_tokens) {
  if (b.request_tokens == 0) return 0;
  const uint64_t per = (b.request_tokens + b.page_size - 1) / b.page_size * b.page_size;
  return kv_tokens / per;
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
  // vLLM: KV cache = u x G - the non-KV memory; blocks of 16 tokens.
  uint64_t non_kv = 0;
  for (const auto& c : b.components)
    if (c.name != "kv_pool" && c.name != "free") non_kv += static_cast<uint64_t>(c.bytes);
  e.gpu_memory_utilization = shortest_decimal(non_kv + N * cell, non_kv + (N + 16) * cell, G);
  return e;
}

}  // namespace moeprof::planner
