// gpu_collect.h for builds made where the CUDA toolkit's CUPTI and NVTX headers were not found:
// the API exists, collection is always off, and the message says how to get it.
#include "gpuprof/gpu_collect.h"

namespace gpuprof::collect {
namespace {
GpuStatus unavailable() {
  GpuStatus s;
  s.message =
      "this gpuprof was built without the CUDA toolkit's CUPTI headers, so it profiles host-side "
      "only; rebuild it where /usr/local/cuda/include/cupti.h exists (or set CUDA_HOME)";
  s.nvml_message = s.message;
  return s;
}
}  // namespace

GpuStatus gpu_start(const GpuConfig&) { return unavailable(); }
void gpu_flush() {}
void gpu_stop() {}
void gpu_release() {}
bool gpu_enabled() { return false; }
GpuStatus gpu_status() { return unavailable(); }
void gpu_drain(Trace&) {}
GpuCounters gpu_counters() { return {}; }
std::string cupti_library_path(const std::vector<std::string>&, std::string& why) {
  why = unavailable().message;
  return {};
}
void gpu_external_push(uint64_t) {}
void gpu_external_pop() {}
void nvtx_push(const char*) {}
void nvtx_pop() {}

}  // namespace gpuprof::collect
