#include "executor/graph_runner.h"

#include <algorithm>
#include <tuple>

#include "model/routing.h"

namespace moeprof {

std::vector<int64_t> default_graph_sizes(uint64_t device_bytes, int64_t max_bs, int64_t max_running_requests) {
  std::vector<int64_t> v = {1, 2, 4, 8};
  for (int64_t b = 16; b <= 160; b += 8) v.push_back(b);
  constexpr uint64_t kGiB = 1ull << 30;
  if (device_bytes > 96 * kGiB)
    for (int64_t b = 168; b <= 256; b += 8) v.push_back(b);
  if (device_bytes > 180 * kGiB)
    for (int64_t b = 272; b <= 512; b += 16) v.push_back(b);
  return graph_capture_sizes(std::move(v), max_bs, max_running_requests);
}

std::vector<int64_t> graph_capture_sizes(std::vector<int64_t> sizes, int64_t max_bs, int64_t max_running_requests) {
  if (!sizes.empty() && *std::max_element(sizes.begin(), sizes.end()) > max_running_requests)
    sizes.push_back(max_running_requests);  // the largest batch that can run gets its graph
  std::vector<int64_t> out;
  for (int64_t b : sizes)
    if (b > 0 && (max_bs <= 0 || b <= max_bs) && b <= max_running_requests) out.push_back(b);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

StepInputs DecodeGraphs::inputs(int64_t size, const std::string& scope) const {
  StepInputs in;
  in.ids = ids_.reshaped(1, size);
  in.positions = positions_.reshaped(1, size);
  in.row_req = rows_.reshaped(1, size);
  in.slots = slots_.reshaped(1, size);
  in.all_logits = true;
  in.scope = scope;
  in.static_shapes = true;
  if (routed_ids_.defined()) {
    in.routed_ids = routed_ids_;
    in.routed_ids_stride = max_bs_;
  }
  return in;
}

Status DecodeGraphs::fill_inputs(int64_t size, const std::vector<int32_t>& ids, const std::vector<int32_t>& positions,
                                 const std::vector<int32_t>& rows, const std::vector<int32_t>& slots,
                                 const std::vector<uint64_t>& route_keys) {
  const size_t n = ids.size();
  if (const RoutingDraw* draw = model_.routing_draw(); draw != nullptr && routed_ids_.defined()) {
    // Every MoE layer's draw for the padded batch, as an eager step of these rows draws it.
    std::vector<uint64_t> keys(static_cast<size_t>(size), kPaddingRoutingKey);
    std::copy(route_keys.begin(), route_keys.begin() + static_cast<std::ptrdiff_t>(std::min(route_keys.size(), keys.size())), keys.begin());
    const int64_t k = routed_ids_.cols();
    std::vector<int32_t> host(static_cast<size_t>(routed_ids_.rows() * k), 0);
    for (size_t m = 0; m < model_.moe_layers().size(); ++m)
      draw->draw(model_.moe_layers()[m], keys, host.data() + static_cast<int64_t>(m) * max_bs_ * k);
    MOEPROF_RETURN_IF_ERROR(be_.copy_from_host(routed_ids_, host.data()));
  }
  auto padded = [&](const std::vector<int32_t>& v, int32_t pad) {
    std::vector<int32_t> out(static_cast<size_t>(size), pad);
    std::copy(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(n, out.size())), out.begin());
    return out;
  };
  for (auto [t, v] : {std::pair<Tensor*, std::vector<int32_t>>{&ids_, padded(ids, pad_token_)},
                      {&positions_, padded(positions, 0)},
                      {&rows_, padded(rows, 0)},
                      {&slots_, padded(slots, 0)}}) {
    Tensor dst = t->reshaped(1, size);
    MOEPROF_RETURN_IF_ERROR(be_.copy_from_host(dst, v.data()));
  }
  return Status::ok();
}

Result<std::unique_ptr<DecodeGraphs>> DecodeGraphs::capture(Backend& backend, DeepseekModel& model, const PagedKv& kv,
                                                            std::vector<int64_t> sizes, int32_t pad_token,
                                                            MoeRunnerStats* stats) {
  std::unique_ptr<DecodeGraphs> g(new DecodeGraphs(backend, model, kv));
  g->pad_token_ = pad_token;
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  if (sizes.empty()) return g;
  if (sizes.front() < 1) return Status::bad_input("CUDA-graph batch sizes must be >= 1");
  const int64_t max_bs = sizes.back();
  for (auto [t, name] : {std::pair<Tensor*, const char*>{&g->ids_, "input_ids"},
                         {&g->positions_, "positions"},
                         {&g->rows_, "req_pool_indices"},
                         {&g->slots_, "out_cache_loc"}}) {
    MOEPROF_ASSIGN_OR_RETURN(*t, backend.empty(DType::kI32, 1, max_bs, AllocTag{name, "graph/inputs", Category::kGraph}));
  }
  g->max_bs_ = max_bs;
  if (model.routing_draw() != nullptr && !model.moe_layers().empty()) {
    const int64_t moe = static_cast<int64_t>(model.moe_layers().size());
    MOEPROF_ASSIGN_OR_RETURN(g->routed_ids_, backend.empty(DType::kI32, moe * max_bs, model.config().num_experts_per_tok,
                                                           AllocTag{"routed_ids", "graph/inputs", Category::kGraph}));
  }
  // Largest first, as SGLang captures: the smaller graphs then fit in what the larger ones freed.
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    const int64_t bs = *it;
    const std::string scope = "graph.bs" + std::to_string(bs);
    MOEPROF_RETURN_IF_ERROR(g->fill_inputs(bs, {}, {}, {}, {}, {}));
    backend.marker(scope, true);
    g->pool_.set_scope(scope);
    backend.set_graph_pool(&g->pool_);
    // Captured ops run at replay, not now: op timing (--op-times) leaves the capture out (and
    // must not copy to the host inside it).
    Backend::OpProfilePause no_op_times(backend);
    Status st = backend.begin_capture();
    Result<StepOutputs> out = Status::run_failure("not run");
    if (st.is_ok()) {
      out = model.step(g->inputs(bs, scope), kv, stats);
      auto handle = backend.end_capture();  // always ends a capture begun
      if (out.is_ok() && !handle.is_ok()) out = handle.status();
      if (out.is_ok()) {
        Graph gr;
        gr.bs = bs;
        gr.handle = std::move(handle).value();
        gr.logits = out.value().logits;
        out.value().hidden.reset();  // not an output the runner keeps: its block goes back to the pool
        g->captures_.push_back(GraphCapture{bs, 0, gr.logits.bytes()});
        g->graphs_.insert(g->graphs_.begin(), std::move(gr));
      }
    }
    backend.set_graph_pool(nullptr);
    backend.marker(scope, false);
    if (!st.is_ok()) return st.with_context("capturing the decode graph of batch size " + std::to_string(bs));
    if (!out.is_ok()) return out.status().with_context("capturing the decode graph of batch size " + std::to_string(bs));
    GraphCapture& c = g->captures_.back();
    c.pool_bytes_after = g->pool_.reserved_bytes();
    c.live_peak_bytes = g->pool_.scope_live_peak_bytes();
    c.live_at_peak = g->pool_.scope_live_at_peak();
    c.blocks = g->pool_.scope_blocks();
    c.own_peak_bytes = c.live_peak_bytes;
    for (const GraphPool::LiveBlock& b : c.live_at_peak)
      if (b.scope.rfind(scope + "/", 0) != 0) c.own_peak_bytes -= b.bytes;
    c.output_block_bytes = (c.output_bytes + GraphPool::kGranule - 1) / GraphPool::kGranule * GraphPool::kGranule;
    std::sort(c.live_at_peak.begin(), c.live_at_peak.end(), [](const GraphPool::LiveBlock& a, const GraphPool::LiveBlock& b) {
      if (a.bytes != b.bytes) return a.bytes > b.bytes;
      return std::tie(a.scope, a.name) < std::tie(b.scope, b.name);
    });
  }
  std::reverse(g->captures_.begin(), g->captures_.end());  // ascending, like graphs_
  return g;
}

Result<SharedPoolNeed> shared_pool_need(const std::vector<GraphCapture>& captures, std::vector<int64_t> sizes) {
  std::sort(sizes.rbegin(), sizes.rend());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  SharedPoolNeed n;
  uint64_t outputs = 0;  // of the larger graphs of the set, captured before
  for (int64_t bs : sizes) {
    auto it = std::find_if(captures.begin(), captures.end(), [&](const GraphCapture& c) { return c.bs == bs; });
    if (it == captures.end()) return Status::bad_input("no captured decode graph of batch size " + std::to_string(bs));
    if (it->own_peak_bytes + outputs > n.need_bytes || n.at_bs == 0) {
      n.need_bytes = it->own_peak_bytes + outputs;
      n.at_bs = bs;
      n.at_own_bytes = it->own_peak_bytes;
      n.at_outputs_bytes = outputs;
    }
    n.separate_bytes += it->own_peak_bytes;
    outputs += it->output_block_bytes;
  }
  return n;
}

DecodeGraphs::~DecodeGraphs() {
  // Outputs and graphs before the pool's segments, which the pool releases last.
  graphs_.clear();
}

uint64_t DecodeGraphs::input_bytes() const {
  uint64_t b = 0;
  for (const Tensor* t : {&ids_, &positions_, &rows_, &slots_, &routed_ids_})
    if (t->defined()) b += t->bytes();
  return b;
}

int64_t DecodeGraphs::size_for(int64_t batch) const {
  for (const Graph& g : graphs_)
    if (g.bs >= batch) return g.bs;
  return 0;
}

Result<std::vector<float>> DecodeGraphs::replay(int64_t size, const std::vector<int32_t>& ids,
                                                const std::vector<int32_t>& positions, const std::vector<int32_t>& rows,
                                                const std::vector<int32_t>& slots, const std::vector<uint64_t>& route_keys) {
  auto it = std::find_if(graphs_.begin(), graphs_.end(), [&](const Graph& g) { return g.bs == size; });
  if (it == graphs_.end() || static_cast<int64_t>(ids.size()) > size)
    return Status::bad_input("no captured decode graph of batch size " + std::to_string(size) + " holds " +
                             std::to_string(ids.size()) + " rows");
  MOEPROF_RETURN_IF_ERROR(fill_inputs(size, ids, positions, rows, slots, route_keys));
  const int64_t n = static_cast<int64_t>(ids.size()), vocab = it->logits.cols();
  std::vector<float> host(static_cast<size_t>(n * vocab));
  if (be_.captures_graphs()) {
    MOEPROF_RETURN_IF_ERROR(be_.replay_graph(it->handle));
    MOEPROF_RETURN_IF_ERROR(be_.copy_to_host(it->logits.rows_view(0, n), host.data()));
    return host;
  }
  // No stream capture here: compute what the graph computes, recording nothing.
  be_.set_unrecorded(true);
  MoeRunnerStats replayed;  // a replay makes no MoE call of its own on the GPU: not counted
  auto out = model_.step(inputs(size, "graph.bs" + std::to_string(size)), kv_, &replayed);
  Status st = out.is_ok() ? be_.copy_to_host(out.value().logits.rows_view(0, n), host.data()) : out.status();
  if (out.is_ok()) out = StepOutputs{};  // released while unrecorded
  be_.set_unrecorded(false);
  MOEPROF_RETURN_IF_ERROR(st);
  return host;
}

}  // namespace moeprof
