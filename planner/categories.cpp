#include "core/utf8.h"
#include "planner/categories.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "planner/address_map.h"

namespace moeprof::planner {

Result<std::vector<CategoryRule>> parse_category_rules(std::string_view text, const std::string& source) {
  std::vector<CategoryRule> out;
  size_t pos = 0, line_no = 0;
  while (pos <= text.size()) {
    const size_t nl = text.find('\n', pos);
    std::string line(text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos));
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++line_no;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream in(line);
    std::string cat;
    if (!(in >> cat)) continue;
    const std::string where = source + ":" + std::to_string(line_no) + ": ";
    CategoryRule r;
    if (!parse_category(cat, &r.category))
      return Status::bad_input(where + "unknown category '" + printable(cat) +
                               "' (unknown, weights, kv_cache, activation, workspace, communication, graph)");
    // The selector is parsed as the target of a drop rule, so both files share one grammar.
    std::string rest((std::istreambuf_iterator<char>(in)), {});
    auto rules = parse_rules("drop " + rest, source);
    if (!rules) {
      std::string msg = rules.status().message();
      const size_t cut = msg.find(": ");
      return Status::bad_input(where + (cut == std::string::npos ? msg : msg.substr(cut + 2)));
    }
    if (rules->empty()) return Status::bad_input(where + "a category rule needs a selector");
    r.selector = (*rules)[0].target;
    r.origin = source + ":" + std::to_string(line_no);
    out.push_back(std::move(r));
  }
  return out;
}

Result<std::vector<CategoryRule>> load_category_rules(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::bad_input("cannot read category rules " + path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  return parse_category_rules(ss.str(), path);
}

bool should_infer_categories(const RunMeta& meta, bool any_unknown, CategoryInference mode, bool has_rules) {
  if (mode == CategoryInference::kKeep) return false;
  if (mode == CategoryInference::kInfer || has_rules) return true;
  const bool traced =
      meta.backend == "cupti" || meta.backend == "torch-snapshot" || meta.mode == "traced" || meta.mode == "imported";
  return any_unknown && traced;
}

bool should_infer_categories(const Trace& trace, CategoryInference mode, bool has_rules) {
  bool any_unknown = false;
  for (const TraceRecord& r : trace.records)
    if (r.kind == EventKind::kAlloc && r.category == Category::kUnknown) {
      any_unknown = true;
      break;
    }
  return should_infer_categories(trace.meta, any_unknown, mode, has_rules);
}

std::string categories_note(const InferredCategories& c) {
  return "categories inferred (docs/metrics.md): " + std::to_string(c.persistent) + " persistent (counted as weights), " +
         std::to_string(c.transient) + " transient (activation), " + std::to_string(c.by_library) +
         " from library frames, " + std::to_string(c.driver) + " driver-internal (workspace), " +
         std::to_string(c.by_rule) + " by rule";
}

void PersistenceScan::Span::advance(uint64_t ts) {
  any = true;
  begin = std::min(begin, ts);
  if (ts <= end) return;
  end = ts;
  // Frees before the (new) end of the work are before its final end too.
  while (!late.empty() && late.front().free_ts < end) {
    std::pop_heap(late.begin(), late.end(), std::greater<>());
    late.pop_back();
  }
}

void PersistenceScan::Span::freed(const LateFree& f) {
  if (f.free_ts < end) return;  // before the work's end: not live at it
  late.push_back(f);
  std::push_heap(late.begin(), late.end(), std::greater<>());
}

void PersistenceScan::work(const TraceRecord& r) {
  if (r.kind == EventKind::kUse || r.kind == EventKind::kKernel) kernels_.advance(r.timestamp_ns);
  else if (r.kind == EventKind::kAlloc) allocs_.advance(r.timestamp_ns);
}

void PersistenceScan::replayed(const TraceRecord& r, uint64_t n) {
  if (r.kind == EventKind::kAlloc) {
    any_unknown_ |= r.category == Category::kUnknown;
    uint32_t& s = open_.slot(r.device, r.address);
    if (s != 0) {
      never_freed_.push_back(slab_[s - 1]);  // allocated over: the earlier one is never freed
    } else if (!spare_.empty()) {
      s = spare_.back() + 1;
      spare_.pop_back();
    } else {
      slab_.push_back({});
      s = static_cast<uint32_t>(slab_.size());
    }
    slab_[s - 1] = Open{n, r.timestamp_ns};
  } else if (r.kind == EventKind::kFree) {
    uint32_t* s = open_.find(r.device, r.address);
    if (s == nullptr || *s == 0) return;
    const Open& o = slab_[*s - 1];
    kernels_.freed(LateFree{r.timestamp_ns, o.n, o.alloc_ts});
    allocs_.freed(LateFree{r.timestamp_ns, o.n, o.alloc_ts});
    spare_.push_back(*s - 1);
    *s = 0;
  }
}

std::vector<uint64_t> PersistenceScan::persistent() const {
  const Span& w = kernels_.any ? kernels_ : allocs_;
  auto spans_work = [&](uint64_t alloc_ts) {  // as in infer_categories
    if (w.end <= w.begin) return true;
    const uint64_t from = std::max(alloc_ts, w.begin);
    return from <= w.end && 2 * (w.end - from) >= w.end - w.begin;
  };
  std::vector<uint64_t> out;
  std::vector<char> is_free(slab_.size(), 0);
  for (uint32_t i : spare_) is_free[i] = 1;
  for (size_t i = 0; i < slab_.size(); ++i)
    if (!is_free[i] && spans_work(slab_[i].alloc_ts)) out.push_back(slab_[i].n);
  for (const Open& o : never_freed_)
    if (spans_work(o.alloc_ts)) out.push_back(o.n);
  for (const LateFree& f : w.late)
    if (spans_work(f.alloc_ts)) out.push_back(f.n);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// Category a library allocated for, from the stack (innermost frame first).
Category stack_library_category(const RunAnalysis& t, StackId stack) {
  for (uint32_t fid : t.stacks.stack(stack)) {
    const StackFrame& f = t.stacks.frame(fid);
    const std::string_view file = t.str(f.file);
    if (f.kind == FrameKind::kNative) {
      if (contains(file, "libnccl")) return Category::kCommunication;
      for (std::string_view lib : {"libcublas", "libcudnn", "libcufft", "libcusparse"})
        if (contains(file, lib)) return Category::kWorkspace;
    } else if (contains(file, "-packages/torch/distributed")) {
      return Category::kCommunication;
    }
  }
  return Category::kUnknown;
}

// ... and from the scope.
Category scope_library_category(const RunAnalysis& t, StrId scope_id) {
  std::string scope(t.str(scope_id));
  std::transform(scope.begin(), scope.end(), scope.begin(), [](unsigned char c) { return std::tolower(c); });
  return contains(scope, "nccl") ? Category::kCommunication : Category::kUnknown;
}

// The two, each found once per id (InferredCategories::library_by_stack / _by_scope).
Category library_category(const RunAnalysis& t, const TraceRecord& r, InferredCategories* memo) {
  auto known = [](std::vector<uint8_t>& v, uint32_t id, auto&& find) {
    if (id >= v.size()) v.resize(static_cast<size_t>(id) + 1, 0);
    if (v[id] == 0) v[id] = static_cast<uint8_t>(1 + static_cast<uint8_t>(find()));
    return static_cast<Category>(v[id] - 1);
  };
  const Category c = known(memo->library_by_stack, index_of(r.stack_id), [&] { return stack_library_category(t, r.stack_id); });
  if (c != Category::kUnknown) return c;
  return known(memo->library_by_scope, index_of(r.scope_id), [&] { return scope_library_category(t, r.scope_id); });
}

}  // namespace

namespace {
// The first rule matching the allocation (counted), else unknown.
Category first_rule(const TraceRecord& r, const std::vector<CategoryRule>& rules, const RunAnalysis& shell, InferredCategories* out) {
  if (rules.empty()) return Category::kUnknown;
  Lifetime l;
  l.bytes = r.bytes;
  l.device = r.device;
  l.name_id = r.name_id;
  l.scope_id = r.scope_id;
  l.stack_id = r.stack_id;
  l.category = r.category;
  for (const CategoryRule& rule : rules)
    if (rule.selector.matches(l, shell)) {
      ++out->by_rule;
      return rule.category;
    }
  return Category::kUnknown;
}
}  // namespace

Category rule_category(const TraceRecord& r, const std::vector<CategoryRule>& rules, const RunAnalysis& shell,
                       InferredCategories* out) {
  const Category c = first_rule(r, rules, shell, out);
  return c == Category::kUnknown ? r.category : c;
}

Category decide_category(const TraceRecord& r, bool cupti, bool persistent, const std::vector<CategoryRule>& rules,
                         const RunAnalysis& shell, InferredCategories* out) {
  Category c = first_rule(r, rules, shell, out);
  if (c == Category::kUnknown && (c = library_category(shell, r, out)) != Category::kUnknown) ++out->by_library;
  // No API call behind it (CUPTI correlation id 0, no thread): the driver's own memory, e.g. the
  // static __device__ data of a kernel module loaded lazily at its first launch.
  if (c == Category::kUnknown && cupti && r.seq == 0 && r.tid == 0 && r.name_id == StrId::kNone &&
      r.stack_id == StackId::kNone) {
    c = Category::kWorkspace;
    ++out->driver;
  }
  if (c == Category::kUnknown) {
    c = persistent ? Category::kWeights : Category::kActivation;
    ++(persistent ? out->persistent : out->transient);
  }
  return c;
}

InferredCategories infer_categories(const Trace& t, const std::vector<CategoryRule>& rules, CategoryInference mode) {
  InferredCategories out;
  const size_t n = t.records.size();
  out.by_record.resize(n, Category::kUnknown);
  for (size_t i = 0; i < n; ++i) out.by_record[i] = t.records[i].category;
  // Replay order (timestamp, seq, file position) to tell which allocations are live at the end.
  std::vector<uint32_t> order;
  for (uint32_t i = 0; i < n; ++i)
    if (t.records[i].kind == EventKind::kAlloc || t.records[i].kind == EventKind::kFree) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const TraceRecord &x = t.records[a], &y = t.records[b];
    return x.timestamp_ns != y.timestamp_ns ? x.timestamp_ns < y.timestamp_ns : x.seq < y.seq;
  });
  // The end of the work: the last use or kernel, else the last allocation. An allocation still
  // live then outlived the computation (weights, caches, the outputs); teardown frees after it
  // do not make it transient.
  uint64_t work_begin = UINT64_MAX, work_end = 0;
  bool have_work = false;
  for (const TraceRecord& r : t.records)
    if (r.kind == EventKind::kUse || r.kind == EventKind::kKernel) {
      work_begin = std::min(work_begin, r.timestamp_ns);
      work_end = std::max(work_end, r.timestamp_ns);
      have_work = true;
    }
  if (!have_work)
    for (const TraceRecord& r : t.records)
      if (r.kind == EventKind::kAlloc) {
        work_begin = std::min(work_begin, r.timestamp_ns);
        work_end = std::max(work_end, r.timestamp_ns);
      }
  // Persistent: live at the end of the work and through at least half of it (an output kept from
  // one iteration while the next runs is live at the end, but only for its last part).
  auto spans_work = [&](uint64_t alloc_ts) {
    if (work_end <= work_begin) return true;
    const uint64_t from = std::max(alloc_ts, work_begin);
    return from <= work_end && 2 * (work_end - from) >= work_end - work_begin;
  };
  AddressMap open;  // (device, address) -> alloc record index + 1; 0 after a free
  std::vector<char> freed(n, 0);  // freed before the end of the work
  for (uint32_t i : order) {
    const TraceRecord& r = t.records[i];
    if (r.kind == EventKind::kAlloc) {
      open.slot(r.device, r.address) = i + 1;
    } else if (uint32_t* s = open.find(r.device, r.address); s && *s) {
      if (r.timestamp_ns < work_end) freed[*s - 1] = 1;
      *s = 0;
    }
  }
  // Rules see the trace through a RunAnalysis shell (strings and stacks) and a lifetime per record.
  RunAnalysis shell;
  shell.strings = t.strings.all();
  shell.stacks = t.stacks;
  const bool cupti = t.meta.backend == "cupti";
  for (uint32_t i = 0; i < n; ++i) {
    const TraceRecord& r = t.records[i];
    if (r.kind != EventKind::kAlloc) continue;
    if (!decides_category(r, mode)) {
      if (!rules.empty()) out.by_record[i] = rule_category(r, rules, shell, &out);
      continue;
    }
    const Category c = decide_category(r, cupti, !freed[i] && spans_work(r.timestamp_ns), rules, shell, &out);
    out.by_record[i] = c;
  }
  return out;
}

}  // namespace moeprof::planner
