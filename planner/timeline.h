// Downsampled timeline (internal to the planner): the time range [t0, t1] is cut into points/2
// buckets; each keeps its first minimum and first maximum sample, so the peak is always present.
// Samples arrive in replay order (time never decreases), so only the buckets that received a
// sample are stored: memory is bounded by min(samples, points), not by points per device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace moeprof::planner {

class Timeline {
 public:
  void init(size_t points, uint64_t t0, uint64_t t1) {
    buckets_ = points / 2;
    if (points > 0 && buckets_ == 0) buckets_ = 1;
    t0_ = t0;
    scale_ = static_cast<double>(buckets_) / (static_cast<double>(t1 >= t0 ? t1 - t0 : 0) + 1.0);
    points_ = points;
  }
  // Streaming: the time range is not known in advance. Buckets start 1 ns wide from the first
  // sample; whenever they would exceed points/2 the width doubles and neighbours merge (each
  // merged bucket keeps its first minimum and first maximum, so the peak stays a point).
  void init_adaptive(size_t points) {
    buckets_ = points / 2;
    if (points > 0 && buckets_ == 0) buckets_ = 1;
    points_ = points;
    adaptive_ = true;
    width_log2_ = 0;
    started_ = false;
  }
  // Two samples per allocation and free: the common case, a sample in the last bucket of a
  // started adaptive timeline, is inline; the rest goes to sample_slow().
  void sample(uint64_t ts, uint64_t v) {
    if (adaptive_ && started_ && ts >= t0_ && width_log2_ < 64 && !out_.empty()) {
      Bucket& k = out_.back();
      if (((ts - t0_) >> width_log2_) == k.bucket) {
        if (v < k.lo.second) k.lo = {ts, v};
        if (v > k.hi.second) k.hi = {ts, v};
        return;
      }
    }
    sample_slow(ts, v);
  }
  std::vector<std::pair<uint64_t, uint64_t>> points() const {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (const Bucket& k : out_) {
      const auto a = k.lo, c = k.hi;
      if (a == c) {
        out.push_back(a);
      } else if (a.first <= c.first) {
        out.push_back(a);
        out.push_back(c);
      } else {
        out.push_back(c);
        out.push_back(a);
      }
    }
    if (out.size() > points_) out.resize(points_);  // only when points_ == 1
    return out;
  }

 private:
  // Out of line, so that sample() stays small enough to be inlined at its callers.
  __attribute__((noinline)) void sample_slow(uint64_t ts, uint64_t v) {
    if (buckets_ == 0) return;
    if (adaptive_) {
      if (!started_) {
        t0_ = ts;
        started_ = true;
      }
      // The width is a power of two: a shift, not a division (two samples per allocation and
      // free, on the replay's critical path).
      const uint64_t dt = ts > t0_ ? ts - t0_ : 0;
      auto bucket = [&] { return width_log2_ < 64 ? dt >> width_log2_ : 0; };  // (2^64 holds any range)
      uint64_t b = bucket();
      while (b >= buckets_) {
        widen();
        b = bucket();
      }
      put(b, ts, v);
      return;
    }
    // Clamped in floating point before the conversion: a sample outside [t0, t1] lands in the
    // first or last bucket.
    const double x = ts > t0_ ? static_cast<double>(ts - t0_) * scale_ : 0.0;
    const size_t b = x >= static_cast<double>(buckets_ - 1) ? buckets_ - 1 : static_cast<size_t>(x);
    put(b, ts, v);
  }
  struct Bucket {
    size_t bucket;
    std::pair<uint64_t, uint64_t> lo, hi;
  };
  void put(size_t b, uint64_t ts, uint64_t v) {
    if (out_.empty() || out_.back().bucket != b) {
      out_.push_back(Bucket{b, {ts, v}, {ts, v}});
      return;
    }
    Bucket& k = out_.back();
    if (v < k.lo.second) k.lo = {ts, v};
    if (v > k.hi.second) k.hi = {ts, v};
  }
  void widen() {
    ++width_log2_;  // at most 64: sample() stops there
    std::vector<Bucket> merged;
    for (Bucket k : out_) {
      k.bucket /= 2;
      if (!merged.empty() && merged.back().bucket == k.bucket) {
        Bucket& m = merged.back();  // m is earlier in time: it wins ties
        if (k.lo.second < m.lo.second) m.lo = k.lo;
        if (k.hi.second > m.hi.second) m.hi = k.hi;
      } else {
        merged.push_back(k);
      }
    }
    out_.swap(merged);
  }
  size_t buckets_ = 0, points_ = 0;
  uint64_t t0_ = 0;
  double scale_ = 0.0;
  bool adaptive_ = false, started_ = false;
  unsigned width_log2_ = 0;  // the buckets' width is 2^width_log2_ ns
  std::vector<Bucket> out_;
};

}  // namespace moeprof::planner
