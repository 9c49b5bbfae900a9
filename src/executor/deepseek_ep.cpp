// The routed experts under expert parallelism (`moeprof run --ep N`, docs/executor.md "Expert
// parallelism"): rank ep_rank's buffers, through the backend. Emulated on one device, or real:
// with real ranks (Backend::collectives_real(), `--gpus N`: threads of CPU reference backends, or
// GPUs over NCCL) the rows travel by the backend's all-to-all and all-gather.
//
// Per MoE layer, with the routing of the whole batch known on the host (model/expert_parallel.h;
// with real ranks every rank computes the same router over the same rows):
//  dispatch (layer.L/moe/dispatch, communication): the rank's send buffer, its own token slice's
//    rows grouped by destination rank (S*k rows: every pair goes somewhere), released once sent;
//    the rows it receives (dispatch_recv [R, H] bf16), by source rank, with their local expert
//    indices;
//  experts (layer.L/moe/experts): the FP4 runner over the R received rows, each row one "token"
//    routed to one local expert (top-1 over E/N experts): quantized input, permutation, gemm1,
//    gemm2, as in routed_experts();
//  combine (layer.L/moe/combine, communication): the unweighted expert output of each received
//    row (combine_send [R, H]), the rows of its own slice's pairs back (combine_recv [S*k, H],
//    grouped by the rank they come from), then the weighted sum with the shared expert into the
//    slice's rows of the output, as moe_combine does with one rank; last, the all-gather of the
//    output's slices, so that every rank holds all T rows.
// With --ep-buffers worst-case every buffer sized by R is sized by W = ep_worst_rows instead.
// With exact buffers, a tensor sized by R carries its size at W as AllocTag::worst_bytes.
// Emulated, the rows that would cross the network are moved by gathers outside the trace, and the
// recorded ops (ep_dispatch, ep_combine, ep_all_gather) are the collectives' reads and writes:
// the recorded allocations and uses are those of a real rank, so that emulated and real per-rank
// peaks are equal to the byte.
//
// ModelOptions::ep_compute_all (the CPU reference, emulated): the other ranks' stages and combines
// run too, unrecorded, so the output is the model's: every row passes through the same per-row
// ops (quantize, gemm1, gemm2) as with one rank and is summed in the same order, so the outputs
// equal EP=1's bit for bit. Real ranks on the CPU reference give the same output (each rank holds
// its experts' values of the whole model: ModelOptions::ep_model_values).
#include <algorithm>

#include "executor/deepseek_weights.h"

namespace moeprof {

namespace {
// Another rank's work (on): no allocation is recorded, and no op's use of a recorded tensor.
struct Unrecorded {
  Backend& b;
  bool& quiet;
  bool was, was_quiet;
  Unrecorded(Backend& be, bool& q, bool on) : b(be), quiet(q), was(be.unrecorded()), was_quiet(q) {
    b.set_unrecorded(was || on);
    quiet = was_quiet || on;
  }
  ~Unrecorded() {
    b.set_unrecorded(was);
    quiet = was_quiet;
  }
};
}  // namespace

struct DeepseekModel::EpStage {
  EpReceive recv;
  int64_t buffered = 0;  // rows of the dispatch buffers (R exact, W worst-case)
  Tensor combine_send;   // [buffered, H]: row i = the expert output of received pair i
};

namespace {
// counts[s][d]: the pairs of slice s whose expert is on rank d (what s sends d in the dispatch).
std::vector<std::vector<int64_t>> ep_pair_counts(const std::vector<int32_t>& ids, int64_t T, int64_t k, int64_t E, int N) {
  std::vector<std::vector<int64_t>> c(static_cast<size_t>(N), std::vector<int64_t>(static_cast<size_t>(N), 0));
  const int64_t El = E / N;
  for (int s = 0; s < N; ++s) {
    const EpSlice sl = ep_token_slice(T, N, s);
    for (int64_t i = sl.begin * k; i < sl.end * k; ++i) ++c[static_cast<size_t>(s)][static_cast<size_t>(ids[static_cast<size_t>(i)] / El)];
  }
  return c;
}
}  // namespace

Status DeepseekModel::ep_expert_stage(int64_t l, int s, const Tensor& moe_in, const std::vector<int32_t>& host_ids,
                                      const std::vector<std::vector<int64_t>>& counts, Tensor* send,
                                      const std::function<Status()>* pack, MoeRunnerStats* stats, EpStage* st) {
  const LayerWeights& L = w_->layers[l];
  const int N = shape_.ep_size;
  // The batch's tokens; moe_in holds all of them, or with DP attention the rank's own from row0.
  const int64_t T = shape_.dp_attention ? shape_.batch_tokens : moe_in.rows(), row0 = shape_.dp_attention ? shape_.token_offset : 0,
                H = cfg_.hidden_size, E = cfg_.n_routed_experts, k = cfg_.num_experts_per_tok,
                I = shape_.moe_inter, El = E / N;
  const std::string base = plans_[l].scope + "/moe";
  const bool mine = s == shape_.ep_rank;
  const bool real = mine && be_.collectives_real();
  st->recv = ep_receive(host_ids.data(), T, k, E, N, s);
  const int64_t R = st->recv.rows(), W = ep_worst_rows(T, k, E, N);
  const bool exact = opt_.ep_buffers == EpBuffers::kExact;
  const int64_t Rb = exact ? R : W;
  st->buffered = Rb;
  // The runner's padded rows for Rb rows, and at W (the worst routing of the router's capacity).
  const int64_t tile = moe_tile_rows(std::max<int64_t>(Rb, 1), 1, El), tile_w = moe_tile_rows(W, 1, El);
  int64_t P = moe_bound_rows(Rb, 1, El, tile);
  const int64_t bound_w = moe_bound_rows(W, 1, El, tile_w);
  int64_t Pw = bound_w;
  if (opt_.moe_rows == MoeRows::kRouted) {
    Pw = moe_worst_rows(W, 1, El, tile_w);
    P = exact ? moe_routed_rows(expert_counts(st->recv.local_experts.data(), R, El), tile) : Pw;
  }
  // Exact buffers of a rank that received nothing: none is allocated; each is a worst-only tag of
  // its size at the worst case (below), so the peak under the worst routing counts them as a
  // worst-case run allocates them.
  const bool none = Rb == 0;
  if (none) P = 0;
  if (mine && stats != nullptr) {
    ++stats->calls;
    stats->rows_allocated += P;
    stats->rows_bound += bound_w;
    stats->rows_worst += Pw;
    stats->ep_rows_received += R;
    stats->ep_rows_buffered += Rb;
    stats->ep_rows_worst += W;
    stats->ep_max_rows_received = std::max(stats->ep_max_rows_received, R);
  }
  // What this rank sends each rank, and receives from each (rows): the dispatch's counts.
  std::vector<int64_t> send_rows(static_cast<size_t>(N)), recv_rows(static_cast<size_t>(N));
  for (int d = 0; d < N; ++d) {
    send_rows[static_cast<size_t>(d)] = counts[static_cast<size_t>(s)][static_cast<size_t>(d)];
    recv_rows[static_cast<size_t>(d)] = counts[static_cast<size_t>(d)][static_cast<size_t>(s)];
  }
  const Tensor no_send;
  const Tensor& send_t = send != nullptr ? *send : no_send;
  // A buffer sized by the received rows: rows_w, its rows at the worst case, gives its worst_bytes
  // (exact buffers); vec: a [1, n] vector of n_w elements at the worst case.
  const bool dd = sized_by_routing(exact);  // exact buffers follow the rows received
  // With nothing received (none), they are worst-only: no bytes, no trace record, their worst bytes
  // counted by the worst-routing accounting alone (AllocTag::worst_only).
  auto buf = [&](DType dt, int64_t rows, int64_t cols, int64_t rows_w, const std::string& name, const std::string& scope,
                 Category cat) {
    const uint64_t wb = rows == rows_w ? 0 : static_cast<uint64_t>(rows_w) * static_cast<uint64_t>(cols) * dtype_size(dt);
    return be_.empty(dt, rows, cols, AllocTag{name, scope_prefix_ + scope, cat, wb, dd, none && wb > 0});
  };
  auto vec = [&](DType dt, int64_t n, int64_t n_w, const std::string& name, const std::string& scope, Category cat) {
    const uint64_t wb = n == n_w ? 0 : static_cast<uint64_t>(n_w) * dtype_size(dt);
    return be_.empty(dt, 1, n, AllocTag{name, scope_prefix_ + scope, cat, wb, dd, none && wb > 0});
  };
  const Category comm = Category::kCommunication;
  const std::string ds = base + "/dispatch", es = base + "/experts", cs = base + "/combine";
  // dispatch: the received rows' local expert indices (padding rows: expert 0), and the rows.
  std::vector<int32_t> tok(static_cast<size_t>(Rb), -1), loc(static_cast<size_t>(Rb), 0);
  for (int64_t i = 0; i < R; ++i) {
    tok[static_cast<size_t>(i)] = static_cast<int32_t>(st->recv.pairs[static_cast<size_t>(i)] / k);
    loc[static_cast<size_t>(i)] = st->recv.local_experts[static_cast<size_t>(i)];
  }
  MOEPROF_ASSIGN_OR_RETURN(Tensor loc_ids, buf(DType::kI32, Rb, 1, W, "dispatch_expert_index", ds, comm));
  if (!none) MOEPROF_RETURN_IF_ERROR(be_.copy_from_host(loc_ids, loc.data()));
  MOEPROF_ASSIGN_OR_RETURN(Tensor recv, buf(DType::kBF16, Rb, H, W, "dispatch_recv", ds, comm));
  {
    // Padding rows (worst-case buffers) are zeros; emulated, every received row is token tok[i]'s
    // row, gathered outside the trace (the network). With DP attention another rank's rows are
    // not on this device: zeros (the emulated outputs are then not the model's).
    Unrecorded net(be_, ep_quiet_, true);
    const int64_t from = real ? R : 0;
    for (int64_t i = from; i < Rb; ++i) {
      int32_t& t = tok[static_cast<size_t>(i)];
      t = t >= row0 && t < row0 + moe_in.rows() ? static_cast<int32_t>(t - row0) : -1;
    }
    if (Rb > from) {
      MOEPROF_ASSIGN_OR_RETURN(Tensor tok_idx, act(DType::kI32, 1, Rb - from, "dispatch_token_index", ds, comm));
      MOEPROF_RETURN_IF_ERROR(be_.copy_from_host(tok_idx, tok.data() + from));
      Tensor dst = recv.rows_view(from, Rb - from);
      MOEPROF_RETURN_IF_ERROR(be_.embedding(tok_idx, moe_in, 0, dst));
    }
  }
  // This rank's send buffer, packed from moe_in (its last use: with the fixes, moe_in is released
  // there, and the gathers above were its last reads outside the trace).
  if (pack != nullptr) MOEPROF_RETURN_IF_ERROR((*pack)());
  // The all-to-all: this rank's slice out (grouped by destination), the rows of its experts in.
  MOEPROF_RETURN_IF_ERROR(op("ep_dispatch", real ? be_.all_to_all_rows(send_t, send_rows, recv, recv_rows) : Status::ok(), {&send_t},
                             {&recv}));
  if (send != nullptr) send->reset();  // sent

  // This rank's experts: its own tensors, or (another rank, ep_compute_all) its slice of all.
  auto rows = [&](const Tensor& all, int64_t per) { return all.rows_view(s * El * per, El * per); };
  const Tensor w13 = mine ? L.w13 : rows(L.all_w13, 2 * I), w13_sf = mine ? L.w13_scales : rows(L.all_w13_scales, 2 * I),
               w13_gs = mine ? L.w13_gs : L.rank_w13_gs[static_cast<size_t>(s)], w2 = mine ? L.w2 : rows(L.all_w2, H),
               w2_sf = mine ? L.w2_scales : rows(L.all_w2_scales, H), w2_gs = mine ? L.w2_gs : L.rank_w2_gs[static_cast<size_t>(s)];
  MOEPROF_ASSIGN_OR_RETURN(Tensor hs_fp4, buf(DType::kFP4x2, Rb, H / 2, W, "hs_fp4", es, Category::kActivation));
  MOEPROF_ASSIGN_OR_RETURN(Tensor hs_sf, buf(DType::kE4M3, Rb, H / 16, W, "hs_scales", es, Category::kActivation));
  if (!none)
    MOEPROF_RETURN_IF_ERROR(op("fp4_quantize", be_.fp4_quantize(recv, L.a_gs, hs_fp4, hs_sf), {&recv}, {&hs_fp4, &hs_sf}));
  MOEPROF_ASSIGN_OR_RETURN(Tensor offsets, none ? vec(DType::kI32, 0, El + 1, "expert_offsets", es, Category::kActivation)
                                                : act(DType::kI32, 1, El + 1, "expert_offsets", es));
  MOEPROF_ASSIGN_OR_RETURN(Tensor p2t, vec(DType::kI32, P, Pw, "permuted_to_token", es, Category::kActivation));
  MOEPROF_ASSIGN_OR_RETURN(Tensor e2p, buf(DType::kI32, Rb, 1, W, "expanded_to_permuted", es, Category::kActivation));
  // The permute workspace follows the rows too: counted at W's under the worst routing (with
  // nothing received, worst-only: the CUDA runner's workspace for 0 rows is not 0 bytes).
  Tensor perm_ws;
  const size_t ws = be_.moe_permute_workspace_bytes(Rb, 1, El), ws_w = be_.moe_permute_workspace_bytes(W, 1, El);
  if (ws > 0 || (none && ws_w > 0)) {
    const AllocTag tag{"permute_workspace", scope_prefix_ + es, Category::kWorkspace, none ? ws_w : (ws_w > ws ? ws_w : 0), dd, none};
    MOEPROF_ASSIGN_OR_RETURN(perm_ws, be_.empty(DType::kU8, 1, none ? 0 : static_cast<int64_t>(ws), tag));
  }
  const bool any = R > 0;  // worst-case buffers of a rank that received nothing: no compute
  Tensor ids_r = any ? loc_ids.rows_view(0, R) : Tensor(), e2p_r = any ? e2p.rows_view(0, R) : Tensor();
  if (any)
    MOEPROF_RETURN_IF_ERROR(op("moe_permute", be_.moe_permute(ids_r, El, tile, offsets, p2t, e2p_r, perm_ws), {&loc_ids},
                               {&offsets, &p2t, &e2p}));
  perm_ws.reset();
  MOEPROF_ASSIGN_OR_RETURN(Tensor g1, buf(DType::kFP4x2, P, I / 2, Pw, "gemm1_out_fp4", es, Category::kActivation));
  MOEPROF_ASSIGN_OR_RETURN(Tensor g1_sf, buf(DType::kE4M3, P, I / 16, Pw, "gemm1_out_scales", es, Category::kActivation));
  if (any)
    MOEPROF_RETURN_IF_ERROR(op("moe_gemm1_fp4",
                               be_.moe_gemm1_fp4(hs_fp4, hs_sf, L.a_gs, w13, w13_sf, w13_gs, offsets, p2t, L.h_gs, g1, g1_sf),
                               {&hs_fp4, &hs_sf, &offsets, &p2t}, {&g1, &g1_sf}));
  if (plans_[l].free_quantized_input_after_gemm1) {
    hs_fp4.reset();
    hs_sf.reset();
  }
  MOEPROF_ASSIGN_OR_RETURN(Tensor g2, buf(DType::kBF16, P, H, Pw, "gemm2_out", es, Category::kActivation));
  if (any)
    MOEPROF_RETURN_IF_ERROR(op("moe_gemm2_fp4", be_.moe_gemm2_fp4(g1, g1_sf, L.h_gs, w2, w2_sf, w2_gs, offsets, p2t, g2),
                               {&g1, &g1_sf, &offsets, &p2t}, {&g2}));
  // combine, send side: each received row's expert output, unweighted (the source weighs it).
  MOEPROF_ASSIGN_OR_RETURN(st->combine_send, buf(DType::kBF16, Rb, H, W, "combine_send", cs, comm));
  if (any) {
    Tensor send_r = st->combine_send.rows_view(0, R);
    MOEPROF_RETURN_IF_ERROR(op("ep_combine_send", be_.embedding(e2p_r, g2, 0, send_r), {&g2, &e2p}, {&st->combine_send}));
  }
  return Status::ok();  // the runner's buffers and the received rows are released here
}

Result<Tensor> DeepseekModel::ep_routed_experts(int64_t l, Tensor& moe_in, const Tensor& topk_w, const Tensor& shared_out,
                                                MoeRunnerStats* stats, const std::vector<int32_t>& host_ids) {
  const int N = shape_.ep_size, r = shape_.ep_rank;
  // The batch's T tokens: every rank's moe_in holds all of them, or with DP attention (dp) only its
  // own slice, from batch row row0 (the output then too: no all-gather).
  const bool dp = shape_.dp_attention;
  const int64_t Tloc = moe_in.rows(), T = dp ? shape_.batch_tokens : Tloc, row0 = dp ? shape_.token_offset : 0,
                H = cfg_.hidden_size, E = cfg_.n_routed_experts, k = cfg_.num_experts_per_tok;
  if (static_cast<int64_t>(host_ids.size()) != T * k)
    return Status::bad_input("moe: " + std::to_string(host_ids.size()) + " routed ids for " + std::to_string(T) + " tokens x " +
                             std::to_string(k));
  if (dp && (ep_token_slice(T, N, r).begin != row0 || ep_token_slice(T, N, r).size() != Tloc))
    return Status::bad_input("moe: DP rank " + std::to_string(r) + " holds tokens [" + std::to_string(row0) + ", " +
                             std::to_string(row0 + Tloc) + ") of " + std::to_string(T) + ", not its slice");
  const std::string base = plans_[l].scope + "/moe";
  const std::string ds = base + "/dispatch", cs = base + "/combine";
  for (int32_t e : host_ids)
    if (e < 0 || e >= E) return Status::bad_input("moe: expert id " + std::to_string(e) + " outside [0, " + std::to_string(E) + ")");
  const bool real = be_.collectives_real();
  if (real && (be_.collective_size() != N || be_.collective_rank() != r))
    return Status::bad_input("moe: EP rank " + std::to_string(r) + " of " + std::to_string(N) + " on a backend that is rank " +
                             std::to_string(be_.collective_rank()) + " of " + std::to_string(be_.collective_size()));
  const bool all = opt_.ep_compute_all && !real && !dp;

  // The output, [T, H] (every slice, after the all-gather; DP: the rank's own rows): the provided
  // buffer when it matches.
  MOEPROF_ASSIGN_OR_RETURN(Tensor out, moe_output_buffer(l, Tloc, base + "/experts", stats));
  const int64_t El = E / N;
  auto dest = [&](int64_t i) { return static_cast<int>(host_ids[static_cast<size_t>(i)] / El); };
  const auto counts = ep_pair_counts(host_ids, T, k, E, N);

  // dispatch, send side: the own slice's pairs grouped by destination rank, packed by this rank's
  // stage once its receive buffers are placed (pack). moe_in's last use is that pack: with the
  // fixes it is released there, before the experts run.
  const EpSlice mine = ep_token_slice(T, N, r);
  const int64_t Sk = mine.size() * k;
  Tensor send;
  const std::function<Status()> pack = [&]() -> Status {
    if (Sk > 0) {
      std::vector<int32_t> idx;
      idx.reserve(static_cast<size_t>(Sk));
      for (int d = 0; d < N; ++d)
        for (int64_t i = mine.begin * k; i < mine.end * k; ++i)
          if (dest(i) == d) idx.push_back(static_cast<int32_t>(i / k - row0));
      MOEPROF_ASSIGN_OR_RETURN(Tensor send_idx, act(DType::kI32, 1, Sk, "dispatch_send_index", ds, Category::kCommunication));
      MOEPROF_RETURN_IF_ERROR(be_.copy_from_host(send_idx, idx.data()));
      MOEPROF_ASSIGN_OR_RETURN(send, act(DType::kBF16, Sk, H, "dispatch_send", ds, Category::kCommunication));
      MOEPROF_RETURN_IF_ERROR(op("ep_dispatch_pack", be_.embedding(send_idx, moe_in, 0, send), {&moe_in, &send_idx}, {&send}));
    }
    if (plans_[l].free_mlp_input_after_use) moe_in.reset();  // its last use
    return Status::ok();
  };
  // Every rank's stage (the others only with ep_compute_all, unrecorded, first: they read moe_in,
  // which this rank's pack may release); this rank's releases the send buffer once its rows are sent.
  std::vector<EpStage> stages(static_cast<size_t>(N));
  for (int i = 1; i <= N; ++i) {
    const int s = (r + i) % N;  // this rank's own stage last
    if (s != r && !all) continue;
    Unrecorded u(be_, ep_quiet_, s != r);
    MOEPROF_RETURN_IF_ERROR(ep_expert_stage(l, s, moe_in, host_ids, counts, s == r ? &send : nullptr, s == r ? &pack : nullptr,
                                            s == r ? stats : nullptr, &stages[static_cast<size_t>(s)]));
  }

  // combine, receive side: slice s's pairs back from their ranks, grouped by the rank they come
  // from (in each group by ascending pair), then the weighted sum with the shared expert into the
  // slice's rows of the output. Slice r recorded; the others (ep_compute_all) unrecorded.
  auto combine_slice = [&](int s) -> Status {
    const bool own = s == r;
    Unrecorded u(be_, ep_quiet_, !own);
    const EpSlice sl = ep_token_slice(T, N, s);
    const int64_t n = sl.size() * k;
    if (n == 0) {  // a rank with no tokens still returns the rows it computed
      if (own) {
        std::vector<int64_t> back(static_cast<size_t>(N), 0), none(static_cast<size_t>(N), 0);
        for (int q = 0; q < N; ++q) back[static_cast<size_t>(q)] = counts[static_cast<size_t>(q)][static_cast<size_t>(r)];
        Tensor nothing;
        const Tensor& cs_r = stages[static_cast<size_t>(r)].combine_send;
        MOEPROF_RETURN_IF_ERROR(op("ep_combine", real ? be_.all_to_all_rows(cs_r, back, nothing, none) : Status::ok(), {&cs_r}, {}));
      }
      return Status::ok();
    }
    const auto& cnt = counts[static_cast<size_t>(s)];
    std::vector<int64_t> group(static_cast<size_t>(N), 0);  // first row of each source rank's group
    for (int d = 1; d < N; ++d) group[static_cast<size_t>(d)] = group[static_cast<size_t>(d - 1)] + cnt[static_cast<size_t>(d - 1)];
    std::vector<int32_t> rows(static_cast<size_t>(n));  // pair i's row in combine_recv
    {
      std::vector<int64_t> next = group;
      for (int64_t i = 0; i < n; ++i) rows[static_cast<size_t>(i)] = static_cast<int32_t>(next[static_cast<size_t>(dest(sl.begin * k + i))]++);
    }
    MOEPROF_ASSIGN_OR_RETURN(Tensor crecv, act(DType::kBF16, n, H, "combine_recv", cs, Category::kCommunication));
    const Tensor& cs_own = stages[static_cast<size_t>(own ? r : s)].combine_send;
    if (own && real) {
      // The way back: rank q's rows return to q (this rank received them grouped by source).
      std::vector<int64_t> back(static_cast<size_t>(N)), in(cnt.begin(), cnt.end());
      for (int q = 0; q < N; ++q) back[static_cast<size_t>(q)] = counts[static_cast<size_t>(q)][static_cast<size_t>(r)];
      MOEPROF_RETURN_IF_ERROR(op("ep_combine", be_.all_to_all_rows(cs_own, back, crecv, in), {&cs_own}, {&crecv}));
    } else {
      // Emulated: rows from rank d are a contiguous run of its combine_send (its slice-s group),
      // copied outside the trace; the rows of a rank not computed here are zeros.
      {
        Unrecorded net(be_, ep_quiet_, true);
        for (int d = 0; d < N; ++d) {
          const int64_t c = cnt[static_cast<size_t>(d)];
          if (c == 0) continue;
          const EpStage& sd = stages[static_cast<size_t>(d)];
          int64_t first = 0;  // where slice s's rows start among the rows rank d received
          for (int q = 0; q < s; ++q) first += counts[static_cast<size_t>(q)][static_cast<size_t>(d)];
          const bool have = sd.combine_send.defined() && (d == s || all);
          std::vector<int32_t> idx(static_cast<size_t>(c), -1);
          if (have)
            for (int64_t j = 0; j < c; ++j) idx[static_cast<size_t>(j)] = static_cast<int32_t>(first + j);
          MOEPROF_ASSIGN_OR_RETURN(Tensor idx_t, act(DType::kI32, 1, c, "combine_net_index", cs));
          MOEPROF_RETURN_IF_ERROR(be_.copy_from_host(idx_t, idx.data()));
          Tensor dst = crecv.rows_view(group[static_cast<size_t>(d)], c);
          const Tensor& table = have ? sd.combine_send : crecv;  // all -1 ids: zeros whatever the table
          MOEPROF_RETURN_IF_ERROR(be_.embedding(idx_t, table, 0, dst));
        }
      }
      MOEPROF_RETURN_IF_ERROR(op("ep_combine", Status::ok(), {&cs_own}, {&crecv}));
    }
    MOEPROF_ASSIGN_OR_RETURN(Tensor rows_idx, act(DType::kI32, 1, n, "combine_rows", cs));
    MOEPROF_RETURN_IF_ERROR(be_.copy_from_host(rows_idx, rows.data()));
    Tensor w = topk_w.rows_view(sl.begin - row0, sl.size());
    Tensor sh = shared_out.defined() ? shared_out.rows_view(sl.begin - row0, sl.size()) : Tensor();
    Tensor o = out.rows_view(sl.begin - row0, sl.size());
    MOEPROF_RETURN_IF_ERROR(op("moe_combine", be_.moe_combine(crecv, rows_idx, w, sh, o), {&crecv, &rows_idx, &topk_w, &shared_out},
                               {&out}));
    return Status::ok();
  };
  MOEPROF_RETURN_IF_ERROR(combine_slice(r));
  if (all)
    for (int s = 0; s < N; ++s)
      if (s != r) MOEPROF_RETURN_IF_ERROR(combine_slice(s));
  // The output's other slices come from the other ranks: an all-gather (emulated: the rows are
  // there already with ep_compute_all, and are not computed otherwise). DP attention: each rank
  // keeps its own rows.
  if (dp) return out;
  if (!real && !all) {
    // Emulated without the other ranks' computation (the CUDA and meta backends): their slices'
    // rows are not computed here. Zeros, outside the trace, so that they do not hold whatever the
    // buffer held before: a fresh block in one mode, the previous layer's hidden states in the
    // reuse mode, which had made the modes' outputs differ on a GPU.
    Unrecorded quiet(be_, ep_quiet_, true);
    for (int s = 0; s < N; ++s) {
      const EpSlice sl = ep_token_slice(T, N, s);
      if (s == r || sl.size() == 0) continue;
      const std::vector<int32_t> none(static_cast<size_t>(sl.size()), -1);  // no row: zeros whatever the table
      MOEPROF_ASSIGN_OR_RETURN(Tensor idx_t, act(DType::kI32, 1, sl.size(), "ep_zero_index", cs));
      MOEPROF_RETURN_IF_ERROR(be_.copy_from_host(idx_t, none.data()));
      Tensor o = out.rows_view(sl.begin - row0, sl.size());
      MOEPROF_RETURN_IF_ERROR(be_.embedding(idx_t, out, 0, o));
    }
  }
  std::vector<int64_t> slice_rows(static_cast<size_t>(N));
  for (int s = 0; s < N; ++s) slice_rows[static_cast<size_t>(s)] = ep_token_slice(T, N, s).size();
  MOEPROF_RETURN_IF_ERROR(op("ep_all_gather", real ? be_.all_gather_rows(out, slice_rows) : Status::ok(), {&out}, {&out}));
  return out;
}

}  // namespace moeprof
