/* Stand-in libnvidia-ml.so.1 for the simulated device (tests only): the H100 of cuda_sim.c at PCI
 * bus id 0000:19:00.0, with readings the test sets (simnvml_set) and a total-energy counter that
 * integrates the set power over CLOCK_MONOTONIC time since nvmlInit. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

enum { NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_SUPPORTED = 3,
       NVML_ERROR_NOT_FOUND = 6 };
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef void *nvmlDevice_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_init;
static int g_device;   /* the one handle's target */
static unsigned g_util_gpu = 87, g_util_mem = 41, g_power_mw = 350000, g_sm_mhz = 1980, g_temp_c = 54;
static unsigned long long g_mem_used = 12884901888ull;   /* 12 GiB */
static int g_energy_supported = 1;
static double g_energy_mj;   /* accumulated up to g_last_ns */
static int64_t g_last_ns;
static uint64_t g_reads;

static int64_t mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Under g_mu: the counter up to now at the current power. */
static void advance(void) {
  const int64_t now = mono_ns();
  g_energy_mj += (double)g_power_mw * (double)(now - g_last_ns) / 1e9;   /* mW * s = mJ */
  g_last_ns = now;
}

int nvmlInit_v2(void) {
  pthread_mutex_lock(&g_mu);
  if (!g_init) g_last_ns = mono_ns(), g_energy_mj = 1.0e9;   /* the counter counts since the driver loaded */
  g_init = 1;
  pthread_mutex_unlock(&g_mu);
  return NVML_SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned int *n) {
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (n == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  *n = 1;
  return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *dev) {
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (dev == NULL || i != 0) return NVML_ERROR_INVALID_ARGUMENT;
  *dev = &g_device;
  return NVML_SUCCESS;
}

/* NVML accepts the domain in 4 or 8 hex digits ("0000:19:00.0" or "00000000:19:00.0"). */
int nvmlDeviceGetHandleByPciBusId_v2(const char *id, nvmlDevice_t *dev) {
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (id == NULL || dev == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  if (strcasecmp(id, "0000:19:00.0") != 0 && strcasecmp(id, "00000000:19:00.0") != 0) return NVML_ERROR_NOT_FOUND;
  *dev = &g_device;
  return NVML_SUCCESS;
}

#define CHECK_DEV(d, out)                                           \
  if (!g_init) return NVML_ERROR_UNINITIALIZED;                     \
  if ((d) != &g_device || (out) == NULL) return NVML_ERROR_INVALID_ARGUMENT

int nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
  CHECK_DEV(d, u);
  pthread_mutex_lock(&g_mu);
  u->gpu = g_util_gpu, u->memory = g_util_mem;
  ++g_reads;
  pthread_mutex_unlock(&g_mu);
  return NVML_SUCCESS;
}

int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
  CHECK_DEV(d, m);
  pthread_mutex_lock(&g_mu);
  m->total = 85520809984ull, m->used = g_mem_used, m->free = m->total - m->used;
  pthread_mutex_unlock(&g_mu);
  return NVML_SUCCESS;
}

int nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) {
  CHECK_DEV(d, mw);
  pthread_mutex_lock(&g_mu);
  *mw = g_power_mw;
  pthread_mutex_unlock(&g_mu);
  return NVML_SUCCESS;
}

int nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) {
  CHECK_DEV(d, mhz);
  if (type != 1) return NVML_ERROR_NOT_SUPPORTED;   /* NVML_CLOCK_SM only */
  pthread_mutex_lock(&g_mu);
  *mhz = g_sm_mhz;
  pthread_mutex_unlock(&g_mu);
  return NVML_SUCCESS;
}

int nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *c) {
  CHECK_DEV(d, c);
  if (sensor != 0) return NVML_ERROR_NOT_SUPPORTED;
  pthread_mutex_lock(&g_mu);
  *c = g_temp_c;
  pthread_mutex_unlock(&g_mu);
  return NVML_SUCCESS;
}

int nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj) {
  CHECK_DEV(d, mj);
  pthread_mutex_lock(&g_mu);
  const int ok = g_energy_supported;
  if (ok) advance(), *mj = (unsigned long long)g_energy_mj;
  pthread_mutex_unlock(&g_mu);
  return ok ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

const char *nvmlErrorString(int r) {
  switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    default: return "Unknown Error";
  }
}

/* Control (tests, through ctypes). */
void simnvml_set(unsigned util_gpu, unsigned util_mem, unsigned power_mw, unsigned sm_mhz, int energy_supported) {
  pthread_mutex_lock(&g_mu);
  if (g_init) advance();
  g_util_gpu = util_gpu, g_util_mem = util_mem, g_power_mw = power_mw, g_sm_mhz = sm_mhz;
  g_energy_supported = energy_supported;
  pthread_mutex_unlock(&g_mu);
}

uint64_t simnvml_reads(void) {
  pthread_mutex_lock(&g_mu);
  const uint64_t n = g_reads;
  pthread_mutex_unlock(&g_mu);
  return n;
}
