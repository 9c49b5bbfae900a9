// Size laws (planner/fit.h) on synthetic programs with known laws: linear, quadratic, growing with
// the context, data-dependent, a regime at small sizes; confirmed against unconfirmed; predictions
// checked to the byte against the program built at the predicted size; mismatched programs.
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <random>

#include "core/trace_io.h"

#include "planner/analysis.h"
#include "planner/fit.h"
#include "tests/planner/trace_builder.h"

using namespace moeprof;
using namespace moeprof::planner;
using moeprof::planner::testing::TraceBuilder;
using exact::i128;
using exact::Q;

namespace {

struct Program {
  bool quad3 = false;      // the quadratic site has all three coefficients (2 T^2 + 3 T + 5)
  bool context = false;    // a site of 4 x T x L bytes (T = chunk, L = context)
  bool random = false;     // a site of random bytes in [1000, 5000]
  bool regime = false;     // a site of 8 T + 24 (tile - 1) bytes, tile = clamp(next_pow2(T / 16), 8, 64)
  bool stacks = false;     // unnamed allocations known by their call stack
  int layers = 3;
};

int64_t tile(int64_t t) {
  int64_t p = 8;
  while (p < t / 16 && p < 64) p <<= 1;
  return p;
}

// One run of the program at chunk T, context L. Random sizes differ per seed.
Trace build(const Program& p, int64_t T, int64_t L = 0, uint64_t seed = 1) {
  TraceBuilder b("run");
  b.trace.meta.tokens = T;
  std::mt19937_64 rng(seed * 7919 + static_cast<uint64_t>(T));
  uint64_t ts = 1, addr = 0x1000;
  auto alloc = [&](uint64_t bytes, Category c, const std::string& scope, const std::string& name) {
    addr += 0x100000000ull;
    TraceRecord& r = b.alloc(ts++, addr, bytes, c, scope, p.stacks ? "" : name);
    if (p.stacks) {
      const uint32_t f = b.trace.stacks.intern_frame(StackFrame{b.trace.strings.intern(name), b.trace.strings.intern("model.py"), 42, FrameKind::kPython});
      r.stack_id = b.trace.stacks.intern_stack({f});
    }
    return addr;
  };
  const uint64_t w = alloc(1'000'003, Category::kWeights, "model", "weights");
  const uint64_t kv = alloc(74 * static_cast<uint64_t>(T), Category::kKvCache, "model", "kv_cache");
  for (int l = 0; l < p.layers; ++l) {
    const std::string s = "layer." + std::to_string(l);
    const uint64_t x = alloc(100 * T + 64, Category::kActivation, s, "lin");
    const uint64_t q = alloc(p.quad3 ? 2 * T * T + 3 * T + 5 : 2 * T * T + 3 * T, Category::kActivation, s, "quad");
    uint64_t r = 0, c = 0, g = 0;
    if (p.random) r = alloc(1000 + rng() % 4001, Category::kActivation, s, "routed");
    b.free(ts++, q);
    const uint64_t y = alloc(7 * T + 13, Category::kWorkspace, s, "ws");
    if (p.context) c = alloc(4 * static_cast<uint64_t>(T) * static_cast<uint64_t>(L), Category::kActivation, s, "scores");
    if (p.regime) g = alloc(static_cast<uint64_t>(8 * T + 24 * (tile(T) - 1)), Category::kActivation, s, "padded");
    b.free(ts++, x);
    b.free(ts++, y);
    if (c) b.free(ts++, c);
    if (r) b.free(ts++, r);
    if (g) b.free(ts++, g);
  }
  b.free(ts++, kv);
  b.free(ts++, w);
  return b.trace;
}

RunAnalysis analyzed(const Trace& t) {
  AnalyzeOptions o;
  o.keep_lifetimes = true;
  o.findings = false;
  return analyze(t, o);
}

struct Fitted {
  std::vector<RunAnalysis> runs;
  FitResult fit;
};

Fitted fit_program(const Program& p, const std::vector<int64_t>& T, const std::vector<int64_t>& L = {}) {
  Fitted f;
  for (size_t i = 0; i < T.size(); ++i) f.runs.push_back(analyzed(build(p, T[i], L.empty() ? 0 : L[i], i + 1)));
  std::vector<const RunAnalysis*> ptrs;
  for (const auto& r : f.runs) ptrs.push_back(&r);
  std::vector<FitVariable> vars = {{L.empty() ? "tokens" : "chunk", "", T}};
  if (!L.empty()) vars.push_back({"context", "", L});
  auto r = fit_size_laws(ptrs, vars);
  REQUIRE(r.is_ok());
  f.fit = std::move(r).value();
  return f;
}

const SizeLaw& law_of(const FitResult& f, const std::string& name, int layer = 0) {
  for (const auto& s : f.sites)
    if (f.name_of(s) == name && f.scope_of(s) == (name == "weights" || name == "kv_cache" ? "model" : "layer." + std::to_string(layer)))
      return f.laws[s.law];
  FAIL("no site " << name);
  return f.laws.at(0);
}

void require_exact(const FitResult& fit, const Trace& actual, const std::vector<int64_t>& at) {
  const RunAnalysis a = analyzed(actual);
  auto p = predict_peak(fit, at);
  REQUIRE(p.is_ok());
  CHECK(p->peak_activation_bytes == a.peak_activation_bytes);
  CHECK(p->peak_total_bytes == a.peak_total_bytes);
}

}  // namespace

TEST_CASE("exact arithmetic - rationals, monomials, the solve, overflow", "[planner][fit]") {
  Q a, b, c;
  REQUIRE(exact::make_q(14, -4, &a));
  CHECK(a.num == -7);
  CHECK(a.den == 2);
  REQUIRE(exact::make_q(1, 3, &b));
  REQUIRE(exact::add(a, b, &c));
  CHECK(exact::to_string(c) == "-19/6");
  CHECK(exact::to_string(static_cast<i128>(180633600), true) == "180,633,600");
  CHECK(exact::to_string(-static_cast<i128>(1000), true) == "-1,000");
  const auto m2 = exact::monomials(2, 2);
  REQUIRE(m2.size() == 6);  // 1, a, b, a^2, ab, b^2
  CHECK(m2[3].exp[0] == 2);
  CHECK((m2[4].exp[0] == 1 && m2[4].exp[1] == 1));
  CHECK(m2[5].exp[1] == 2);
  CHECK(exact::monomials(3, 2).size() == 10);
  // 6 y = 21 x - 2 at x = 2, 8, 14 over the columns (6, 6 x): y = 7/2 x - 1/3, exactly.
  std::vector<std::vector<i128>> A = {{6, 12}, {6, 48}, {6, 84}};
  std::vector<i128> y = {21 * 2 - 2, 21 * 8 - 2, 21 * 14 - 2};
  std::vector<Q> sol;
  REQUIRE(exact::solve(A, y, &sol) == exact::SolveStatus::kSolved);
  CHECK(exact::to_string(sol[0]) == "-1/3");
  CHECK(exact::to_string(sol[1]) == "7/2");
  y[2] += 1;
  CHECK(exact::solve(A, y, &sol) == exact::SolveStatus::kInconsistent);
  CHECK(exact::solve({{1, 5}, {1, 5}}, {3, 3}, &sol) == exact::SolveStatus::kUnderdetermined);
  i128 big = static_cast<i128>(1) << 100, out;
  CHECK_FALSE(exact::checked_mul(big, big, &out));
  CHECK_FALSE(exact::mul(Q{big, 1}, Q{big, 3}, &a));
}

TEST_CASE("fit - linear, quadratic and constant sites confirmed, the peak predicted to the byte", "[planner][fit]") {
  Program p;
  Fitted f = fit_program(p, {37, 61, 97, 150});
  REQUIRE(f.fit.same_sequence);
  CHECK(f.fit.unconfirmed_sites == 0);
  CHECK(f.fit.none_sites == 0);
  CHECK(f.fit.sites.size() == 2 + 3 * 3);
  const auto& lin = law_of(f.fit, "lin");
  CHECK(lin.state == LawState::kConfirmed);
  CHECK(law_formula(lin, f.fit.variables) == "100 * T + 64");
  const auto& quad = law_of(f.fit, "quad", 2);
  CHECK(quad.state == LawState::kConfirmed);
  CHECK(quad.degree == 2);
  CHECK(law_formula(quad, f.fit.variables) == "2 * T^2 + 3 * T");
  CHECK(law_formula(law_of(f.fit, "weights"), f.fit.variables) == "1,000,003");
  CHECK(law_formula(law_of(f.fit, "kv_cache"), f.fit.variables) == "74 * T");
  CHECK(law_formula(law_of(f.fit, "ws"), f.fit.variables) == "7 * T + 13");
  CHECK(f.fit.size_granularity == 1);
  // The measured peaks come back, and sizes never run are exact, large and small.
  for (size_t t = 0; t < f.runs.size(); ++t) {
    auto back = predict_peak(f.fit, {f.fit.variables[0].values[t]});
    REQUIRE(back.is_ok());
    CHECK(back->peak_activation_bytes == f.runs[t].peak_activation_bytes);
  }
  for (int64_t T : {1, 5, 1001, 123457}) require_exact(f.fit, build(p, T), {T});
  auto pr = predict_peak(f.fit, {1001});
  REQUIRE(pr.is_ok());
  CHECK_FALSE(pr->unconfirmed);
  CHECK_FALSE(pr->bounded);
  // Pruning keeps fewer positions than there are.
  CHECK(f.fit.activation_candidates.size() < f.fit.candidate_positions);
}

TEST_CASE("fit - a law with as many coefficients as sizes is unconfirmed, and so are the predictions on it", "[planner][fit]") {
  Program p;
  p.quad3 = true;
  Fitted three = fit_program(p, {37, 61, 150});
  const auto& q3 = law_of(three.fit, "quad");
  CHECK(q3.state == LawState::kUnconfirmed);
  CHECK(law_formula(q3, three.fit.variables) == "2 * T^2 + 3 * T + 5");
  CHECK(q3.note.find("unconfirmed") != std::string::npos);
  CHECK(law_of(three.fit, "lin").state == LawState::kConfirmed);
  auto p3 = predict_peak(three.fit, {999});
  REQUIRE(p3.is_ok());
  CHECK(p3->unconfirmed);
  CHECK(p3->unconfirmed_sites_at_peak >= 1);
  Fitted four = fit_program(p, {37, 61, 97, 150});
  CHECK(law_of(four.fit, "quad").state == LawState::kConfirmed);
  auto p4 = predict_peak(four.fit, {999});
  REQUIRE(p4.is_ok());
  CHECK_FALSE(p4->unconfirmed);
  CHECK(p4->peak_activation_bytes == p3->peak_activation_bytes);
  require_exact(four.fit, build(p, 999), {999});
}

TEST_CASE("fit - a site growing with the context, and where it exhausts a budget", "[planner][fit]") {
  Program p;
  p.context = true;
  const std::vector<int64_t> C = {64, 128, 64, 200, 96}, L = {1000, 1000, 3000, 5000, 7001};
  Fitted f = fit_program(p, C, L);
  REQUIRE(f.fit.same_sequence);
  const auto& sc = law_of(f.fit, "scores", 1);
  CHECK(sc.state == LawState::kConfirmed);
  CHECK(law_formula(sc, f.fit.variables) == "4 * C * L");
  CHECK(sc.uses(1));
  CHECK_FALSE(law_of(f.fit, "lin").uses(1));
  CHECK(law_formula(law_of(f.fit, "lin"), f.fit.variables) == "100 * C + 64");
  require_exact(f.fit, build(p, 256, 100000), {256, 100000});
  require_exact(f.fit, build(p, 33, 77), {33, 77});
  // Alone, the site exceeds 1e9 B at the first L with 4 x 200 x L > 1e9.
  const uint64_t budget = 1'000'000'000;
  CHECK(law_exceeds_at(sc, {200, 1}, 1, budget) == static_cast<int64_t>(budget / 800 + 1));
  // The whole peak: the largest context within the budget, checked against built programs.
  auto s = solve_budget(f.fit, budget, 1, {200, 0});
  REQUIRE(s.is_ok());
  CHECK_FALSE(s->unbounded);
  CHECK(analyzed(build(p, 200, s->largest)).peak_activation_bytes <= budget);
  CHECK(analyzed(build(p, 200, s->largest + 1)).peak_activation_bytes > budget);
}

TEST_CASE("fit - data-dependent sites get a range and a bound, and the prediction says it is one", "[planner][fit]") {
  Program p;
  p.random = true;
  const std::vector<int64_t> T = {37, 61, 97, 150, 211};
  Fitted f = fit_program(p, T);
  const auto& r = law_of(f.fit, "routed");
  REQUIRE(r.state == LawState::kNone);
  CHECK(r.min_bytes >= 1000);
  CHECK(r.max_bytes <= 5000);
  i128 per = 0;
  for (size_t i = 0; i < T.size(); ++i) per = std::max(per, exact::ceil_div(static_cast<i128>(r.values[i]), T[i]));
  CHECK(r.bound_per_unit == per);
  CHECK(law_formula(r, f.fit.variables).rfind("<= ", 0) == 0);
  CHECK(r.note.find("data-dependent") != std::string::npos);
  auto pr = predict_peak(f.fit, {400});
  REQUIRE(pr.is_ok());
  CHECK(pr->bounded);
  for (uint64_t seed : {11u, 12u, 13u}) CHECK(pr->peak_activation_bytes >= analyzed(build(p, 400, 0, seed)).peak_activation_bytes);
}

TEST_CASE("fit - a regime above a size: unconfirmed from three sizes, confirmed and exact with a fourth", "[planner][fit]") {
  Program p;
  p.regime = true;
  // tile(256) = 16, then 64: the padded site is 8 T + 1,512 from T = 1,024 on.
  Fitted three = fit_program(p, {256, 1024, 2048});
  const auto& g3 = law_of(three.fit, "padded");
  CHECK(g3.state == LawState::kUnconfirmed);
  CHECK(g3.regime_min == 1024);
  REQUIRE(g3.off_law.size() == 1);
  CHECK(g3.off_law[0] == 0);
  CHECK(law_formula(g3, three.fit.variables) == "8 * T + 1,512");
  CHECK(g3.note.find("negative") != std::string::npos);  // the quadratic through all three is concave
  CHECK(g3.note.find("T = 4,096") != std::string::npos);  // the size that confirms it
  auto below = predict_peak(three.fit, {512});
  REQUIRE_FALSE(below.is_ok());
  CHECK(below.status().message().find("regime") != std::string::npos);
  auto p3 = predict_peak(three.fit, {100000});
  REQUIRE(p3.is_ok());
  CHECK(p3->unconfirmed);
  Fitted four = fit_program(p, {256, 1024, 2048, 4096});
  const auto& g4 = law_of(four.fit, "padded");
  CHECK(g4.state == LawState::kConfirmed);
  CHECK(g4.regime_min == 1024);
  require_exact(four.fit, build(p, 100000), {100000});
  require_exact(four.fit, build(p, 1500), {1500});
  // Without regimes the site has no law.
  std::vector<const RunAnalysis*> ptrs;
  for (const auto& r : four.runs) ptrs.push_back(&r);
  FitOptions no;
  no.regimes = false;
  auto nr = fit_size_laws(ptrs, {{"tokens", "", {256, 1024, 2048, 4096}}}, no);
  REQUIRE(nr.is_ok());
  CHECK(law_of(*nr, "padded").state == LawState::kNone);
}

TEST_CASE("fit - the budget solve gives the largest size whose peak fits", "[planner][fit]") {
  Program p;
  Fitted f = fit_program(p, {37, 61, 97, 150});
  for (uint64_t budget : {uint64_t{2'000'000}, uint64_t{987'654'321}}) {
    auto s = solve_budget(f.fit, budget, 0, {0});
    REQUIRE(s.is_ok());
    REQUIRE_FALSE(s->none_fits);
    CHECK(s->at_largest.peak_activation_bytes <= budget);
    CHECK(s->above.peak_activation_bytes > budget);
    CHECK(analyzed(build(p, s->largest)).peak_activation_bytes <= budget);
    CHECK(analyzed(build(p, s->largest + 1)).peak_activation_bytes > budget);
  }
  auto tiny = solve_budget(f.fit, 10, 0, {0});
  REQUIRE(tiny.is_ok());
  CHECK(tiny->none_fits);
}

TEST_CASE("fit - traced programs match unnamed allocations by their call stack", "[planner][fit]") {
  Program p;
  p.stacks = true;
  Fitted f = fit_program(p, {37, 61, 97});
  REQUIRE(f.fit.same_sequence);
  bool found = false;
  for (const auto& s : f.fit.sites)
    if (f.fit.name_of(s).find("lin") != std::string::npos && f.fit.name_of(s).find("model.py:42") != std::string::npos) {
      found = true;
      CHECK(law_formula(f.fit.laws[s.law], f.fit.variables) == "100 * T + 64");
    }
  CHECK(found);
  require_exact(f.fit, build(p, 500), {500});
}

TEST_CASE("fit - traces of different programs: sites in some only, no prediction, bad variables refused", "[planner][fit]") {
  Program p, q;
  q.layers = 4;
  std::vector<RunAnalysis> runs = {analyzed(build(p, 37)), analyzed(build(p, 61)), analyzed(build(q, 97))};
  std::vector<const RunAnalysis*> ptrs = {&runs[0], &runs[1], &runs[2]};
  auto r = fit_size_laws(ptrs, {{"tokens", "", {37, 61, 97}}});
  REQUIRE(r.is_ok());
  CHECK_FALSE(r->same_sequence);
  CHECK(r->partial.size() == 3);  // the three allocations of layer.3
  CHECK(r->partial[0].traces == std::vector<size_t>{2});
  auto pr = predict_peak(*r, {200});
  REQUIRE_FALSE(pr.is_ok());
  CHECK(pr.status().message().find("not one program") != std::string::npos);
  // Same sites, another order: refused too.
  Trace swapped = build(p, 97);
  std::swap(swapped.records[3].timestamp_ns, swapped.records[4].timestamp_ns);
  std::swap(swapped.records[3].seq, swapped.records[4].seq);
  std::vector<RunAnalysis> runs2 = {analyzed(build(p, 37)), analyzed(build(p, 61)), analyzed(swapped)};
  auto r2 = fit_size_laws({&runs2[0], &runs2[1], &runs2[2]}, {{"tokens", "", {37, 61, 97}}});
  REQUIRE(r2.is_ok());
  CHECK_FALSE(r2->same_sequence);
  CHECK(r2->sequence_note.find("event") != std::string::npos);
  // Variables: one value per trace, not constant, 1 to 3 of them.
  CHECK_FALSE(fit_size_laws(ptrs, {{"tokens", "", {37, 61}}}).is_ok());
  CHECK_FALSE(fit_size_laws(ptrs, {{"tokens", "", {5, 5, 5}}}).is_ok());
  CHECK_FALSE(fit_size_laws({ptrs[0]}, {{"tokens", "", {37}}}).is_ok());
}

namespace {

// The trace as fit reads it straight from the file, and as the analysis gives it: the same.
void require_same_read(const Trace& t, const std::string& tag) {
  const std::string path = (std::filesystem::temp_directory_path() / ("fit_read_" + tag + ".mtrace")).string();
  REQUIRE(write_trace(path, t).is_ok());
  bool full = true;
  auto direct = read_size_trace(path, &full);
  REQUIRE(direct.is_ok());
  REQUIRE_FALSE(full);
  auto back = read_trace(path);
  REQUIRE(back.is_ok());
  auto via = size_trace(analyzed(back.value()));
  REQUIRE(via.is_ok());
  REQUIRE(direct->allocs.size() == via->allocs.size());
  for (size_t i = 0; i < via->allocs.size(); ++i) {
    const auto &x = direct->allocs[i], &y = via->allocs[i];
    CHECK(direct->strings[x.name] == via->strings[y.name]);
    CHECK(direct->strings[x.scope] == via->strings[y.scope]);
    CHECK(x.device == y.device);
    CHECK(x.category == y.category);
    CHECK(x.bytes == y.bytes);
    CHECK(x.address == y.address);
  }
  CHECK(direct->events == via->events);
  CHECK(direct->peak_activation_bytes == via->peak_activation_bytes);
  CHECK(direct->peak_total_bytes == via->peak_total_bytes);
  CHECK(direct->meta.tokens == t.meta.tokens);
  std::filesystem::remove(path);
}

}  // namespace

TEST_CASE("fit - traces read straight from the file replay as analyze() does", "[planner][fit]") {
  Program p;
  p.random = p.context = p.regime = true;
  require_same_read(build(p, 97, 300, 5), "program");
  // The replay's corner cases: an allocation over a live one, frees of unknown, null and freed
  // addresses, malloc(0) returning null, two devices, uses.
  TraceBuilder b("corners");
  b.trace.meta.tokens = 7;
  b.alloc(1, 0x100, 64, Category::kActivation, "s", "a");
  b.alloc(2, 0x100, 32, Category::kActivation, "s", "b");
  b.free(3, 0x999);
  b.free(4, 0);
  b.alloc(5, 0, 0, Category::kActivation, "s", "z");
  b.alloc(6, 0x200, 128, Category::kWeights, "m", "w", 1);
  b.free(7, 0x100);
  b.free(8, 0x100);
  b.use(9, 0x200, 1);
  b.alloc(10, 0x300, 77, Category::kWorkspace, "s", "c");
  b.alloc(11, 0x300, 5, Category::kWorkspace, "s", "d", 1);
  b.free(12, 0x300);
  b.free(13, 0x200, 1);
  require_same_read(b.trace, "corners");
  // What needs the whole analysis: records out of order, categories to infer, stack-named sites.
  const std::string path = (std::filesystem::temp_directory_path() / "fit_read_full.mtrace").string();
  Trace unordered = build(p, 50);
  std::swap(unordered.records[3].timestamp_ns, unordered.records[4].timestamp_ns);
  Trace unknown = build(p, 50);
  unknown.records[2].category = Category::kUnknown;
  Program sp;
  sp.stacks = true;
  for (const Trace& t : {unordered, unknown, build(sp, 50)}) {
    REQUIRE(write_trace(path, t).is_ok());
    bool full = false;
    auto r = read_size_trace(path, &full);
    REQUIRE(r.is_ok());
    CHECK(full);
  }
  std::filesystem::remove(path);
}
