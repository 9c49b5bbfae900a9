// Routing of the MoE layers: the top-k methods and scoring functions of DeepSeek-V2-family configs
// and the parameters one router call takes. Plain data: the model config reads them from
// config.json, and the executor's router op (executor/backend.h) takes them as they are.
#pragma once

namespace moeprof {

enum class TopkMethod { kGreedy, kGroupLimitedGreedy, kNoauxTc };
enum class ScoringFunc { kSoftmax, kSigmoid };

struct RouterParams {
  int top_k = 2;
  int n_group = 1;
  int topk_group = 1;
  TopkMethod method = TopkMethod::kGreedy;
  ScoringFunc scoring = ScoringFunc::kSoftmax;
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;
};

}  // namespace moeprof
