// Hash maps of the replay's hot path (internal to the planner).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "core/huge_pages.h"
#include "planner/analysis.h"

namespace moeprof::planner {

// Room for `need` elements in a table that grows with what is live: capacity doubles (as
// push_back's would) and the new storage is advised for huge pages (core/huge_pages.h) before
// anything touches it. On the 2-core CPU machine the streamed replay of live65536-v1 at 1e7
// events took 76,000 page faults without, a quarter of its CPU time, and 23,000 with.
// (The elements move into the new storage after the advice, so that their copies are made in
// huge pages too.)
template <class V>
inline void reserve_huge(V& v, size_t need) {
  if (need <= v.capacity()) return;
  V fresh;
  fresh.reserve(std::max(need, 2 * v.capacity()));
  advise_huge(fresh.data(), fresh.capacity() * sizeof(typename V::value_type));
  fresh.insert(fresh.end(), std::make_move_iterator(v.begin()), std::make_move_iterator(v.end()));
  v.swap(fresh);
}

// A hint: every cache line of [p, p + n) is loaded (an object of more than a line, or unaligned,
// spans two or three; prefetching only its ends would leave the middle one to miss).
inline void prefetch_bytes(const void* p, size_t n) {
  constexpr uintptr_t kLine = 64;
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~(kLine - 1);
  const uintptr_t last = (reinterpret_cast<uintptr_t>(p) + n - 1) & ~(kLine - 1);
  for (uintptr_t a = first; a <= last; a += kLine) __builtin_prefetch(reinterpret_cast<const void*>(a));
}
template <class T>
inline void prefetch_object(const T* p) {
  prefetch_bytes(p, sizeof(T));
}

// Open-addressing map from a pair of words to a uint32, for the hot per-event lookups:
// (device, address) -> allocation state, (device, scope) -> scope-chain slots, (scope, name or
// stack) -> allocation-group label, (device, bytes) -> hand-off key. Linear probing, power-of-two
// capacity, at most half full; erase() shifts the entries after it back (no tombstones).
// `First` is the first word's type: with a device number (uint16_t: DeviceMap) an entry is 16 B,
// four to a cache line and never across two; with a 64-bit word (PairMap) it is 24 B.
template <class First>
class BasicPairMap {
 public:
  using Key = std::pair<First, uint64_t>;
  BasicPairMap() { rehash(256); }

  // The value for the key, inserted as 0 when absent.
  uint32_t& operator[](Key k) {
    if ((size_ + 1) * 2 > cap_) rehash(cap_ * 2);
    size_t i = hash(k) & (cap_ - 1);
    while (true) {
      Entry& e = entries_[i];
      if (!e.used) {
        e.used = true;
        e.set(k);
        e.value = 0;
        ++size_;
        return e.value;
      }
      if (e.is(k)) return e.value;
      i = (i + 1) & (cap_ - 1);
    }
  }
  // nullptr when absent.
  uint32_t* find(Key k) {
    size_t i = hash(k) & (cap_ - 1);
    while (true) {
      Entry& e = entries_[i];
      if (!e.used) return nullptr;
      if (e.is(k)) return &e.value;
      i = (i + 1) & (cap_ - 1);
    }
  }
  const uint32_t* find(Key k) const { return const_cast<BasicPairMap*>(this)->find(k); }
  // A hint: the key's home entry is loaded into the cache (the streamed replay asks for the
  // entries of records a few places ahead, whose lookups would otherwise each miss).
  void prefetch(Key k) const { __builtin_prefetch(&entries_[hash(k) & (cap_ - 1)]); }
  // Removes the key; false when absent. Pointers and references into the map are invalidated.
  bool erase(Key k) {
    const size_t mask = cap_ - 1;
    size_t i = hash(k) & mask;
    while (true) {
      if (!entries_[i].used) return false;
      if (entries_[i].is(k)) break;
      i = (i + 1) & mask;
    }
    // Backward shift: an entry after the hole moves into it unless its home lies in (hole, entry].
    for (size_t j = (i + 1) & mask; entries_[j].used; j = (j + 1) & mask) {
      const size_t home = hash(entries_[j].key()) & mask;
      const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
      if (stays) continue;
      entries_[i] = entries_[j];
      i = j;
    }
    entries_[i].used = false;
    --size_;
    return true;
  }
  template <typename F>
  void for_each(F&& f) const {
    for (const Entry& e : entries_) {
      if (e.used) f(e.key(), e.value);
    }
  }
  size_t size() const { return size_; }
  // The entry where a key's probe starts in a table of `capacity` entries (tests).
  static size_t home_entry(Key k, size_t capacity) { return hash(k) & (capacity - 1); }

 private:
  struct Entry {
    uint64_t second = 0;
    uint32_t value = 0;
    bool used = false;
    First first{};
    Key key() const { return {first, second}; }
    bool is(Key k) const { return second == k.second && first == k.first; }
    void set(Key k) { first = k.first, second = k.second; }
  };
  static_assert(sizeof(Entry) == (sizeof(First) <= 2 ? 16 : 24), "16-B entries for a device map, 24 B for a pair map");
  static size_t hash(Key k) {
    uint64_t x = uint64_t{k.first} * 0x9e3779b97f4a7c15ULL ^ (k.second + 0x632be59bd9b4e019ULL);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return static_cast<size_t>(x);
  }
  void rehash(size_t cap) {
    std::vector<Entry> old = std::move(entries_);
    entries_ = std::vector<Entry>();
    reserve_huge(entries_, cap);
    entries_.assign(cap, Entry{});
    cap_ = cap;
    size_ = 0;
    for (const Entry& e : old) {
      if (e.used) (*this)[e.key()] = e.value;
    }
  }
  std::vector<Entry> entries_;
  size_t cap_ = 0, size_ = 0;
};
using PairMap = BasicPairMap<uint64_t>;
using DeviceMap = BasicPairMap<uint16_t>;  // (device, a 64-bit word) -> uint32

// (label, bytes) -> count for the allocation groups (AllocGroupCount; a count of 0 marks an empty
// slot): 16 B an entry, at most 3/4 full, never erased. A trace whose sizes do not repeat has one
// entry per allocation, each a random access into a table of 16 B x the groups, so the entries
// are as small as the key allows and a large table asks for huge pages (fewer TLB misses).
class GroupCounter {
 public:
  GroupCounter() { table_ = alloc_table(1024); }
  void add(uint32_t label, uint64_t bytes) {
    if ((size_ + 1) * 4 > cap_ * 3) grow();
    const size_t mask = cap_ - 1;
    for (size_t i = hash(label, bytes) & mask;; i = (i + 1) & mask) {
      AllocGroupCount& e = table_[i];
      if (e.count == 0) {
        e = AllocGroupCount{bytes, label, 1};
        ++size_;
        return;
      }
      if (e.bytes == bytes && e.label == label) {
        ++e.count;
        return;
      }
    }
  }
  size_t size() const { return size_; }
  // The entries, in no order; the counter is left empty (its table freed).
  std::vector<AllocGroupCount> take() {
    std::vector<AllocGroupCount> out;
    out.reserve(size_);
    for (size_t i = 0; i < cap_; ++i)
      if (table_[i].count != 0) out.push_back(table_[i]);
    table_ = alloc_table(1024);
    size_ = 0;
    return out;
  }

 private:
  struct Free {
    void operator()(AllocGroupCount* p) const { std::free(p); }
  };
  using Table = std::unique_ptr<AllocGroupCount[], Free>;
  Table alloc_table(size_t cap) {
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t bytes = cap * sizeof(AllocGroupCount);
    void* p = bytes >= kHuge ? std::aligned_alloc(kHuge, bytes) : std::malloc(bytes);
    if (p == nullptr) throw std::bad_alloc();
    advise_huge(p, bytes);  // from 2 MiB on aligned to 2 MiB: all of it
    std::memset(p, 0, bytes);
    cap_ = cap;
    return Table(static_cast<AllocGroupCount*>(p));
  }
  static size_t hash(uint32_t label, uint64_t bytes) {
    uint64_t x = bytes * 0x9e3779b97f4a7c15ULL ^ (uint64_t{label} * 0xc2b2ae3d27d4eb4fULL + 0x632be59bd9b4e019ULL);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return static_cast<size_t>(x);
  }
  void grow() {
    const size_t old_cap = cap_;
    Table old = std::move(table_);
    table_ = alloc_table(old_cap * 2);
    const size_t mask = cap_ - 1;
    for (size_t k = 0; k < old_cap; ++k) {
      const AllocGroupCount& e = old[k];
      if (e.count == 0) continue;
      size_t i = hash(e.label, e.bytes) & mask;
      while (table_[i].count != 0) i = (i + 1) & mask;
      table_[i] = e;
    }
  }
  Table table_;
  size_t cap_ = 0, size_ = 0;
};

// Allocation state per (device, address). A freed allocation leaves its address marked freed, so
// a second free is told apart from a free of an unknown address. State: (slot + 1), | kFreedBit
// once freed.
class AddressMap {
 public:
  static constexpr uint32_t kFreedBit = 1u << 31;
  uint32_t& slot(uint16_t device, uint64_t address) { return map_[{device, address}]; }
  uint32_t* find(uint16_t device, uint64_t address) { return map_.find({device, address}); }
  void prefetch(uint16_t device, uint64_t address) const { map_.prefetch({device, address}); }
  size_t size() const { return map_.size(); }

 private:
  DeviceMap map_;
};

}  // namespace moeprof::planner
