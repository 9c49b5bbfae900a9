#include "executor/op_profile.h"

#include <algorithm>
#include <chrono>
#include <map>

namespace moeprof {

namespace {

class HostOpClock final : public OpClock {
 public:
  std::string name() const override { return "host steady_clock"; }
  Result<int64_t> mark() override {
    marks_.push_back(std::chrono::steady_clock::now());
    return static_cast<int64_t>(marks_.size()) - 1;
  }
  Result<double> seconds(int64_t a, int64_t b) override {
    if (a < 0 || b <= a || b >= static_cast<int64_t>(marks_.size()))
      return Status::run_failure("op clock: marks " + std::to_string(a) + ", " + std::to_string(b) + " out of range");
    return std::chrono::duration<double>(marks_[b] - marks_[a]).count();
  }

 private:
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

}  // namespace

std::unique_ptr<OpClock> make_host_op_clock() { return std::make_unique<HostOpClock>(); }

DevicePeaks known_device_peaks(const std::string& device_name) {
  // Dense bf16 tensor-core rates and HBM bandwidths from NVIDIA's product pages (SXM parts;
  // the sparse figures are twice the dense ones). Substrings of cudaDeviceProp::name.
  struct Known {
    const char* name;
    double tflops, tbps;
  };
  static const Known kKnown[] = {
      {"H200", 989.4, 4.8},   // H200 SXM: 1,979 TFLOPS bf16 with sparsity, 4.8 TB/s HBM3e
      {"H100", 989.4, 3.35},  // H100 SXM5: 1,979 TFLOPS bf16 with sparsity, 3.35 TB/s HBM3
      {"A100", 312.0, 2.039}, // A100 SXM 80GB: 312 TFLOPS bf16, 2,039 GB/s HBM2e
  };
  for (const Known& k : kKnown)
    if (device_name.find(k.name) != std::string::npos)
      return DevicePeaks{k.tflops * 1e12, k.tbps * 1e12, std::string("NVIDIA datasheet for ") + k.name};
  return {};
}

OpFamilyFigures op_family_figures(const OpFamilyStats& f, const OpProfile& p, const DevicePeaks& peaks) {
  OpFamilyFigures g;
  if (f.seconds > 0) {
    g.tflops = f.flops / f.seconds / 1e12;
    g.gbps = f.bytes / f.seconds / 1e9;
  }
  if (p.op_seconds > 0) g.share = f.seconds / p.op_seconds;
  if (peaks.flops_per_s > 0) g.flop_floor_s = f.flops / peaks.flops_per_s;
  if (peaks.bytes_per_s > 0) g.byte_floor_s = f.bytes / peaks.bytes_per_s;
  g.floor_s = std::max(g.flop_floor_s, g.byte_floor_s);
  if (g.floor_s > 0) {
    g.bound = g.flop_floor_s >= g.byte_floor_s ? "compute" : "memory";
    g.of_floor = f.seconds / g.floor_s;
  }
  return g;
}

void OpProfiler::begin() {
  // A public op that calls another one (none today) is charged once, to the outer op.
  if (depth_++ > 0) return;
  auto m = clock_->mark();
  if (!m.is_ok()) {
    if (error_.is_ok()) error_ = m.status();
    open_ = -1;
    return;
  }
  open_ = m.value();
}

void OpProfiler::end(const char* op, const OpCost& cost) {
  if (--depth_ > 0) return;
  if (open_ < 0) return;
  auto m = clock_->mark();
  if (!m.is_ok()) {
    if (error_.is_ok()) error_ = m.status();
    return;
  }
  calls_.push_back(Call{op, cost, open_, m.value()});
  open_ = -1;
}

Result<OpProfile> OpProfiler::finish() {
  if (!error_.is_ok()) return error_.with_context("op timing");
  OpProfile p;
  p.clock = clock_->name();
  std::map<std::string, OpFamilyStats> by_op;
  std::map<std::string, std::map<std::string, OpFamilyStats>> by_detail;
  auto add = [](OpFamilyStats& f, const std::string& name, double s, const OpCost& c) {
    f.op = name;
    ++f.calls;
    f.seconds += s;
    f.flops += c.flops;
    f.bytes += c.bytes;
  };
  for (const Call& c : calls_) {
    MOEPROF_ASSIGN_OR_RETURN(double s, clock_->seconds(c.a, c.b));
    add(by_op[c.op], c.op, s, c.cost);
    if (!c.cost.detail.empty()) add(by_detail[c.op][c.cost.detail], c.cost.detail, s, c.cost);
    p.op_seconds += s;
    ++p.calls;
  }
  auto by_time = [](const OpFamilyStats& a, const OpFamilyStats& b) { return a.seconds > b.seconds; };
  for (auto& [name, f] : by_op) {
    for (auto& [d, part] : by_detail[name]) f.parts.push_back(part);
    std::stable_sort(f.parts.begin(), f.parts.end(), by_time);
    p.families.push_back(f);
  }
  std::stable_sort(p.families.begin(), p.families.end(), by_time);
  return p;
}

}  // namespace moeprof
