#include "nvml_sampler.h"

#include <algorithm>

#include <dlfcn.h>

#include "gpuprof/collector.h"

namespace gpuprof::collect {
namespace {

// The few NVML entry points used, declared from NVML's documented C ABI (nvml.h is not part of the
// CUDA toolkit install here): every call returns an int status, 0 = NVML_SUCCESS.
using nvmlDevice_t = void*;
struct NvmlUtilization {
  unsigned int gpu, memory;
};
struct NvmlMemory {
  unsigned long long total, free, used;
};
constexpr int kNvmlClockSm = 1;         // NVML_CLOCK_SM
constexpr int kNvmlTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU

struct Nvml {
  bool ok = false;
  std::string error;
  int (*init)() = nullptr;
  int (*count)(unsigned int*) = nullptr;
  int (*by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  int (*by_pci)(const char*, nvmlDevice_t*) = nullptr;
  int (*utilization)(nvmlDevice_t, NvmlUtilization*) = nullptr;
  int (*memory)(nvmlDevice_t, NvmlMemory*) = nullptr;
  int (*power)(nvmlDevice_t, unsigned int*) = nullptr;
  int (*clock)(nvmlDevice_t, int, unsigned int*) = nullptr;
  int (*temperature)(nvmlDevice_t, int, unsigned int*) = nullptr;
  const char* (*error_string)(int) = nullptr;
};

const Nvml& nvml() {
  static Nvml* n = [] {
    auto* n = new Nvml;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      n->error = "NVML not found (libnvidia-ml.so.1 comes with the NVIDIA driver)";
      return n;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      return fn != nullptr;
    };
    const bool all = sym(n->init, "nvmlInit_v2") && sym(n->count, "nvmlDeviceGetCount_v2") &&
                     sym(n->by_index, "nvmlDeviceGetHandleByIndex_v2") &&
                     sym(n->utilization, "nvmlDeviceGetUtilizationRates") &&
                     sym(n->memory, "nvmlDeviceGetMemoryInfo") && sym(n->power, "nvmlDeviceGetPowerUsage") &&
                     sym(n->clock, "nvmlDeviceGetClockInfo") && sym(n->temperature, "nvmlDeviceGetTemperature") &&
                     sym(n->error_string, "nvmlErrorString");
    sym(n->by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
    if (!all) {
      n->error = "libnvidia-ml.so.1 lacks functions gpuprof needs (driver too old?)";
      return n;
    }
    const int r = n->init();
    if (r != 0) {
      n->error = std::string("NVML failed to initialise: ") + n->error_string(r);
      return n;
    }
    n->ok = true;
    return n;
  }();
  return *n;
}

}  // namespace

bool NvmlSampler::start(const std::vector<std::string>& pci_ids, const std::vector<int>& wanted,
                        int64_t interval_ms, std::string& why) {
  if (thread_.joinable()) return true;
  const Nvml& n = nvml();
  if (!n.ok) {
    why = n.error;
    return false;
  }
  devices_.clear();
  unsigned int count = 0;
  n.count(&count);
  for (size_t i = 0; i < pci_ids.size(); ++i) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), int(i)) == wanted.end()) continue;
    nvmlDevice_t dev = nullptr;
    int r = -1;
    if (!pci_ids[i].empty() && n.by_pci != nullptr) r = n.by_pci(pci_ids[i].c_str(), &dev);
    else if (i < count) r = n.by_index(unsigned(i), &dev);
    if (r == 0) devices_.emplace_back(int(i), dev);
  }
  if (devices_.empty()) {
    why = "NVML sees none of the CUDA devices of this process";
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = false;
  }
  thread_ = std::thread([this, interval_ms] { run(interval_ms); });
  return true;
}

void NvmlSampler::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::vector<GpuSample> NvmlSampler::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<GpuSample> out;
  out.swap(samples_);
  return out;
}

void NvmlSampler::run(int64_t interval_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    sample_once();
    lock.lock();
    wake_.wait_for(lock, std::chrono::milliseconds(interval_ms), [this] { return stopping_; });
  }
}

void NvmlSampler::sample_once() {
  const Nvml& n = nvml();
  std::vector<GpuSample> batch;
  for (const auto& [ordinal, dev] : devices_) {
    GpuSample s;
    s.ts_ns = now_ns();
    s.device = int16_t(ordinal);
    NvmlUtilization u;
    if (n.utilization(dev, &u) == 0) s.gpu_util_pct = int32_t(u.gpu), s.mem_util_pct = int32_t(u.memory);
    NvmlMemory m;
    if (n.memory(dev, &m) == 0) s.memory_used_bytes = int64_t(m.used);
    unsigned int v = 0;
    if (n.power(dev, &v) == 0) s.power_mw = int32_t(v);
    if (n.clock(dev, kNvmlClockSm, &v) == 0) s.sm_clock_mhz = int32_t(v);
    if (n.temperature(dev, kNvmlTemperatureGpu, &v) == 0) s.temperature_c = int32_t(v);
    batch.push_back(s);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  samples_.insert(samples_.end(), batch.begin(), batch.end());
}

}  // namespace gpuprof::collect
