// Implausible values in a trace, counted (gpuprof/analysis/plausibility.h).
#include "gpuprof/analysis/plausibility.h"

#include <algorithm>

namespace gpuprof {

Plausibility check_plausibility(const Trace& t) {
  Plausibility p;
  for (const Event& e : t.events) {
    if (e.kind != EventKind::Kernel || e.aux >= t.kernels.size()) continue;
    const float occ = t.kernels[e.aux].est_occupancy_pct;
    if (occ > 100.0f) {
      ++p.occupancy_clamped_kernels;
      p.occupancy_max_pct = std::max(p.occupancy_max_pct, occ);
    }
  }
  for (const MemorySample& m : t.memory) {
    if (m.device < 0) continue;
    const DeviceProps* d = t.device(m.device);
    if (d == nullptr || d->total_global_mem <= 0) continue;
    const int64_t level = std::max(m.total_allocated, m.total_reserved);
    if (level <= d->total_global_mem) continue;
    ++p.memory_over_capacity_samples;
    if (level > p.memory_over_capacity_max_bytes) {
      p.memory_over_capacity_max_bytes = level;
      p.memory_over_capacity_device_bytes = d->total_global_mem;
      p.memory_over_capacity_device = m.device;
    }
  }
  return p;
}

}  // namespace gpuprof
