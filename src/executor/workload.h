// A serving workload: the requests `moeprof run --workload` drives through the scheduler
// (executor/serving.h). Two sources:
//  * FILE.jsonl: one request per line, a JSON object
//      {"prompt_tokens": 2048, "output_tokens": 256, "arrival_step": 0}
//    prompt_tokens is a count (the ids are then drawn from the seed) or an array of token ids;
//    output_tokens >= 1 is the number of tokens generated (the first by the prefill, the others by
//    decode steps); arrival_step >= 0 (default 0) is the scheduler step at which the request
//    arrives. Blank lines are skipped; anything else (bad JSON, a missing, unknown or out-of-range
//    key) is an error naming the line: "FILE line 3: output_tokens must be an integer >= 1".
//  * synthetic:N,PROMPT,OUTPUT[,SEED]: N requests arriving at step 0; PROMPT and OUTPUT are a
//    length L or a range LO-HI (each request's length uniform in [LO, HI], drawn from SEED,
//    default 0, with the counter-based hash of kernels/common/random.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace moeprof {

inline constexpr int64_t kMaxWorkloadRequests = int64_t{1} << 20;
inline constexpr int64_t kMaxRequestTokens = int64_t{1} << 30;  // prompt or output tokens of one request

struct RequestSpec {
  int64_t prompt_len = 0;
  int64_t output_len = 0;
  int64_t arrival_step = 0;
  std::vector<int32_t> prompt_ids;  // empty: drawn from the run's seed
  int64_t line = 0;                 // the line of a JSONL file (0: synthetic)
};

struct Workload {
  std::string source;  // the file or the synthetic spec
  std::vector<RequestSpec> requests;
};

// JSONL text; `source` names it in errors.
Result<Workload> parse_workload_jsonl(const std::string& text, const std::string& source);
// "synthetic:N,PROMPT,OUTPUT[,SEED]".
Result<Workload> parse_synthetic_workload(const std::string& spec);
// Either: a spec starting with "synthetic:", else a JSONL file.
Result<Workload> load_workload(const std::string& spec);

}  // namespace moeprof
