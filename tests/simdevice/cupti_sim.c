/* Stand-in libcupti.so.13 for the simulated device (tests only; never shipped).
 *
 * Implements the CUPTI entry points gpuprof resolves with CUPTI's documented behaviour: one
 * subscriber; activity kinds enabled and disabled one by one; activity buffers requested through
 * the client's callback and completed on this library's own worker thread (full buffers) or inside
 * cuptiActivityFlushAll; records dropped (and counted per queue) while the client refuses buffers;
 * every timestamp read through the registered timestamp callback; external correlation ids pushed
 * and popped per thread, each API record made while one is pushed followed by an
 * EXTERNAL_CORRELATION record. Records are the CUDA 13 header structs, laid out by the compiler
 * from cupti_activity.h itself.
 *
 * Work is driven by the test through the simdev_* control functions (ctypes): either explicitly
 * (simdev_launch) or by a rule run at each external-id push (simdev_set_rule: every host
 * operator the profiler's hooks see "launches" kernels, copies and sets of known durations). */
#include <cupti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cbid_names.h" /* generated at build time from cupti_runtime_cbid.h / cupti_driver_cbid.h */

#define MAX_KINDS 64
#define MAX_DEPTH 256

typedef struct {
  uint64_t kernels, kernel_ns, memcpys, memcpy_ns, memsets, memset_ns, api_records, external_records;
  uint64_t dropped, buffers_requested, buffers_refused, buffers_completed;
  uint64_t completed_on_worker, completed_in_flush, forced_flushes, unforced_flushes, in_flight;
  uint64_t subscribes, subscribe_refusals, pushes, pops, timestamp_calls;
  uint64_t zero_id_pushes; /* external id 0: an operator the profiler did not record */
} simdev_stats_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_subscribed, g_taken_by_other;
static CUpti_BuffersCallbackRequestFunc g_request;
static CUpti_BuffersCallbackCompleteFunc g_complete;
static CUpti_TimestampCallbackFunc g_ts;
static uint8_t g_enabled[MAX_KINDS];
static CUptiResult g_refuse[MAX_KINDS];
static uint8_t *g_buf;
static size_t g_buf_size, g_buf_used;
typedef struct Done {
  uint8_t *buf;
  size_t size, valid;
  struct Done *next;
} Done;
static Done *g_done_head, *g_done_tail;
static uint64_t g_dropped_pending;
static uint32_t g_next_correlation = 1;
static uint64_t g_device_free;   /* the simulated device runs one thing at a time */
static simdev_stats_t g_stats;
static pthread_t g_worker;
static int g_worker_started;
static int g_completing;          /* a delivery in progress (flush waits for the worker's) */
static pthread_cond_t g_idle_cv = PTHREAD_COND_INITIALIZER;
static int g_hold;                /* the worker hands nothing back (a slow CUPTI thread) */

/* The rule run at each push. */
static int g_rule_kernels;        /* kernels per push */
static uint64_t g_rule_kernel_ns;
static int g_rule_copy_every;     /* a 4 KiB HtoD copy every N pushes (0: none) */
static uint64_t g_rule_copy_ns;
static int g_rule_set_every;
static uint64_t g_rule_set_ns;
static uint64_t g_rule_push_count;

static __thread uint64_t t_ext[MAX_DEPTH];
static __thread int t_depth;

static uint64_t now_ts(void) {
  if (g_ts != NULL) {
    __atomic_add_fetch(&g_stats.timestamp_calls, 1, __ATOMIC_RELAXED);
    return g_ts();
  }
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static size_t record_size(CUpti_ActivityKind k) {
  switch (k) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: return sizeof(CUpti_ActivityAPI);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return sizeof(CUpti_ActivityExternalCorrelation);
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return sizeof(CUpti_ActivitySynchronization2);
    default: return 0;
  }
}
static size_t aligned(size_t n) { return (n + 7) & ~(size_t)7; }

/* Under g_mu. The full buffer goes to the completion queue (delivered without g_mu held: the
 * client's completion callback calls back into CUPTI). */
static void retire_current(void) {
  if (g_buf == NULL) return;
  Done *d = calloc(1, sizeof(Done));
  d->buf = g_buf, d->size = g_buf_size, d->valid = g_buf_used;
  if (g_done_tail) g_done_tail->next = d;
  else g_done_head = d;
  g_done_tail = d;
  g_buf = NULL, g_buf_size = g_buf_used = 0;
  pthread_cond_signal(&g_cv);
}

/* Under g_mu. Copies one record into the current buffer, asking the client for one when needed
 * (CUPTI calls the request callback while holding its own lock, as here). */
static void append(const void *rec, CUpti_ActivityKind kind) {
  const size_t n = aligned(record_size(kind));
  if (g_buf != NULL && g_buf_used + n > g_buf_size) retire_current();
  if (g_buf == NULL && g_request != NULL) {
    uint8_t *b = NULL;
    size_t size = 0, max_records = 0;
    g_request(&b, &size, &max_records);
    ++g_stats.buffers_requested;
    if (b == NULL || size < n) ++g_stats.buffers_refused;
    else g_buf = b, g_buf_size = size, g_buf_used = 0;
  }
  if (g_buf == NULL) {
    ++g_dropped_pending;
    ++g_stats.dropped;
    return;
  }
  memset(g_buf + g_buf_used, 0, n);
  memcpy(g_buf + g_buf_used, rec, record_size(kind));
  g_buf_used += n;
}

static int on(CUpti_ActivityKind k) { return (unsigned)k < MAX_KINDS && g_enabled[k]; }

/* Delivers queued buffers on the calling thread, without g_mu. */
static uint64_t deliver_queued(int from_worker) {
  uint64_t n = 0;
  for (;;) {
    pthread_mutex_lock(&g_mu);
    Done *d = g_done_head;
    if (d != NULL) {
      g_done_head = d->next;
      if (g_done_head == NULL) g_done_tail = NULL;
      ++g_completing;
    }
    CUpti_BuffersCallbackCompleteFunc complete = g_complete;
    pthread_mutex_unlock(&g_mu);
    if (d == NULL) return n;
    if (complete) complete(NULL, 0, d->buf, d->size, d->valid);
    pthread_mutex_lock(&g_mu);
    --g_completing;
    ++g_stats.buffers_completed;
    if (from_worker) ++g_stats.completed_on_worker;
    else ++g_stats.completed_in_flush;
    pthread_cond_broadcast(&g_idle_cv);
    pthread_mutex_unlock(&g_mu);
    free(d);
    ++n;
  }
}

static void *worker(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&g_mu);
    while (g_done_head == NULL || g_hold) pthread_cond_wait(&g_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
    deliver_queued(1);
  }
  return NULL;
}

static void ensure_worker(void) {
  if (!g_worker_started) {
    g_worker_started = 1;
    pthread_create(&g_worker, NULL, worker, NULL);
    pthread_detach(g_worker);
  }
}

/* ---- the CUPTI API ---------------------------------------------------------------------------- */

CUptiResult CUPTIAPI cuptiGetVersion(uint32_t *version) {
  if (version == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char **str) {
  if (str == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
  switch (result) {
    case CUPTI_SUCCESS: *str = "CUPTI_SUCCESS"; break;
    case CUPTI_ERROR_INVALID_PARAMETER: *str = "CUPTI_ERROR_INVALID_PARAMETER"; break;
    case CUPTI_ERROR_INVALID_KIND: *str = "CUPTI_ERROR_INVALID_KIND"; break;
    case CUPTI_ERROR_NOT_COMPATIBLE: *str = "CUPTI_ERROR_NOT_COMPATIBLE"; break;
    case CUPTI_ERROR_MAX_LIMIT_REACHED: *str = "CUPTI_ERROR_MAX_LIMIT_REACHED"; break;
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: *str = "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"; break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
      *str = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED";
      break;
    case CUPTI_ERROR_QUEUE_EMPTY: *str = "CUPTI_ERROR_QUEUE_EMPTY"; break;
    default: *str = "CUPTI_ERROR_UNKNOWN"; return CUPTI_ERROR_INVALID_PARAMETER;
  }
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback, void *userdata) {
  (void)callback, (void)userdata;
  if (subscriber == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
  pthread_mutex_lock(&g_mu);
  CUptiResult r = CUPTI_SUCCESS;
  if (g_subscribed || g_taken_by_other) {
    r = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    ++g_stats.subscribe_refusals;
  } else {
    g_subscribed = 1;
    ++g_stats.subscribes;
    *subscriber = (CUpti_SubscriberHandle)&g_subscribed;
  }
  pthread_mutex_unlock(&g_mu);
  return r;
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  if (subscriber != (CUpti_SubscriberHandle)&g_subscribed) return CUPTI_ERROR_INVALID_PARAMETER;
  pthread_mutex_lock(&g_mu);
  g_subscribed = 0;
  pthread_mutex_unlock(&g_mu);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetCallbackName(CUpti_CallbackDomain domain, uint32_t cbid, const char **name) {
  if (name == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
  const char *n = NULL;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) n = simdev_runtime_name(cbid);
  else if (domain == CUPTI_CB_DOMAIN_DRIVER_API) n = simdev_driver_name(cbid);
  else return CUPTI_ERROR_INVALID_PARAMETER;
  if (n == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
  *name = n;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
  if ((unsigned)kind >= MAX_KINDS) return CUPTI_ERROR_INVALID_KIND;
  pthread_mutex_lock(&g_mu);
  CUptiResult r = g_refuse[kind];
  if (r == CUPTI_SUCCESS && record_size(kind) == 0 && kind != CUPTI_ACTIVITY_KIND_OVERHEAD &&
      kind != CUPTI_ACTIVITY_KIND_MEMCPY2 && kind != CUPTI_ACTIVITY_KIND_MARKER)
    r = CUPTI_ERROR_INVALID_KIND;
  if (r == CUPTI_SUCCESS) g_enabled[kind] = 1;
  pthread_mutex_unlock(&g_mu);
  return r;
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
  if ((unsigned)kind >= MAX_KINDS) return CUPTI_ERROR_INVALID_KIND;
  pthread_mutex_lock(&g_mu);
  g_enabled[kind] = 0;
  pthread_mutex_unlock(&g_mu);
  return CUPTI_SUCCESS;
}

/* Documented to answer CUPTI_SUCCESS (or NOT_INITIALIZED) for any callback id. */
CUptiResult CUPTIAPI cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable) {
  (void)cbid, (void)enable;
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t enable) {
  (void)cbid, (void)enable;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                                    CUpti_BuffersCallbackCompleteFunc complete) {
  if (request == NULL || complete == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
  pthread_mutex_lock(&g_mu);
  g_request = request, g_complete = complete;
  ensure_worker();
  pthread_mutex_unlock(&g_mu);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc func) {
  if (func == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
  g_ts = func;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, CUpti_Activity **record) {
  if (buffer == NULL || record == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
  size_t off = 0;
  if (*record != NULL) {
    const size_t n = record_size((*record)->kind);
    if (n == 0) return CUPTI_ERROR_INVALID_KIND;
    off = (size_t)((uint8_t *)*record - buffer) + aligned(n);
  }
  if (off >= valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = (CUpti_Activity *)(buffer + off);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t stream, size_t *dropped) {
  (void)context, (void)stream;
  if (dropped == NULL) return CUPTI_ERROR_INVALID_PARAMETER;
  pthread_mutex_lock(&g_mu);
  *dropped = (size_t)g_dropped_pending;   /* read and reset, per queue: one global queue here */
  g_dropped_pending = 0;
  pthread_mutex_unlock(&g_mu);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag) {
  pthread_mutex_lock(&g_mu);
  if (flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) ++g_stats.forced_flushes;
  else ++g_stats.unforced_flushes;
  retire_current();   /* every record here is complete (in-flight ones carry zero times) */
  pthread_mutex_unlock(&g_mu);
  deliver_queued(0);
  /* Buffers the worker is handing over at this moment are complete when FlushAll returns. */
  pthread_mutex_lock(&g_mu);
  while (g_completing > 0 || g_done_head != NULL) pthread_cond_wait(&g_idle_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t id);
CUptiResult CUPTIAPI cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t *id) {
  if (kind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) return CUPTI_ERROR_INVALID_PARAMETER;
  if (t_depth == 0) return CUPTI_ERROR_QUEUE_EMPTY;
  --t_depth;
  if (id != NULL) *id = t_ext[t_depth];
  __atomic_add_fetch(&g_stats.pops, 1, __ATOMIC_RELAXED);
  return CUPTI_SUCCESS;
}

/* ---- the simulated device ---------------------------------------------------------------------- */

/* One API call (runtime cbid) on the calling thread and the device work it starts. kind: 0 kernel,
 * 1 HtoD copy, 2 memset. in_flight: the work has not finished (zero times, as a forced flush
 * delivers it). Under g_mu. */
static void launch_locked(int what, const char *kernel_name, uint64_t device_ns, uint64_t bytes, int in_flight) {
  const uint32_t corr = g_next_correlation++;
  const uint64_t api_start = now_ts();
  static const CUpti_CallbackId cbids[] = {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
                                           CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
                                           CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020};
  uint64_t start = api_start > g_device_free ? api_start : g_device_free;
  uint64_t end = start + device_ns;
  if (!in_flight) g_device_free = end;
  const uint64_t api_end = now_ts();
  if (on(CUPTI_ACTIVITY_KIND_RUNTIME)) {
    CUpti_ActivityAPI a;
    memset(&a, 0, sizeof a);
    a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    a.cbid = cbids[what];
    a.start = api_start, a.end = api_end;
    a.processId = 1, a.threadId = (uint32_t)pthread_self();
    a.correlationId = corr;
    append(&a, a.kind);
    ++g_stats.api_records;
  }
  if (t_depth > 0 && on(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION)) {
    CUpti_ActivityExternalCorrelation x;
    memset(&x, 0, sizeof x);
    x.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    x.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
    x.externalId = t_ext[t_depth - 1];
    x.correlationId = corr;
    append(&x, x.kind);
    ++g_stats.external_records;
  }
  if (in_flight) start = end = 0, ++g_stats.in_flight;
  if (what == 0 && (on(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) || on(CUPTI_ACTIVITY_KIND_KERNEL))) {
    CUpti_ActivityKernel10 k;
    memset(&k, 0, sizeof k);
    k.kind = on(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) ? CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL : CUPTI_ACTIVITY_KIND_KERNEL;
    k.start = start, k.end = end;
    k.deviceId = 0, k.contextId = 1, k.streamId = 7;
    k.gridX = 264, k.gridY = 1, k.gridZ = 1;
    k.blockX = 256, k.blockY = 1, k.blockZ = 1;
    k.registersPerThread = 64;
    k.staticSharedMemory = 16384;
    k.dynamicSharedMemory = 0;
    k.correlationId = corr;
    k.name = kernel_name;
    append(&k, k.kind);
    if (!in_flight) ++g_stats.kernels, g_stats.kernel_ns += device_ns;
  } else if (what == 1 && on(CUPTI_ACTIVITY_KIND_MEMCPY)) {
    CUpti_ActivityMemcpy6 m;
    memset(&m, 0, sizeof m);
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    m.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
    m.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    m.bytes = bytes;
    m.start = start, m.end = end;
    m.deviceId = 0, m.contextId = 1, m.streamId = 7;
    m.correlationId = corr;
    append(&m, m.kind);
    if (!in_flight) ++g_stats.memcpys, g_stats.memcpy_ns += device_ns;
  } else if (what == 2 && on(CUPTI_ACTIVITY_KIND_MEMSET)) {
    CUpti_ActivityMemset4 m;
    memset(&m, 0, sizeof m);
    m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    m.value = 0;
    m.bytes = bytes;
    m.start = start, m.end = end;
    m.deviceId = 0, m.contextId = 1, m.streamId = 7;
    m.correlationId = corr;
    m.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    append(&m, m.kind);
    if (!in_flight) ++g_stats.memsets, g_stats.memset_ns += device_ns;
  }
}

CUptiResult CUPTIAPI cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t id) {
  if (kind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) return CUPTI_ERROR_INVALID_PARAMETER;
  if (t_depth >= MAX_DEPTH) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  t_ext[t_depth++] = id;
  __atomic_add_fetch(&g_stats.pushes, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&g_mu);
  if (id == 0) ++g_stats.zero_id_pushes;
  if (g_rule_kernels > 0 || g_rule_copy_every > 0 || g_rule_set_every > 0) {
    const uint64_t n = ++g_rule_push_count;
    for (int i = 0; i < g_rule_kernels; ++i) launch_locked(0, "_Z13simdev_kernelPfi", g_rule_kernel_ns, 0, 0);
    if (g_rule_copy_every > 0 && n % (uint64_t)g_rule_copy_every == 0) launch_locked(1, NULL, g_rule_copy_ns, 4096, 0);
    if (g_rule_set_every > 0 && n % (uint64_t)g_rule_set_every == 0) launch_locked(2, NULL, g_rule_set_ns, 1024, 0);
  }
  pthread_mutex_unlock(&g_mu);
  return CUPTI_SUCCESS;
}

/* ---- control (the tests, through ctypes) -------------------------------------------------------- */

void simdev_set_rule(int kernels_per_push, uint64_t kernel_ns, int copy_every, uint64_t copy_ns, int set_every,
                     uint64_t set_ns) {
  pthread_mutex_lock(&g_mu);
  g_rule_kernels = kernels_per_push, g_rule_kernel_ns = kernel_ns;
  g_rule_copy_every = copy_every, g_rule_copy_ns = copy_ns;
  g_rule_set_every = set_every, g_rule_set_ns = set_ns;
  g_rule_push_count = 0;
  pthread_mutex_unlock(&g_mu);
}

/* Emits `count` launches of `what` from the calling thread (with its pushed external id, if any). */
void simdev_launch(int what, const char *kernel_name, uint64_t device_ns, uint64_t bytes, int in_flight, int count) {
  const char *name = kernel_name ? strdup(kernel_name) : "_Z13simdev_kernelPfi";   /* lives as long as records */
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < count; ++i) launch_locked(what, name, device_ns, bytes, in_flight);
  pthread_mutex_unlock(&g_mu);
}

/* Another profiler (torch.profiler, Nsight) holds the one subscriber slot, or gives it back. */
void simdev_take_subscriber(int taken) {
  pthread_mutex_lock(&g_mu);
  g_taken_by_other = taken;
  pthread_mutex_unlock(&g_mu);
}

/* cuptiActivityEnable(kind) answers `result` from now on (CUPTI_SUCCESS: accepted again). */
void simdev_refuse_kind(int kind, int result) {
  if ((unsigned)kind >= MAX_KINDS) return;
  pthread_mutex_lock(&g_mu);
  g_refuse[kind] = (CUptiResult)result;
  pthread_mutex_unlock(&g_mu);
}

int simdev_kind_enabled(int kind) {
  pthread_mutex_lock(&g_mu);
  const int r = on((CUpti_ActivityKind)kind);
  pthread_mutex_unlock(&g_mu);
  return r;
}

void simdev_stats(simdev_stats_t *out) {
  pthread_mutex_lock(&g_mu);
  *out = g_stats;
  out->pushes = __atomic_load_n(&g_stats.pushes, __ATOMIC_RELAXED);
  out->pops = __atomic_load_n(&g_stats.pops, __ATOMIC_RELAXED);
  out->timestamp_calls = __atomic_load_n(&g_stats.timestamp_calls, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&g_mu);
}

/* While held, full buffers wait on the completion queue (a flush still delivers them). */
void simdev_hold_completions(int hold) {
  pthread_mutex_lock(&g_mu);
  g_hold = hold;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
}

size_t simdev_record_size(int kind) { return record_size((CUpti_ActivityKind)kind); }
