#include "executor/graph_pool.h"

#include "executor/backend.h"

namespace moeprof {

GraphPool::~GraphPool() {
  for (Segment& s : segs_) s.mem.reset();
}

void GraphPool::set_scope(std::string scope) {
  scope_ = std::move(scope);
  scope_peak_ = 0;
  scope_peak_set_.clear();
  scope_blocks_.clear();
}

std::vector<GraphPool::LiveBlock> GraphPool::scope_blocks() const {
  std::vector<LiveBlock> v;
  for (const auto& [k, bytes] : scope_blocks_) v.push_back(LiveBlock{k.second, k.first, bytes});
  return v;
}

uint64_t GraphPool::segment_bytes(uint64_t rounded) {
  constexpr uint64_t kMiB = 1ull << 20;
  if (rounded <= kMiB) return 2 * kMiB;
  if (rounded <= 10 * kMiB) return 20 * kMiB;
  return (rounded + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
}

Result<void*> GraphPool::allocate(size_t bytes, const AllocTag& tag) {
  const uint64_t need = bytes == 0 ? kGranule : (static_cast<uint64_t>(bytes) + kGranule - 1) / kGranule * kGranule;
  // Best fit over every free block of every segment.
  size_t best_seg = segs_.size();
  uint64_t best_off = 0, best_size = UINT64_MAX;
  for (size_t i = 0; i < segs_.size(); ++i)
    for (const auto& [off, sz] : segs_[i].free)
      if (sz >= need && sz < best_size) {
        best_seg = i;
        best_off = off;
        best_size = sz;
      }
  if (best_seg == segs_.size()) {
    const uint64_t size = segment_bytes(need);
    GraphPool* saved = be_.graph_pool();
    be_.set_graph_pool(nullptr);  // the segment itself is an ordinary, recorded allocation
    auto mem = be_.empty(DType::kU8, 1, static_cast<int64_t>(size), AllocTag{"graph_pool_segment", scope_, Category::kGraph},
                         MemKind::kDevice);
    be_.set_graph_pool(saved);
    if (!mem.is_ok()) return mem.status();
    Segment s;
    s.mem = std::move(mem).value();
    s.base = reinterpret_cast<uint64_t>(s.mem.raw());
    s.size = size;
    s.free.emplace(0, size);
    segs_.push_back(std::move(s));
    reserved_ += size;
    if (!growth_.empty() && growth_.back().first == scope_)
      growth_.back().second += size;
    else
      growth_.emplace_back(scope_, size);
    best_seg = segs_.size() - 1;
    best_off = 0;
    best_size = size;
  }
  Segment& s = segs_[best_seg];
  s.free.erase(best_off);
  if (best_size > need) s.free.emplace(best_off + need, best_size - need);
  const uint64_t addr = s.base + best_off;
  live_blocks_.emplace(addr, Block{best_seg, best_off, need, tag.name, tag.scope});
  live_ += need;
  uint64_t& largest = scope_blocks_[{tag.scope, tag.name}];
  if (need > largest) largest = need;
  if (live_ > live_peak_) live_peak_ = live_;
  if (live_ > scope_peak_) {
    scope_peak_ = live_;
    scope_peak_set_.clear();
    for (const auto& [a, b] : live_blocks_) scope_peak_set_.push_back(LiveBlock{b.name, b.scope, b.size});
  }
  return reinterpret_cast<void*>(addr);
}

void GraphPool::release(void* p) {
  auto it = live_blocks_.find(reinterpret_cast<uint64_t>(p));
  if (it == live_blocks_.end()) return;
  const Block b = it->second;
  live_blocks_.erase(it);
  live_ -= b.size;
  auto& fr = segs_[b.seg].free;
  uint64_t off = b.offset, size = b.size;
  auto next = fr.lower_bound(off);
  if (next != fr.end() && next->first == off + size) {  // coalesce with the block after
    size += next->second;
    next = fr.erase(next);
  }
  if (next != fr.begin()) {  // and with the block before
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      off = prev->first;
      size += prev->second;
      fr.erase(prev);
    }
  }
  fr.emplace(off, size);
}

}  // namespace moeprof
