// Values a trace may hold that cannot be true: counted here, over the whole trace, for the report
// to say so beside the numbers they would otherwise distort (docs/metrics.md, "Implausible input").
// The step rules' own counts (repeated, nested, malformed markers, clock-skewed device events) are
// in BreakdownResult; the importer's (timestamps in another unit) in its skip reasons.
#pragma once

#include <cstdint>

#include "gpuprof/core/trace.h"

namespace gpuprof {

struct Plausibility {
  // Kernel launches whose recorded occupancy (Kineto's `est. achieved occupancy %`) is above 100%:
  // taken as 100% by every table and the GPU summary (occupancy.h, kernel_occupancy_pct).
  int64_t occupancy_clamped_kernels = 0;
  float occupancy_max_pct = 0.0f;   // the largest such value
  // Allocator samples whose allocated or reserved level is above the device's memory
  // (deviceProperties' totalGlobalMem): the memory table and curve show them as they are.
  int64_t memory_over_capacity_samples = 0;
  int64_t memory_over_capacity_max_bytes = 0;   // the largest such level
  int64_t memory_over_capacity_device_bytes = 0;   // that device's memory
  int memory_over_capacity_device = -1;
};

Plausibility check_plausibility(const Trace& trace);

}  // namespace gpuprof
