// The step journal's per-step summary (python/gpuprof/traces/journal.py): at each recorded step's
// end, what the live report's step rows and operator table are made of for that step, from the
// events recorded since the step before (collect::drain_new), as one JSON object. A job killed
// before its span closes keeps these, and `gpuprof report DIR` adds them up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpuprof/collect/collector.h"
#include "gpuprof/core/trace.h"

namespace gpuprof {

class StepSummarizer {
 public:
  // The steps completed since the last call (one, at a step's end: its ProfilerStep marker was
  // recorded) as
  //   {"steps": [{"step", "start_ns", "end_ns", "<category>_ns"...,
  //               "flop_counts": {the step's FLOPs row (flops.h StepFlops: "flops", "matmul_flops",
  //                               ..., "backward_ran", "matmul_flops_by_dtype")},
  //               "memory": [[device, peak_allocated, peak_reserved, capacity, peak_rss], ...]}],
  //    "operators": [[name, calls, host_self_ns, host_total_ns, device_self_ns, device_total_ns,
  //                   tc_self_ns, tc_total_ns, flops], ...],
  //    "counted_calls": N, "uncounted_calls": N, "events": N, "dropped": N}
  // with the breakdown, operator and memory rules of the live report (breakdown.h, tables.h:
  // operator_table, step_memory_table; flops.h), over these events only. Names are escaped.
  std::string next();
  // The events the last next() read (for tests and the overhead figures).
  size_t last_events() const { return last_events_; }

 private:
  collect::DrainCursor cursor_;
  Trace trace_;
  // The last allocator level of each device and the last RSS sample of the calls before: a step's
  // memory peak counts the level carried into it, as step_memory_table does over a whole span.
  std::vector<MemorySample> carried_memory_;
  std::vector<HostMemorySample> carried_host_;
  uint64_t epoch_ = 0;
  size_t last_events_ = 0;
};

}  // namespace gpuprof
