// The GPU summary of the overview page, per device (docs/metrics.md, "GPU summary", states each
// definition).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/core/trace.h"

namespace gpuprof {

struct DeviceSummary {
  int id = 0;
  std::string name;                 // "" when the trace has no properties for this device
  int compute_major = 0;
  int compute_minor = 0;
  int64_t window_ns = 0;            // first step start to last step end
  int64_t kernel_ns = 0;            // kernel time inside the window (overlaps counted per kernel)
  int64_t kernel_busy_ns = 0;       // union of kernel intervals inside the window
  int64_t kernels = 0;              // kernels that overlap the window
  double utilization_pct = 0.0;
  double sm_efficiency_pct = 0.0;
  double achieved_occupancy_pct = -1.0;   // -1: no kernel with a known occupancy
  double tensor_core_pct = 0.0;
  double tc_eligible_pct = 0.0;
  int64_t memory_total_bytes = 0;
  int64_t peak_allocated_bytes = -1;      // -1: no allocator samples for this device
  // Communication kernels (NCCL, RCCL, NVSHMEM) inside the window, as a union of intervals, and the
  // parts of it that a compute kernel (any other kernel) and, separately, a copy ran beside
  // (docs/distributed.md, "Overlap").
  int64_t comm_kernel_ns = 0;
  int64_t comm_overlap_compute_ns = 0;
  int64_t comm_overlap_copy_ns = 0;
  // The sums the percentages above divide (not in the report's row): a windowed read adds them
  // over its windows and divides once (analysis/windowed.py). SM share x ns, occupancy x ns over
  // the kernels with a known occupancy and their ns, tensor-core and eligible kernel ns.
  double sm_weighted_ns = 0.0;
  double occupancy_weighted_ns = 0.0;
  double occupancy_weight_ns = 0.0;
  int64_t tensor_core_ns = 0;
  int64_t tc_eligible_ns = 0;
};

struct TimeWindow {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t length_ns() const { return end_ns > start_ns ? end_ns - start_ns : 0; }
};

// From the first step's start to the last step's end; empty when there are no steps.
TimeWindow steps_window(const BreakdownResult& steps);

// The time a windowed import's own steps span (those whose markers are not its context, kContextFlag):
// from the first one's start to the next step's start (the last one's end where no context step
// follows), so that the windows' spans tile the whole trace's steps_window; and where its kernel
// counts start: its first own step's start when a context step precedes it (a kernel that started
// before it is counted by the window before), INT64_MIN otherwise. A trace without context:
// steps_window(steps), INT64_MIN.
struct OwnSteps {
  TimeWindow window;
  int64_t counted_from_ns = INT64_MIN;
};
OwnSteps own_steps_window(const Trace& trace, const BreakdownResult& steps);

// One summary per device that ran a kernel or has allocator samples, ordered by device id.
std::vector<DeviceSummary> summarize_devices(const Trace& trace, const TimeWindow& window,
                                             const LaunchLinks& links);
// The same over a windowed import's own steps: kernels overlapping them are counted when they
// start at or after `own.counted_from_ns`.
std::vector<DeviceSummary> summarize_devices(const Trace& trace, const OwnSteps& own, const LaunchLinks& links);
// Convenience: computes the breakdown's steps and the links itself.
std::vector<DeviceSummary> summarize_devices(const Trace& trace);

// The utilization and SM-efficiency time series of one device (the TensorBoard plugin's GPU
// timeline): the trace's whole extent, first event to last, cut into buckets whose length is the
// smallest power of ten microseconds that makes at most kMaxTimelineBuckets of them; the last
// bucket runs to the end. Utilization and Est. SM efficiency are the GPU summary's definitions,
// each over its bucket. `sm_levels` are the plugin's own SM-efficiency ranges over the same extent:
// each stretch between two kernel edges where the running kernels' SM share (capped at 1) is above 0.
struct SmLevel {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  double pct = 0.0;
};
struct GpuBucket {
  int64_t start_ns = 0;
  int64_t dur_ns = 0;
  double utilization_pct = 0.0;
  double sm_efficiency_pct = 0.0;
};
constexpr int kMaxTimelineBuckets = 100;
struct GpuTimeline {
  int device = 0;
  std::vector<GpuBucket> buckets;
  std::vector<SmLevel> sm_levels;
};
// One timeline per device that ran a kernel, ordered by device id; `sm_levels` only when
// `with_sm_levels` (the Chrome export draws them; the report's timeline does not).
std::vector<GpuTimeline> gpu_timelines(const Trace& trace, bool with_sm_levels = true);

// A windowed read's share of gpu_timelines (python/gpuprof/analysis/window_views.py): over the time
// [own_from, own_to) a window owns, each device's busy time (the union of its kernels) and SM-share
// time (the numerator of Est. SM efficiency) in the buckets [lo + b * width, lo + (b + 1) * width)
// that overlap it, for each of `widths`. The windows' owned times tile the trace, so the sums of
// their parts are the whole trace's buckets' numerators, each kernel clipped as gpu_timelines
// clips it. `extent`: the trace's first event start and last event end (empty: no events).
struct GpuBucketPart {
  int64_t bucket = 0;
  int64_t busy_ns = 0;
  double sm_weighted_ns = 0.0;
};
struct GpuTimelinePart {
  int device = 0;
  std::vector<std::vector<GpuBucketPart>> by_width;   // one list per width, in `widths`' order
};
std::vector<GpuTimelinePart> gpu_timeline_parts(const Trace& trace, int64_t lo, const std::vector<int64_t>& widths,
                                                int64_t own_from, int64_t own_to);
// The first event start and the last event end of a trace; false without events.
bool event_extent(const Trace& trace, int64_t* first_start_ns, int64_t* last_end_ns);

// The memory curve of one device (-1: the host), from the allocator's samples in time order:
// (ts_ns, allocated, reserved), the levels of gpuprof/analysis/memory.h's device_memory: the allocator's own
// totals where recorded; else, where allocations carry addresses (live host allocations), the
// blocks live (those known to predate the trace included); else (old Kineto traces carry only each
// allocation's size) the running sum of the sizes, lifted so that its lowest point is 0, as the
// TensorBoard plugin rebuilt it. Reserved is -1 (unknown) where not recorded. Past max_points samples the
// curve keeps the lowest and the highest sample of each of max_points / 2 equal slices of the
// samples, in time order, so its peak and its envelope stay.
struct MemoryPoint {
  int64_t ts_ns = 0;
  int64_t allocated_bytes = 0;
  int64_t reserved_bytes = -1;
};
struct MemoryCurve {
  int device = -1;
  std::vector<MemoryPoint> points;
  size_t samples = 0;   // before any down-sampling
};
std::vector<MemoryCurve> memory_curves(const Trace& trace, size_t max_points);

// The pieces, exposed for tests and for per-step use. `kernels` are indices into trace.events
// of Kernel events of one device.
double utilization_pct(const Trace& trace, const std::vector<uint32_t>& kernels, const TimeWindow& w);
double sm_efficiency_pct(const Trace& trace, const std::vector<uint32_t>& kernels, const DeviceProps* device,
                         const TimeWindow& w);
double achieved_occupancy_pct(const Trace& trace, const std::vector<uint32_t>& kernels, const DeviceProps* device,
                              const TimeWindow& w);
// The stretches of `sm_efficiency_pct`'s sweep where the level is above 0, in time order (pct: 0-100).
std::vector<SmLevel> sm_efficiency_levels(const Trace& trace, const std::vector<uint32_t>& kernels,
                                          const DeviceProps* device, const TimeWindow& w);

}  // namespace gpuprof
