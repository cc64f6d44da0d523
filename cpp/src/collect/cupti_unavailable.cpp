// gpu_collect.h for builds made where the CUDA toolkit's CUPTI and NVTX headers were not found:
// the API exists, collection is always off, and the message says how to get it.
#include "gpuprof/collect/gpu_collect.h"

namespace gpuprof::collect {
namespace {
GpuStatus unavailable() {
  GpuStatus s;
  s.message =
      "this gpuprof was built without CUDA 13's CUPTI headers (none found, or an older CUDA's), so "
      "it profiles host-side only; rebuild it where a CUDA 13 toolkit's cupti.h exists "
      "(CUDA_HOME=/usr/local/cuda-13.0 pip install .)";
  s.nvml_message = s.message;
  return s;
}
}  // namespace

GpuStatus gpu_start(const GpuConfig&) { return unavailable(); }
std::vector<int> gpu_devices_seen() { return {}; }
void gpu_flush() {}
void gpu_stop() {}
void gpu_release() {}
bool gpu_enabled() { return false; }
GpuStatus gpu_status() { return unavailable(); }
void gpu_drain(Trace&) {}
GpuCounters gpu_counters() { return {}; }
void gpu_sample_energy() {}
void gpu_read_energy() {}
std::string cupti_library_path(const std::vector<std::string>&, std::string& why) {
  why = unavailable().message;
  return {};
}
std::atomic<bool> g_gpu_correlation_used{false};   // never set: nothing is ever pushed
void gpu_external_push(uint64_t) {}
void gpu_external_pop() {}
void nvtx_push(const char*) {}
void nvtx_pop() {}

}  // namespace gpuprof::collect
