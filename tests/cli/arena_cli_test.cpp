// moeprof arena: JSON and text output, --out-csv checked independently, capacity, exit
// codes and one-line errors. Fixture: tests/golden/arena/tiling.csv, a guillotine tiling of
// 100 time units x 4096 bytes (LOAD = optimum = 4096) on which greedy by size needs 5661 and the
// best greedy order (overlapping bytes first) 4915.
#include <catch2/catch.hpp>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_util.h"

using nlohmann::json;
using moeprof::testing::count_lines;
using moeprof::testing::run_cli;

namespace {

std::string fixture() { return "'" + moeprof::testing::golden_dir() + "/arena/tiling.csv'"; }

std::vector<std::vector<std::string>> read_rows(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::string cell;
    std::istringstream ls(line);
    while (std::getline(ls, cell, ',')) f.push_back(cell);
    if (!line.empty() && line.back() == ',') f.emplace_back();
    rows.push_back(f);
  }
  return rows;
}

}  // namespace

TEST_CASE("cli arena: the exact search reaches the optimum that greedy misses", "[cli][arena]") {
  auto r = run_cli("arena " + fixture() + " --json --time-limit 30");
  REQUIRE(r.rc == 0);
  CHECK(r.err.empty());
  json j = json::parse(r.out);
  CHECK(j["buffers"] == 85);
  CHECK(j["load_bytes"] == 4096);
  CHECK(j["lower_bound_bytes"] == 4096);
  CHECK(j["arena_bytes"] == 4096);
  CHECK(j["fragmentation_bytes"] == 0);
  CHECK(j["proven_optimal"] == true);
  CHECK(j["algorithm"] == "search");
  CHECK(j["valid"] == true);
  CHECK(j["seconds"].get<double>() >= 0.0);
  CHECK(j["seconds"].get<double>() < 30.0);  // it stops once proven
  CHECK(j["greedy_by_size_bytes"] == 5661);
  CHECK(j["bound_gap_pct"] == 0.0);
  CHECK(j["search_nodes"].get<uint64_t>() > 0);
  for (const char* k : {"searches", "window_plans", "lns_moves", "core_plans"}) CHECK(j[k].is_number_unsigned());
  // The improvements over time: the first answer (greedy by size), then strictly better plans,
  // the last one the search's.
  const json& imp = j["improvements"];
  REQUIRE(imp.size() >= 2);
  CHECK(imp[0]["arena_bytes"] == 5661);
  CHECK(imp[0]["algorithm"] == "greedy:size_desc");
  CHECK(imp[0]["gap_pct"].get<double>() == Approx(100.0 * (5661 - 4096) / 4096.0));
  for (size_t k = 1; k < imp.size(); ++k) {
    CHECK(imp[k]["arena_bytes"].get<uint64_t>() < imp[k - 1]["arena_bytes"].get<uint64_t>());
    CHECK(imp[k]["seconds"].get<double>() >= imp[k - 1]["seconds"].get<double>());
  }
  CHECK(imp.back()["arena_bytes"] == 4096);
  CHECK(imp.back()["algorithm"] == "search");

  auto g = run_cli("arena " + fixture() + " --json --time-limit 0");
  REQUIRE(g.rc == 0);
  json gj = json::parse(g.out);
  CHECK(gj["arena_bytes"] == 4915);
  CHECK(gj["greedy_by_size_bytes"] == 5661);
  CHECK(gj["proven_optimal"] == false);
  CHECK(gj["algorithm"] == "greedy:conflict_desc");
  CHECK(gj["search_nodes"] == 0);
  CHECK(gj["improvements"].size() == 2);

  auto text = run_cli("arena " + fixture() + " --time-limit 30");
  REQUIRE(text.rc == 0);
  CHECK(text.out.find("LOAD (lower bound)") != std::string::npos);
  CHECK(text.out.find("proven optimal") != std::string::npos);
  CHECK(text.out.find("4,096 B") != std::string::npos);
  CHECK(text.out.find("greedy by size             5.7 kB  (5,661 B)  +38.208% over LOAD") != std::string::npos);
  CHECK(text.out.find("exact-search nodes") != std::string::npos);
  CHECK(text.out.find("improvements") != std::string::npos);
  CHECK(text.out.find("+38.208%  greedy:size_desc") != std::string::npos);
}

TEST_CASE("cli arena: --out-csv adds an offset column that an independent check accepts", "[cli][arena]") {
  auto dir = moeprof::testing::temp_dir("arena_cli");
  const std::string out = (dir / "offsets.csv").string();
  auto r = run_cli("arena " + fixture() + " --time-limit 30 --out-csv '" + out + "'");
  REQUIRE(r.rc == 0);
  CHECK(r.err == "moeprof arena: wrote " + out + "\n");
  const auto in_rows = read_rows(moeprof::testing::slurp(moeprof::testing::golden_dir() + "/arena/tiling.csv"));
  const auto rows = read_rows(moeprof::testing::slurp(out));
  REQUIRE(rows.size() == in_rows.size());
  CHECK(rows[0] == std::vector<std::string>{"id", "lower", "upper", "size", "note", "offset"});
  struct B {
    uint64_t lo, up, size, off;
  };
  std::vector<B> bs;
  for (size_t i = 1; i < rows.size(); ++i) {
    REQUIRE(rows[i].size() == 6);
    CHECK(std::vector<std::string>(rows[i].begin(), rows[i].begin() + 5) == in_rows[i]);  // input kept as is
    bs.push_back({std::stoull(rows[i][1]), std::stoull(rows[i][2]), std::stoull(rows[i][3]), std::stoull(rows[i][5])});
  }
  uint64_t top = 0;
  for (size_t i = 0; i < bs.size(); ++i) {
    top = std::max(top, bs[i].off + bs[i].size);
    for (size_t j = i + 1; j < bs.size(); ++j) {
      const bool time = bs[i].lo < bs[j].up && bs[j].lo < bs[i].up;
      const bool space = bs[i].off < bs[j].off + bs[j].size && bs[j].off < bs[i].off + bs[i].size;
      INFO("rows " << i + 2 << " and " << j + 2);
      CHECK_FALSE((time && space));
    }
  }
  CHECK(top == 4096);

  auto both = run_cli("arena " + fixture() + " --json --out-csv -");
  CHECK(both.rc == 2);
  CHECK(count_lines(both.err) == 1);
  auto to_stdout = run_cli("arena " + fixture() + " --time-limit 30 --out-csv -");
  REQUIRE(to_stdout.rc == 0);
  CHECK(to_stdout.out == moeprof::testing::slurp(out));
}

TEST_CASE("cli arena: capacity", "[cli][arena]") {
  auto fits = run_cli("arena " + fixture() + " --json --time-limit 30 --capacity 4096");
  REQUIRE(fits.rc == 0);
  json j = json::parse(fits.out);
  CHECK(j["capacity_bytes"] == 4096);
  CHECK(j["fits_capacity"] == true);
  auto below = run_cli("arena " + fixture() + " --time-limit 5 --capacity 4095");
  CHECK(below.rc == 3);
  CHECK(count_lines(below.err) == 1);
  CHECK(below.err.find("moeprof arena: error: no plan within the capacity 4095 B found") == 0);
  CHECK(below.err.find("none exists") != std::string::npos);  // LOAD 4096 > 4095
  CHECK(below.out.find("DOES NOT FIT") != std::string::npos);
}

TEST_CASE("cli arena: bad input exits 2 with a one-line error naming the line", "[cli][arena]") {
  auto dir = moeprof::testing::temp_dir("arena_cli_bad");
  const std::string bad = (dir / "bad.csv").string();
  moeprof::testing::spit(bad, "id,lower,upper,size\r\na,0,10,64\r\n\r\nb,5,4,64\r\n");
  auto r = run_cli("arena '" + bad + "'");
  CHECK(r.rc == 2);
  CHECK(r.out.empty());
  CHECK(count_lines(r.err) == 1);
  CHECK(r.err == "moeprof arena: error: " + bad + " line 4: lower 5 is not below upper 4 (a buffer lives on [lower, upper))\n");

  moeprof::testing::spit(bad, "id,lower,upper,size\na,0,10,64\na,5,40,64\n");
  auto dup = run_cli("arena '" + bad + "' --json");
  CHECK(dup.rc == 2);
  CHECK(dup.out.empty());
  CHECK(dup.err == "moeprof arena: error: " + bad + " line 3: duplicate id 'a' (first on line 2)\n");

  auto missing = run_cli("arena /nonexistent/moeprof/x.csv");
  CHECK(missing.rc == 2);
  CHECK(missing.err == "moeprof arena: error: /nonexistent/moeprof/x.csv: cannot open\n");
  CHECK(run_cli("arena " + fixture() + " --time-limit -1").rc == 2);
  CHECK(run_cli("arena " + fixture() + " --time-limit abc").rc == 2);
  CHECK(run_cli("arena " + fixture() + " --capacity 0").rc == 2);
  auto help = run_cli("arena --help");
  CHECK(help.rc == 0);
  for (const char* opt : {"--json", "--out-csv", "--time-limit", "--capacity"}) CHECK(help.out.find(opt) != std::string::npos);
}

TEST_CASE("cli arena: plan --arena reports the solver's fields", "[cli][arena]") {
  const std::string path = std::string(MOEPROF_SOURCE_DIR) + "/examples/traces/tiny-baseline.mtrace";
  for (const char* limit : {"0", "2"}) {
    auto r = run_cli("plan '" + path + "' --arena --json --arena-time-limit " + limit);
    REQUIRE(r.rc == 0);
    json a = json::parse(r.out)["arena"];
    CHECK(a["lower_bound_bytes"].get<uint64_t>() >= a["load_bytes"].get<uint64_t>());
    CHECK(a["arena_bytes"].get<uint64_t>() >= a["lower_bound_bytes"].get<uint64_t>());
    CHECK(a["proven_optimal"].get<bool>() == (a["arena_bytes"] == a["lower_bound_bytes"]));
    CHECK(a["algorithm"].is_string());
    CHECK(a["seconds"].get<double>() >= 0.0);
    CHECK(a["valid"] == true);
  }
  CHECK(run_cli("plan '" + path + "' --arena --arena-time-limit -1").rc == 2);
}

TEST_CASE("cli arena: plan --arena-out-csv writes the instance and its plan, which arena reads back", "[cli][arena]") {
  const std::string path = std::string(MOEPROF_SOURCE_DIR) + "/examples/traces/tiny-baseline.mtrace";
  auto dir = moeprof::testing::temp_dir("arena_cli_plan_csv");
  const std::string out = (dir / "acts.csv").string();
  auto r = run_cli("plan '" + path + "' --arena --json --arena-time-limit 0 --arena-out-csv '" + out + "'");
  REQUIRE(r.rc == 0);
  CHECK(r.err == "moeprof plan: wrote " + out + "\n");
  json a = json::parse(r.out)["arena"];
  const auto rows = read_rows(moeprof::testing::slurp(out));
  REQUIRE(rows.size() == a["buffers"].get<size_t>() + 1);
  CHECK(rows[0] == std::vector<std::string>{"id", "lower", "upper", "size", "alignment", "offset"});
  // Independent check of the plan as written: sizes are multiples of 256, offsets aligned, no
  // two buffers live together overlap, the top is the reported arena.
  struct B {
    uint64_t lo, up, size, off;
  };
  std::vector<B> bs;
  for (size_t i = 1; i < rows.size(); ++i) {
    REQUIRE(rows[i].size() == 6);
    CHECK(rows[i][4] == "256");
    bs.push_back({std::stoull(rows[i][1]), std::stoull(rows[i][2]), std::stoull(rows[i][3]), std::stoull(rows[i][5])});
  }
  uint64_t top = 0;
  for (size_t i = 0; i < bs.size(); ++i) {
    CHECK(bs[i].size % 256 == 0);
    CHECK(bs[i].off % 256 == 0);
    top = std::max(top, bs[i].off + bs[i].size);
    for (size_t j = i + 1; j < bs.size(); ++j) {
      const bool time = bs[i].lo < bs[j].up && bs[j].lo < bs[i].up;
      const bool space = bs[i].off < bs[j].off + bs[j].size && bs[j].off < bs[i].off + bs[i].size;
      CHECK_FALSE((time && space));
    }
  }
  CHECK(top == a["arena_bytes"].get<uint64_t>());
  // moeprof arena on the file plans the same instance: the same LOAD.
  auto back = run_cli("arena '" + out + "' --json --time-limit 0");
  REQUIRE(back.rc == 0);
  CHECK(json::parse(back.out)["load_bytes"] == a["load_bytes"]);
  CHECK(json::parse(back.out)["buffers"] == a["buffers"]);

  auto no_arena = run_cli("plan '" + path + "' --arena-out-csv '" + out + "'");
  CHECK(no_arena.rc == 2);
  CHECK(no_arena.err == "moeprof plan: error: --arena-out-csv needs --arena\n");
  auto to_stdout = run_cli("plan '" + path + "' --arena --arena-out-csv -");
  CHECK(to_stdout.rc == 2);
  CHECK(count_lines(to_stdout.err) == 1);
  auto bad_dir = run_cli("plan '" + path + "' --arena --arena-out-csv /nonexistent/moeprof/a.csv");
  CHECK(bad_dir.rc == 2);
  CHECK(bad_dir.err == "moeprof plan: error: /nonexistent/moeprof/a.csv: cannot open for writing\n");
}
