#include "reports/perfetto.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "reports/report_file.h"

namespace moeprof::reports {

using nlohmann::ordered_json;

namespace {

class EventSink {
 public:
  void add(const ordered_json& e) {
    out_ += first_ ? "\n" : ",\n";
    first_ = false;
    out_ += e.dump();
  }
  std::string finish() { return "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[" + out_ + "\n]}\n"; }

 private:
  std::string out_;
  bool first_ = true;
};

double to_us(uint64_t ts, uint64_t t0) { return ts >= t0 ? static_cast<double>(ts - t0) / 1000.0 : 0.0; }

ordered_json meta_event(const char* what, int pid, int tid, const std::string& name) {
  return ordered_json{{"ph", "M"}, {"name", what}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

void export_run(const PerfettoRun& run, size_t run_index, const PerfettoOptions& opts, EventSink* sink) {
  const Trace& trace = *run.trace;
  const planner::RunAnalysis& an = *run.analysis;
  uint64_t t0 = UINT64_MAX, t_end = 0;
  for (const auto& r : trace.records) {
    t0 = std::min(t0, r.timestamp_ns);
    t_end = std::max(t_end, r.timestamp_ns);
  }
  if (t0 == UINT64_MAX) t0 = 0;

  std::set<uint16_t> devices;
  for (const auto& d : an.devices) devices.insert(d.device);
  for (const auto& r : trace.records) devices.insert(r.device);
  auto pid_of = [&](uint16_t device) { return static_cast<int>((run_index + 1) * 1000 + device); };
  for (uint16_t d : devices) {
    sink->add(meta_event("process_name", pid_of(d), 0, run.name + " / device " + std::to_string(d)));
    sink->add(ordered_json{{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid_of(d)}, {"tid", 0},
                           {"args", {{"sort_index", pid_of(d)}}}});
  }

  // Counters.
  for (const auto& d : an.devices) {
    for (auto [name, series] : {std::pair{"live total bytes", &d.timeline_total},
                                std::pair{"live activation bytes", &d.timeline_activation}}) {
      for (const auto& [ts, bytes] : *series) {
        sink->add(ordered_json{{"ph", "C"}, {"name", name}, {"pid", pid_of(d.device)}, {"tid", 0},
                               {"ts", to_us(ts, t0)}, {"args", {{"bytes", bytes}}}});
      }
    }
  }

  // Allocation lifetimes: the largest max_slices, emitted in allocation order.
  std::vector<size_t> order(an.lifetimes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (order.size() > opts.max_slices) {
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return an.lifetimes[a].bytes > an.lifetimes[b].bytes; });
    order.resize(opts.max_slices);
    std::sort(order.begin(), order.end());
  }
  for (size_t i : order) {
    const auto& l = an.lifetimes[i];
    std::string name = an.str(l.name_id);
    if (name.empty()) name = "alloc " + std::to_string(l.bytes) + " B";
    std::string cat = std::string(category_name(l.category));
    std::string id = "a" + std::to_string(i);
    int pid = pid_of(l.device);
    ordered_json args = {{"bytes", l.bytes}, {"scope", an.str(l.scope_id)}, {"shape", an.str(l.shape_id)},
                         {"dtype", std::string(dtype_name(l.dtype))}, {"mem_kind", std::string(mem_kind_name(l.mem_kind))},
                         {"uses", l.uses}, {"freed", l.freed()}};
    sink->add(ordered_json{{"ph", "b"}, {"cat", cat}, {"name", name}, {"id", id}, {"pid", pid}, {"tid", 0},
                           {"ts", to_us(l.t_alloc, t0)}, {"args", args}});
    uint64_t end = l.freed() ? l.t_free : std::max(t_end, l.t_alloc);
    sink->add(ordered_json{{"ph", "e"}, {"cat", cat}, {"name", name}, {"id", id}, {"pid", pid}, {"tid", 0},
                           {"ts", to_us(end, t0)}});
  }

  // Markers (matched by device, thread and name) and kernels.
  std::map<std::tuple<uint16_t, uint32_t, StrId>, std::vector<const TraceRecord*>> open;
  std::set<std::pair<int, uint32_t>> streams;
  size_t markers = 0, kernels = 0;
  for (const auto& r : trace.records) {
    const EventKind kind = r.kind;
    if (kind == EventKind::kMarkerBegin) {
      open[{r.device, r.tid, r.name_id}].push_back(&r);
    } else if (kind == EventKind::kMarkerEnd) {
      auto& stack = open[{r.device, r.tid, r.name_id}];
      if (stack.empty()) continue;
      const TraceRecord* b = stack.back();
      stack.pop_back();
      std::string id = "m" + std::to_string(markers++);
      std::string name = std::string(trace.str(b->name_id));
      sink->add(ordered_json{{"ph", "b"}, {"cat", "marker"}, {"name", name}, {"id", id}, {"pid", pid_of(b->device)},
                             {"tid", 0}, {"ts", to_us(b->timestamp_ns, t0)}, {"args", {{"scope", trace.str(b->scope_id)}}}});
      sink->add(ordered_json{{"ph", "e"}, {"cat", "marker"}, {"name", name}, {"id", id}, {"pid", pid_of(b->device)},
                             {"tid", 0}, {"ts", to_us(std::max(r.timestamp_ns, b->timestamp_ns), t0)}});
    } else if (kind == EventKind::kKernel && kernels < opts.max_kernels) {
      ++kernels;
      int pid = pid_of(r.device);
      int tid = static_cast<int>(r.stream) + 1;
      if (streams.insert({pid, r.stream}).second) sink->add(meta_event("thread_name", pid, tid, "stream " + std::to_string(r.stream)));
      sink->add(ordered_json{{"ph", "X"}, {"cat", "kernel"}, {"name", std::string(trace.str(r.name_id))}, {"pid", pid},
                             {"tid", tid}, {"ts", to_us(r.timestamp_ns, t0)}, {"dur", static_cast<double>(r.bytes) / 1000.0}});
    }
  }
  for (const auto& [key, stack] : open) {
    for (const TraceRecord* b : stack) {
      sink->add(ordered_json{{"ph", "i"}, {"s", "p"}, {"cat", "marker"}, {"name", std::string(trace.str(b->name_id))},
                             {"pid", pid_of(b->device)}, {"tid", 0}, {"ts", to_us(b->timestamp_ns, t0)}});
    }
  }
}

}  // namespace

std::string perfetto_json(const std::vector<PerfettoRun>& runs, const PerfettoOptions& opts) {
  EventSink sink;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].trace && runs[i].analysis) export_run(runs[i], i, opts, &sink);
  }
  return sink.finish();
}

Status write_perfetto(const std::string& path, const std::vector<PerfettoRun>& runs, const PerfettoOptions& opts) {
  return write_text_file(path, perfetto_json(runs, opts));
}

}  // namespace moeprof::reports
