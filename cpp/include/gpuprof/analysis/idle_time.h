// Why each stream sat idle between its device activities, with Holistic Trace Analysis's three
// causes (docs/metrics.md, "Idle time"): the host had not yet launched the next one (host wait),
// a gap shorter than the launch-overhead threshold between back-to-back launches (kernel wait),
// or anything else (other: an event or a collective it waited on, most often).
#pragma once

#include <cstdint>
#include <vector>

#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/launch_stats.h"
#include "gpuprof/core/trace.h"

namespace gpuprof {

// HTA's default threshold under which a gap between consecutive device activities is launch
// overhead (its `consecutive_kernel_delay`, 30 us).
constexpr int64_t kKernelWaitThresholdNs = 30'000;

struct IdleTimeRow {
  int device = 0;
  uint32_t stream = 0;
  int64_t activities = 0;   // kernels, copies and sets on the stream
  int64_t host_wait_ns = 0;
  int64_t kernel_wait_ns = 0;
  int64_t other_ns = 0;
  int64_t idle_ns() const { return host_wait_ns + kernel_wait_ns + other_ns; }
};

// One row per device and stream, by device then stream, over the activities whose launch call
// (runtime or driver) is recorded and started before `launched_before_ns` (HTA's scope: it drops
// the activities no recorded call launched, and the last step). Each gap between a
// stream's consecutive activities (by start) is the next one's start minus the previous one's
// end; it is a host wait when the runtime call that launched the next one started after the
// previous one ended, else a kernel wait when shorter than `kernel_wait_threshold_ns`, else other.
// Overlapping activities leave no gap.
std::vector<IdleTimeRow> idle_time_table(const Trace& trace, const LaunchLinks& links,
                                         int64_t launched_before_ns = kNoEndNs,
                                         int64_t kernel_wait_threshold_ns = kKernelWaitThresholdNs);

}  // namespace gpuprof
