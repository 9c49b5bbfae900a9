#include <catch2/catch.hpp>

#include "profiler/nvtx_scope.h"
#include "profiler/trace_paths.h"

using namespace moeprof;
using namespace moeprof::profiler;

TEST_CASE("tensor tags parse scope, name and category", "[profiler][nvtx]") {
  TensorTag t;
  REQUIRE(parse_tensor_tag("moeprof.tensor:layer.3/moe/w13|weights", &t));
  CHECK(t.scope == "layer.3/moe");
  CHECK(t.name == "w13");
  CHECK(t.category == Category::kWeights);
  CHECK(t.category_known);

  REQUIRE(parse_tensor_tag("moeprof.tensor:kv|kv_cache", &t));
  CHECK(t.scope.empty());
  CHECK(t.name == "kv");
  CHECK(t.category == Category::kKvCache);

  REQUIRE(parse_tensor_tag("moeprof.tensor:a/b/c", &t));
  CHECK(t.scope == "a/b");
  CHECK(t.name == "c");
  CHECK(t.category == Category::kUnknown);
  CHECK_FALSE(t.category_known);

  REQUIRE(parse_tensor_tag("moeprof.tensor:x/y|bogus", &t));
  CHECK(t.category == Category::kUnknown);
  CHECK_FALSE(t.category_known);

  CHECK_FALSE(parse_tensor_tag("layer.3", &t));
  CHECK_FALSE(parse_tensor_tag("moeprof.tensors:x", &t));
  CHECK(format_tensor_tag("layer.1/attn", "kv", Category::kKvCache) == "moeprof.tensor:layer.1/attn/kv|kv_cache");
  REQUIRE(parse_tensor_tag(format_tensor_tag("", "w", Category::kActivation), &t));
  CHECK(t.name == "w");
  CHECK(t.category == Category::kActivation);
}

TEST_CASE("range stacks resolve to scope paths, tags are not levels", "[profiler][nvtx]") {
  ResolvedScope r = resolve_scope({"prefill", "layer.3", "moe"});
  CHECK(r.path == "prefill/layer.3/moe");
  CHECK_FALSE(r.tagged);

  r = resolve_scope({"prefill", "moeprof.tensor:layer.3/moe/w13|weights"});
  CHECK(r.tagged);
  CHECK(r.path == "prefill");
  CHECK(r.tag.scope == "layer.3/moe");

  r = resolve_scope({"moeprof.tensor:a/x|weights", "mid", "moeprof.tensor:b/y|activation"});
  CHECK(r.tag.name == "y");  // innermost tag wins
  CHECK(r.path == "mid");

  r = resolve_scope({});
  CHECK(r.path.empty());
  r = resolve_scope({"", "a", ""});
  CHECK(r.path == "a");
}

TEST_CASE("per-process trace paths", "[profiler][paths]") {
  CHECK(per_process_trace_path("out/run.mtrace", 123) == "out/run.123.mtrace");
  CHECK(per_process_trace_path("run", 7) == "run.7.mtrace");
  CHECK(trace_stem("a.mtrace") == "a");
  CHECK(trace_stem(".mtrace") == ".mtrace");
}
