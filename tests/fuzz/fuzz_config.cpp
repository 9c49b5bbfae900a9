// Fuzz harness: the HF config.json reader (parse_model_config) and the rank shapes derived from
// it. Invariants: a rejected config is bad input with a one-line message; an accepted one has
// every field within its documented bound (model/config.h), and its rank shape for a few token
// counts and TP degrees is either refused as bad input or consistent (positive sizes, the padded
// rows hold every routed row). Small accepted models also run one layer on the meta backend
// (allocations only): that either succeeds or fails with a Status, never a crash or a wrapped size.
#include "executor/backends.h"
#include "executor/deepseek_model.h"
#include "model/config.h"
#include "tests/fuzz/fuzz_util.h"

using namespace moeprof;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto cfg = parse_model_config(std::string(fuzz::as_text(data, size)), "fuzz.json");
  if (!cfg.is_ok()) {
    fuzz::check_reader_error(cfg.status(), "parse_model_config");
    return 0;
  }
  const ModelConfig& c = cfg.value();
  FUZZ_CHECK(c.hidden_size >= 1 && c.hidden_size <= kMaxHidden, "hidden_size %lld", (long long)c.hidden_size);
  FUZZ_CHECK(c.vocab_size >= 1 && c.vocab_size <= kMaxVocab, "vocab_size %lld", (long long)c.vocab_size);
  FUZZ_CHECK(c.num_hidden_layers >= 1 && c.num_hidden_layers <= kMaxLayers, "layers");
  FUZZ_CHECK(c.n_routed_experts >= 0 && c.n_routed_experts <= kMaxExperts, "experts");
  FUZZ_CHECK(c.n_shared_experts >= 0 && c.n_shared_experts <= kMaxSharedExperts, "shared experts");
  FUZZ_CHECK(c.rms_norm_eps > 0 && c.rms_norm_eps <= 1, "rms_norm_eps %g", c.rms_norm_eps);
  FUZZ_CHECK(c.rope_theta > 0 && c.rope_theta <= 1e12, "rope_theta %g", c.rope_theta);
  for (int64_t tokens : {int64_t{1}, int64_t{7}, int64_t{4096}, kMaxTokens}) {
    for (int tp : {1, 2, 3}) {
      auto s = make_rank_shape(c, tokens, tp, tp - 1, 0);
      if (!s.is_ok()) {
        fuzz::check_reader_error(s.status(), "make_rank_shape");
        continue;
      }
      FUZZ_CHECK(s->heads >= 1 && s->vocab >= 1 && s->layers >= 1, "degenerate shape");
      FUZZ_CHECK(s->vocab_start + s->vocab >= c.vocab_size, "the last rank's vocab rows do not reach the vocabulary's end");
      if (c.n_routed_experts > 0)
        FUZZ_CHECK(s->padded_rows >= tokens * c.num_experts_per_tok && s->moe_tile >= 8 && s->moe_tile <= 64,
                   "padded rows %lld for %lld routed rows", (long long)s->padded_rows, (long long)(tokens * c.num_experts_per_tok));
    }
  }
  // One layer on the meta backend for models small enough to keep the harness fast.
  if (c.hidden_size <= 4096 && c.vocab_size <= (1 << 16) && c.n_routed_experts <= 256 && c.intermediate_size <= 16384 &&
      c.num_attention_heads <= 128) {
    auto shape = make_rank_shape(c, 16, 1, 0, 1);
    if (shape.is_ok()) {
      auto be = make_meta_backend();
      auto model = DeepseekModel::create(*be, c, *shape, MemoryMode::kBaseline, ModelOptions{});
      if (model.is_ok()) {
        auto out = model.value()->forward();
        if (!out.is_ok()) fuzz::check_reader_error(out.status(), "forward (meta)");
      } else {
        fuzz::check_reader_error(model.status(), "DeepseekModel::create (meta)");
      }
    }
  }
  return 0;
}
