// A deviceProperties or gpuprofGpuSamples entry, number by number (kineto_devices.h).
#include "kineto_devices.h"

#include <cstdint>

#include "decimal.h"

namespace gpuprof::kineto {

using io::parse_int;

void set_device_number(DeviceProps& d, std::string_view k, std::string_view v) {
  int64_t x = 0;
  if (!parse_int(v, &x)) return;
  const int xi = x > INT32_MAX || x < INT32_MIN ? 0 : int(x);
  if (k == "id") d.id = xi;
  else if (k == "totalGlobalMem") d.total_global_mem = x;
  else if (k == "computeMajor") d.compute_major = xi;
  else if (k == "computeMinor") d.compute_minor = xi;
  else if (k == "maxThreadsPerBlock") d.max_threads_per_block = xi;
  else if (k == "maxThreadsPerMultiprocessor") d.max_threads_per_sm = xi;
  else if (k == "regsPerBlock") d.regs_per_block = xi;
  else if (k == "regsPerMultiprocessor") d.regs_per_sm = xi;
  else if (k == "warpSize") d.warp_size = xi;
  else if (k == "sharedMemPerBlock") d.shared_mem_per_block = x;
  else if (k == "sharedMemPerMultiprocessor" || k == "maxSharedMemoryPerMultiProcessor") d.shared_mem_per_sm = x;
  else if (k == "sharedMemPerBlockOptin") d.shared_mem_per_block_optin = x;
  else if (k == "numSms") d.num_sms = xi;
  else if (k == "maxBlocksPerMultiprocessor") d.max_blocks_per_sm = xi;
}

void set_sample_number(GpuSample& s, std::string_view k, std::string_view v) {
  int64_t x = 0;
  if (!parse_int(v, &x)) return;
  const bool small = x >= INT32_MIN && x <= INT32_MAX;
  if (k == "ts_ns") s.ts_ns = x;
  else if (k == "device" && x >= INT16_MIN && x <= INT16_MAX) s.device = int16_t(x);
  else if (k == "gpu_util_pct" && small) s.gpu_util_pct = int32_t(x);
  else if (k == "mem_util_pct" && small) s.mem_util_pct = int32_t(x);
  else if (k == "memory_used_bytes") s.memory_used_bytes = x;
  else if (k == "power_mw" && small) s.power_mw = int32_t(x);
  else if (k == "sm_clock_mhz" && small) s.sm_clock_mhz = int32_t(x);
  else if (k == "temperature_c" && small) s.temperature_c = int32_t(x);
  else if (k == "energy_mj") s.energy_mj = x;
}

}  // namespace gpuprof::kineto
