/* Stand-in libnvidia-ml.so.1 for the simulated device (tests only): the H100 of cuda_sim.c at PCI
 * bus id 0000:19:00.0 (or the devices a test lists, by PCI bus id), with readings the test sets
 * (simnvml_set, simnvml_set_device) and a total-energy counter per device that integrates its set
 * power over CLOCK_MONOTONIC time since nvmlInit. */
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
typedef struct {
  char pci_bus_id[16];
  unsigned util_gpu, util_mem, power_mw, sm_mhz, temp_c;
  unsigned long long mem_used;
  double energy_mj; /* accumulated up to g_last_ns */
} Device;
#define MAX_DEVICES 8
static Device g_dev[MAX_DEVICES] = {{"0000:19:00.0", 87, 41, 350000, 1980, 54, 12884901888ull /* 12 GiB */, 0}};
static int g_count = 1;
static int g_energy_supported = 1;
static unsigned g_energy_delay_us; /* how long a total-energy read takes (the counter is read halfway) */
static int64_t g_last_ns;
static uint64_t g_reads;

static int64_t mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Under g_mu: every counter up to now at its device's current power. */
static void advance(void) {
  const int64_t now = mono_ns();
  for (int i = 0; i < g_count; ++i)
    g_dev[i].energy_mj += (double)g_dev[i].power_mw * (double)(now - g_last_ns) / 1e9; /* mW * s = mJ */
  g_last_ns = now;
}

int nvmlInit_v2(void) {
  pthread_mutex_lock(&g_mu);
  if (!g_init) { /* the counters count since the driver loaded */
    g_last_ns = mono_ns();
    for (int i = 0; i < g_count; ++i) g_dev[i].energy_mj = 1.0e9 * (i + 1);
  }
  g_init = 1;
  pthread_mutex_unlock(&g_mu);
  return NVML_SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned int *n) {
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (n == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  *n = (unsigned)g_count;
  return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *dev) {
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (dev == NULL || i >= (unsigned)g_count) return NVML_ERROR_INVALID_ARGUMENT;
  *dev = &g_dev[i];
  return NVML_SUCCESS;
}

/* NVML accepts the domain in 4 or 8 hex digits ("0000:19:00.0" or "00000000:19:00.0"). */
int nvmlDeviceGetHandleByPciBusId_v2(const char *id, nvmlDevice_t *dev) {
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (id == NULL || dev == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < g_count; ++i) {
    const char *mine = g_dev[i].pci_bus_id; /* "0000:BB:DD.F" */
    if (strcasecmp(id, mine) == 0 || (strncmp(id, "0000", 4) == 0 && strcasecmp(id + 4, mine) == 0)) {
      *dev = &g_dev[i];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

static Device *device(nvmlDevice_t d) {
  for (int i = 0; i < g_count; ++i)
    if (d == &g_dev[i]) return &g_dev[i];
  return NULL;
}

#define CHECK_DEV(d, out)                                           \
  if (!g_init) return NVML_ERROR_UNINITIALIZED;                     \
  Device *dv = device(d);                                           \
  if (dv == NULL || (out) == NULL) return NVML_ERROR_INVALID_ARGUMENT

int nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
  CHECK_DEV(d, u);
  pthread_mutex_lock(&g_mu);
  u->gpu = dv->util_gpu, u->memory = dv->util_mem;
  ++g_reads;
  pthread_mutex_unlock(&g_mu);
  return NVML_SUCCESS;
}

int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
  CHECK_DEV(d, m);
  pthread_mutex_lock(&g_mu);
  m->total = 85520809984ull, m->used = dv->mem_used, m->free = m->total - m->used;
  pthread_mutex_unlock(&g_mu);
  return NVML_SUCCESS;
}

int nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) {
  CHECK_DEV(d, mw);
  pthread_mutex_lock(&g_mu);
  *mw = dv->power_mw;
  pthread_mutex_unlock(&g_mu);
  return NVML_SUCCESS;
}

int nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) {
  CHECK_DEV(d, mhz);
  if (type != 1) return NVML_ERROR_NOT_SUPPORTED;   /* NVML_CLOCK_SM only */
  pthread_mutex_lock(&g_mu);
  *mhz = dv->sm_mhz;
  pthread_mutex_unlock(&g_mu);
  return NVML_SUCCESS;
}

int nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *c) {
  CHECK_DEV(d, c);
  if (sensor != 0) return NVML_ERROR_NOT_SUPPORTED;
  pthread_mutex_lock(&g_mu);
  *c = dv->temp_c;
  pthread_mutex_unlock(&g_mu);
  return NVML_SUCCESS;
}

static void sleep_us(unsigned us) {
  struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

int nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj) {
  CHECK_DEV(d, mj);
  pthread_mutex_lock(&g_mu);
  const unsigned delay = g_energy_delay_us;
  pthread_mutex_unlock(&g_mu);
  if (delay) sleep_us(delay / 2);
  pthread_mutex_lock(&g_mu);
  const int ok = g_energy_supported;
  if (ok) advance(), *mj = (unsigned long long)dv->energy_mj;
  pthread_mutex_unlock(&g_mu);
  if (delay) sleep_us(delay - delay / 2);
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

/* Control (tests, through ctypes). The readings of every device. */
void simnvml_set(unsigned util_gpu, unsigned util_mem, unsigned power_mw, unsigned sm_mhz, int energy_supported) {
  pthread_mutex_lock(&g_mu);
  if (g_init) advance();
  for (int i = 0; i < g_count; ++i)
    g_dev[i].util_gpu = util_gpu, g_dev[i].util_mem = util_mem, g_dev[i].power_mw = power_mw, g_dev[i].sm_mhz = sm_mhz;
  g_energy_supported = energy_supported;
  pthread_mutex_unlock(&g_mu);
}

/* How long each total-energy read takes from now on (an H200's took 2.2-2.8 ms, up to 16). */
void simnvml_set_energy_delay(unsigned us) {
  pthread_mutex_lock(&g_mu);
  g_energy_delay_us = us;
  pthread_mutex_unlock(&g_mu);
}

/* The devices NVML lists, in its index order (which need not be CUDA's), by PCI bus id, each with
 * the H100 readings until simnvml_set_device; before nvmlInit only. */
int simnvml_set_devices(int n, const char *const *pci_bus_ids) {
  if (n < 1 || n > MAX_DEVICES || pci_bus_ids == NULL) return -1;
  pthread_mutex_lock(&g_mu);
  const int ok = !g_init;
  if (ok) {
    for (int i = 0; i < n; ++i) {
      g_dev[i] = g_dev[0];
      strncpy(g_dev[i].pci_bus_id, pci_bus_ids[i], sizeof g_dev[i].pci_bus_id - 1);
      g_dev[i].pci_bus_id[sizeof g_dev[i].pci_bus_id - 1] = 0;
    }
    g_count = n;
  }
  pthread_mutex_unlock(&g_mu);
  return ok ? 0 : -1;
}

/* One device's readings, by NVML index. */
void simnvml_set_device(int i, unsigned util_gpu, unsigned util_mem, unsigned power_mw, unsigned sm_mhz) {
  pthread_mutex_lock(&g_mu);
  if (i >= 0 && i < g_count) {
    if (g_init) advance();
    g_dev[i].util_gpu = util_gpu, g_dev[i].util_mem = util_mem, g_dev[i].power_mw = power_mw, g_dev[i].sm_mhz = sm_mhz;
  }
  pthread_mutex_unlock(&g_mu);
}

uint64_t simnvml_reads(void) {
  pthread_mutex_lock(&g_mu);
  const uint64_t n = g_reads;
  pthread_mutex_unlock(&g_mu);
  return n;
}
