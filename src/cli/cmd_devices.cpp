// moeprof devices [--json]: the GPUs the CUDA driver reports and whether moeprof can use them.
// Exit 0 when at least one is usable (sm_90 or newer), 3 otherwise. scripts/test.sh uses it to
// decide whether to run the gpu-labelled tests.
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/gpu_probe.h"
#include "reports/format.h"
#include "reports/report_file.h"

namespace moeprof::cli {

void register_devices(CLI::App& app, int* exit_code) {
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("devices", "List the GPUs the CUDA driver reports and whether moeprof can use them");
  cmd->add_flag("--json", *json, "print the list as JSON on stdout");
  cmd->footer("Example: moeprof devices --json\nExit 0 when a usable GPU (compute capability 9.0 or newer) exists, 3 otherwise.");
  cmd->callback([json, exit_code] {
    const GpuProbe p = probe_gpus();
    const size_t usable = p.usable().size();
    std::string out;
    if (*json) {
      nlohmann::ordered_json j;
      j["usable"] = usable;
      j["problem"] = p.problem;
      j["devices"] = nlohmann::ordered_json::array();
      for (const GpuInfo& g : p.devices)
        j["devices"].push_back({{"index", g.index}, {"name", g.name},
                                {"compute_capability", fmt::format("{}.{}", g.cc_major, g.cc_minor)},
                                {"memory_bytes", g.memory_bytes}, {"usable", g.cc_major >= 9}});
      out = reports::json_text(j, 2) + "\n";
    } else {
      for (const GpuInfo& g : p.devices)
        out += fmt::format("GPU {}: {} (compute capability {}.{}, {}){}\n", g.index, g.name, g.cc_major, g.cc_minor,
                           reports::format_bytes(g.memory_bytes), g.cc_major >= 9 ? "" : " not usable: moeprof's kernels need sm_90");
      if (usable == 0) out += "no usable GPU: " + p.problem + "\n";
    }
    if (Status st = write_stdout(out); !st) {
      *exit_code = fail("devices", st);
      return;
    }
    *exit_code = usable > 0 ? kExitOk : kExitRunFailure;
  });
}

}  // namespace moeprof::cli
