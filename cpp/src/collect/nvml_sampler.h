// A thread reading NVML (libnvidia-ml, loaded at run time) every interval during active steps:
// GPU and memory utilization, memory used, power, SM clock, temperature, and the total-energy
// counter where the device has one; at every step boundary the session thread asks it for one more
// reading of that counter (sample_energy), which it takes at once.
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
  // The samples taken since the last take(), with the boundary reading asked for last (waited
  // for, a second at most).
  std::vector<GpuSample> take();
  // At a step boundary, from the session's thread: asks the sampler's thread for one reading of
  // the energy counter of each sampled device that has one (a sample carrying only energy_mj,
  // stamped at the middle of the call), and returns without waiting for it: one such NVML call
  // took 2.2-2.8 ms on an H200 (up to 16 ms), too long for the training thread to wait at every
  // step. Requests made while one is pending are served by one reading; one pending at stop() is
  // served before the thread ends. Nothing while stopped, or where no device has the counter
  // (their steps are integrated from the periodic power samples instead).
  void sample_energy();
  // The same reading on the calling thread (where a span's first step starts).
  void read_energy_now() {
    if (thread_.joinable() && any_energy_counter_) read_energies();
  }
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
  void read_energies();   // one reading of each device's counter, kept with the samples

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;     // the sampler's thread: stop, or a boundary's reading asked for
  std::condition_variable served_;   // take(): the readings asked for are in samples_
  bool stopping_ = false;
  bool energy_requested_ = false;
  bool reading_ = false;   // the sampler's thread is reading NVML
  bool any_energy_counter_ = false;
  std::vector<Device> devices_;   // written by start() only, while no sampler thread runs
  std::vector<GpuSample> samples_;
  std::string energy_note_;
};

}  // namespace gpuprof::collect
