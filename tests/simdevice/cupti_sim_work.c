/* The stand-in libcupti.so.13's replayed and sustained work (tests only; see cupti_sim.c): records
 * of a stored trace with their own times and properties (simdev_replay, tests/simdevice/replay.py),
 * and a producer thread making kernel records at a set rate (simdev_produce_start,
 * tests/simdevice/throughput.py). */
#include <string.h>
#include <time.h>

#include "cupti_sim.h"

/* The number of callback ids of a domain (the cbid header's _SIZE): the tests name ids by search. */
uint32_t simdev_cbid_count(int domain) {
  return domain == CUPTI_CB_DOMAIN_RUNTIME_API  ? CUPTI_RUNTIME_TRACE_CBID_SIZE
         : domain == CUPTI_CB_DOMAIN_DRIVER_API ? CUPTI_DRIVER_TRACE_CBID_SIZE
                                                : 0;
}

/* One piece of a recorded trace, replayed with its own times (in the timestamp callback's units)
 * and properties: an API call (api_kind RUNTIME or DRIVER, 0: none) and / or the device work it
 * started (what: -1 none, 0 kernel, 1 copy, 2 set), sharing `correlation`. The API call is made on
 * the calling thread, so an external id pushed there is correlated with it, as with a real call. */
typedef struct {
  int api_kind;
  uint32_t cbid;
  uint64_t api_start, api_end;
  int what;
  const char *name;
  uint64_t start, end;
  uint32_t correlation, device, stream;
  int32_t grid[3], block[3];
  uint16_t registers;
  int32_t shared_mem;
  uint64_t bytes;
  uint8_t copy_kind, src_kind, dst_kind;
} simdev_replay_t;

void simdev_replay(const simdev_replay_t *w) {
  pthread_mutex_lock(&g_mu);
  ++g_stats.replayed;
  int api = w->api_kind == CUPTI_ACTIVITY_KIND_RUNTIME || w->api_kind == CUPTI_ACTIVITY_KIND_DRIVER;
  if (api && !api_recorded((CUpti_ActivityKind)w->api_kind, w->cbid)) ++g_stats.api_switched_off, api = 0;
  if (api) {
    CUpti_ActivityAPI a;
    memset(&a, 0, sizeof a);
    a.kind = (CUpti_ActivityKind)w->api_kind;
    a.cbid = w->cbid;
    a.start = w->api_start, a.end = w->api_end;
    a.processId = 1, a.threadId = (uint32_t)pthread_self();
    a.correlationId = w->correlation;
    append(&a, a.kind);
    ++g_stats.api_records;
  }
  if (api && t_depth > 0 && on(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION)) {
    CUpti_ActivityExternalCorrelation x;
    memset(&x, 0, sizeof x);
    x.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    x.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
    x.externalId = t_ext[t_depth - 1];
    x.correlationId = w->correlation;
    append(&x, x.kind);
    ++g_stats.external_records;
  }
  const uint64_t ns = w->end > w->start ? w->end - w->start : 0;
  if (w->what == 0 && on(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) {
    CUpti_ActivityKernel10 k;
    memset(&k, 0, sizeof k);
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = w->start, k.end = w->end;
    k.deviceId = w->device, k.contextId = 1, k.streamId = w->stream;
    k.gridX = w->grid[0], k.gridY = w->grid[1], k.gridZ = w->grid[2];
    k.blockX = w->block[0], k.blockY = w->block[1], k.blockZ = w->block[2];
    k.registersPerThread = w->registers;
    k.staticSharedMemory = w->shared_mem;
    k.correlationId = w->correlation;
    k.name = intern_locked(w->name ? w->name : "");
    append(&k, k.kind);
    ++g_stats.kernels, g_stats.kernel_ns += ns;
  } else if (w->what == 1 && on(CUPTI_ACTIVITY_KIND_MEMCPY)) {
    CUpti_ActivityMemcpy6 m;
    memset(&m, 0, sizeof m);
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m.copyKind = w->copy_kind, m.srcKind = w->src_kind, m.dstKind = w->dst_kind;
    m.bytes = w->bytes;
    m.start = w->start, m.end = w->end;
    m.deviceId = w->device, m.contextId = 1, m.streamId = w->stream;
    m.correlationId = w->correlation;
    append(&m, m.kind);
    ++g_stats.memcpys, g_stats.memcpy_ns += ns;
  } else if (w->what == 2 && on(CUPTI_ACTIVITY_KIND_MEMSET)) {
    CUpti_ActivityMemset4 m;
    memset(&m, 0, sizeof m);
    m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    m.bytes = w->bytes;
    m.start = w->start, m.end = w->end;
    m.deviceId = w->device, m.contextId = 1, m.streamId = w->stream;
    m.correlationId = w->correlation;
    m.memoryKind = w->dst_kind;
    append(&m, m.kind);
    ++g_stats.memsets, g_stats.memset_ns += ns;
  }
  pthread_mutex_unlock(&g_mu);
}

/* A device busy at a set rate, on a thread of its own: `rate` kernel records a second for
 * `duration_ns`, each 1/rate apart on the device and half that long, made in batches as the clock
 * reaches them (at most 4096 a batch, so the lock is never held long). */
static pthread_t g_producer;
static uint64_t g_produce_rate, g_produce_ns, g_produce_elapsed_ns, g_produce_max_lag_ns;
static int g_producing;

static void *producer(void *arg) {
  (void)arg;
  const uint64_t total = (uint64_t)((double)g_produce_rate * (double)g_produce_ns / 1e9);
  const double period_ns = 1e9 / (double)g_produce_rate;
  pthread_mutex_lock(&g_mu);
  const uint64_t origin = now_ts();
  const double ticks_per_ns = g_ticks_per_ns;
  const char *name = intern_locked("_Z15simdev_producedv");
  pthread_mutex_unlock(&g_mu);
  const int64_t t0 = mono_ns();
  uint64_t made = 0;
  while (made < total) {
    const int64_t now = mono_ns() - t0;
    uint64_t due = (uint64_t)((double)now / period_ns);
    if (due > total) due = total;
    if (due <= made) {
      struct timespec pause = {0, 50000};
      nanosleep(&pause, NULL);
      continue;
    }
    const uint64_t lag = (uint64_t)now - (uint64_t)((double)made * period_ns);
    if (lag > g_produce_max_lag_ns) g_produce_max_lag_ns = lag;
    pthread_mutex_lock(&g_mu);
    for (int batch = 0; made < due && batch < 4096; ++made, ++batch) {
      CUpti_ActivityKernel10 k;
      memset(&k, 0, sizeof k);
      k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
      k.start = origin + (uint64_t)((double)made * period_ns * ticks_per_ns);
      k.end = k.start + (uint64_t)(0.5 * period_ns * ticks_per_ns);
      k.deviceId = 0, k.contextId = 1, k.streamId = 7;
      k.gridX = k.gridY = k.gridZ = 1;
      k.blockX = 128, k.blockY = k.blockZ = 1;
      k.registersPerThread = 32;
      k.correlationId = g_next_correlation++;
      k.name = name;
      if (on(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) append(&k, k.kind);
      else ++g_dropped_pending, ++g_stats.dropped;
      ++g_stats.produced;
    }
    pthread_mutex_unlock(&g_mu);
  }
  g_produce_elapsed_ns = (uint64_t)(mono_ns() - t0);
  return NULL;
}

int simdev_produce_start(uint64_t rate_per_s, uint64_t duration_ns) {
  if (g_producing || rate_per_s == 0) return -1;
  g_produce_rate = rate_per_s, g_produce_ns = duration_ns;
  g_produce_elapsed_ns = g_produce_max_lag_ns = 0;
  g_producing = 1;
  return pthread_create(&g_producer, NULL, producer, NULL);
}

/* Waits for the producer; its wall time and the most it fell behind its schedule, in ns. */
void simdev_produce_join(uint64_t *elapsed_ns, uint64_t *max_lag_ns) {
  if (!g_producing) return;
  pthread_join(g_producer, NULL);
  g_producing = 0;
  *elapsed_ns = g_produce_elapsed_ns;
  *max_lag_ns = g_produce_max_lag_ns;
}
