#include "model/expert_parallel.h"

#include <algorithm>

namespace moeprof {

std::string_view ep_buffers_name(EpBuffers b) { return b == EpBuffers::kWorstCase ? "worst-case" : "exact"; }

Result<EpBuffers> parse_ep_buffers(std::string_view text) {
  if (text == "exact") return EpBuffers::kExact;
  if (text == "worst-case") return EpBuffers::kWorstCase;
  return Status::bad_input("--ep-buffers " + std::string(text) + ": must be exact or worst-case");
}

EpSlice ep_token_slice(int64_t tokens, int ranks, int rank) {
  // 128-bit products: tokens may reach 2^40.
  auto at = [&](int s) {
    return static_cast<int64_t>(static_cast<__int128>(tokens) * s / ranks);
  };
  return EpSlice{at(rank), at(rank + 1)};
}

int64_t ep_worst_rows(int64_t tokens, int64_t top_k, int64_t experts, int ranks) {
  return tokens * std::min<int64_t>(top_k, experts / ranks);
}

EpReceive ep_receive(const int32_t* ids, int64_t tokens, int64_t top_k, int64_t experts, int ranks, int rank) {
  const int64_t per = experts / ranks, first = per * rank;
  EpReceive r;
  for (int64_t i = 0; i < tokens * top_k; ++i) {
    const int64_t e = ids[i] - first;
    if (e >= 0 && e < per) {
      r.pairs.push_back(i);
      r.local_experts.push_back(static_cast<int32_t>(e));
    }
  }
  return r;
}

Status check_ep_size(int ranks, int64_t experts, const std::string& model) {
  if (ranks < 1) return Status::bad_input("--ep must be at least 1");
  if (ranks == 1) return Status::ok();
  if (experts <= 0) return Status::bad_input("--ep " + std::to_string(ranks) + ": " + model + " has no routed experts");
  if (experts % ranks != 0)
    return Status::bad_input("--ep " + std::to_string(ranks) + " does not divide " + model + "'s " + std::to_string(experts) +
                             " routed experts");
  return Status::ok();
}

}  // namespace moeprof
