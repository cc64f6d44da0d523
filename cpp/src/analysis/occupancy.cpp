#include "gpuprof/analysis/occupancy.h"

#include <algorithm>
#include <climits>

namespace gpuprof {

namespace {

// Shared-memory sizes (KiB) an SM can be configured to, per architecture family.
constexpr int kVoltaCarveouts[] = {0, 8, 16, 32, 64, 96};
constexpr int kTuringCarveouts[] = {32, 64};
constexpr int kAmpereDcCarveouts[] = {0, 8, 16, 32, 64, 100, 132, 164};   // sm_80, sm_87
constexpr int kAmpereGfxCarveouts[] = {0, 8, 16, 32, 64, 100};            // sm_86, sm_89, sm_12x
constexpr int kHopperCarveouts[] = {0, 8, 16, 32, 64, 100, 132, 164, 196, 228};   // sm_90, sm_10x

int64_t round_up(int64_t x, int64_t unit) { return unit <= 0 ? x : (x + unit - 1) / unit * unit; }
int64_t divide_round_up(int64_t x, int64_t unit) { return (x + unit - 1) / unit; }

template <size_t N>
void set_carveouts(ArchLimits* a, const int (&sizes)[N]) {
  a->carveout_kib = sizes;
  a->num_carveouts = static_cast<int>(N);
}

// The smallest configurable shared-memory size that holds `bytes`; `bytes` itself when it is
// above every configuration (the device reported more than the table knows of).
int64_t align_to_carveout(const ArchLimits& a, int64_t bytes) {
  for (int i = 0; i < a.num_carveouts; ++i)
    if (bytes <= int64_t(a.carveout_kib[i]) * 1024) return int64_t(a.carveout_kib[i]) * 1024;
  return bytes;
}

bool looks_like_nvidia(const DeviceProps& d) {
  // ROCm traces reuse the same fields (AMD reports compute "9.0" with 64-wide wavefronts).
  return d.warp_size == 32;
}

}  // namespace

bool arch_limits_for(int major, int minor, ArchLimits* out) {
  ArchLimits a;
  a.register_alloc_unit = 256;
  a.max_registers_per_thread = 255;
  a.sub_partitions_per_sm = 4;
  a.shared_mem_alloc_granularity = major >= 8 ? 128 : 256;
  a.reserved_shared_mem_per_block = major >= 8 ? 1024 : 0;
  switch (major) {
    case 7:
      if (minor == 5) {
        a.max_blocks_per_sm = 16;
        set_carveouts(&a, kTuringCarveouts);
      } else if (minor == 0 || minor == 2) {
        a.max_blocks_per_sm = 32;
        set_carveouts(&a, kVoltaCarveouts);
      } else {
        return false;
      }
      break;
    case 8:
      if (minor == 0 || minor == 7) {
        a.max_blocks_per_sm = minor == 0 ? 32 : 16;
        set_carveouts(&a, kAmpereDcCarveouts);
      } else if (minor == 6 || minor == 9) {
        a.max_blocks_per_sm = minor == 9 ? 24 : 16;
        set_carveouts(&a, kAmpereGfxCarveouts);
      } else {
        return false;
      }
      break;
    case 9:
      if (minor != 0) return false;
      a.max_blocks_per_sm = 32;
      set_carveouts(&a, kHopperCarveouts);
      break;
    case 10:
      if (minor != 0 && minor != 1 && minor != 3) return false;
      a.max_blocks_per_sm = minor == 1 ? 24 : 32;
      set_carveouts(&a, kHopperCarveouts);
      break;
    case 11:
      if (minor != 0) return false;
      a.max_blocks_per_sm = 24;
      set_carveouts(&a, kHopperCarveouts);
      break;
    case 12:
      if (minor != 0 && minor != 1) return false;
      a.max_blocks_per_sm = 24;
      set_carveouts(&a, kAmpereGfxCarveouts);
      break;
    default: return false;
  }
  *out = a;
  return true;
}

OccupancyResult active_blocks_per_sm(const DeviceProps& d, const LaunchResources& launch,
                                     SharedMemLimit smem_limit) {
  OccupancyResult r;
  ArchLimits arch;
  if (!looks_like_nvidia(d)) {
    r.why_not = "not an NVIDIA device (warp size is not 32); occupancy rules are NVIDIA's";
    return r;
  }
  if (!arch_limits_for(d.compute_major, d.compute_minor, &arch)) {
    r.why_not = "compute capability outside the occupancy rules gpuprof knows (7.0 to 12.x)";
    return r;
  }
  if (d.max_threads_per_sm <= 0 || d.max_threads_per_block <= 0 || d.regs_per_sm <= 0 || d.regs_per_block <= 0 ||
      d.shared_mem_per_sm <= 0 || d.shared_mem_per_block <= 0) {
    r.why_not =
        "device properties incomplete (threads, registers and shared memory per SM and per block are needed)";
    return r;
  }
  if (launch.threads_per_block <= 0 || launch.registers_per_thread < 0 || launch.shared_mem_bytes < 0) {
    r.why_not = "launch shape unknown (block size, registers per thread or shared memory missing)";
    return r;
  }
  const int64_t warp = d.warp_size;
  const int64_t warps_per_block = divide_round_up(launch.threads_per_block, warp);

  // Warps: the SM's warp slots, whole blocks only.
  r.limit_warps = launch.threads_per_block > d.max_threads_per_block
                      ? 0
                      : static_cast<int>((d.max_threads_per_sm / warp) / warps_per_block);

  // Registers: allocated per warp in units; each sub-partition's register file holds whole warps.
  const int64_t regs_per_warp = round_up(int64_t(launch.registers_per_thread) * warp, arch.register_alloc_unit);
  const int64_t regs_per_block = regs_per_warp * warps_per_block;
  // The per-block check assumes the block's warps are spread over every sub-partition.
  const int64_t regs_per_block_checked = regs_per_warp * round_up(warps_per_block, arch.sub_partitions_per_sm);
  if (launch.registers_per_thread > arch.max_registers_per_thread || regs_per_block > d.regs_per_block ||
      regs_per_block_checked > d.regs_per_block) {
    r.limit_registers = 0;
  } else if (regs_per_warp == 0) {
    r.limit_registers = INT_MAX;
  } else {
    const int64_t warps_per_sub_partition = (d.regs_per_sm / arch.sub_partitions_per_sm) / regs_per_warp;
    r.limit_registers = static_cast<int>(warps_per_sub_partition * arch.sub_partitions_per_sm / warps_per_block);
  }

  // Shared memory: per block rounded up to the granularity (with the driver's reserve), against
  // the SM's configured size (the default carveout: the most the SM offers).
  const int64_t smem_per_block =
      round_up(launch.shared_mem_bytes + arch.reserved_shared_mem_per_block, arch.shared_mem_alloc_granularity);
  int64_t smem_block_limit = d.shared_mem_per_block + arch.reserved_shared_mem_per_block;
  if (smem_limit == SharedMemLimit::Auto && smem_per_block > smem_block_limit &&
      d.shared_mem_per_block_optin > d.shared_mem_per_block)
    smem_block_limit = d.shared_mem_per_block_optin + arch.reserved_shared_mem_per_block;
  if (smem_per_block > smem_block_limit) {
    r.limit_shared_mem = 0;
  } else {
    int64_t smem_per_sm = align_to_carveout(arch, d.shared_mem_per_sm);
    if (smem_per_sm < smem_per_block) smem_per_sm = align_to_carveout(arch, smem_per_block);
    r.limit_shared_mem = smem_per_block > 0 ? static_cast<int>(smem_per_sm / smem_per_block) : INT_MAX;
  }

  r.limit_blocks = d.max_blocks_per_sm > 0 ? d.max_blocks_per_sm : arch.max_blocks_per_sm;

  int active = r.limit_warps;
  if (r.limit_registers < active) active = r.limit_registers;
  if (r.limit_shared_mem < active) active = r.limit_shared_mem;
  if (r.limit_blocks < active) active = r.limit_blocks;
  r.active_blocks_per_sm = active;
  r.ok = true;
  return r;
}

double occupancy_pct(const DeviceProps& d, const KernelInfo& k, SharedMemLimit smem_limit) {
  if (d.num_sms <= 0 || d.max_threads_per_sm <= 0 || k.blocks() <= 0) return -1.0;
  LaunchResources launch;
  launch.threads_per_block = k.threads_per_block();
  launch.registers_per_thread = k.registers_per_thread;
  launch.shared_mem_bytes = k.shared_mem_bytes;
  const OccupancyResult r = active_blocks_per_sm(d, launch, smem_limit);
  if (!r.ok) return -1.0;
  // Single precision on purpose: Kineto's estimate is computed in float, and whole-percent
  // rounding of values like 2.5 only agrees when we do the same.
  const float blocks_per_sm = static_cast<float>(k.blocks()) / static_cast<float>(d.num_sms);
  const float active = static_cast<float>(r.active_blocks_per_sm);
  const float resident = active < blocks_per_sm ? active : blocks_per_sm;
  const float fraction =
      resident * static_cast<float>(launch.threads_per_block) / static_cast<float>(d.max_threads_per_sm);
  return static_cast<double>(fraction) * 100.0;
}

double kernel_occupancy_pct(const DeviceProps* d, const KernelInfo& k) {
  if (k.est_occupancy_pct >= 0.0f) {
    const bool kineto_ignored_optin = k.est_occupancy_pct == 0.0f && d != nullptr && d->shared_mem_per_block > 0 &&
                                      k.shared_mem_bytes > d->shared_mem_per_block;
    // Occupancy is a share of an SM's warp slots: a recorded value above 100% cannot be true and
    // is taken as 100% (check_plausibility counts such kernels for the report to say so).
    if (!kineto_ignored_optin) return std::min(k.est_occupancy_pct, 100.0f);
    const double ours = occupancy_pct(*d, k);
    return ours >= 0.0 ? ours : k.est_occupancy_pct;
  }
  return d != nullptr ? occupancy_pct(*d, k) : -1.0;
}

}  // namespace gpuprof
