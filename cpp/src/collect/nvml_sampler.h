// A thread reading NVML (libnvidia-ml, loaded at run time) every interval during active steps:
// GPU and memory utilization, memory used, power, SM clock, temperature.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpuprof/trace.h"

namespace gpuprof::collect {

class NvmlSampler {
 public:
  NvmlSampler() = default;
  ~NvmlSampler() { stop(); }
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;

  // Samples the CUDA devices whose PCI bus ids are given (index = CUDA ordinal; NVML numbers GPUs
  // its own way, so they are matched by bus id; an empty id falls back to the same NVML index).
  // Only the ordinals in `wanted` (the devices this process uses; every device when empty): a rank
  // of an 8-GPU job polls its own GPU, not all eight.
  // False with `why` when NVML is absent or sees none of them. Restarting while running is a no-op.
  bool start(const std::vector<std::string>& cuda_pci_bus_ids, const std::vector<int>& wanted, int64_t interval_ms,
             std::string& why);
  void stop();
  // The samples taken since the last take().
  std::vector<GpuSample> take();

 private:
  void run(int64_t interval_ms);
  void sample_once();

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<std::pair<int, void*>> devices_;   // (CUDA ordinal, nvmlDevice_t)
  std::vector<GpuSample> samples_;
};

}  // namespace gpuprof::collect
