/* Stand-in libcuda.so.1 for the simulated device (tests only): by default one NVIDIA H100 80GB HBM3
 * (SXM5), with the attributes the real driver reports for it; a test may present other devices. */
#include <cuda.h>
#include <stdint.h>
#include <string.h>

static int g_init;

/* The devices this driver presents: one H100 unless the test sets others (simcuda_set_devices,
 * before the first cuInit the profiler makes: a real driver's device list does not change). */
typedef struct {
  char name[96];
  char pci_bus_id[16];
  uint64_t total_mem;
  int major, minor, max_threads_per_block, max_threads_per_sm, regs_per_block, regs_per_sm, warp_size;
  int shared_per_block, shared_per_sm, shared_per_block_optin, num_sms, max_blocks_per_sm;
} simcuda_device_t;

#define MAX_DEVICES 16
static simcuda_device_t g_devices[MAX_DEVICES] = {
    {"NVIDIA H100 80GB HBM3", "0000:19:00.0", 85520809984ull, /* 81559 MiB, as the driver reports */
     9, 0, 1024, 2048, 65536, 65536, 32, 49152, 233472, 232448, 132, 32},
};
static int g_count = 1;

int simcuda_set_devices(int n, const simcuda_device_t *devices) {
  if (n < 1 || n > MAX_DEVICES || devices == NULL) return -1;
  memcpy(g_devices, devices, sizeof(simcuda_device_t) * (size_t)n);
  g_count = n;
  return 0;
}

CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  g_init = 1;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (count == NULL) return CUDA_ERROR_INVALID_VALUE;
  *count = g_count;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= g_count) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

static const simcuda_device_t *device(CUdevice dev) {
  return dev >= 0 && dev < g_count ? &g_devices[dev] : NULL;
}

CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice dev) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (v == NULL) return CUDA_ERROR_INVALID_VALUE;
  const simcuda_device_t *d = device(dev);
  if (d == NULL) return CUDA_ERROR_INVALID_DEVICE;
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = d->major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = d->minor; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = d->max_threads_per_block; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = d->max_threads_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *v = d->regs_per_block; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *v = d->regs_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = d->warp_size; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = d->shared_per_block; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = d->shared_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = d->shared_per_block_optin; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = d->num_sms; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *v = d->max_blocks_per_sm; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (name == NULL || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  const simcuda_device_t *d = device(dev);
  if (d == NULL) return CUDA_ERROR_INVALID_DEVICE;
  strncpy(name, d->name, (size_t)len - 1);
  name[len - 1] = 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (bytes == NULL) return CUDA_ERROR_INVALID_VALUE;
  const simcuda_device_t *d = device(dev);
  if (d == NULL) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = (size_t)d->total_mem;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice dev) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (id == NULL || len < 13) return CUDA_ERROR_INVALID_VALUE;
  const simcuda_device_t *d = device(dev);
  if (d == NULL) return CUDA_ERROR_INVALID_DEVICE;
  strncpy(id, d->pci_bus_id, (size_t)len - 1);
  id[len - 1] = 0;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult r, const char **s) {
  if (s == NULL) return CUDA_ERROR_INVALID_VALUE;
  switch (r) {
    case CUDA_SUCCESS: *s = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *s = "invalid argument"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *s = "initialization error"; break;
    case CUDA_ERROR_INVALID_DEVICE: *s = "invalid device ordinal"; break;
    default: *s = NULL; return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
