// Two of Holistic Trace Analysis's counters (docs/metrics.md, "Queue length", "Copy bandwidth"):
// how many launched activities each stream had waiting to start, and the bandwidth of the copies
// and sets of each kind running at once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/launch_stats.h"
#include "gpuprof/core/trace.h"

namespace gpuprof {

// HTA's limit on the activities one stream may hold launched but not started
// (CUDA_MAX_LAUNCH_QUEUE_PER_STREAM): at or above it the next launch call blocks.
constexpr int64_t kMaxLaunchQueue = 1024;

// The runtime and driver calls HTA counts as enqueuing one activity on a stream: CUDA's and
// HIP's kernel launches, asynchronous copies and sets.
bool is_queue_launch_call(std::string_view name);

struct QueueLengthRow {
  int device = 0;
  uint32_t stream = 0;
  int64_t samples = 0;   // points of the step function: one per launch call, one per activity start
  double mean = 0;       // mean over the points, unweighted by time
  int64_t max = 0;
  int64_t blocked_ns = 0;   // time spent at kMaxLaunchQueue or more
};

// One row per device and stream (by device, then stream) with at least one activity launched by a
// call is_queue_launch_call names that started before `launched_before_ns` (HTA's scope, as in
// idle_time.h). The queue grows by one at each such call's start and shrinks by one at the start
// of the activity it launched; the points are taken in time order, a start before a call at the
// same instant.
std::vector<QueueLengthRow> queue_length_table(const Trace& trace, const LaunchLinks& links,
                                               int64_t launched_before_ns = kNoEndNs,
                                               int64_t max_queue = kMaxLaunchQueue);

// HTA's kind of a copy or set, from its name: "Memset" for names starting so, the first 11
// characters ("Memcpy HtoD") for names starting "Memcpy", else "Memcpy Unknown".
std::string copy_bandwidth_kind(std::string_view name);

struct CopyBandwidthRow {
  std::string kind;
  int64_t copies = 0;
  int64_t bytes = 0;
  int64_t time_ns = 0;     // summed durations
  double gbps = 0;         // bytes / time
  // The summed bandwidth of the copies of this kind running at each change (each start and end,
  // one copy's bandwidth its bytes over its duration), over the points where it is above 0.
  int64_t samples = 0;
  double mean_gbps = 0;
  double min_gbps = 0;
  double p50_gbps = 0;
  double max_gbps = 0;
};

// One row per kind of the trace's copies and sets whose launch call (any recorded runtime or
// driver call) started before `launched_before_ns` (HTA's scope), by kind. An activity of 0 ns
// lasts 1 ns here, as in HTA. At one instant, ends come before starts.
std::vector<CopyBandwidthRow> copy_bandwidth_table(const Trace& trace, const LaunchLinks& links,
                                                   int64_t launched_before_ns = kNoEndNs);

}  // namespace gpuprof
