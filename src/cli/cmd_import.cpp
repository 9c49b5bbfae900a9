// moeprof import SNAPSHOT.pickle --out FILE.mtrace: a PyTorch memory snapshot
// (torch.cuda.memory._dump_snapshot) as a moeprof trace, with a summary of the replay.
// Exit 0 ok, 2 unreadable / malformed / unsupported pickle, 3 the trace could not be written.
#include <algorithm>
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/status.h"
#include "core/trace_io.h"
#include "core/utf8.h"
#include "import/torch_snapshot.h"
#include "planner/analysis.h"
#include "reports/format.h"
#include "reports/text_report.h"

namespace moeprof::cli {

namespace {

struct ImportArgs {
  std::string snapshot, out, free_on = "completed", name;
  bool json = false;
  size_t top = 10;
};


struct TopEntry {
  uint64_t bytes = 0, address = 0, entry = 0;
  bool by_entry = false;  // allocated by entry `entry` (else synthesized: allocated before the history began)
  uint32_t stream = 0;
  std::string label;
};

struct DevicePeak {
  uint64_t bytes = 0, ts = 0, entry = 0, reserved_peak = 0;
  bool by_entry = false;  // an entry's allocation reached the peak (else one synthesized before the first entry)
  std::vector<TopEntry> top;
};

// The replayed peak of each device (planner::analyze) and the largest allocations live at it.
// The synthesized allocations come first in a device's replay (the first entry's time, seq 0 and
// records added before the entries'), so they are its first `synthesized()` lifetimes.
std::map<uint16_t, DevicePeak> peaks(const Trace& trace, const importer::TorchImportResult& res, const planner::RunAnalysis& run,
                                     size_t top) {
  std::map<uint16_t, DevicePeak> out;
  for (const auto& d : run.devices) {
    DevicePeak& p = out[d.device];
    p.bytes = d.peak_total_bytes;
    p.ts = d.peak_total_ts;
    p.reserved_peak = d.pool_reserved_peak_bytes;
    uint64_t synthesized = 0, ordinal = 0;
    for (const auto& s : res.devices)
      if (s.device == d.device) synthesized = s.synthesized();
    std::vector<std::pair<const planner::Lifetime*, bool>> live;  // (lifetime, allocated by an entry)
    for (const auto& l : run.lifetimes) {
      if (l.device != d.device || d.peak_total_bytes == 0) continue;
      if (l.alloc_index == d.peak_total_index && ordinal >= synthesized) {  // an entry's alloc reached the peak
        p.entry = l.seq;
        p.by_entry = true;
      }
      const bool by_entry = ordinal++ >= synthesized;
      if (l.alloc_index <= d.peak_total_index && d.peak_total_index < l.free_index && l.bytes > 0) live.emplace_back(&l, by_entry);
    }
    std::stable_sort(live.begin(), live.end(), [](const auto& x, const auto& y) {
      const planner::Lifetime *a = x.first, *b = y.first;
      return a->bytes != b->bytes ? a->bytes > b->bytes : a->alloc_index < b->alloc_index;
    });
    if (live.size() > top) live.resize(top);
    for (const auto& [l, by_entry] : live) {
      TopEntry e{l->bytes, l->address, l->seq, by_entry, l->stream, std::string(trace.str(l->name_id))};
      p.top.push_back(std::move(e));
    }
  }
  return out;
}

std::string anomaly_text(const planner::Anomalies& a) {
  std::vector<std::string> notes;
  if (a.unknown_frees) notes.push_back(fmt::format("{} unknown frees", a.unknown_frees));
  if (a.double_frees) notes.push_back(fmt::format("{} double frees", a.double_frees));
  if (a.alloc_over_live) notes.push_back(fmt::format("{} allocations over a live address", a.alloc_over_live));
  if (a.free_size_mismatches) notes.push_back(fmt::format("{} frees whose size differs from the allocation's", a.free_size_mismatches));
  if (a.zero_size_allocs) notes.push_back(fmt::format("{} zero-size allocations", a.zero_size_allocs));
  return notes.empty() ? "none" : fmt::format("{}", fmt::join(notes, "; "));
}

void print_text(const ImportArgs& args, const importer::TorchImportResult& res, const std::map<uint16_t, DevicePeak>& pk,
                const planner::RunAnalysis& run) {
  using reports::format_bytes;
  using reports::with_commas;
  const auto& extra = res.trace.meta.extra;
  auto get = [&](const char* k) {
    auto it = extra.find(k);
    return it == extra.end() ? std::string() : it->second;
  };
  fmt::print("imported {} -> {}\n", args.snapshot, args.out);
  fmt::print("  pickle protocol {}, {} device trace(s), {} entries, frees on free_{}, {} allocation(s) synthesized\n",
             get("pickle_protocol"), get("devices"), res.entries, get("free_on"), res.synthesized_allocs);
  if (!res.skipped_actions.empty()) fmt::print("  skipped actions: {}\n", get("skipped_actions"));
  if (!res.unknown_block_states.empty())
    fmt::print("  unknown block states (not counted live): {}\n", get("unknown_block_states"));
  for (const auto& d : res.devices) {
    fmt::print("\ndevice {}: {} entries, {} allocs, {} frees, {} synthesized ({} from frees, {} from segments), "
               "{} segment events{}\n",
               d.device, d.entries, d.allocs, d.frees, d.synthesized(), d.synthesized_from_frees, d.synthesized_from_segments,
               d.segment_events, d.oom_events ? fmt::format(", {} OOM", d.oom_events) : "");
    auto it = pk.find(d.device);
    const DevicePeak p = it == pk.end() ? DevicePeak{} : it->second;
    fmt::print("  replayed peak   {:>14}  ({}){}\n", format_bytes(p.bytes), reports::format_exact_bytes(p.bytes),
               !p.bytes      ? ""
               : p.by_entry ? fmt::format(", reached at entry {}", p.entry)
                            : ", live before the first entry (allocations made before the history began)");
    fmt::print("  reserved peak   {:>14}  ({})\n", format_bytes(p.reserved_peak), reports::format_exact_bytes(p.reserved_peak));
    if (d.end_state_checked) {
      fmt::print("  end of trace    {:>14}  live ({}); the snapshot's blocks hold {}{}\n", format_bytes(d.end_live_bytes),
                 reports::format_exact_bytes(d.end_live_bytes), reports::format_exact_bytes(d.snapshot_live_bytes),
                 d.end_state_mismatches ? fmt::format(" ({} addresses disagree)", d.end_state_mismatches) : " (consistent)");
    }
    if (!p.top.empty()) {
      fmt::print("  largest live allocations at the peak:\n");
      for (const auto& e : p.top) {
        fmt::print("    {:>12}  {:#014x}  {}\n", format_bytes(e.bytes), e.address, e.label.empty() ? "(no Python frame)" : e.label);
      }
    }
  }
  fmt::print("\nanomalies in the replay: {}\n", anomaly_text(run.anomalies));
}

nlohmann::ordered_json to_json(const ImportArgs& args, const importer::TorchImportResult& res,
                               const std::map<uint16_t, DevicePeak>& pk, const planner::RunAnalysis& run) {
  using nlohmann::ordered_json;
  const auto& extra = res.trace.meta.extra;
  ordered_json j;
  j["input"] = args.snapshot;
  j["output"] = args.out;
  j["free_on"] = extra.at("free_on");
  j["pickle_protocol"] = std::stoi(extra.at("pickle_protocol"));
  j["entries"] = res.entries;
  j["synthesized_allocs"] = res.synthesized_allocs;
  ordered_json skipped = ordered_json::object();
  for (const auto& [k, n] : res.skipped_actions) skipped[k] = n;
  j["skipped_actions"] = skipped;
  ordered_json states = ordered_json::object();
  for (const auto& [k, n] : res.unknown_block_states) states[k] = n;
  j["unknown_block_states"] = states;
  j["devices"] = ordered_json::array();
  for (const auto& d : res.devices) {
    auto it = pk.find(d.device);
    const DevicePeak p = it == pk.end() ? DevicePeak{} : it->second;
    ordered_json dj{{"device", d.device},
                    {"entries", d.entries},
                    {"allocs", d.allocs},
                    {"frees", d.frees},
                    {"synthesized_from_frees", d.synthesized_from_frees},
                    {"synthesized_from_segments", d.synthesized_from_segments},
                    {"segment_events", d.segment_events},
                    {"oom_events", d.oom_events},
                    {"peak_bytes", p.bytes},
                    {"peak_timestamp_ns", p.ts},
                    {"peak_entry", p.by_entry ? nlohmann::ordered_json(p.entry) : nlohmann::ordered_json()},
                    {"reserved_peak_bytes", p.reserved_peak},
                    {"initial_reserved_bytes", d.initial_reserved_bytes},
                    {"end_reserved_bytes", d.end_reserved_bytes},
                    {"end_live_bytes", d.end_live_bytes},
                    {"snapshot_live_bytes", d.snapshot_live_bytes},
                    {"end_state_mismatches", d.end_state_checked ? ordered_json(d.end_state_mismatches) : ordered_json()}};
    dj["top"] = ordered_json::array();
    for (const auto& e : p.top)
      dj["top"].push_back({{"bytes", e.bytes}, {"address", e.address}, {"entry", e.by_entry ? ordered_json(e.entry) : ordered_json()}, {"stream", e.stream}, {"label", e.label}});
    j["devices"].push_back(std::move(dj));
  }
  j["anomalies"] = {{"unknown_frees", run.anomalies.unknown_frees},
                    {"double_frees", run.anomalies.double_frees},
                    {"alloc_over_live", run.anomalies.alloc_over_live},
                    {"free_size_mismatches", run.anomalies.free_size_mismatches},
                    {"zero_size_allocs", run.anomalies.zero_size_allocs}};
  return j;
}

}  // namespace

void register_import(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ImportArgs>();
  auto* cmd = app.add_subcommand("import", "Convert a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) into a trace");
  cmd->footer("Example: moeprof import snapshot.pickle --out snapshot.mtrace && moeprof plan snapshot.mtrace");
  cmd->add_option("snapshot", args->snapshot, "the snapshot pickle")->required()->type_name("FILE");
  cmd->add_option("--out,-o", args->out, "the trace to write (.mtrace)")->required()->type_name("FILE");
  cmd->add_option("--free-on", args->free_on,
                  "which entry ends an allocation: completed (free_completed, the block is reusable: PyTorch's "
                  "memory_viz and requested_bytes view) or requested (free_requested, the tensor was released)")
      ->check(CLI::IsMember({"completed", "requested"}))
      ->capture_default_str();
  cmd->add_option("--name", args->name, "run name in the trace [default: the snapshot's file stem]")->type_name("NAME");
  cmd->add_option("--top", args->top, "largest live allocations listed per device")
      ->check(integer_range(0, 1000000))
      ->type_name("N")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "print the summary as JSON on stdout");
  cmd->callback([args, exit_code] {
    if (args->out == "-") {  // a trace is a file of frames, read back by seeking; never stdout
      *exit_code = fail("import", Status::bad_input("--out: a trace is written to a file, not to stdout ('-')"));
      return;
    }
    if (!is_valid_utf8(args->name)) {  // as report's --name: the name is stored in the trace and shown in every report
      *exit_code = fail("import", Status::bad_input("run name '" + valid_utf8(args->name) + "' is not valid UTF-8"));
      return;
    }
    if (Status st = check_output_not_input("--out", args->out, {args->snapshot}, false); !st) {
      *exit_code = fail("import", st);
      return;
    }
    importer::TorchImportOptions opt;
    importer::parse_free_on(args->free_on, &opt.free_on);  // validated by CLI11
    opt.run_name = args->name;
    auto res = importer::import_torch_snapshot_file(args->snapshot, opt);
    if (!res) {
      *exit_code = fail("import", res.status());
      return;
    }
    planner::AnalyzeOptions aopts;
    aopts.timeline_points = 0;
    aopts.keep_lifetimes = true;
    const planner::RunAnalysis run = planner::analyze(res->trace, aopts);
    if (!run.limit_error.empty()) {
      *exit_code = fail("import", Status::bad_input(args->snapshot + ": " + run.limit_error));
      return;
    }
    Status st = write_trace(args->out, res->trace);
    if (!st) {
      *exit_code = fail("import", st);
      return;
    }
    const auto pk = peaks(res->trace, *res, run, args->top);
    if (args->json) {
      if (Status wst = write_stdout(to_json(*args, *res, pk, run).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"); !wst) {
        *exit_code = fail("import", wst);
        return;
      }
    } else {
      print_text(*args, *res, pk, run);
    }
    if (run.allocations == 0) note("import", "note: {} has no allocations{}", args->snapshot, reports::kEmptySnapshotAdvice);
    *exit_code = kExitOk;
  });
}

}  // namespace moeprof::cli
