// `moeprof fit` through the binary: the tiny model on the CPU backend at several sizes predicts a
// run it was not fitted on to the byte; the JSON contract; the regime of the MoE runner's padded
// rows; a budget solve checked by running its edge; mismatched programs and bad input refused.
#include <catch2/catch.hpp>

#include <cctype>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "core/trace_io.h"
#include "planner/analysis.h"
#include "tests/cli/cli_util.h"

namespace fs = std::filesystem;
using moeprof::testing::run_cli;

namespace {

// One baseline run of the tiny model on the CPU at `tokens`; its trace path (cached per size).
std::string tiny_trace(int64_t tokens, const std::string& backend = "cpu", const std::string& model = "tiny",
                       const std::string& extra = "") {
  static std::map<std::string, std::string> done;
  std::string tag = extra;
  for (char& c : tag)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  const std::string key = backend + model + std::to_string(tokens) + tag;
  if (auto it = done.find(key); it != done.end()) return it->second;
  const fs::path dir = moeprof::testing::temp_dir("fit_cli_" + key);
  auto r = run_cli("run --backend " + backend + " --model " + model + " --tokens " + std::to_string(tokens) +
                   " --mode baseline --quiet " + extra + " --out '" + dir.string() + "'");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  return done[key] = (dir / "baseline.mtrace").string();
}

moeprof::planner::RunAnalysis analysed(const std::string& path) {
  auto t = moeprof::read_trace(path);
  REQUIRE(t.is_ok());
  return moeprof::planner::analyze(t.value());
}

std::string traces(std::initializer_list<int64_t> sizes) {
  std::string s;
  for (int64_t t : sizes) s += " '" + tiny_trace(t) + "'";
  return s;
}

const nlohmann::json& law(const nlohmann::json& j, const std::string& site) {
  for (const auto& l : j["laws"])
    if (l["site"] == site) return l;
  FAIL("no law for " << site);
  return j;
}

}  // namespace

TEST_CASE("moeprof fit predicts a tiny CPU run it was not fitted on, to the byte", "[cli][fit]") {
  const auto actual = analysed(tiny_trace(1000));
  auto r = run_cli("fit" + traces({100, 140, 200, 300}) + " --at tokens=1000 --json");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["predictions"].size() == 1);
  const auto& p = j["predictions"][0];
  CHECK(p["variables"]["tokens"] == 1000);
  CHECK(p["peak_activation_bytes"].get<uint64_t>() == actual.peak_activation_bytes);
  CHECK(p["peak_total_bytes"].get<uint64_t>() == actual.peak_total_bytes);
  CHECK(p["unconfirmed"] == false);
  CHECK(j["same_event_sequence"] == true);
  // The moe_output law (T x hidden 256 x 2 B), and the padded rows above the tile's regime:
  // tile = clamp(next_pow2(T x 2 / 8), 8, 64) is 32 at T = 100 and 64 from T = 132 on.
  const auto& mo = law(j, "layer.1/moe/experts/moe_output");
  CHECK(mo["formula"] == "512 * T");
  CHECK(mo["text"] == "moe_output = 512 * T B");
  CHECK(mo["confirmed"] == true);
  REQUIRE(mo["coefficients"].size() == 1);
  CHECK(mo["coefficients"][0]["value"] == "512");
  CHECK(mo["coefficients"][0]["exponents"]["tokens"] == 1);
  const auto& g2 = law(j, "layer.1/moe/experts/gemm2_out");
  CHECK(g2["confirmed"] == true);
  CHECK(g2["regime"]["min"] == 140);
  // P = 2 T + 8 x 63 rows of 256 x 2 B.
  CHECK(g2["formula"] == "1,024 * T + 258,048");
  // Every site has a law; the measured sizes come back.
  CHECK(j["laws"].size() == j["sites"]["common"].get<size_t>());
  for (const auto& t : j["traces"])
    if (!t["predicted_peak_activation_bytes"].is_null()) CHECK(t["predicted_peak_activation_bytes"] == t["peak_activation_bytes"]);
  // The text names the law in a person's form.
  auto text = run_cli("fit" + traces({140, 200, 300}) + " --at tokens=1000");
  REQUIRE(text.rc == 0);
  CHECK(text.out.find("moe_output = 512 * T B") != std::string::npos);
}

TEST_CASE("moeprof fit: three sizes across the tile change leave the padded rows unconfirmed, and say which size confirms them", "[cli][fit]") {
  auto r = run_cli("fit" + traces({100, 140, 200}) + " --at tokens=1000 --json");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  const auto& g2 = law(j, "layer.1/moe/experts/gemm2_out");
  CHECK(g2["confirmed"] == false);
  CHECK(g2["state"] == "unconfirmed");
  const auto& detail = j["law_details"][g2["law"].get<size_t>()];
  CHECK(detail["law"] == g2["law"]);
  CHECK(detail["note"].get<std::string>().find("T = 400") != std::string::npos);
  CHECK(detail["sizes_used"] == 2);
  CHECK(j["predictions"][0]["unconfirmed"] == true);
  CHECK(j["predictions"][0]["peak_activation_bytes"].get<uint64_t>() == analysed(tiny_trace(1000)).peak_activation_bytes);
  // Below the regime: refused in one line.
  auto below = run_cli("fit" + traces({100, 140, 200}) + " --at tokens=120");
  CHECK(below.rc == 2);
  CHECK(moeprof::testing::count_lines(below.err) == 1);
  CHECK(below.err.find("regime") != std::string::npos);
}

TEST_CASE("moeprof fit --budget: the largest size, checked by running both sides of it", "[cli][fit]") {
  auto r = run_cli("fit" + traces({140, 200, 300}) + " --var tokens=140,200,300 --budget 3000000 --json");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  const int64_t largest = j["budget"]["largest"];
  REQUIRE(largest > 300);
  CHECK(analysed(tiny_trace(largest)).peak_activation_bytes <= 3'000'000u);
  CHECK(analysed(tiny_trace(largest + 1)).peak_activation_bytes > 3'000'000u);
}

TEST_CASE("moeprof fit refuses other programs and bad variables in one line", "[cli][fit]") {
  auto mixed = run_cli("fit '" + tiny_trace(140) + "' '" + tiny_trace(256, "meta", "deepseek-v2-lite") + "'");
  CHECK(mixed.rc == 2);
  CHECK(moeprof::testing::count_lines(mixed.err) == 1);
  CHECK(mixed.err.find("not one program") != std::string::npos);
  CHECK(mixed.err.rfind("moeprof fit: error: ", 0) == 0);
  auto count = run_cli("fit" + traces({140, 200}) + " --var tokens=1,2,3");
  CHECK(count.rc == 2);
  CHECK(moeprof::testing::count_lines(count.err) == 1);
  auto same = run_cli("fit" + traces({140, 200}) + " --var tokens=5,5");
  CHECK(same.rc == 2);
  CHECK(same.err.find("nothing to fit") != std::string::npos);
  auto one = run_cli("fit '" + tiny_trace(140) + "'");
  CHECK(one.rc == 2);
  auto missing = run_cli("fit" + traces({140}) + " /nonexistent.mtrace");
  CHECK(missing.rc == 2);
  CHECK(moeprof::testing::count_lines(missing.err) == 1);
  auto at = run_cli("fit" + traces({140, 200}) + " --at context=5");
  CHECK(at.rc == 2);
  CHECK(moeprof::testing::count_lines(at.err) == 1);
  // A size given twice would count as one more size confirming every law.
  const std::string t200 = tiny_trace(200);
  auto twice = run_cli("fit" + traces({140, 200}) + " '" + t200 + "'");
  CHECK(twice.rc == 2);
  CHECK(twice.err == "moeprof fit: error: " + t200 + " and " + t200 + " are at the same size (tokens = 200): give each size once\n");
  auto var_twice = run_cli("fit" + traces({140, 200}) + " --var tokens=140,200 --var tokens=1,2");
  CHECK(var_twice.rc == 2);
  CHECK(var_twice.err == "moeprof fit: error: --var tokens is given twice\n");
  auto routed = run_cli("fit" + traces({140}) + " '" + tiny_trace(200, "cpu", "tiny", "--routing worst --moe-rows routed") + "'");
  CHECK(routed.rc == 2);
  CHECK(routed.err.find("are not one program (MoE rows bound vs routed)") != std::string::npos);
  for (const char* out : {"--out-json -", "--out-md -"}) {
    auto both = run_cli("fit" + traces({140, 200}) + " --json " + out);
    CHECK(both.rc == 2);
    CHECK(both.err == "moeprof fit: error: --json prints on stdout: give the --out-* options a file, not \"-\"\n");
  }
  auto zero = run_cli("fit" + traces({140, 200}) + " --at tokens=0");
  CHECK(zero.rc == 2);
  CHECK(zero.err == "moeprof fit: error: --at tokens=0: a size is at least 1\n");
  auto degree = run_cli("fit" + traces({140, 200}) + " --max-degree 0");
  CHECK(degree.rc == 2);
  auto big = run_cli("fit" + traces({140, 200}) + " --at tokens=1152921504606846976");
  CHECK(big.rc == 2);
  CHECK(big.err.find("is above the largest size a fit takes, 10^18 - 1") != std::string::npos);
}

TEST_CASE("moeprof fit finds a serving run's context length in its traces' metadata", "[cli][fit][serving]") {
  std::string ts;
  for (int L : {4099, 8191, 16411}) {
    const fs::path dir = moeprof::testing::temp_dir("fit_cli_context_" + std::to_string(L));
    REQUIRE(run_cli("run --backend meta --model tiny --workload synthetic:3,40,4 --chunked-prefill-size 32 --kv-tokens 256 --context-length " +
                    std::to_string(L) + " --mode baseline --quiet -o '" + dir.string() + "'")
                .rc == 0);
    ts += " '" + (dir / "baseline.mtrace").string() + "'";
  }
  auto r = run_cli("fit" + ts + " --json");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["variables"].size() == 1);
  CHECK(j["variables"][0]["name"] == "context");
  // SGLang's request table: (max requests + 1) rows of (context + 4) int32.
  CHECK(law(j, "kv_pool/req_to_token")["confirmed"] == true);
}

TEST_CASE("moeprof fit on routed rows: the worst routing follows exact laws within one residue of the tile", "[cli][fit][routing]") {
  auto routed = [](std::initializer_list<int64_t> sizes, const std::string& routing) {
    std::string s;
    for (int64_t t : sizes) s += " '" + tiny_trace(t, "meta", "tiny", "--routing " + routing + " --moe-rows routed") + "'";
    return s;
  };
  // Under the worst routing of the router's capacity, an expert's padded rows are a law of the
  // tokens only among sizes of one residue: the worst puts tile-1 padding rows on every expert
  // only where T*k - E is a multiple of the tile (tiny: k 2, E 8, tile 64 from T = 132 on, so
  // T = 4 mod 32). Sizes of that residue give confirmed laws and the peak of such a size to the
  // byte; sizes of mixed residues leave the laws unconfirmed, and the prediction says so.
  const auto worst = analysed(tiny_trace(996, "meta", "tiny", "--routing worst --moe-rows routed"));
  auto w = run_cli("fit" + routed({164, 228, 292, 356}, "worst") + " --at tokens=996 --json");
  INFO(w.err);
  REQUIRE(w.rc == 0);
  const auto jw = nlohmann::json::parse(w.out);
  CHECK(jw["predictions"][0]["peak_activation_bytes"].get<uint64_t>() == worst.peak_activation_bytes);
  CHECK(jw["predictions"][0]["bounded"] == false);
  CHECK(jw["predictions"][0]["unconfirmed"] == false);
  CHECK(law(jw, "layer.1/moe/experts/gemm2_out")["formula"] == "1,024 * T + 258,048");  // (2 T + 8 x 63) x 256 x 2 B
  auto mixed = run_cli("fit" + routed({143, 211, 307, 401}, "worst") + " --at tokens=996 --json");
  REQUIRE(mixed.rc == 0);
  CHECK(nlohmann::json::parse(mixed.out)["predictions"][0]["unconfirmed"] == true);
  // The worst routing bounds a drawn one at the same size.
  const auto drawn = analysed(tiny_trace(996, "meta", "tiny", "--routing zipf:1.3 --moe-rows routed"));
  CHECK(drawn.peak_activation_bytes <= worst.peak_activation_bytes);
  // A drawn routing's padded rows are the run's data: the executor marks those allocations
  // (kFlagDataDependent) and fit gives them no law, even where a polynomial would go through
  // these four sizes by chance (zipf:1.3 at these sizes once "confirmed" a quadratic gemm2_out).
  // The worst routing's are laws: nothing is marked there.
  size_t marked = 0, marked_worst = 0;
  for (const auto& l : drawn.lifetimes) {
    const std::string name = drawn.strings[index_of(l.name_id)];
    const bool routed = name == "permuted_to_token" || name == "gemm1_out_fp4" || name == "gemm1_out_scales" || name == "gemm2_out";
    CHECK(l.data_dependent == routed);
    marked += l.data_dependent ? 1 : 0;
  }
  for (const auto& l : worst.lifetimes) marked_worst += l.data_dependent ? 1 : 0;
  CHECK(marked == 4 * 3);  // four tensors in each of tiny's three MoE layers
  CHECK(marked_worst == 0);
  auto d = run_cli("fit" + routed({164, 228, 292, 356}, "zipf:1.3") + " --at tokens=996 --json");
  INFO(d.err);
  REQUIRE(d.rc == 0);
  const auto jd = nlohmann::json::parse(d.out);
  for (const char* site : {"layer.1/moe/experts/gemm2_out", "layer.2/moe/experts/gemm1_out_fp4", "layer.3/moe/experts/permuted_to_token"}) {
    INFO(site);
    CHECK(law(jd, site)["state"] == "data-dependent");
    const auto note = jd["law_details"][law(jd, site)["law"].get<size_t>()]["note"].get<std::string>();
    CHECK(note.find("sized by the run's data") != std::string::npos);
  }
  CHECK(law(jd, "layer.1/moe/experts/hs_fp4")["state"] == "confirmed");  // T rows: a law, not data
  CHECK(jd["predictions"][0]["bounded"] == true);
  CHECK(jd["predictions"][0]["peak_activation_bytes"].get<uint64_t>() >= drawn.peak_activation_bytes);
}

TEST_CASE("moeprof fit: a peak total that rests on the request table's law says so", "[cli][fit][serving]") {
  // SGLang's request table: clamp(K / context x 512, 2048, 4096) + 1 rows, piecewise in the pool's
  // tokens K: no exact law through these sizes, so the peak total is no confirmed figure.
  const fs::path dir = moeprof::testing::temp_dir("fit_cli_table");
  const std::string w = (dir / "w.jsonl").string();
  moeprof::testing::spit(w, "{\"prompt_tokens\": 300, \"output_tokens\": 5}\n");
  std::string traces;
  for (const char* k : {"10000", "20000", "30000", "50000", "40000"}) {
    const std::string out = (dir / (std::string("k") + k)).string();
    REQUIRE(run_cli("run -q --backend meta --model tiny --workload '" + w + "' --kv-tokens " + k + " --mode baseline -o '" + out + "'").rc == 0);
    if (std::string(k) != "40000") traces += " '" + out + "/baseline.mtrace'";
  }
  auto r = run_cli("fit --json" + traces + " --var kv=10000,20000,30000,50000 --at kv=40000");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  const auto& p = j["predictions"][0];
  CHECK_FALSE(p["unconfirmed"].get<bool>());  // the activations' laws hold
  CHECK_FALSE(p["bounded"].get<bool>());
  CHECK((p["total_unconfirmed"].get<bool>() || p["total_bounded"].get<bool>()));
  CHECK(p["total_unconfirmed_sites_at_peak"].get<uint64_t>() + p["total_bounded_sites_at_peak"].get<uint64_t>() >= 1);
  auto actual = run_cli("plan --json '" + (dir / "k40000" / "baseline.mtrace").string() + "'");
  REQUIRE(actual.rc == 0);
  const auto a = nlohmann::json::parse(actual.out);
  CHECK(p["peak_activation_bytes"] == a["peak_activation_bytes"]);
  CHECK(p["peak_total_bytes"] != a["peak_total_bytes"]);
  auto text = run_cli("fit" + traces + " --var kv=10000,20000,30000,50000 --at kv=40000");
  CHECK(text.out.find("the peak total") != std::string::npos);
}
