/* Stand-in libcuda.so.1 for the simulated device (tests only): one NVIDIA H100 80GB HBM3 (SXM5),
 * with the attributes the real driver reports for it. */
#include <cuda.h>
#include <string.h>

static int g_init;

CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  g_init = 1;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (count == NULL) return CUDA_ERROR_INVALID_VALUE;
  *count = 1;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *dev = 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice dev) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (v == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = 233472; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 232448; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *v = 32; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (name == NULL || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  strncpy(name, "NVIDIA H100 80GB HBM3", (size_t)len - 1);
  name[len - 1] = 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (bytes == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = 85520809984ull;   /* 81559 MiB, as the driver reports an 80GB H100 */
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice dev) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (id == NULL || len < 13) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  strncpy(id, "0000:19:00.0", (size_t)len - 1);
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
