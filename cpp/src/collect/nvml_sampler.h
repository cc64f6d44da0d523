// A thread reading NVML (libnvidia-ml, loaded at run time) every interval during active steps:
// GPU and memory utilization, memory used, power, SM clock, temperature, and the total-energy
// counter where the device has one; the session thread also reads that counter at every step
// boundary (sample_energy).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpuprof/core/trace.h"

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
  // At a step boundary, from the session's thread: one reading of the energy counter of each
  // sampled device that has one (a sample carrying only energy_mj, stamped at the middle of the
  // call). Nothing while stopped, or for devices without the counter (their steps are integrated
  // from the periodic power samples instead).
  void sample_energy();
  // How each sampled device's energy is measured, in one line for the report's metadata
  // ("GPU 0: NVML energy counter; GPU 1: power samples integrated (nvmlDeviceGetTotalEnergy
  // Consumption: Not Supported)"); "" before start().
  const std::string& energy_note() const { return energy_note_; }

 private:
  struct Device {
    int ordinal = -1;          // CUDA ordinal
    void* handle = nullptr;    // nvmlDevice_t
    bool energy_counter = false;   // nvmlDeviceGetTotalEnergyConsumption answered at start
  };
  void run(int64_t interval_ms);
  void sample_once();

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<Device> devices_;   // written by start() only, while no sampler thread runs
  std::vector<GpuSample> samples_;
  std::string energy_note_;
};

}  // namespace gpuprof::collect
