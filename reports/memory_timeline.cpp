#include "reports/memory_timeline.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <unordered_map>

#include "core/dtype.h"
#include "planner/stacks.h"

namespace moeprof::reports {

using nlohmann::ordered_json;

namespace {

constexpr uint32_t kNeverFreed = UINT32_MAX;

// Interned strings of the timeline (names, scopes, shapes, dtypes, frames); index 0 is "".
class Strings {
 public:
  Strings() { id(""); }
  size_t id(const std::string& s) {
    auto [it, fresh] = ids_.emplace(s, list_.size());
    if (fresh) list_.push_back(s);
    return it->second;
  }
  ordered_json json() const { return ordered_json(list_); }

 private:
  std::unordered_map<std::string, size_t> ids_;
  std::vector<std::string> list_;
};

// (position, live bytes after the event) of a step series, downsampled to about `points` points:
// per bucket of positions the first minimum and first maximum; `keep` is always present, exact.
std::vector<std::pair<uint32_t, uint64_t>> downsample(const std::vector<std::pair<uint32_t, uint64_t>>& v, size_t points,
                                                      uint32_t keep) {
  if (v.size() <= points || points < 4) return v;
  const size_t buckets = points / 2;
  const uint32_t lo = v.front().first, hi = v.back().first;
  const double scale = static_cast<double>(buckets) / (static_cast<double>(hi - lo) + 1.0);
  std::vector<std::pair<uint32_t, uint64_t>> out;
  size_t i = 0;
  while (i < v.size()) {
    const size_t b = static_cast<size_t>(static_cast<double>(v[i].first - lo) * scale);
    size_t j = i, imin = i, imax = i, ikeep = SIZE_MAX;
    while (j < v.size() && static_cast<size_t>(static_cast<double>(v[j].first - lo) * scale) == b) {
      if (v[j].second < v[imin].second) imin = j;
      if (v[j].second > v[imax].second) imax = j;
      if (v[j].first == keep) ikeep = j;
      ++j;
    }
    std::vector<size_t> pick = {imin, imax};
    if (ikeep != SIZE_MAX) pick.push_back(ikeep);
    std::sort(pick.begin(), pick.end());
    pick.erase(std::unique(pick.begin(), pick.end()), pick.end());
    for (size_t k : pick) out.push_back(v[k]);
    i = j;
  }
  return out;
}

bool is_layer_word(std::string_view w) {
  for (const char* k : {"layer", "layers", "blk", "block", "blocks", "h"})
    if (w == k) return true;
  return false;
}

}  // namespace

long layer_of_scope(std::string_view scope, std::string* label) {
  size_t start = 0;
  while (start <= scope.size()) {
    size_t end = scope.find('/', start);
    if (end == std::string_view::npos) end = scope.size();
    std::string_view c = scope.substr(start, end - start);
    size_t d = c.size();
    while (d > 0 && std::isdigit(static_cast<unsigned char>(c[d - 1]))) --d;
    if (d < c.size() && c.size() - d <= 9) {
      std::string_view word = c.substr(0, d);
      if (!word.empty() && (word.back() == '.' || word.back() == '_')) word.remove_suffix(1);
      if (is_layer_word(word)) {
        if (label) *label = std::string(c);
        return std::stol(std::string(c.substr(d)));
      }
    }
    start = end + 1;
  }
  return -1;
}

ordered_json memory_timeline_json(const planner::RunAnalysis& run, const TimelineOptions& opts) {
  if (run.devices.empty() || run.lifetimes.empty()) return nullptr;
  const planner::DeviceAnalysis& dev = run.devices[run.peak_device];
  std::vector<const planner::Lifetime*> lts;
  for (const auto& l : run.lifetimes)
    if (l.device == dev.device && l.bytes > 0) lts.push_back(&l);
  if (lts.empty()) return nullptr;
  uint64_t t0 = UINT64_MAX;
  uint32_t end_pos = 0;
  for (const auto* l : lts) {
    t0 = std::min(t0, l->t_alloc);
    end_pos = std::max(end_pos, l->alloc_index + 1);
    if (l->free_index != kNeverFreed) end_pos = std::max(end_pos, l->free_index + 1);
  }
  auto rel = [&](uint64_t t) { return t >= t0 ? t - t0 : 0; };

  ordered_json j;
  j["device"] = dev.device;
  j["end_position"] = end_pos;

  // The x axis. Layers: the first activation allocation of each layer, in replay order.
  std::map<std::string, uint32_t> layer_start;
  uint32_t last_layer_alloc = 0;
  for (const auto* l : lts) {
    if (!counts_as_activation(l->category)) continue;
    std::string label;
    if (layer_of_scope(run.str(l->scope_id), &label) < 0) continue;
    auto [it, fresh] = layer_start.emplace(label, l->alloc_index);
    if (!fresh) it->second = std::min(it->second, l->alloc_index);
    last_layer_alloc = std::max(last_layer_alloc, l->alloc_index);
  }
  ordered_json axis;
  ordered_json anchors = ordered_json::array(), labels = ordered_json::array();
  if (!layer_start.empty()) {
    std::vector<std::pair<uint32_t, std::string>> starts;
    for (const auto& [label, pos] : layer_start) starts.emplace_back(pos, label);
    std::sort(starts.begin(), starts.end());
    axis["unit"] = "layer";
    if (starts.front().first > 0) {
      anchors.push_back({0, -1.0});
      labels.push_back({-1.0, "set-up"});
    }
    for (size_t k = 0; k < starts.size(); ++k) {
      anchors.push_back({starts[k].first, static_cast<double>(k)});
      labels.push_back({static_cast<double>(k), starts[k].second});
    }
    const uint32_t fwd_end = std::max(last_layer_alloc + 1, starts.back().first + 1);
    anchors.push_back({fwd_end, static_cast<double>(starts.size())});
    if (end_pos > fwd_end) {
      labels.push_back({static_cast<double>(starts.size()), "end"});
      anchors.push_back({end_pos, static_cast<double>(starts.size()) + 1.0});
    }
  } else {
    // Time: (position, ms since the first event) of allocs and frees, thinned to ~500 anchors.
    std::vector<std::pair<uint32_t, uint64_t>> pts;
    for (const auto* l : lts) {
      pts.emplace_back(l->alloc_index, rel(l->t_alloc));
      if (l->free_index != kNeverFreed) pts.emplace_back(l->free_index, rel(l->t_free));
    }
    std::sort(pts.begin(), pts.end());
    const size_t step = std::max<size_t>(1, pts.size() / 500);
    axis["unit"] = "ms";
    for (size_t i = 0; i < pts.size(); i += step) anchors.push_back({pts[i].first, static_cast<double>(pts[i].second) / 1e6});
    if ((pts.size() - 1) % step != 0) anchors.push_back({pts.back().first, static_cast<double>(pts.back().second) / 1e6});
  }
  axis["anchors"] = anchors;
  axis["labels"] = labels;
  j["axis"] = axis;

  const uint32_t peak_pos = dev.peak_activation_index;
  ordered_json peak;
  peak["position"] = peak_pos;
  peak["time_ns"] = rel(dev.peak_activation_ts);
  peak["activation_bytes"] = dev.peak_activation_bytes;
  peak["total_bytes"] = dev.live_at_activation_peak.total();
  j["peak"] = peak;

  // The largest max_allocations one by one (in allocation order), the rest summarized.
  std::vector<size_t> order(lts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<bool> listed(lts.size(), true);
  if (lts.size() > opts.max_allocations) {
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lts[a]->bytes > lts[b]->bytes; });
    for (size_t i = opts.max_allocations; i < order.size(); ++i) listed[order[i]] = false;
  }
  ordered_json cats = ordered_json::array();
  for (int c = 0; c < kNumCategories; ++c) cats.push_back(std::string(category_name(static_cast<Category>(c))));
  j["categories"] = cats;
  Strings strings;
  ordered_json rows = ordered_json::array();
  std::vector<std::pair<uint32_t, int64_t>> omitted_events[2];  // [0] activation panel, [1] the rest
  uint64_t omitted = 0;
  for (size_t i = 0; i < lts.size(); ++i) {
    const planner::Lifetime& l = *lts[i];
    const bool freed = l.free_index != kNeverFreed;
    if (!listed[i]) {
      ++omitted;
      auto& ev = omitted_events[counts_as_activation(l.category) ? 0 : 1];
      ev.emplace_back(l.alloc_index, static_cast<int64_t>(l.bytes));
      if (freed) ev.emplace_back(l.free_index, -static_cast<int64_t>(l.bytes));
      continue;
    }
    std::string frame;
    if (l.stack_id != StackId::kNone) {
      for (const auto& f : planner::user_frames(run, l.stack_id, 4)) frame += (frame.empty() ? "" : "\n") + f;
    }
    rows.push_back({l.alloc_index, freed ? static_cast<int64_t>(l.free_index) : -1, l.bytes, static_cast<int>(l.category),
                    strings.id(run.str(l.name_id)), strings.id(run.str(l.scope_id)), strings.id(run.str(l.shape_id)),
                    strings.id(std::string(dtype_name(l.dtype))), strings.id(frame), rel(l.t_alloc),
                    freed ? static_cast<int64_t>(rel(l.t_free)) : -1});
  }
  j["columns"] = {"alloc_position", "free_position", "bytes", "category", "name", "scope", "shape", "dtype", "frames",
                  "alloc_ns", "free_ns"};
  j["allocations"] = rows;
  ordered_json om;
  om["allocations"] = omitted;
  for (int p = 0; p < 2; ++p) {
    auto& ev = omitted_events[p];
    std::stable_sort(ev.begin(), ev.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::pair<uint32_t, uint64_t>> steps;
    int64_t live = 0;
    for (size_t i = 0; i < ev.size(); ++i) {
      live += ev[i].second;
      if (i + 1 < ev.size() && ev[i + 1].first == ev[i].first) continue;  // one point per position
      steps.emplace_back(ev[i].first, static_cast<uint64_t>(live));
    }
    // The value at the peak position, exact even when no summarized event happens there.
    if (!steps.empty()) {
      auto it = std::upper_bound(steps.begin(), steps.end(), std::make_pair(peak_pos, UINT64_MAX));
      const uint64_t at_peak = it == steps.begin() ? 0 : std::prev(it)->second;
      if (it == steps.begin() || std::prev(it)->first != peak_pos) steps.insert(it, {peak_pos, at_peak});
      om[p == 0 ? "activation_bytes_at_peak" : "other_bytes_at_peak"] = at_peak;
    } else {
      om[p == 0 ? "activation_bytes_at_peak" : "other_bytes_at_peak"] = 0;
    }
    ordered_json series = ordered_json::array();
    for (const auto& [pos, b] : downsample(steps, opts.summary_points, peak_pos)) series.push_back({pos, b});
    om[p == 0 ? "activation" : "other"] = series;
  }
  j["summarized"] = om;
  j["strings"] = strings.json();
  return j;
}

}  // namespace moeprof::reports
