// HostRankGroup (executor/host_group.h): the collectives of real ranks on the CPU reference. Ranks
// are threads; inputs are random with odd sizes; the expected results are computed here from the
// inputs (the sum in rank order, the rows each rank sends each other rank). Also: CpuBackend's
// collectives through the group, mismatched counts failing on every rank alike, abort()
// releasing a rank that waits for one that never comes, and real TP ranks on the CPU.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "core/trace_io.h"
#include "executor/backends.h"
#include "executor/cpu_backend.h"
#include "executor/host_group.h"
#include "executor/run.h"
#include "executor/tp_run.h"
#include "kernels/common/fp_formats.h"

using namespace moeprof;

namespace {

// Runs f(rank) on n threads and returns each rank's status.
template <typename F>
std::vector<Status> on_ranks(int n, F f) {
  std::vector<Status> st(static_cast<size_t>(n));
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r) th.emplace_back([&, r] { st[static_cast<size_t>(r)] = f(r); });
  for (auto& t : th) t.join();
  return st;
}

}  // namespace

TEST_CASE("host group - all_reduce sums f32 and bf16 in rank order, the same on every rank", "[executor][host_group]") {
  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int n : {2, 3, 4}) {
    const size_t count = 1013;
    HostRankGroup g(n);
    std::vector<std::vector<float>> f(static_cast<size_t>(n), std::vector<float>(count));
    std::vector<std::vector<uint16_t>> h(static_cast<size_t>(n), std::vector<uint16_t>(count));
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) {
        f[static_cast<size_t>(r)][i] = u(rng);
        h[static_cast<size_t>(r)][i] = kern::f32_to_bf16(u(rng));
      }
    std::vector<float> want_f(count, 0.0f), want_hf(count, 0.0f);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) {
        want_f[i] += f[static_cast<size_t>(r)][i];
        want_hf[i] += kern::bf16_to_f32(h[static_cast<size_t>(r)][i]);
      }
    auto st = on_ranks(n, [&](int r) -> Status {
      MOEPROF_RETURN_IF_ERROR(g.all_reduce(r, f[static_cast<size_t>(r)].data(), count, DType::kF32));
      return g.all_reduce(r, h[static_cast<size_t>(r)].data(), count, DType::kBF16);
    });
    for (int r = 0; r < n; ++r) {
      INFO("n " << n << " rank " << r);
      REQUIRE(st[static_cast<size_t>(r)].is_ok());
      CHECK(std::memcmp(f[static_cast<size_t>(r)].data(), want_f.data(), count * 4) == 0);
      for (size_t i = 0; i < count; ++i)
        if (h[static_cast<size_t>(r)][i] != kern::f32_to_bf16(want_hf[i])) FAIL("bf16 element " << i);
    }
  }
}

TEST_CASE("host group - all_to_all delivers each rank's part to its destination, by source rank", "[executor][host_group]") {
  std::mt19937 rng(777);
  for (int n : {2, 3, 5}) {
    HostRankGroup g(n);
    // counts[s][d]: bytes s sends d (odd, some zero).
    std::vector<std::vector<size_t>> counts(static_cast<size_t>(n), std::vector<size_t>(static_cast<size_t>(n)));
    std::vector<std::vector<uint8_t>> send(static_cast<size_t>(n));
    for (int s = 0; s < n; ++s) {
      size_t total = 0;
      for (int d = 0; d < n; ++d) total += counts[static_cast<size_t>(s)][static_cast<size_t>(d)] = (rng() % 4 == 0) ? 0 : 1 + 2 * (rng() % 50);
      send[static_cast<size_t>(s)].resize(total);
      for (auto& b : send[static_cast<size_t>(s)]) b = static_cast<uint8_t>(rng());
    }
    std::vector<std::vector<uint8_t>> recv(static_cast<size_t>(n));
    std::vector<std::vector<size_t>> sb(static_cast<size_t>(n)), rb(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      size_t total = 0;
      for (int s = 0; s < n; ++s) {
        sb[static_cast<size_t>(r)].push_back(counts[static_cast<size_t>(r)][static_cast<size_t>(s)]);
        rb[static_cast<size_t>(r)].push_back(counts[static_cast<size_t>(s)][static_cast<size_t>(r)]);
        total += counts[static_cast<size_t>(s)][static_cast<size_t>(r)];
      }
      recv[static_cast<size_t>(r)].assign(total, 0xAB);
    }
    auto st = on_ranks(n, [&](int r) {
      return g.all_to_all(r, send[static_cast<size_t>(r)].data(), sb[static_cast<size_t>(r)], recv[static_cast<size_t>(r)].data(),
                          rb[static_cast<size_t>(r)]);
    });
    for (int r = 0; r < n; ++r) {
      INFO("n " << n << " rank " << r);
      REQUIRE(st[static_cast<size_t>(r)].is_ok());
      std::vector<uint8_t> want;
      for (int s = 0; s < n; ++s) {
        size_t off = 0;
        for (int d = 0; d < r; ++d) off += counts[static_cast<size_t>(s)][static_cast<size_t>(d)];
        const auto& src = send[static_cast<size_t>(s)];
        want.insert(want.end(), src.begin() + static_cast<long>(off),
                    src.begin() + static_cast<long>(off + counts[static_cast<size_t>(s)][static_cast<size_t>(r)]));
      }
      CHECK(recv[static_cast<size_t>(r)] == want);
    }
  }
}

TEST_CASE("host group - mismatched counts fail on every rank, and abort releases a waiting rank", "[executor][host_group]") {
  {
    HostRankGroup g(2);
    std::vector<uint8_t> a(10, 1), b(10, 2), ra(10), rbuf(10);
    std::vector<size_t> s0{0, 4}, r0{0, 3}, s1{3, 0}, r1{5, 0};  // rank 0 sends 4, rank 1 expects 5
    auto st = on_ranks(2, [&](int r) {
      return r == 0 ? g.all_to_all(0, a.data(), s0, ra.data(), r0) : g.all_to_all(1, b.data(), s1, rbuf.data(), r1);
    });
    for (const Status& s : st) {
      REQUIRE_FALSE(s.is_ok());
      CHECK(s.message() == "all_to_all: rank 0 sends 4 bytes to rank 1, which expects 5");
    }
  }
  {
    HostRankGroup g(3);
    std::vector<float> x(7, 1.0f);
    Status waiting;
    std::thread t([&] { waiting = g.all_reduce(0, x.data(), x.size(), DType::kF32); });  // ranks 1, 2 never come
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    g.abort();
    t.join();
    REQUIRE_FALSE(waiting.is_ok());
    CHECK(waiting.message() == "the rank group was aborted (another rank failed)");
    CHECK(g.aborted());
    CHECK_FALSE(g.all_reduce(1, x.data(), x.size(), DType::kF32).is_ok());  // later calls fail at once
  }
}

TEST_CASE("host group - CpuBackend's collectives: rows to their ranks, slices gathered, sums", "[executor][host_group]") {
  const int n = 3;
  const int64_t H = 37;
  HostRankGroup g(n);
  std::vector<std::unique_ptr<CpuBackend>> be;
  for (int r = 0; r < n; ++r) be.push_back(std::make_unique<CpuBackend>(1));
  for (int r = 0; r < n; ++r) be[static_cast<size_t>(r)]->attach_group(&g, r);
  // Rank s sends rows[s][d] rows to d; row values encode (source, destination, row).
  const std::vector<std::vector<int64_t>> rows = {{2, 0, 3}, {1, 4, 0}, {0, 2, 5}};
  auto val = [](int s, int d, int64_t i, int64_t c) { return kern::f32_to_bf16(float(s * 100 + d * 10) + float(i) + float(c) / 64.0f); };
  const std::vector<int64_t> slices = {3, 0, 4};  // an all-gather with an empty slice
  std::vector<std::vector<uint16_t>> got(n), gathered(n);
  auto st = on_ranks(n, [&](int r) -> Status {
    CpuBackend& b = *be[static_cast<size_t>(r)];
    if (!b.collectives_real() || b.collective_rank() != r || b.collective_size() != n) return Status::run_failure("not attached");
    std::vector<int64_t> sr(n), rr(n);
    int64_t ns = 0, nr = 0;
    for (int d = 0; d < n; ++d) {
      sr[static_cast<size_t>(d)] = rows[static_cast<size_t>(r)][static_cast<size_t>(d)];
      rr[static_cast<size_t>(d)] = rows[static_cast<size_t>(d)][static_cast<size_t>(r)];
      ns += sr[static_cast<size_t>(d)];
      nr += rr[static_cast<size_t>(d)];
    }
    MOEPROF_ASSIGN_OR_RETURN(Tensor send, b.empty(DType::kBF16, ns, H, AllocTag{"send", "t", Category::kCommunication}));
    MOEPROF_ASSIGN_OR_RETURN(Tensor recv, b.empty(DType::kBF16, nr + 1, H, AllocTag{"recv", "t", Category::kCommunication}));
    std::vector<uint16_t> host;
    for (int d = 0; d < n; ++d)
      for (int64_t i = 0; i < sr[static_cast<size_t>(d)]; ++i)
        for (int64_t c = 0; c < H; ++c) host.push_back(val(r, d, i, c));
    MOEPROF_RETURN_IF_ERROR(b.copy_from_host(send, host.data()));
    MOEPROF_RETURN_IF_ERROR(b.all_to_all_rows(send, sr, recv, rr));
    got[static_cast<size_t>(r)].resize(static_cast<size_t>((nr + 1) * H));
    MOEPROF_RETURN_IF_ERROR(b.copy_to_host(recv, got[static_cast<size_t>(r)].data()));
    // All-gather: rank p's slice holds p + row/8.
    MOEPROF_ASSIGN_OR_RETURN(Tensor t, b.empty(DType::kBF16, 7, H, AllocTag{"out", "t", Category::kActivation}));
    std::vector<uint16_t> mine(static_cast<size_t>(7 * H), 0xFFFF);  // NaN where another rank's slice goes
    int64_t first = 0;
    for (int p = 0; p < r; ++p) first += slices[static_cast<size_t>(p)];
    for (int64_t i = 0; i < slices[static_cast<size_t>(r)]; ++i)
      for (int64_t c = 0; c < H; ++c) mine[static_cast<size_t>((first + i) * H + c)] = kern::f32_to_bf16(float(r) + float(i) / 8.0f);
    MOEPROF_RETURN_IF_ERROR(b.copy_from_host(t, mine.data()));
    MOEPROF_RETURN_IF_ERROR(b.all_gather_rows(t, slices));
    gathered[static_cast<size_t>(r)].resize(mine.size());
    return b.copy_to_host(t, gathered[static_cast<size_t>(r)].data());
  });
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    REQUIRE(st[static_cast<size_t>(r)].is_ok());
    size_t at = 0;
    for (int s = 0; s < n; ++s)
      for (int64_t i = 0; i < rows[static_cast<size_t>(s)][static_cast<size_t>(r)]; ++i)
        for (int64_t c = 0; c < H; ++c) REQUIRE(got[static_cast<size_t>(r)][at++] == val(s, r, i, c));
    int64_t row = 0;
    for (int p = 0; p < n; ++p)
      for (int64_t i = 0; i < slices[static_cast<size_t>(p)]; ++i, ++row)
        for (int64_t c = 0; c < H; ++c)
          REQUIRE(gathered[static_cast<size_t>(r)][static_cast<size_t>(row * H + c)] == kern::f32_to_bf16(float(p) + float(i) / 8.0f));
  }
  // Without a group, one rank: counts for one rank only; its rows go to itself.
  CpuBackend lone(1);
  auto x = lone.empty(DType::kBF16, 2, H, AllocTag{"x", "t", Category::kActivation});
  REQUIRE(x.is_ok());
  auto status = lone.all_gather_rows(*x, {1, 1});
  REQUIRE_FALSE(status.is_ok());
  CHECK(status.message() == "all_gather_rows: rows has 2 counts for 1 ranks");
}

TEST_CASE("host group - real TP=2 on CPU ranks: rank 0 allocates what the emulated TP rank does, both end with one hidden state",
          "[executor][host_group]") {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("moeprof_host_group_tp_" + std::to_string(::getpid()));
  RunPlan plan;
  plan.model = "tiny";
  plan.tokens = 29;
  plan.tp = 2;
  plan.modes = {MemoryMode::kBaseline, MemoryMode::kReuse};
  plan.out_dir = (root / "real").string();
  auto real = execute_tp_run_plan(plan, 2, "cpu");
  INFO((real.is_ok() ? std::string() : real.status().message()));
  REQUIRE(real.is_ok());
  CHECK_FALSE(real->tp_emulated);
  REQUIRE(real->rank_modes.size() == 2);
  CHECK(real->outputs_identical);  // each rank's modes agree
  auto cpu = make_cpu_backend();
  plan.out_dir = (root / "emulated").string();
  auto emu = execute_run_plan(*cpu, plan);
  REQUIRE(emu.is_ok());
  REQUIRE(emu->tp_emulated);
  for (size_t m = 0; m < 2; ++m) {
    INFO("mode " << m);
    // The all-reduces really sum: after them both ranks hold the same hidden states.
    CHECK(real->rank_modes[0][m].output.hidden_hash == real->rank_modes[1][m].output.hidden_hash);
    // Rank 0's shapes and allocations are the emulated rank's (only the collectives differ).
    auto a = read_trace(real->rank_modes[0][m].trace_path);
    auto b = read_trace(emu->modes[m].trace_path);
    REQUIRE(a.is_ok());
    REQUIRE(b.is_ok());
    std::vector<std::string> sa, sb;
    for (const TraceRecord& r : a->records)
      if (r.kind == EventKind::kAlloc) sa.push_back(std::string(a->str(r.name_id)) + " " + std::to_string(r.bytes));
    for (const TraceRecord& r : b->records)
      if (r.kind == EventKind::kAlloc) sb.push_back(std::string(b->str(r.name_id)) + " " + std::to_string(r.bytes));
    CHECK(sa == sb);
    CHECK(real->rank_modes[0][m].accounting.peak_activation == emu->modes[m].accounting.peak_activation);
  }
  fs::remove_all(root);
}
