#include "reports/perfetto.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "planner/stacks.h"
#include "reports/format.h"
#include "reports/report_file.h"

namespace moeprof::reports {

using nlohmann::ordered_json;

namespace {

class EventSink {
 public:
  void add(const ordered_json& e) {
    out_ += first_ ? "\n" : ",\n";
    first_ = false;
    out_ += json_text(e);
  }
  std::string finish() { return "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[" + out_ + "\n]}\n"; }

 private:
  std::string out_;
  bool first_ = true;
};

double to_us(uint64_t ts, uint64_t t0) { return ts >= t0 ? static_cast<double>(ts - t0) / 1000.0 : 0.0; }

// Allocation lanes get thread ids from here up (kernel streams use 1 + stream id below it).
constexpr int kFirstAllocationThread = 1000000;

// A counter series thinned to about `points` samples: per bucket of samples the first minimum and
// the first maximum (so the series' peak stays), in time order.
std::vector<std::pair<uint64_t, uint64_t>> thin(const std::vector<std::pair<uint64_t, uint64_t>>& v, size_t points) {
  if (v.size() <= points || points < 4) return v;
  const size_t per = (v.size() + points / 2 - 1) / (points / 2);
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (size_t i = 0; i < v.size(); i += per) {
    size_t lo = i, hi = i;
    for (size_t j = i; j < std::min(v.size(), i + per); ++j) {
      if (v[j].second < v[lo].second) lo = j;
      if (v[j].second > v[hi].second) hi = j;
    }
    out.push_back(v[std::min(lo, hi)]);
    if (lo != hi) out.push_back(v[std::max(lo, hi)]);
  }
  return out;
}

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

  // Counters: per device one track per category in bytes ("category weights bytes"), the sum of
  // the activation categories ("activation memory bytes") and the total ("total bytes"), from the
  // lifetimes (exact at every alloc and free; thinned to min and max per bucket beyond
  // opts.max_counter_points, so each track's peak stays).
  for (const auto& d : an.devices) {
    struct Ev {
      uint32_t pos;
      uint64_t ts;
      Category cat;
      int64_t delta;
    };
    std::vector<Ev> ev;
    bool used[kNumCategories] = {};
    for (const auto& l : an.lifetimes) {
      if (l.device != d.device || l.bytes == 0) continue;
      used[static_cast<int>(l.category)] = true;
      ev.push_back({l.alloc_index, l.t_alloc, l.category, static_cast<int64_t>(l.bytes)});
      if (l.freed()) ev.push_back({l.free_index, l.t_free, l.category, -static_cast<int64_t>(l.bytes)});
    }
    std::sort(ev.begin(), ev.end(), [](const Ev& x, const Ev& y) { return x.pos < y.pos; });
    std::vector<std::string> names;
    std::vector<int> track_cat;  // -1 total, -2 activation memory, else a category
    names.push_back("total");
    track_cat.push_back(-1);
    names.push_back("activation memory");
    track_cat.push_back(-2);
    for (int c = 0; c < kNumCategories; ++c) {
      if (!used[c]) continue;
      names.push_back("category " + std::string(category_name(static_cast<Category>(c))));
      track_cat.push_back(c);
    }
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> series(names.size());  // (ts, bytes)
    int64_t live[kNumCategories] = {};
    for (size_t i = 0; i < ev.size(); ++i) {
      live[static_cast<int>(ev[i].cat)] += ev[i].delta;
      if (i + 1 < ev.size() && ev[i + 1].pos == ev[i].pos) continue;
      int64_t total = 0, act = 0;
      for (int c = 0; c < kNumCategories; ++c) {
        total += live[c];
        if (counts_as_activation(static_cast<Category>(c))) act += live[c];
      }
      for (size_t k = 0; k < names.size(); ++k) {
        const int64_t v = track_cat[k] == -1 ? total : track_cat[k] == -2 ? act : live[track_cat[k]];
        auto& sv = series[k];
        if (sv.empty() || sv.back().second != static_cast<uint64_t>(v)) sv.emplace_back(ev[i].ts, static_cast<uint64_t>(v));
      }
    }
    for (size_t k = 0; k < names.size(); ++k) {
      for (const auto& [ts, bytes] : thin(series[k], opts.max_counter_points))
        sink->add(ordered_json{{"ph", "C"}, {"name", names[k]}, {"pid", pid_of(d.device)}, {"tid", 0}, {"ts", to_us(ts, t0)}, {"args", {{"bytes", bytes}}}});
    }
    // The peaks, as instants on the device's process.
    sink->add(ordered_json{{"ph", "i"}, {"s", "p"}, {"cat", "peak"}, {"name", "peak activation memory " + format_bytes(d.peak_activation_bytes)},
                           {"pid", pid_of(d.device)}, {"tid", 0}, {"ts", to_us(d.peak_activation_ts, t0)},
                           {"args", {{"bytes", d.peak_activation_bytes}}}});
    sink->add(ordered_json{{"ph", "i"}, {"s", "p"}, {"cat", "peak"}, {"name", "peak total " + format_bytes(d.peak_total_bytes)},
                           {"pid", pid_of(d.device)}, {"tid", 0}, {"ts", to_us(d.peak_total_ts, t0)},
                           {"args", {{"bytes", d.peak_total_bytes}}}});
  }

  // Allocation lifetimes, the largest max_slices, grouped by scope: one thread per scope and lane
  // (allocations of a scope whose lifetimes overlap go to separate lanes, so slices never overlap
  // on a thread), named by the scope, threads of a scope next to each other.
  std::vector<size_t> order(an.lifetimes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (order.size() > opts.max_slices) {
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return an.lifetimes[a].bytes > an.lifetimes[b].bytes; });
    order.resize(opts.max_slices);
    std::sort(order.begin(), order.end());
  }
  std::map<std::pair<uint16_t, std::string>, std::vector<uint64_t>> lanes;  // (device, scope) -> end time of each lane
  std::map<std::tuple<uint16_t, std::string, size_t>, int> lane_tid;
  int next_tid = kFirstAllocationThread;
  for (size_t i : order) {
    const auto& l = an.lifetimes[i];
    std::string name = an.str(l.name_id);
    if (name.empty() && l.stack_id != StackId::kNone) {  // a traced program's allocation: its innermost user frame
      const auto frames = planner::user_frames(an, l.stack_id, 1);
      if (!frames.empty()) name = frames.front();
    }
    if (name.empty()) name = std::string(category_name(l.category)) + " " + format_bytes(l.bytes);
    std::string scope = an.str(l.scope_id);
    if (scope.empty()) scope = "(unscoped)";
    const uint64_t end = l.freed() ? l.t_free : std::max(t_end, l.t_alloc);
    auto& ends = lanes[{l.device, scope}];
    size_t lane = 0;
    while (lane < ends.size() && ends[lane] > l.t_alloc) ++lane;
    if (lane == ends.size()) ends.push_back(end);
    else ends[lane] = end;
    const int pid = pid_of(l.device);
    auto [it, fresh] = lane_tid.emplace(std::make_tuple(l.device, scope, lane), 0);
    if (fresh) {
      it->second = next_tid++;
      sink->add(meta_event("thread_name", pid, it->second, lane == 0 ? scope : scope + " (" + std::to_string(lane + 1) + ")"));
    }
    ordered_json args = {{"bytes", l.bytes}, {"size", format_bytes(l.bytes)}, {"scope", an.str(l.scope_id)},
                         {"shape", an.str(l.shape_id)}, {"dtype", std::string(dtype_name(l.dtype))},
                         {"category", std::string(category_name(l.category))}, {"mem_kind", std::string(mem_kind_name(l.mem_kind))},
                         {"uses", l.uses}, {"freed", l.freed()}};
    sink->add(ordered_json{{"ph", "X"}, {"cat", std::string(category_name(l.category))}, {"name", name}, {"pid", pid},
                           {"tid", it->second}, {"ts", to_us(l.t_alloc, t0)}, {"dur", to_us(end, t0) - to_us(l.t_alloc, t0)},
                           {"args", args}});
  }
  // Thread order: by scope name (sort index = the thread id given in scope order).
  {
    std::vector<std::pair<std::tuple<uint16_t, std::string, size_t>, int>> v(lane_tid.begin(), lane_tid.end());
    int idx = 0;
    for (const auto& [key, tid] : v)
      sink->add(ordered_json{{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid_of(std::get<0>(key))}, {"tid", tid},
                             {"args", {{"sort_index", kFirstAllocationThread + idx++}}}});
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
      // A plain id is global in the Trace Event Format: the process in it keeps the runs' (and
      // devices') markers apart when one file holds several.
      std::string id = "p" + std::to_string(pid_of(b->device)) + ".m" + std::to_string(markers++);
      std::string name = std::string(trace.str(b->name_id));
      sink->add(ordered_json{{"ph", "b"}, {"cat", "marker"}, {"name", name}, {"id", id}, {"pid", pid_of(b->device)},
                             {"tid", 0}, {"ts", to_us(b->timestamp_ns, t0)}, {"args", {{"scope", trace.str(b->scope_id)}}}});
      sink->add(ordered_json{{"ph", "e"}, {"cat", "marker"}, {"name", name}, {"id", id}, {"pid", pid_of(b->device)},
                             {"tid", 0}, {"ts", to_us(std::max(r.timestamp_ns, b->timestamp_ns), t0)}});
    } else if (kind == EventKind::kCounter) {
      // A counter the run recorded (a serving run's KV pool occupancy): a counter track of its own.
      const std::string name(trace.str(r.name_id));
      sink->add(ordered_json{{"ph", "C"}, {"cat", "counter"}, {"name", name}, {"pid", pid_of(r.device)}, {"tid", 0},
                             {"ts", to_us(r.timestamp_ns, t0)}, {"args", {{"value", r.bytes}}}});
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
