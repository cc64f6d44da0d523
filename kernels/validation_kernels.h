// Host entry points of the validation kernels (validation_kernels.cu). Each returns the CUDA-event
// time of every run in milliseconds, and throws std::runtime_error with CUDA's message on failure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpuprof::kernels {

struct DeviceInfo {
  std::string name;
  int sm_count = 0;
  int compute_major = 0;
  int compute_minor = 0;
  int clock_khz = 0;
  int memory_clock_khz = 0;
  int memory_bus_bits = 0;
};
DeviceInfo device_info(int device);

std::vector<double> spin_ns(int64_t duration_ns, int blocks, int repeats);
std::vector<double> spin_cycles(int64_t cycles, int blocks, int repeats);
std::vector<double> polynomial(int64_t n, int k, int repeats);
std::vector<double> host_to_device(int64_t bytes, bool pinned, int repeats);
std::vector<double> gemm_fp32(int n, int repeats);
std::vector<double> gemm_tensor_core(int n, int repeats);
std::vector<float> gemm_check(int n, bool tensor_core);

}  // namespace gpuprof::kernels
