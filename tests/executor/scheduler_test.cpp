// The serving workload parser and the scheduler (pure bookkeeping): parse errors name the line,
// synthetic specs, chunking and packing of prefill steps, admission against the pool and the
// request limit, and a workload larger than the pool that completes without ever overrunning it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "executor/scheduler.h"
#include "executor/workload.h"

using namespace moeprof;

namespace {

std::string parse_error(const std::string& text) {
  auto w = parse_workload_jsonl(text, "w.jsonl");
  if (w.is_ok()) return "(parsed)";
  CHECK(w.status().code() == ErrorCode::kBadInput);
  CHECK(w.status().message().find('\n') == std::string::npos);
  return w.status().message();
}

Workload requests(std::initializer_list<std::pair<int64_t, int64_t>> lens, int64_t arrival = 0) {
  Workload w;
  w.source = "test";
  for (auto [p, o] : lens) w.requests.push_back(RequestSpec{p, o, arrival, {}, 0});
  return w;
}

// Runs the scheduler to the end, checking at every step that the pool is never overrun and that no
// two stored positions share a slot; tokens are 100 + the request index.
struct Trace {
  std::vector<StepPlan> plans;
  int64_t max_tokens = 0, max_pages = 0;
};
Trace drive(Scheduler& s) {
  Trace t;
  std::map<int32_t, std::pair<int64_t, int64_t>> owner;  // slot -> (request, position)
  int guard = 0;
  while (!s.done() && ++guard < 100000) {
    StepPlan p = s.next();
    for (const StepRow& r : p.rows) {
      INFO("step " << p.index << " request " << r.request << " pos " << r.pos << " slot " << r.slot);
      REQUIRE(r.slot >= s.config().page_size);                                   // never the padding page
      REQUIRE(r.slot < s.config().page_size * (s.pool_pages() + 1));
      REQUIRE(owner.emplace(r.slot, std::make_pair(r.request, r.pos)).second);  // a slot holds one position
    }
    REQUIRE(s.pages_used() <= s.pool_pages());
    REQUIRE(s.reserved_pages() <= s.pool_pages());
    REQUIRE(s.tokens_used() <= s.config().pool_tokens);
    REQUIRE(s.running() <= s.config().max_running_requests);
    t.max_tokens = std::max(t.max_tokens, s.tokens_used());
    t.max_pages = std::max(t.max_pages, s.pages_used());
    std::vector<int32_t> tokens;
    if (p.kind == StepKind::kPrefill) {
      for (const auto& seg : p.segments)
        if (seg.completes) tokens.push_back(static_cast<int32_t>(100 + seg.request));
    } else {
      for (const StepRow& r : p.rows) tokens.push_back(static_cast<int32_t>(100 + r.request));
    }
    s.finish(p, tokens);
    // Slots of finished requests are free again.
    for (auto it = owner.begin(); it != owner.end();)
      it = s.requests()[static_cast<size_t>(it->second.first)].finished() ? owner.erase(it) : std::next(it);
    t.plans.push_back(std::move(p));
  }
  REQUIRE(s.done());
  CHECK(s.tokens_used() == 0);
  CHECK(s.pages_used() == 0);
  CHECK(s.running() == 0);
  return t;
}

}  // namespace

TEST_CASE("workload: JSONL errors name the line", "[cpu][serving]") {
  CHECK(parse_error("{\"prompt_tokens\": 3, \"output_tokens\": 2}\n{\"prompt_tokens\": 3,\n").rfind("w.jsonl line 2: not JSON (parse error", 0) == 0);
  CHECK(parse_error("[1, 2]") == "w.jsonl line 1: must be a JSON object {\"prompt_tokens\": ..., \"output_tokens\": ...}");
  CHECK(parse_error("\n\n{\"prompt\": 3, \"output_tokens\": 2}") ==
        "w.jsonl line 3: unknown key \"prompt\" (known: prompt_tokens, output_tokens, arrival_step)");
  CHECK(parse_error("{\"prompt_tokens\": 3}") == "w.jsonl line 1: output_tokens is missing");
  CHECK(parse_error("{\"output_tokens\": 3}") == "w.jsonl line 1: prompt_tokens is missing");
  CHECK(parse_error("{\"prompt_tokens\": 3, \"output_tokens\": 0}") == "w.jsonl line 1: output_tokens must be an integer in [1, 2^30]");
  CHECK(parse_error("{\"prompt_tokens\": 2.5, \"output_tokens\": 1}") ==
        "w.jsonl line 1: prompt_tokens must be an integer in [1, 2^30] or an array of token ids");
  CHECK(parse_error("{\"prompt_tokens\": 1073741825, \"output_tokens\": 1}") ==
        "w.jsonl line 1: prompt_tokens must be an integer in [1, 2^30] or an array of token ids");
  CHECK(parse_error("{\"prompt_tokens\": [5, -1], \"output_tokens\": 1}") ==
        "w.jsonl line 1: prompt_tokens[1] must be a token id (an integer >= 0)");
  CHECK(parse_error("{\"prompt_tokens\": [], \"output_tokens\": 1}") == "w.jsonl line 1: prompt_tokens must hold 1 to 2^30 token ids");
  CHECK(parse_error("{\"prompt_tokens\": 4, \"output_tokens\": 1, \"arrival_step\": -2}") ==
        "w.jsonl line 1: arrival_step must be an integer in [0, 2^30]");
  CHECK(parse_error("\n  \n") == "w.jsonl: no request (one JSON object per line)");
  // A key given twice had been read as its last value.
  CHECK(parse_error("{\"prompt_tokens\": 3, \"output_tokens\": 2, \"prompt_tokens\": 5}") ==
        "w.jsonl line 1: key \"prompt_tokens\" given twice");
  CHECK(parse_error("{\"prompt_tokens\": [1, 2], \"output_tokens\": 2}") == "(parsed)");
  auto missing = load_workload("/nonexistent/w.jsonl");
  REQUIRE(!missing.is_ok());
  CHECK(missing.status().message() == "cannot open workload /nonexistent/w.jsonl (a JSONL file, or synthetic:N,PROMPT,OUTPUT[,SEED])");
}

TEST_CASE("workload: JSONL requests as written (counts, ids, arrivals, blank and CRLF lines)", "[cpu][serving]") {
  auto w = parse_workload_jsonl("{\"prompt_tokens\": 7, \"output_tokens\": 3}\r\n\r\n{\"prompt_tokens\": [4, 9, 2], \"output_tokens\": 1, \"arrival_step\": 12}\n",
                                "w.jsonl");
  REQUIRE(w.is_ok());
  REQUIRE(w->requests.size() == 2);
  CHECK(w->requests[0].prompt_len == 7);
  CHECK(w->requests[0].output_len == 3);
  CHECK(w->requests[0].arrival_step == 0);
  CHECK(w->requests[0].line == 1);
  CHECK(w->requests[1].prompt_ids == std::vector<int32_t>{4, 9, 2});
  CHECK(w->requests[1].prompt_len == 3);
  CHECK(w->requests[1].arrival_step == 12);
  CHECK(w->requests[1].line == 3);
}

TEST_CASE("workload: synthetic specs, fixed lengths and ranges", "[cpu][serving]") {
  auto fixed = parse_synthetic_workload("synthetic:5,2048,256");
  REQUIRE(fixed.is_ok());
  REQUIRE(fixed->requests.size() == 5);
  for (const auto& r : fixed->requests) {
    CHECK(r.prompt_len == 2048);
    CHECK(r.output_len == 256);
    CHECK(r.arrival_step == 0);
  }
  auto a = parse_synthetic_workload("synthetic:400,100-130,1-3,9"), b = parse_synthetic_workload("synthetic:400,100-130,1-3,9"),
       c = parse_synthetic_workload("synthetic:400,100-130,1-3,10");
  REQUIRE(a.is_ok());
  std::set<int64_t> prompts, outputs;
  for (const auto& r : a->requests) {
    CHECK(r.prompt_len >= 100);
    CHECK(r.prompt_len <= 130);
    prompts.insert(r.prompt_len);
    outputs.insert(r.output_len);
  }
  CHECK(prompts.size() == 31);  // every length of the range is drawn in 400 requests
  CHECK(outputs == std::set<int64_t>{1, 2, 3});
  bool same = true, differs = false;
  for (size_t i = 0; i < a->requests.size(); ++i) {
    same = same && a->requests[i].prompt_len == b->requests[i].prompt_len && a->requests[i].output_len == b->requests[i].output_len;
    differs = differs || a->requests[i].prompt_len != c->requests[i].prompt_len;
  }
  CHECK(same);     // the seed determines the draw
  CHECK(differs);  // and another seed draws others
  auto err = [](const std::string& spec) {
    auto w = load_workload(spec);
    REQUIRE(!w.is_ok());
    CHECK(w.status().code() == ErrorCode::kBadInput);
    return w.status().message();
  };
  const std::string usage = " (synthetic:N,PROMPT,OUTPUT[,SEED] with PROMPT and OUTPUT a length L or a range LO-HI)";
  CHECK(err("synthetic:0,10,10") == "workload synthetic:0,10,10: N must be an integer in [1, 2^20] (got \"0\")");
  CHECK(err("synthetic:3,30-10,10") == "workload synthetic:3,30-10,10: PROMPT must be L or LO-HI with 1 <= LO <= HI <= 2^30 (got \"30-10\")");
  CHECK(err("synthetic:3,10,x") == "workload synthetic:3,10,x: OUTPUT must be L or LO-HI with 1 <= LO <= HI <= 2^30 (got \"x\")");
  CHECK(err("synthetic:3,10") == "workload synthetic:3,10: needs 3 or 4 fields" + usage);
  CHECK(err("synthetic:3,10,10,-1") == "workload synthetic:3,10,10,-1: SEED must be a non-negative integer (got \"-1\")");
}

TEST_CASE("scheduler: a long prompt is chunked, each chunk after its cached prefix", "[cpu][serving]") {
  SchedulerConfig cfg{32, 4, 1, 400, 1000};
  auto s = Scheduler::create(cfg, requests({{100, 3}}));
  REQUIRE(s.is_ok());
  Trace t = drive(*s);
  REQUIRE(t.plans.size() == 6);  // 4 prefill chunks, then the 2 tokens the prefill did not make
  const int64_t lens[] = {32, 32, 32, 4};
  for (int i = 0; i < 4; ++i) {
    const StepPlan& p = t.plans[static_cast<size_t>(i)];
    CHECK(p.kind == StepKind::kPrefill);
    REQUIRE(p.segments.size() == 1);
    CHECK(p.segments[0].len == lens[i]);
    CHECK(p.segments[0].prefix == 32 * i);
    CHECK(p.segments[0].completes == (i == 3));
    CHECK(p.rows.front().pos == 32 * i);
  }
  for (int i = 4; i < 6; ++i) {
    CHECK(t.plans[static_cast<size_t>(i)].kind == StepKind::kDecode);
    REQUIRE(t.plans[static_cast<size_t>(i)].rows.size() == 1);
    CHECK(t.plans[static_cast<size_t>(i)].rows[0].pos == 100 + (i - 4));  // the previous token's position
  }
  CHECK(s->requests()[0].output == std::vector<int32_t>{100, 100, 100});
  CHECK(t.max_tokens == 102);  // prompt + output - 1 positions
}

TEST_CASE("scheduler: new requests are packed into a prefill step, the last one cut at the budget", "[cpu][serving]") {
  SchedulerConfig cfg{32, 8, 4, 400, 1000};
  auto s = Scheduler::create(cfg, requests({{10, 2}, {10, 2}, {30, 2}}));
  REQUIRE(s.is_ok());
  Trace t = drive(*s);
  const StepPlan& p0 = t.plans[0];
  CHECK(p0.kind == StepKind::kPrefill);
  REQUIRE(p0.segments.size() == 3);
  CHECK(p0.segments[2].len == 12);
  CHECK(!p0.segments[2].completes);
  CHECK(p0.rows.size() == 32);
  const StepPlan& p1 = t.plans[1];  // the cut request goes on before any decode
  CHECK(p1.kind == StepKind::kPrefill);
  REQUIRE(p1.segments.size() == 1);
  CHECK(p1.segments[0].prefix == 12);
  CHECK(p1.segments[0].len == 18);
  CHECK(t.plans[2].kind == StepKind::kDecode);
  CHECK(t.plans[2].rows.size() == 3);
}

TEST_CASE("scheduler: a workload larger than the pool completes, requests wait, the pool is never overrun", "[cpu][serving]") {
  // 7 requests of 17 + 4 tokens (20 positions = 5 pages of 4); the pool holds 16 pages: 3 at once.
  SchedulerConfig cfg{64, 16, 4, 64, 100};
  auto s = Scheduler::create(cfg, requests({{17, 4}, {17, 4}, {17, 4}, {17, 4}, {17, 4}, {17, 4}, {17, 4}}));
  REQUIRE(s.is_ok());
  Trace t = drive(*s);
  CHECK(s->waited_requests() == 4);
  CHECK(s->pool_held_requests() == 4);  // the pool's pages held them, not the 100 rows
  CHECK(t.max_pages == 15);
  CHECK(t.max_tokens == 60);
  for (const auto& r : s->requests()) CHECK(r.output.size() == 4);
  int64_t max_running_seen = 0;
  for (const StepPlan& p : t.plans)
    if (p.kind == StepKind::kDecode) max_running_seen = std::max<int64_t>(max_running_seen, static_cast<int64_t>(p.rows.size()));
  CHECK(max_running_seen == 3);
}

TEST_CASE("scheduler: the request limit holds requests back", "[cpu][serving]") {
  SchedulerConfig cfg{1000, 2, 1, 1000, 100};
  auto s = Scheduler::create(cfg, requests({{5, 3}, {5, 3}, {5, 3}, {5, 3}, {5, 3}}));
  REQUIRE(s.is_ok());
  Trace t = drive(*s);
  CHECK(t.plans[0].segments.size() == 2);
  CHECK(s->waited_requests() == 3);
  CHECK(s->pool_held_requests() == 0);  // the rows held them: a larger pool schedules the same
}

TEST_CASE("scheduler: arrivals, and requests that could never run", "[cpu][serving]") {
  SchedulerConfig cfg{64, 4, 4, 64, 100};
  auto s = Scheduler::create(cfg, requests({{8, 2}}, 10));
  REQUIRE(s.is_ok());
  Trace t = drive(*s);
  CHECK(t.plans.front().index == 10);  // idle steps are skipped up to the first arrival
  auto too_big = Scheduler::create(cfg, requests({{8, 2}, {60, 6}}));
  REQUIRE(!too_big.is_ok());
  CHECK(too_big.status().message() == "request 1 needs 65 KV tokens, more than the whole pool (64 tokens, 16 pages of 4): it could never run");
  auto too_long = Scheduler::create(SchedulerConfig{64, 4, 4, 400, 50}, requests({{48, 4}}));
  REQUIRE(!too_long.is_ok());
  CHECK(too_long.status().message() ==
        "request 0 needs 51 positions (prompt + output - 1), more than the context length 50");
}
