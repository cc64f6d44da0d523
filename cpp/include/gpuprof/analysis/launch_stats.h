// How long each device activity took to launch, as Holistic Trace Analysis measures it
// (docs/metrics.md, "Launch statistics"): per launch, the runtime call's duration on the host, the
// activity's duration on the device, and the launch delay (the activity's start minus the call's
// end, 0 when it started first); summarised per kernel (copy, set) name.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/core/trace.h"

namespace gpuprof {

constexpr int64_t kNoEndNs = std::numeric_limits<int64_t>::max();

// The end of the launches HTA analyses: the start of the trace's last step marker (it leaves the
// last step out, as the profiler may have stopped inside it); no end with fewer than two markers
// (HTA would analyse nothing, or everything without markers). Both tables below count a device
// activity only when its launch call started before it.
int64_t last_step_start(const Trace& trace);

// HTA's cut-offs: a launch call longer than this is a runtime outlier, and a launch call no longer
// than it whose activity ran shorter than the call launched a short kernel...
constexpr int64_t kLaunchRuntimeCutoffNs = 50'000;
// ...and a launch delay longer than this is a delay outlier.
constexpr int64_t kLaunchDelayCutoffNs = 100'000;

// Whether a runtime call of this name launches one device activity (kernel launches and the
// asynchronous copies and sets, CUDA's and HIP's).
bool is_launch_call(std::string_view name);

struct LaunchStatsRow {
  std::string name;   // the device activity's name
  int64_t launches = 0;
  int64_t cpu_total_ns = 0;   // summed launch-call durations
  int64_t gpu_total_ns = 0;   // summed device durations
  int64_t delay_total_ns = 0;
  double delay_p50_ns = 0;    // percentiles by linear interpolation between the sorted delays
  double delay_p95_ns = 0;
  int64_t delay_max_ns = 0;
  int64_t short_kernels = 0;      // call <= the runtime cut-off and device time < call
  int64_t runtime_outliers = 0;   // call > the runtime cut-off
  int64_t delay_outliers = 0;     // delay > the delay cut-off
  double cpu_mean_ns() const { return launches ? double(cpu_total_ns) / double(launches) : 0.0; }
  double gpu_mean_ns() const { return launches ? double(gpu_total_ns) / double(launches) : 0.0; }
  double delay_mean_ns() const { return launches ? double(delay_total_ns) / double(launches) : 0.0; }
};

// One row per name of device activity launched by a launch call (is_launch_call) that started
// before `launched_before_ns`, the largest summed launch delay first (then by name).
std::vector<LaunchStatsRow> launch_stats_table(const Trace& trace, const LaunchLinks& links,
                                               int64_t launched_before_ns = kNoEndNs);

}  // namespace gpuprof
