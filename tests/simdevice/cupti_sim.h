/* What the stand-in libcupti.so.13's two sources share (tests only): cupti_sim.c holds the CUPTI API
 * and the live device, cupti_sim_work.c the replayed and the sustained work. Everything here is
 * hidden: the library exports the CUPTI API and the simdev_* controls only. */
#ifndef SIMDEVICE_CUPTI_SIM_H
#define SIMDEVICE_CUPTI_SIM_H

#include <cupti.h>
#include <pthread.h>
#include <stdint.h>

#define MAX_KINDS 64
#define MAX_DEPTH 256

#pragma GCC visibility push(hidden)

typedef struct {
  uint64_t kernels, kernel_ns, memcpys, memcpy_ns, memsets, memset_ns, api_records, external_records;
  uint64_t dropped, buffers_requested, buffers_refused, buffers_completed;
  uint64_t completed_on_worker, completed_in_flush, forced_flushes, unforced_flushes, in_flight;
  uint64_t subscribes, subscribe_refusals, pushes, pops, timestamp_calls;
  uint64_t zero_id_pushes; /* external id 0: an operator the profiler did not record */
  uint64_t api_filter_calls;   /* cuptiActivityEnableRuntimeApi / DriverApi calls */
  uint64_t invalid_cbid_calls; /* ... of them for an id with no name (refused) */
  uint64_t api_switched_off;   /* API calls made with their id switched off: no record */
  uint64_t replayed;           /* simdev_replay calls */
  uint64_t complete_cpu_ns;    /* CPU time the client's completion callback took (its decoding) */
  uint64_t produced;           /* kernel records made by the producer thread (simdev_produce) */
  uint64_t callback_enables;   /* cuptiEnableCallback / cuptiEnableDomain calls accepted */
  uint64_t finalizes;          /* cuptiFinalize calls */
} simdev_stats_t;

extern pthread_mutex_t g_mu;       /* guards everything below but the thread-locals */
extern simdev_stats_t g_stats;
extern uint64_t g_dropped_pending; /* dropped since cuptiActivityGetNumDroppedRecords last read */
extern uint32_t g_next_correlation;
extern double g_ticks_per_ns;      /* the timestamp callback's units per nanosecond */
extern __thread uint64_t t_ext[MAX_DEPTH]; /* this thread's pushed external ids */
extern __thread int t_depth;

uint64_t now_ts(void);  /* a timestamp, through the client's callback when it registered one */
int64_t mono_ns(void);  /* CLOCK_MONOTONIC */
/* Under g_mu: */
void append(const void *rec, CUpti_ActivityKind kind); /* into the current buffer, or dropped */
int on(CUpti_ActivityKind k);                          /* the kind is enabled */
int api_recorded(CUpti_ActivityKind kind, CUpti_CallbackId cbid); /* ... and the call not switched off */
const char *intern_locked(const char *text);           /* a kernel name for the library's lifetime */

#pragma GCC visibility pop

#endif
