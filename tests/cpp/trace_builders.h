// Building blocks for the hand-built timelines of the analysis specs.
#pragma once

#include <cstdint>

#include "gpuprof/core/trace.h"

namespace gpuprof::spec {

// A small Volta-like GPU: compute capability 7.0, 10 SMs, 2048 threads, 64K registers and 96 KiB of
// shared memory per SM (48 KiB per block), 16 GiB.
inline DeviceProps small_gpu(int id = 0) {
  DeviceProps d;
  d.id = id;
  d.name = "Test GPU";
  d.compute_major = 7;
  d.compute_minor = 0;
  d.total_global_mem = 16LL << 30;
  d.max_threads_per_block = 1024;
  d.max_threads_per_sm = 2048;
  d.regs_per_block = d.regs_per_sm = 65536;
  d.shared_mem_per_block = 48 * 1024;
  d.shared_mem_per_sm = d.shared_mem_per_block_optin = 96 * 1024;
  d.num_sms = 10;
  return d;
}

// A kernel of `blocks` blocks of 128 threads (32 registers, no shared memory) with Kineto's
// occupancy (-1: absent); `blocks` 0: the launch shape is unknown (no KernelInfo).
inline Event& add_kernel(Trace& t, const char* name, int64_t start, int64_t end, uint64_t correlation, int blocks,
                         float occupancy_pct, int device = 0) {
  Event& e = t.add(EventKind::Kernel, name, start, end - start);
  e.correlation = correlation;
  e.device = static_cast<int16_t>(device);
  if (blocks == 0) return e;
  KernelInfo k;
  k.grid[0] = blocks;
  k.grid[1] = k.grid[2] = 1;
  k.block[0] = 128;
  k.block[1] = k.block[2] = 1;
  k.registers_per_thread = 32;
  k.shared_mem_bytes = 0;
  k.est_occupancy_pct = occupancy_pct;
  e.aux = static_cast<uint32_t>(t.kernels.size());
  t.kernels.push_back(k);
  return e;
}

}  // namespace gpuprof::spec
