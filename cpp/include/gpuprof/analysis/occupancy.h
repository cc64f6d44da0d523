// Theoretical occupancy of a kernel launch, from the device's properties and the launch's
// resources, by the rules of NVIDIA's CUDA occupancy calculator (documented in the toolkit's
// cuda_occupancy.h). Needs neither a GPU nor CUDA headers, so imported traces get it anywhere.
#pragma once

#include <cstdint>

#include "gpuprof/core/event.h"
#include "gpuprof/core/trace.h"

namespace gpuprof {

// Per-architecture facts the device properties do not carry (NVIDIA compute capability 7.0-12.x).
struct ArchLimits {
  int max_blocks_per_sm = 0;
  int register_alloc_unit = 0;          // registers per warp are rounded up to this
  int max_registers_per_thread = 0;
  int sub_partitions_per_sm = 0;        // the register file is split between them
  int shared_mem_alloc_granularity = 0; // bytes; shared memory per block is rounded up to this
  int64_t reserved_shared_mem_per_block = 0;   // bytes the driver keeps per block (sm_80+)
  const int* carveout_kib = nullptr;    // shared-memory sizes one SM can be configured to, ascending
  int num_carveouts = 0;
};

// False (and `out` untouched) for a compute capability the rules do not cover: before Volta,
// unknown minors, or a non-NVIDIA device.
bool arch_limits_for(int compute_major, int compute_minor, ArchLimits* out);

// What one launch asks of an SM.
struct LaunchResources {
  int64_t threads_per_block = 0;
  int registers_per_thread = 0;
  int64_t shared_mem_bytes = 0;   // static + dynamic
};

enum class SharedMemLimit : uint8_t {
  // A launch that uses more than the default per-block limit must have opted in to the larger
  // one (it could not have run otherwise), so the opt-in limit applies to it. Right for real runs.
  Auto = 0,
  // Always the default per-block limit, as Kineto's own estimate does: a block above it counts as
  // not fitting (0 active blocks). Only for reproducing Kineto's `est. achieved occupancy %`.
  DefaultOnly,
};

struct OccupancyResult {
  bool ok = false;
  const char* why_not = "";       // when !ok: what is missing, in words a user can act on
  int active_blocks_per_sm = 0;   // min of the four limits below
  int limit_warps = 0;
  int limit_registers = 0;
  int limit_shared_mem = 0;
  int limit_blocks = 0;
};

// Blocks of this launch that one SM can hold at once.
OccupancyResult active_blocks_per_sm(const DeviceProps& device, const LaunchResources& launch,
                                     SharedMemLimit smem_limit = SharedMemLimit::Auto);

// Theoretical occupancy of one kernel in percent: min(active blocks per SM, blocks of the launch
// per SM) x threads per block / max threads per SM. Computed in single precision the way Kineto
// computes it, so that rounding to whole percent agrees with the value Kineto writes.
// Returns -1 when it cannot be computed (no device properties, no launch shape, rules unknown).
double occupancy_pct(const DeviceProps& device, const KernelInfo& kernel,
                     SharedMemLimit smem_limit = SharedMemLimit::Auto);

// The occupancy the GPU summary and the kernel table use for one kernel: Kineto's recorded value
// when the trace has it (so our numbers agree with the plugin's), except where Kineto's estimate
// is known to be wrong (shared memory above the default per-block limit: Kineto ignores the
// opt-in and writes 0); otherwise our calculation. -1 when neither is available; at most 100.
double kernel_occupancy_pct(const DeviceProps* device, const KernelInfo& kernel);

}  // namespace gpuprof
