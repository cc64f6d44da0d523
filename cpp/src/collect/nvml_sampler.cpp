#include "nvml_sampler.h"

#include <algorithm>
#include <chrono>

#include <dlfcn.h>

#include "gpuprof/collect/collector.h"

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
  // Optional (nullptr where the driver's NVML lacks it): millijoules since the driver loaded; NVML
  // answers NVML_ERROR_NOT_SUPPORTED on devices older than Volta.
  int (*total_energy)(nvmlDevice_t, unsigned long long*) = nullptr;
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
    sym(n->total_energy, "nvmlDeviceGetTotalEnergyConsumption");
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

// How a device's energy can be measured, asked once at start: the counter when it answers, else
// power samples (integrated by the analysis), else nothing; with NVML's reason for each refusal.
std::string probe_energy(const Nvml& n, void* dev, int ordinal, bool& counter) {
  const std::string gpu = "GPU " + std::to_string(ordinal) + ": ";
  std::string why_not;
  if (n.total_energy == nullptr) {
    why_not = "this driver's NVML has no nvmlDeviceGetTotalEnergyConsumption";
  } else {
    unsigned long long mj = 0;
    const int r = n.total_energy(dev, &mj);
    if (r == 0) {
      counter = true;
      return gpu + "NVML energy counter";
    }
    why_not = std::string("nvmlDeviceGetTotalEnergyConsumption: ") + n.error_string(r);
  }
  counter = false;
  unsigned int mw = 0;
  const int r = n.power(dev, &mw);
  if (r == 0) return gpu + "power samples integrated (" + why_not + ")";
  return gpu + "not measured (" + why_not + "; nvmlDeviceGetPowerUsage: " + n.error_string(r) + ")";
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
  energy_note_.clear();
  unsigned int count = 0;
  n.count(&count);
  for (size_t i = 0; i < pci_ids.size(); ++i) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), int(i)) == wanted.end()) continue;
    nvmlDevice_t dev = nullptr;
    int r = -1;
    if (!pci_ids[i].empty() && n.by_pci != nullptr) r = n.by_pci(pci_ids[i].c_str(), &dev);
    else if (i < count) r = n.by_index(unsigned(i), &dev);
    if (r != 0) continue;
    Device d;
    d.ordinal = int(i);
    d.handle = dev;
    energy_note_ += (energy_note_.empty() ? "" : "; ") + probe_energy(n, dev, d.ordinal, d.energy_counter);
    devices_.push_back(d);
  }
  if (devices_.empty()) {
    why = "NVML sees none of the CUDA devices of this process";
    return false;
  }
  any_energy_counter_ =
      std::any_of(devices_.begin(), devices_.end(), [](const Device& d) { return d.energy_counter; });
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = false;
    energy_requested_ = false;
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
  std::unique_lock<std::mutex> lock(mutex_);
  // The boundary reading asked for last (the drained span's end) belongs to what is taken now: wait
  // for it, and for a reading under way, a second at most (an NVML call that hangs is left out).
  if (thread_.joinable())
    served_.wait_for(lock, std::chrono::seconds(1), [this] { return !energy_requested_ && !reading_; });
  std::vector<GpuSample> out;
  out.swap(samples_);
  return out;
}

void NvmlSampler::run(int64_t interval_ms) {
  using Clock = std::chrono::steady_clock;
  std::unique_lock<std::mutex> lock(mutex_);
  Clock::time_point next = Clock::now();
  for (;;) {
    // A boundary's reading is taken also when stop() follows at once: the last step's end needs it.
    const bool due = !stopping_ && Clock::now() >= next;
    if (energy_requested_ || due) {
      energy_requested_ = false;
      reading_ = true;
      lock.unlock();
      if (due) sample_once();   // reads the counter first: a pending boundary's reading too
      else read_energies();
      lock.lock();
      reading_ = false;
      if (due) next = Clock::now() + std::chrono::milliseconds(interval_ms);
      served_.notify_all();
      continue;
    }
    if (stopping_) break;
    wake_.wait_until(lock, next, [this] { return stopping_ || energy_requested_; });
  }
}

// The counter is read first, and the sample stamped at the middle of that call: of a sample's
// readings it is the one whose time matters most (the analysis differences it across each step).
static bool read_energy(const Nvml& n, void* dev, GpuSample& s) {
  unsigned long long mj = 0;
  const int64_t before = now_ns();
  const int r = n.total_energy(dev, &mj);
  const int64_t after = now_ns();
  s.ts_ns = before + (after - before) / 2;
  if (r != 0) return false;
  s.energy_mj = int64_t(mj);
  return true;
}

void NvmlSampler::sample_energy() {
  // Stopped (or never started): no sampling outside steps. No device with the counter: nothing to read.
  if (!thread_.joinable() || !any_energy_counter_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    energy_requested_ = true;
  }
  wake_.notify_one();
}

void NvmlSampler::read_energies() {
  const Nvml& n = nvml();
  std::vector<GpuSample> batch;
  for (const Device& d : devices_) {
    if (!d.energy_counter) continue;
    GpuSample s;
    s.device = int16_t(d.ordinal);
    if (read_energy(n, d.handle, s)) batch.push_back(s);
  }
  if (batch.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  samples_.insert(samples_.end(), batch.begin(), batch.end());
}

void NvmlSampler::sample_once() {
  const Nvml& n = nvml();
  std::vector<GpuSample> batch;
  for (const Device& d : devices_) {
    void* dev = d.handle;
    GpuSample s;
    s.device = int16_t(d.ordinal);
    if (d.energy_counter) read_energy(n, dev, s);
    else s.ts_ns = now_ns();
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
