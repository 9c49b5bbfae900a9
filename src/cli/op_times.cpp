#include "cli/op_times.h"

#include <fmt/format.h>

namespace moeprof::cli {

DevicePeaks resolve_peaks(const std::string& device_name, double peak_tflops, double peak_gbps) {
  DevicePeaks p = known_device_peaks(device_name);
  if (peak_tflops > 0 || peak_gbps > 0) {
    if (peak_tflops > 0) p.flops_per_s = peak_tflops * 1e12;
    if (peak_gbps > 0) p.bytes_per_s = peak_gbps * 1e9;
    p.source = p.source.empty() ? "given on the command line" : p.source + ", overridden on the command line";
  }
  return p;
}

namespace {

std::string ms(double s) { return fmt::format("{:.3f}", s * 1e3); }
std::string rate(double v) {
  if (v <= 0) return "-";
  return v >= 10 ? fmt::format("{:.1f}", v) : (v >= 0.01 ? fmt::format("{:.3f}", v) : fmt::format("{:.2e}", v));
}

}  // namespace

std::string op_times_table(const std::string& mode, const OpProfile& p, const DevicePeaks& peaks, double forward_seconds) {
  const bool have_peaks = peaks.flops_per_s > 0 && peaks.bytes_per_s > 0;
  std::string out = fmt::format("\nop times ({}, {} calls, {}):\n", mode, p.calls, p.clock);
  out += fmt::format("  {:<26} {:>6} {:>11} {:>7} {:>9} {:>9} {:>11} {:>11} {:>8} {:>8}\n", "op family", "calls", "time ms",
                     "share", "TFLOP/s", "GB/s", "FLOP floor", "byte floor", "bound", "x floor");
  double floor_sum = 0;
  auto row = [&](const OpFamilyStats& f, const std::string& label) {
    const OpFamilyFigures g = op_family_figures(f, p, peaks);
    out += fmt::format("  {:<26} {:>6} {:>11} {:>6.1f}% {:>9} {:>9} {:>11} {:>11} {:>8} {:>8}\n", label, f.calls, ms(f.seconds),
                       100.0 * g.share, f.flops > 0 ? rate(g.tflops) : "-", rate(g.gbps),
                       have_peaks && f.flops > 0 ? ms(g.flop_floor_s) : "-", have_peaks ? ms(g.byte_floor_s) : "-",
                       have_peaks ? g.bound : "-", have_peaks && g.floor_s > 0 ? fmt::format("{:.1f}", g.of_floor) : "-");
    return g;
  };
  for (const OpFamilyStats& f : p.families) {
    floor_sum += row(f, f.op).floor_s;
    // The family's parts (a GEMM's M x N x K), the largest first; the rest summed in one line.
    constexpr size_t kShown = 8;
    for (size_t i = 0; i < f.parts.size() && i < kShown; ++i) row(f.parts[i], "  " + f.parts[i].op);
    if (f.parts.size() > kShown) {
      OpFamilyStats rest;
      for (size_t i = kShown; i < f.parts.size(); ++i) {
        rest.calls += f.parts[i].calls;
        rest.seconds += f.parts[i].seconds;
        rest.flops += f.parts[i].flops;
        rest.bytes += f.parts[i].bytes;
      }
      row(rest, fmt::format("  {} more shapes", f.parts.size() - kShown));
    }
  }
  out += fmt::format("  sum of op times {} ms of the prefill's {} ms wall time ({:.1f}%)", ms(p.op_seconds), ms(forward_seconds),
                     forward_seconds > 0 ? 100.0 * p.op_seconds / forward_seconds : 0.0);
  if (have_peaks)
    out += fmt::format("; floor {} ms (each family at the larger of its two floors), {:.1f}x above it\n", ms(floor_sum),
                       floor_sum > 0 ? p.op_seconds / floor_sum : 0.0) +
           fmt::format("  peaks: {:.1f} TFLOP/s bf16 dense, {:.0f} GB/s ({})\n", peaks.flops_per_s / 1e12,
                       peaks.bytes_per_s / 1e9, peaks.source);
  else
    out += "; no peak rates known for this device (give --peak-tflops and --peak-gbps for the floors)\n";
  return out;
}

nlohmann::json op_times_json(const std::string& mode, const std::string& device, const OpProfile& p,
                             const DevicePeaks& peaks, double forward_seconds) {
  nlohmann::json j;
  j["mode"] = mode;
  j["device"] = device;
  j["clock"] = p.clock;
  j["forward_seconds"] = forward_seconds;
  j["op_seconds"] = p.op_seconds;
  j["calls"] = p.calls;
  j["peak_flops_per_s"] = peaks.flops_per_s;
  j["peak_bytes_per_s"] = peaks.bytes_per_s;
  j["peaks_source"] = peaks.source;
  double floor_sum = 0;
  nlohmann::json fams = nlohmann::json::array();
  auto entry = [&](const OpFamilyStats& f) {
    const OpFamilyFigures g = op_family_figures(f, p, peaks);
    return nlohmann::json{{"op", f.op},
                          {"calls", f.calls},
                          {"seconds", f.seconds},
                          {"share", g.share},
                          {"flops", f.flops},
                          {"bytes", f.bytes},
                          {"tflops", g.tflops},
                          {"gbps", g.gbps},
                          {"flop_floor_seconds", g.flop_floor_s},
                          {"byte_floor_seconds", g.byte_floor_s},
                          {"bound", g.bound},
                          {"times_floor", g.of_floor}};
  };
  for (const OpFamilyStats& f : p.families) {
    floor_sum += op_family_figures(f, p, peaks).floor_s;
    nlohmann::json e = entry(f);
    if (!f.parts.empty()) {
      e["parts"] = nlohmann::json::array();
      for (const OpFamilyStats& part : f.parts) e["parts"].push_back(entry(part));
    }
    fams.push_back(std::move(e));
  }
  j["families"] = std::move(fams);
  j["floor_seconds"] = floor_sum;
  return j;
}

}  // namespace moeprof::cli
