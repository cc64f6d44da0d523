#include "cupti_library.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <mutex>

namespace gpuprof::collect::cupti {
namespace {

template <typename Fn>
bool resolve(void* lib, const char* symbol, Fn& fn, std::string& missing) {
  fn = reinterpret_cast<Fn>(dlsym(lib, symbol));
  if (fn == nullptr) {
    if (!missing.empty()) missing += ", ";
    missing += symbol;
  }
  return fn != nullptr;
}

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The CUPTI major version these sources were compiled against: CUPTI_API_VERSION is 130001 for
// CUDA 13.0 (major * 10000 + ...).
constexpr uint32_t kCompiledMajor = CUPTI_API_VERSION / 10000;

}  // namespace

bool CudaDriver::properties(int ordinal, DeviceProps& out) const {
  if (!ok || ordinal < 0 || ordinal >= device_count) return false;
  CUdevice dev;
  if (cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS) return false;
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    return cuDeviceGetAttribute(&v, a, dev) == CUDA_SUCCESS ? v : 0;
  };
  char name[256] = {0};
  if (cuDeviceGetName(name, sizeof(name) - 1, dev) == CUDA_SUCCESS) out.name = name;
  size_t mem = 0;
  if (cuDeviceTotalMem(&mem, dev) == CUDA_SUCCESS) out.total_global_mem = int64_t(mem);
  out.id = ordinal;
  out.compute_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  out.compute_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  out.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  out.max_threads_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  out.regs_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  out.regs_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  out.warp_size = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  out.shared_mem_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  out.shared_mem_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  out.shared_mem_per_block_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  out.num_sms = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  out.max_blocks_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
  return true;
}

std::string CudaDriver::pci_bus_id(int ordinal) const {
  if (!ok || cuDeviceGetPCIBusId == nullptr) return "";
  CUdevice dev;
  char id[64] = {0};
  if (cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS || cuDeviceGetPCIBusId(id, sizeof(id) - 1, dev) != CUDA_SUCCESS)
    return "";
  return id;
}

const CudaDriver& driver() {
  static CudaDriver* d = [] {
    auto* d = new CudaDriver;   // leaked on purpose: used until process exit
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      d->error = "no NVIDIA driver (" + std::string(dlerror()) + ")";
      return d;
    }
    std::string missing;
    resolve(lib, "cuInit", d->cuInit, missing);
    resolve(lib, "cuDeviceGetCount", d->cuDeviceGetCount, missing);
    resolve(lib, "cuDeviceGet", d->cuDeviceGet, missing);
    resolve(lib, "cuDeviceGetAttribute", d->cuDeviceGetAttribute, missing);
    resolve(lib, "cuDeviceGetName", d->cuDeviceGetName, missing);
    resolve(lib, "cuDeviceTotalMem_v2", d->cuDeviceTotalMem, missing);
    resolve(lib, "cuGetErrorString", d->cuGetErrorString, missing);
    std::string optional;
    resolve(lib, "cuDeviceGetPCIBusId", d->cuDeviceGetPCIBusId, optional);
    if (!missing.empty()) {
      d->error = "the NVIDIA driver's libcuda.so.1 lacks " + missing + " (driver too old?)";
      return d;
    }
    const CUresult r = d->cuInit(0);
    if (r != CUDA_SUCCESS) {
      const char* s = nullptr;
      d->cuGetErrorString(r, &s);
      d->error = "the CUDA driver failed to initialise (cuInit: " + std::string(s ? s : "unknown error") +
                 ", code " + std::to_string(int(r)) + ")";
      return d;
    }
    if (d->cuDeviceGetCount(&d->device_count) != CUDA_SUCCESS || d->device_count == 0) {
      d->error = "the CUDA driver sees no GPU (check CUDA_VISIBLE_DEVICES and nvidia-smi)";
      return d;
    }
    d->ok = true;
    return d;
  }();
  return *d;
}

std::string CuptiApi::describe(CUptiResult r) const {
  const char* s = nullptr;
  if (cuptiGetResultString != nullptr) cuptiGetResultString(r, &s);
  return (s ? std::string(s) : std::string("CUPTI error")) + " (code " + std::to_string(int(r)) + ")";
}

const std::vector<std::string>& cupti_sonames() {
  static const std::vector<std::string> names = {"libcupti.so.13", "libcupti.so.12", "libcupti.so.11",
                                                 "libcupti.so"};
  return names;
}

LoadedLibrary find_loaded(const std::vector<std::string>& sonames, const char* symbol) {
  LoadedLibrary out;
  for (const std::string& soname : sonames) {
    void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) continue;
    out.handle = lib;
    out.soname = soname;
    out.path = soname;
    Dl_info info{};
    void* sym = dlsym(lib, symbol);
    if (sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr && *info.dli_fname)
      out.path = info.dli_fname;
    break;
  }
  return out;
}

std::vector<std::string> cupti_candidates(const std::vector<std::string>& extra_dirs) {
  static const char* kNames[] = {"libcupti.so.13", "libcupti.so"};
  std::vector<std::string> out;
  auto add_dir = [&](const std::string& dir) {
    if (dir.empty()) return;
    for (const char* n : kNames) out.push_back(dir + "/" + n);
  };
  if (const char* env = std::getenv("GPUPROF_CUPTI"); env != nullptr && *env) {
    if (is_dir(env)) add_dir(env);
    else out.push_back(env);
  }
  for (const std::string& d : extra_dirs) add_dir(d);
  if (const char* home = std::getenv("CUDA_HOME"); home != nullptr && *home) {
    add_dir(std::string(home) + "/extras/CUPTI/lib64");
    add_dir(std::string(home) + "/lib64");
  }
  add_dir("/usr/local/cuda/extras/CUPTI/lib64");
  add_dir("/usr/local/cuda/lib64");
  for (const char* n : kNames) out.push_back(n);   // LD_LIBRARY_PATH, ld.so.cache
  return out;
}

const CuptiApi& cupti(const std::vector<std::string>& extra_dirs) {
  static std::mutex m;
  static CuptiApi* api = nullptr;
  std::lock_guard<std::mutex> lock(m);
  if (api != nullptr) return *api;
  api = new CuptiApi;   // leaked on purpose: CUPTI may call back until process exit

  // One CUPTI per process: reuse the one torch (Kineto) already loaded, if any, whatever its
  // version (a second CUPTI beside it would fight it for the driver's callbacks).
  const LoadedLibrary loaded = find_loaded(cupti_sonames(), "cuptiGetVersion");
  void* lib = loaded.handle;
  if (lib != nullptr) {
    api->path = loaded.path;
    api->already_loaded = true;
    const char* env = std::getenv("GPUPROF_CUPTI");
    if (env != nullptr && *env && std::string(env) != loaded.path)
      api->note = "$GPUPROF_CUPTI (" + std::string(env) + ") not used: this process already loaded " +
                  loaded.path + ", and a second CUPTI beside it is never loaded";
  }
  std::string tried;
  if (lib == nullptr) {
    for (const std::string& path : cupti_candidates(extra_dirs)) {
      lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) {
        api->path = path;
        break;
      }
      if (path.find('/') != std::string::npos) {
        struct stat st;
        if (::stat(path.c_str(), &st) != 0) continue;   // absent: not worth a line
      }
      tried += (tried.empty() ? "" : "; ") + std::string(dlerror());
    }
  }
  if (lib == nullptr) {
    api->error =
        "libcupti was not found (looked in $GPUPROF_CUPTI, torch's nvidia wheels, $CUDA_HOME/extras/"
        "CUPTI/lib64, /usr/local/cuda/extras/CUPTI/lib64, /usr/local/cuda/lib64 and the loader path" +
        (tried.empty() ? std::string() : "; load errors: " + tried) +
        "); install nvidia-cuda-cupti or the CUDA toolkit, or set GPUPROF_CUPTI to libcupti.so.13";
    return *api;
  }
  std::string missing;
  resolve(lib, "cuptiGetVersion", api->cuptiGetVersion, missing);
  resolve(lib, "cuptiGetResultString", api->cuptiGetResultString, missing);
  resolve(lib, "cuptiSubscribe", api->cuptiSubscribe, missing);
  resolve(lib, "cuptiUnsubscribe", api->cuptiUnsubscribe, missing);
  resolve(lib, "cuptiGetCallbackName", api->cuptiGetCallbackName, missing);
  resolve(lib, "cuptiActivityEnable", api->cuptiActivityEnable, missing);
  resolve(lib, "cuptiActivityDisable", api->cuptiActivityDisable, missing);
  resolve(lib, "cuptiActivityRegisterCallbacks", api->cuptiActivityRegisterCallbacks, missing);
  resolve(lib, "cuptiActivityRegisterTimestampCallback", api->cuptiActivityRegisterTimestampCallback, missing);
  resolve(lib, "cuptiActivityGetNextRecord", api->cuptiActivityGetNextRecord, missing);
  resolve(lib, "cuptiActivityGetNumDroppedRecords", api->cuptiActivityGetNumDroppedRecords, missing);
  resolve(lib, "cuptiActivityFlushAll", api->cuptiActivityFlushAll, missing);
  resolve(lib, "cuptiActivityPushExternalCorrelationId", api->cuptiActivityPushExternalCorrelationId, missing);
  resolve(lib, "cuptiActivityPopExternalCorrelationId", api->cuptiActivityPopExternalCorrelationId, missing);
  std::string optional;
  resolve(lib, "cuptiActivityEnableRuntimeApi", api->cuptiActivityEnableRuntimeApi, optional);
  resolve(lib, "cuptiActivityEnableDriverApi", api->cuptiActivityEnableDriverApi, optional);
  if (!missing.empty()) {
    api->error = api->path + " lacks " + missing + " (a CUPTI older than CUDA " + std::to_string(kCompiledMajor) +
                 "?); set GPUPROF_CUPTI to a CUDA " + std::to_string(kCompiledMajor) + " libcupti.so";
    return *api;
  }
  if (!api->already_loaded) {   // a bare soname found on the loader's path: the file it names
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(api->cuptiGetVersion), &info) != 0 && info.dli_fname != nullptr &&
        *info.dli_fname)
      api->path = info.dli_fname;
  }
  if (api->cuptiGetVersion(&api->version) != CUPTI_SUCCESS) api->version = 0;
  // CUDA 13 numbers the API major * 10000 + ...; CUDA 12 and 11 numbered it 13..28.
  if (api->version / 10000 != kCompiledMajor && api->already_loaded) {
    api->error =
        "this process already loaded " + api->path + " (CUPTI API version " + std::to_string(api->version) + ", " +
        loaded.soname + ": torch built for an older CUDA), and gpuprof reads only CUDA " +
        std::to_string(kCompiledMajor) +
        "'s CUPTI records and never loads a second CUPTI "
        "beside it; use a torch built for CUDA " +
        std::to_string(kCompiledMajor) + " (pip install torch --index-url https://download.pytorch.org/whl/cu130)";
    return *api;
  }
  if (api->version / 10000 != kCompiledMajor) {
    api->error = api->path + " is CUPTI API version " + std::to_string(api->version) +
                 ", but gpuprof was built for CUDA " + std::to_string(kCompiledMajor) + "'s CUPTI (API " +
                 std::to_string(CUPTI_API_VERSION) +
                 "): its activity records differ; set GPUPROF_CUPTI to a CUDA " + std::to_string(kCompiledMajor) +
                 " libcupti.so";
    return *api;
  }
  api->ok = true;
  return *api;
}

}  // namespace gpuprof::collect::cupti
