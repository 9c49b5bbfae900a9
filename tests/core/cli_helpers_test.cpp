// The core helpers behind the CLI's messages: "did you mean" (core/nearest.h), what a file is
// (core/file_kind.h) and whether traces are the ranks of one run (core/trace_merge.h).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/file_kind.h"
#include "core/nearest.h"
#include "core/trace_io.h"
#include "core/trace_merge.h"

using namespace moeprof;

TEST_CASE("edit distance: insertions, deletions, substitutions, adjacent transpositions, case ignored", "[core][nearest]") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("plan", "plan") == 0);
  CHECK(edit_distance("PLAN", "plan") == 0);
  CHECK(edit_distance("plna", "plan") == 1);       // transposition
  CHECK(edit_distance("--tokns", "--tokens") == 1);  // insertion
  CHECK(edit_distance("kimi-k25", "kimi-k2.5") == 1);
  CHECK(edit_distance("gate", "plan") == 4);
  CHECK(edit_distance("abc", "") == 3);
  CHECK(edit_distance("", "abcd") == 4);
  CHECK(edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("nearest names: within a third of the length, nearest first, prefixes count", "[core][nearest]") {
  const std::vector<std::string> subs = {"run", "trace", "plan", "arena", "compare", "report", "gate", "export", "devices", "import"};
  CHECK(nearest_names("plna", subs) == std::vector<std::string>{"plan"});
  CHECK(nearest_names("comp", subs) == std::vector<std::string>{"compare"});  // a prefix of 3+ characters
  CHECK(nearest_names("xyzzy", subs).empty());
  CHECK(nearest_names("rnu", subs) == std::vector<std::string>{"run"});
  CHECK(did_you_mean("plna", subs) == "; did you mean 'plan'?");
  CHECK(did_you_mean("xyzzy", subs).empty());
  CHECK(did_you_mean("--mdoe", {"--model", "--mode", "--tokens"}) == "; did you mean '--mode' or '--model'?");
  const std::vector<std::string> many = {"a1", "a2", "a3", "a4"};
  CHECK(nearest_names("a", many, 2).size() == 2);
}

TEST_CASE("file kinds from the first bytes", "[core][file_kind]") {
  CHECK(file_kind("") == FileKind::kEmpty);
  CHECK(file_kind(std::string(kTraceMagic, 8) + "rest") == FileKind::kTrace);
  CHECK(file_kind(std::string("\x80\x04\x95", 3)) == FileKind::kPickle);
  CHECK(file_kind(std::string("\x80\x02}q", 4)) == FileKind::kPickle);
  CHECK(file_kind(std::string("\x80\x09", 2)) == FileKind::kUnknown);  // no pickle protocol 9
  CHECK(file_kind("PK\x03\x04....") == FileKind::kZip);
  CHECK(file_kind("\x1f\x8b\x08") == FileKind::kGzip);
  CHECK(file_kind("\x7f" "ELF\x02") == FileKind::kElf);
  CHECK(file_kind("{\n  \"schema_version\": 3,\n  \"generator\": \"moeprof\",\n  \"runs\": []") == FileKind::kReportJson);
  CHECK(file_kind("\xEF\xBB\xBF  {\"traceEvents\": []}") == FileKind::kPerfettoJson);
  CHECK(file_kind("[1, 2]") == FileKind::kJson);
  CHECK(file_kind("<!DOCTYPE html><html>") == FileKind::kHtml);
  CHECK(file_kind("id,lower,upper,size\n0,0,3,16\n") == FileKind::kArenaCsv);
  CHECK(file_kind("hello") == FileKind::kUnknown);
  CHECK(describe_file_kind(FileKind::kPickle) == "a Python pickle (a PyTorch memory snapshot?)");
  CHECK(file_kind_advice(FileKind::kPickle, "s.pickle") ==
        "convert a torch.cuda.memory._dump_snapshot pickle with moeprof import s.pickle --out s.pickle.mtrace");
  CHECK(file_kind_advice(FileKind::kHtml, "x").empty());
}

namespace {

RunMeta rank(int r, int size, const std::string& mode = "baseline") {
  RunMeta m;
  m.name = mode;
  m.model = "kimi-k2.5";
  m.mode = mode;
  m.tokens = 4096;
  m.layers = 4;
  m.tp_rank = r;
  m.tp_size = size;
  m.pid = 1000 + static_cast<uint32_t>(r);
  return m;
}

RunMeta traced(uint32_t pid, const std::string& command) {
  RunMeta m;
  m.name = "python3";
  m.mode = "traced";
  m.pid = pid;
  m.extra["command"] = command;
  return m;
}

std::string why(const std::vector<RunMeta>& metas) {
  std::vector<std::string> paths;
  for (size_t i = 0; i < metas.size(); ++i) paths.push_back("t" + std::to_string(i));
  Status st = check_rank_traces(metas, paths);
  return st.is_ok() ? "" : st.message();
}

}  // namespace

TEST_CASE("check_rank_traces: ranks of one run pass, anything else is named", "[core][merge]") {
  CHECK(why({rank(0, 2)}).empty());
  CHECK(why({rank(0, 2), rank(1, 2)}).empty());
  CHECK(why({rank(1, 4), rank(3, 4), rank(0, 4)}).empty());
  CHECK(why({traced(11, "torchrun serve.py"), traced(12, "torchrun serve.py")}).empty());
  CHECK(why({rank(0, 2), rank(0, 2)}) ==
        "t0 and t1 are not ranks of one run: both are TP rank 0 of 2; to compare two runs: moeprof compare t0 t1");
  CHECK(why({rank(0, 2), rank(1, 2, "reuse")}) ==
        "t0 and t1 are not ranks of one run: modes baseline and reuse; to compare two runs: moeprof compare t0 t1");
  RunMeta other = rank(1, 2);
  other.model = "deepseek-v3";
  CHECK(why({rank(0, 2), other}).find("models kimi-k2.5 and deepseek-v3") != std::string::npos);
  other = rank(1, 2);
  other.tokens = 8192;
  CHECK(why({rank(0, 2), other}).find("4096 and 8192 tokens") != std::string::npos);
  CHECK(why({rank(0, 2), rank(1, 4)}).find("TP sizes 2 and 4") != std::string::npos);
  CHECK(why({rank(0, 1), rank(0, 1)}).find("each is a run of one device (TP and EP size 1)") != std::string::npos);
  CHECK(why({rank(0, 2), rank(1, 2), rank(0, 2)}).find("t0 and t2 are not ranks of one run: both are TP rank 0 of 2; to compare runs: "
                                                       "moeprof report A B ...") == 0);
  RunMeta merged = rank(0, 2);
  merged.extra["ranks"] = "2";
  CHECK(why({merged, rank(1, 2)}) == "t0 already holds the 2 ranks of its run (a merged trace): give it alone; to compare two runs: "
                                     "moeprof compare t0 t1");
  CHECK(why({traced(11, "a.py"), traced(12, "b.py")}).find("they record different commands") != std::string::npos);
  CHECK(why({traced(11, "a.py"), traced(11, "a.py")}).find("both record process 11") != std::string::npos);
}
