// Inferred categories of traced programs, category rules, and growing allocation families.
#include <catch2/catch.hpp>

#include <algorithm>

#include "planner/analysis.h"
#include "planner/categories.h"
#include "planner/stacks.h"
#include "tests/planner/trace_builder.h"

using namespace moeprof;
using namespace moeprof::planner;
using moeprof::planner::testing::TraceBuilder;

namespace {

StackId stack_of(Trace& t, const std::vector<std::tuple<std::string, std::string, uint32_t, FrameKind>>& frames) {
  std::vector<uint32_t> ids;
  for (const auto& [fn, file, line, kind] : frames)
    ids.push_back(t.stacks.intern_frame(StackFrame{t.strings.intern(fn), t.strings.intern(file), line, kind}));
  return t.stacks.intern_stack(ids);
}

// A traced program: weights w1 (700) and w2 (500) never freed; a cuBLAS workspace (300) never
// freed; an NCCL buffer (64) freed; activations a (100) and b (200) freed.
Trace traced() {
  TraceBuilder b;
  b.trace.meta.backend = "cupti";
  b.trace.meta.mode = "traced";
  b.alloc(1, 0x10, 700, Category::kUnknown);
  b.alloc(2, 0x20, 500, Category::kUnknown);
  b.alloc(3, 0x30, 300, Category::kUnknown).stack_id =
      stack_of(b.trace, {{"cublasLtMatmul", "libcublasLt.so.13", 0, FrameKind::kNative},
                         {"forward", "/src/model.py", 40, FrameKind::kPython}});
  b.alloc(4, 0x40, 64, Category::kUnknown).stack_id =
      stack_of(b.trace, {{"all_reduce", "/site-packages/torch/distributed/c10d.py", 9, FrameKind::kPython}});
  b.alloc(5, 0x50, 100, Category::kUnknown);
  b.alloc(6, 0x60, 200, Category::kUnknown);
  b.free(7, 0x50);
  b.free(8, 0x60);
  b.free(9, 0x40);
  b.use(10, 0x10);  // the last use: the end of the work
  b.free(11, 0x20);  // teardown: w2 stays persistent
  return b.trace;
}

}  // namespace

TEST_CASE("inferred categories: persistent, library workspaces and communication, transient", "[planner][categories]") {
  Trace t = traced();
  REQUIRE(should_infer_categories(t, CategoryInference::kAuto));
  CHECK_FALSE(should_infer_categories(t, CategoryInference::kKeep));
  InferredCategories c = infer_categories(t, {});
  CHECK(c.by_record[0] == Category::kWeights);
  CHECK(c.by_record[1] == Category::kWeights);
  CHECK(c.by_record[2] == Category::kWorkspace);
  CHECK(c.by_record[3] == Category::kCommunication);
  CHECK(c.by_record[4] == Category::kActivation);
  CHECK(c.by_record[5] == Category::kActivation);
  CHECK(c.persistent == 2);
  CHECK(c.transient == 2);
  CHECK(c.by_library == 2);
  // Without inference everything is "activation-like" unknown: the whole program.
  CHECK(analyze(t).peak_activation_bytes == 700 + 500 + 300 + 64 + 100 + 200);
  AnalyzeOptions o;
  o.record_categories = &c.by_record;
  const RunAnalysis a = analyze(t, o);
  CHECK(a.peak_activation_bytes == 300 + 64 + 100 + 200);  // workspace + communication + activation
  CHECK(a.devices[0].peak_by_category[Category::kWeights] == 1200);
  CHECK(a.peak_total_bytes == 1864);
  // Without uses or kernels the end of the work is the last allocation (t=6): then the NCCL buffer
  // and both activations count as freed during the work too, and w2's teardown free as well.
  Trace plain = traced();
  plain.records.erase(std::remove_if(plain.records.begin(), plain.records.end(),
                                     [](const TraceRecord& r) { return r.kind == EventKind::kUse; }),
                      plain.records.end());
  InferredCategories p = infer_categories(plain, {});
  CHECK(p.by_record[1] == Category::kWeights);  // freed at 11 >= 6: persistent
  CHECK(p.by_record[4] == Category::kActivation);
}

TEST_CASE("category rules override the inference, errors name the line", "[planner][categories]") {
  Trace t = traced();
  auto rules = parse_category_rules("# comment\nkv_cache size=500\n\nactivation size=..100  # small ones\n", "cats");
  REQUIRE(rules.is_ok());
  REQUIRE(rules->size() == 2);
  CHECK(rules->at(1).origin == "cats:4");
  InferredCategories c = infer_categories(t, *rules);
  CHECK(c.by_record[1] == Category::kKvCache);
  CHECK(c.by_record[3] == Category::kActivation);  // the rule beats the NCCL frame
  CHECK(c.by_record[4] == Category::kActivation);
  CHECK(c.by_rule == 3);  // w2, the NCCL buffer (64), a (100)
  auto bad = parse_category_rules("weights name=x\nhoney name=y\n", "cats");
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().message() ==
        "cats:2: unknown category 'honey' (unknown, weights, kv_cache, activation, workspace, communication, graph)");
  auto bad2 = parse_category_rules("weights colour=red\n", "cats");
  REQUIRE_FALSE(bad2.is_ok());
  CHECK(bad2.status().message() == "cats:1: unknown selector key 'colour' (name, scope, category, size, stack, device)");
  auto bad3 = parse_category_rules("weights\n", "cats");
  REQUIRE_FALSE(bad3.is_ok());
  CHECK(bad3.status().message().rfind("cats:1: a selector needs at least one term", 0) == 0);
}

TEST_CASE("the executor's own traces keep their categories", "[planner][categories]") {
  TraceBuilder b;
  b.trace.meta.backend = "cpu";
  b.alloc(1, 0x10, 10, Category::kUnknown);
  CHECK_FALSE(should_infer_categories(b.trace, CategoryInference::kAuto));
  CHECK(should_infer_categories(b.trace, CategoryInference::kInfer));
  CHECK(should_infer_categories(b.trace, CategoryInference::kAuto, /*has_rules=*/true));
  CHECK_FALSE(should_infer_categories(b.trace, CategoryInference::kKeep, true));
}

TEST_CASE("rules override recorded categories, infer decides every allocation again", "[planner][categories]") {
  // An executor's trace: a KV cache and weights live to the end, activations freed on the way.
  TraceBuilder b;
  b.trace.meta.backend = "cpu";
  b.alloc(1, 0x1000, 4096 + 7, Category::kWeights);
  b.alloc(2, 0x3000, 8192 + 3, Category::kKvCache);
  b.alloc(3, 0x6000, 333, Category::kActivation, "layer.0", "gemm_out");
  b.use(4, 0x6000);
  b.free(5, 0x6000);
  b.alloc(6, 0x7000, 555, Category::kActivation, "layer.0", "norm_out");
  b.use(7, 0x7000);
  b.free(8, 0x7000);
  b.use(9, 0x3000);
  auto rules = parse_category_rules("workspace name=gemm_out\n", "r");
  REQUIRE(rules.is_ok());
  auto cats = [&](const InferredCategories& c) {
    std::vector<Category> out;
    for (size_t i = 0; i < b.trace.records.size(); ++i)
      if (b.trace.records[i].kind == EventKind::kAlloc) out.push_back(c.by_record[i]);
    return out;
  };
  const InferredCategories rules_only = infer_categories(b.trace, *rules, CategoryInference::kAuto);
  CHECK(cats(rules_only) == std::vector<Category>{Category::kWeights, Category::kKvCache, Category::kWorkspace, Category::kActivation});
  CHECK(rules_only.by_rule == 1);
  CHECK(rules_only.persistent + rules_only.transient == 0);
  const InferredCategories all = infer_categories(b.trace, *rules, CategoryInference::kInfer);
  // Live to the end through the work: persistent (weights), the KV cache too; the rule first.
  CHECK(cats(all) == std::vector<Category>{Category::kWeights, Category::kWeights, Category::kWorkspace, Category::kActivation});
  CHECK(all.by_rule == 1);
  CHECK(all.persistent == 2);
  CHECK(all.transient == 1);
}

TEST_CASE("growth: a transient family that grows every occurrence is flagged", "[planner][categories]") {
  TraceBuilder b;
  uint64_t ts = 1;
  for (int step = 0; step < 5; ++step) {
    b.alloc(ts++, 0x100, 1000 * (step + 1), Category::kActivation, "step." + std::to_string(step), "kv_grow");
    b.alloc(ts++, 0x200, 50, Category::kActivation, "step." + std::to_string(step), "steady");
    b.free(ts++, 0x100);
    b.free(ts++, 0x200);
  }
  const RunAnalysis a = analyze(b.trace);
  REQUIRE(a.growth.size() == 1);
  CHECK(a.growth[0].label == "kv_grow");
  CHECK(a.growth[0].scope == "step.*");
  CHECK(a.growth[0].occurrences == 5);
  CHECK(a.growth[0].first_bytes == 1000);
  CHECK(a.growth[0].last_bytes == 5000);
}

TEST_CASE("user frames: torch's package and the interpreter fold, model code stays", "[planner][stacks]") {
  CHECK(is_library_frame("Module._call_impl", "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/modules/module.py", FrameKind::kPython));
  CHECK_FALSE(is_library_frame("DeepseekV3MLP.forward",
                               "/opt/torch/.venv/lib/python3.12/site-packages/transformers/models/deepseek_v3/modeling_deepseek_v3.py",
                               FrameKind::kPython));
  CHECK(is_library_frame("_find_and_load", "<frozen importlib._bootstrap>", FrameKind::kPython));
  CHECK_FALSE(is_library_frame("main", "/home/u/torch/serve.py", FrameKind::kPython));  // a directory named torch
  CHECK(is_library_frame("cublasLtMatmul", "libcublasLt.so.13", FrameKind::kNative));
  CHECK(is_library_frame("at::native::empty_cuda", "libtorch_cuda.so", FrameKind::kNative));
  CHECK_FALSE(is_library_frame("my_op", "serve", FrameKind::kNative));
}
