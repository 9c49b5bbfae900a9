// Fuzz harness: the pickle reader (importer::parse_pickle) and the PyTorch snapshot importer.
// Invariants: a rejected input is bad input in one line; an accepted document prints (py_repr);
// an imported snapshot's trace survives write_trace / read_trace unchanged in its records and
// counts, and analyses, or is refused by the byte limit.
#include <cstring>

#include "core/trace_io.h"
#include "import/pickle.h"
#include "import/torch_snapshot.h"
#include "planner/analysis.h"
#include "tests/fuzz/fuzz_util.h"

using namespace moeprof;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto doc = importer::parse_pickle(std::string(fuzz::as_text(data, size)));
  if (!doc.is_ok()) {
    fuzz::check_reader_error(doc.status(), "parse_pickle");
    return 0;
  }
  (void)importer::py_repr(doc->root());
  auto res = importer::import_torch_snapshot(doc->root());
  if (!res.is_ok()) {
    fuzz::check_reader_error(res.status(), "import_torch_snapshot");
    return 0;
  }
  const Trace& t = res->trace;
  planner::AnalyzeOptions ao;
  ao.timeline_points = 16;
  const planner::RunAnalysis run = planner::analyze(t, ao);
  if (!run.limit_error.empty()) return 0;
  const std::string path = fuzz::scratch_path("pickle");
  Status st = write_trace(path, t);
  FUZZ_CHECK(st.is_ok(), "write_trace: %s", st.message().c_str());
  auto back = read_trace(path);
  std::remove(path.c_str());
  FUZZ_CHECK(back.is_ok(), "the imported trace does not read back: %s", back.status().message().c_str());
  FUZZ_CHECK(back->records.size() == t.records.size(), "record count changed");
  FUZZ_CHECK(t.records.empty() || std::memcmp(back->records.data(), t.records.data(), t.records.size() * sizeof(TraceRecord)) == 0,
             "records changed");
  FUZZ_CHECK(back->strings.size() == t.strings.size(), "string count changed");
  return 0;
}
