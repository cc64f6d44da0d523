// The CUPTI activity session behind gpu_collect.h.
//
// Buffer lifetime: CUPTI asks for a buffer (buffer_requested), fills it, and hands it back
// (buffer_completed) on its own worker thread or inside cuptiActivityFlushAll. Completed buffers
// are decoded at once into a staging Trace under one mutex, then returned to the BufferPool
// (cupti_buffers.h), so the number of buffers alive is bounded by max_buffers and no record
// outlives its buffer. A refused request (every buffer in CUPTI's hands) makes CUPTI drop records,
// which it counts; we count the refusals too.
#include <dlfcn.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <set>
#include <vector>

#include "cupti_buffers.h"
#include "cupti_decode.h"
#include "cupti_library.h"
#include "gpuprof/collector.h"
#include "gpuprof/gpu_collect.h"
#include "nvml_sampler.h"

namespace gpuprof::collect {
namespace {

const CUpti_ActivityKind kRequiredKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL};
const CUpti_ActivityKind kOptionalKinds[] = {
    CUPTI_ACTIVITY_KIND_MEMCPY,   CUPTI_ACTIVITY_KIND_MEMCPY2,   // MEMCPY2: peer-to-peer copies
    CUPTI_ACTIVITY_KIND_MEMSET,   CUPTI_ACTIVITY_KIND_RUNTIME,
    CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_OVERHEAD,
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
    // NVTX ranges and marks; CUPTI makes these records only when it is the NVTX injection library
    // (NVTX_INJECTION64_PATH, which the user sets before Python starts: docs/gpu.md).
    CUPTI_ACTIVITY_KIND_MARKER};

struct Session {
  std::mutex mutex;                        // guards everything below except the atomics
  const cupti::CuptiApi* api = nullptr;
  CUpti_SubscriberHandle subscriber = nullptr;
  bool subscribed = false;
  bool enabled = false;
  bool driver_enabled = false;
  GpuConfig config;
  GpuStatus status;
  // Staging, written by buffer_completed.
  std::mutex stage_mutex;
  Trace staged;
  cupti::ExternalIds external_ids;
  cupti::MarkerRanges markers;   // NVTX ranges started and not yet ended, across buffers of a span
  std::set<int> devices_seen;
  std::unique_ptr<cupti::ApiNames> names;
  std::vector<uint32_t> unused_runtime_cbids;   // API records CUPTI is told not to make
  std::vector<uint32_t> unused_driver_cbids;
  GpuCounters counters;
  NvmlSampler nvml;
};

Session& session() {
  static Session* s = new Session;   // leaked: CUPTI may call back during process exit
  return *s;
}

std::atomic<bool> g_correlating{false};
std::atomic<int64_t> g_outstanding_pushes{0};   // external ids pushed and not yet popped, all threads
cupti::BufferPool& buffer_pool() {
  static cupti::BufferPool* pool = new cupti::BufferPool;   // leaked, as the session
  return *pool;
}
CUptiResult (*g_push)(CUpti_ExternalCorrelationKind, uint64_t) = nullptr;
CUptiResult (*g_pop)(CUpti_ExternalCorrelationKind, uint64_t*) = nullptr;

// Which of this thread's open host ops pushed an external id (bit d: depth d), so an exit pops
// exactly when its enter pushed, whatever happened to collection in between.
// Plain data without initialisers: zero-initialised thread_local storage needs no per-access
// initialisation guard, which keeps this on the hot path to a TLS address computation.
struct CorrelationStack {
  uint32_t depth;
  uint64_t pushed;
  bool thread_known;   // this thread's (CUPTI id -> OS id) pair is in g_threads
};
thread_local CorrelationStack tl_corr;

// CUPTI thread id -> OS thread id of every thread that pushed an external id (so made CUDA calls
// inside host ops), for map_api_threads at drain.
std::mutex g_threads_mutex;
std::unordered_map<uint32_t, uint32_t> g_threads;

void note_thread(CorrelationStack& c) {
  c.thread_known = true;
  const pthread_t self = pthread_self();
  uint32_t cupti_tid = 0;
  std::memcpy(&cupti_tid, &self, sizeof(cupti_tid));   // the low 32 bits, as CUPTI reports them
  const uint32_t os_tid = static_cast<uint32_t>(::syscall(SYS_gettid));
  std::lock_guard<std::mutex> lock(g_threads_mutex);
  g_threads[cupti_tid] = os_tid;
}

// gpuprof's clock while a session holds CUPTI. The callback cannot be unregistered, so once the
// session releases CUPTI it answers with CUPTI's own Linux default (CLOCK_REALTIME), and a later
// torch.profiler in the same process sees the timestamps it would have seen without us.
std::atomic<bool> g_session_clock{false};

uint64_t CUPTIAPI timestamp_ns() {
  if (g_session_clock.load(std::memory_order_relaxed)) return uint64_t(now_ns());
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

void CUPTIAPI noop_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;   // as many records as fit
  *buffer = buffer_pool().acquire(size);
  if (*buffer == nullptr) {
    Session& s = session();
    std::lock_guard<std::mutex> lock(s.stage_mutex);
    ++s.counters.buffers_refused;
  }
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t size,
                               size_t valid_bytes) {
  Session& s = session();
  const cupti::CuptiApi* api = s.api;
  {
    std::lock_guard<std::mutex> lock(s.stage_mutex);
    CUpti_Activity* record = nullptr;
    while (api != nullptr && valid_bytes > 0 &&
           api->cuptiActivityGetNextRecord(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
      ++s.counters.records;
      if (s.staged.events.size() >= s.config.max_events) {
        if (record->kind != CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) ++s.counters.events_dropped;
        continue;
      }
      const cupti::DecodeResult r = cupti::decode_record(*record, *s.names, s.staged, &s.markers);
      if (r.what == cupti::DecodeResult::What::Event) {
        ++s.counters.events;
        const Event& e = s.staged.events.back();
        if (e.device >= 0) s.devices_seen.insert(e.device);
      } else if (r.what == cupti::DecodeResult::What::ExternalCorrelation) {
        s.external_ids[r.correlation] = r.external_id;
      } else if (r.what == cupti::DecodeResult::What::Untimed) {
        ++s.counters.untimed;
      }
    }
    size_t dropped = 0;
    if (api != nullptr && api->cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) == CUPTI_SUCCESS)
      s.counters.cupti_dropped += dropped;
  }
  buffer_pool().release(buffer, size);
}

std::vector<std::string> cuda_pci_bus_ids() {
  std::vector<std::string> ids;
  const cupti::CudaDriver& d = cupti::driver();
  for (int i = 0; d.ok && i < d.device_count; ++i) ids.push_back(d.pci_bus_id(i));
  return ids;
}

void set_kinds(Session& s, bool on) {
  const cupti::CuptiApi& api = *s.api;
  auto apply = on ? api.cuptiActivityEnable : api.cuptiActivityDisable;
  for (CUpti_ActivityKind k : kOptionalKinds) apply(k);
  if (s.config.driver_api || !on) apply(CUPTI_ACTIVITY_KIND_DRIVER);
  for (CUpti_ActivityKind k : kRequiredKinds) apply(k);
}

// Tells CUPTI not to record the runtime and driver calls the decoder would drop anyway.
void skip_unused_apis(Session& s) {
  const cupti::CuptiApi& api = *s.api;
  if (s.unused_runtime_cbids.empty() && s.unused_driver_cbids.empty()) {
    std::lock_guard<std::mutex> lock(s.stage_mutex);   // ApiNames is shared with buffer_completed
    s.unused_runtime_cbids =
        cupti::unused_api_cbids(*s.names, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE);
    s.unused_driver_cbids =
        cupti::unused_api_cbids(*s.names, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE);
  }
  if (api.cuptiActivityEnableRuntimeApi != nullptr)
    for (uint32_t cbid : s.unused_runtime_cbids) api.cuptiActivityEnableRuntimeApi(cbid, 0);
  if (api.cuptiActivityEnableDriverApi != nullptr && s.config.driver_api)
    for (uint32_t cbid : s.unused_driver_cbids) api.cuptiActivityEnableDriverApi(cbid, 0);
}

// Subscribes and turns the activities on; on failure leaves everything off and says why.
bool enable(Session& s) {
  const cupti::CuptiApi& api = *s.api;
  if (!s.subscribed) {
    const CUptiResult r = api.cuptiSubscribe(&s.subscriber, noop_callback, nullptr);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      s.status.message =
          "another CUDA profiler already holds CUPTI in this process (torch.profiler, Nsight Systems "
          "or Nsight Compute: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED); profiling host-side "
          "only. Run gpuprof without the other profiler for GPU timings; torch.profiler keeps CUPTI "
          "after its first use until the process exits unless TEARDOWN_CUPTI=1 is set in the "
          "environment before torch starts";
      return false;
    }
    if (r != CUPTI_SUCCESS) {
      s.status.message = "CUPTI could not start (cuptiSubscribe: " + api.describe(r) +
                         "); profiling host-side only";
      return false;
    }
    s.subscribed = true;
  }
  // Device and host timestamps on one clock: CUPTI asks us for every timestamp.
  g_session_clock.store(true, std::memory_order_relaxed);
  CUptiResult r = api.cuptiActivityRegisterTimestampCallback(timestamp_ns);
  if (r == CUPTI_SUCCESS) r = api.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  for (CUpti_ActivityKind k : kRequiredKinds)
    if (r == CUPTI_SUCCESS) r = api.cuptiActivityEnable(k);
  if (r != CUPTI_SUCCESS) {
    if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES ||
        r == CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES) {
      s.status.message =
          "GPU profiling is restricted to admin users on this machine "
          "(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES); profiling host-side only. Run as root, or allow "
          "all users: `options nvidia NVreg_RestrictProfilingToAdminUsers=0` in "
          "/etc/modprobe.d/nvidia-profiling.conf, then reboot (in a container: start it with "
          "--cap-add=SYS_ADMIN or the host setting above)";
    } else {
      s.status.message = "CUPTI refused kernel tracing (" + api.describe(r) +
                         "); profiling host-side only";
    }
    set_kinds(s, false);
    return false;
  }
  std::string notes;
  for (CUpti_ActivityKind k : kOptionalKinds) {
    const CUptiResult ok = api.cuptiActivityEnable(k);
    if (k == CUPTI_ACTIVITY_KIND_MARKER) s.status.nvtx_markers = ok == CUPTI_SUCCESS;
    if (ok != CUPTI_SUCCESS) notes += (notes.empty() ? "" : "; ") + std::string("activity kind ") +
                                      std::to_string(int(k)) + " unavailable: " + api.describe(ok);
  }
  if (s.config.driver_api) api.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER);
  skip_unused_apis(s);   // after the kinds: enabling RUNTIME / DRIVER resets the per-API switches
  if (!notes.empty()) s.status.message = notes;
  return true;
}

void flush_locked(Session& s) {
  if (s.api != nullptr && s.api->ok && s.subscribed)
    s.api->cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

void clear_staged(Session& s) {
  std::lock_guard<std::mutex> lock(s.stage_mutex);
  s.staged = Trace();
  s.external_ids.clear();
  s.markers.close_span();   // a new epoch: ranges of the old one never close here
  s.devices_seen.clear();
  const uint64_t in_use = s.counters.buffers_in_use;
  s.counters = GpuCounters();
  s.counters.buffers_in_use = in_use;
}

void start_nvml(Session& s) {
  s.status.nvml = false;
  s.status.nvml_message.clear();
  if (s.config.nvml_interval_ms <= 0) return;
  std::string why;
  if (s.nvml.start(cuda_pci_bus_ids(), s.config.nvml_interval_ms, why)) s.status.nvml = true;
  else s.status.nvml_message = why;
}

}  // namespace

GpuStatus gpu_start(const GpuConfig& config) {
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.enabled) {
    // New epoch (warmup -> active): whatever CUPTI holds belongs to the old one.
    flush_locked(s);
    clear_staged(s);
    s.nvml.take();
    return s.status;
  }
  s.config = config;
  s.status = GpuStatus();
  buffer_pool().configure(std::max<size_t>(config.buffer_bytes, 64 << 10),
                          std::max<size_t>(config.max_buffers, 2));

  const cupti::CudaDriver& drv = cupti::driver();
  if (!drv.ok) {
    s.status.message = drv.error + "; profiling host-side only";
    s.status.nvml_message = drv.error;
    return s.status;
  }
  s.api = &cupti::cupti(config.search_dirs);
  if (!s.api->ok) {
    s.status.message = s.api->error + "; profiling host-side only";
    start_nvml(s);
    return s.status;
  }
  s.status.cupti_library = s.api->path;
  s.status.cupti_version = s.api->version;
  if (!s.names) {
    const cupti::CuptiApi* api = s.api;
    s.names = std::make_unique<cupti::ApiNames>([api](CUpti_CallbackDomain d, uint32_t cbid) {
      const char* n = nullptr;
      return api->cuptiGetCallbackName(d, cbid, &n) == CUPTI_SUCCESS && n ? std::string(n) : std::string();
    });
  }
  clear_staged(s);
  if (enable(s)) {
    s.enabled = true;
    s.status.enabled = true;
    g_push = s.api->cuptiActivityPushExternalCorrelationId;
    g_pop = s.api->cuptiActivityPopExternalCorrelationId;
    g_correlating.store(true, std::memory_order_release);
    note_thread(tl_corr);   // the session's thread makes CUDA calls outside host ops too
  } else if (s.subscribed) {
    s.api->cuptiUnsubscribe(s.subscriber);   // leave CUPTI free for whoever can use it
    s.subscribed = false;
    g_session_clock.store(false, std::memory_order_relaxed);
  }
  start_nvml(s);
  return s.status;
}

void gpu_flush() {
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.enabled) flush_locked(s);
}

void gpu_stop() {
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.nvml.stop();
  if (!s.enabled) return;
  g_correlating.store(false, std::memory_order_release);
  set_kinds(s, false);
  flush_locked(s);
  s.enabled = false;
}

void gpu_release() {
  gpu_stop();
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.subscribed) {
    s.api->cuptiUnsubscribe(s.subscriber);
    s.subscribed = false;
  }
  g_session_clock.store(false, std::memory_order_relaxed);
  buffer_pool().trim();   // CUPTI has handed every buffer back (gpu_stop flushed)
}

bool gpu_enabled() { return g_correlating.load(std::memory_order_acquire); }

GpuStatus gpu_status() {
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.status;
}

void gpu_drain(Trace& trace) {
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  Trace staged;
  cupti::ExternalIds external_ids;
  std::set<int> devices;
  GpuCounters counters;
  {
    std::lock_guard<std::mutex> stage(s.stage_mutex);
    std::swap(staged, s.staged);
    std::swap(external_ids, s.external_ids);
    std::swap(devices, s.devices_seen);
    // End of the span: an NVTX range still open now is dropped (its end, if it comes, finds no
    // start and is ignored).
    s.counters.nvtx_unclosed += s.markers.close_span();
    counters = s.counters;
    const uint64_t in_use = s.counters.buffers_in_use;
    s.counters = GpuCounters();
    s.counters.buffers_in_use = in_use;
  }
  staged.dropped_events =
      counters.cupti_dropped + counters.events_dropped + counters.untimed + counters.nvtx_unclosed;
  timespec real, mono;
  clock_gettime(CLOCK_REALTIME, &real);
  clock_gettime(CLOCK_MONOTONIC, &mono);   // now_ns()'s clock
  const int64_t real_minus_mono = (int64_t(real.tv_sec) - int64_t(mono.tv_sec)) * 1'000'000'000 +
                                  (int64_t(real.tv_nsec) - int64_t(mono.tv_nsec));
  const size_t realigned = cupti::realign_realtime_stamped(staged, now_ns(), real_minus_mono);
  const size_t first_gpu_event = trace.events.size();
  cupti::merge_decoded(trace, std::move(staged), external_ids);
  {
    std::lock_guard<std::mutex> lock(g_threads_mutex);
    cupti::map_api_threads(trace, g_threads, first_gpu_event);
  }
  const cupti::CudaDriver& drv = cupti::driver();
  for (int id : devices) {
    if (trace.device(id) != nullptr) continue;
    DeviceProps p;
    if (drv.properties(id, p)) trace.devices.push_back(p);
  }
  std::vector<GpuSample> samples = s.nvml.take();
  trace.gpu_samples.insert(trace.gpu_samples.end(), samples.begin(), samples.end());
  if (s.status.enabled) {
    trace.metadata["cupti_library"] = s.status.cupti_library;
    trace.metadata["cupti_records"] = std::to_string(counters.records);
    trace.metadata["cupti_dropped_records"] = std::to_string(counters.cupti_dropped);
    trace.metadata["cupti_buffers_refused"] = std::to_string(counters.buffers_refused);
    trace.metadata["cupti_untimed_records"] = std::to_string(counters.untimed);
    if (counters.nvtx_unclosed > 0)
      trace.metadata["nvtx_ranges_unclosed"] = std::to_string(counters.nvtx_unclosed);
    if (realigned > 0)   // the timestamp callback did not reach these: worth knowing on a new setup
      trace.metadata["cupti_realtime_records_realigned"] = std::to_string(realigned);
  }
}

std::string cupti_library_path(const std::vector<std::string>& search_dirs, std::string& why) {
  const cupti::CuptiApi& api = cupti::cupti(search_dirs);
  if (!api.ok) why = api.error;
  return api.ok ? api.path : std::string();
}

GpuCounters gpu_counters() {
  Session& s = session();
  std::lock_guard<std::mutex> stage(s.stage_mutex);
  GpuCounters c = s.counters;
  c.buffers_in_use = buffer_pool().in_use();
  return c;
}

// Fast path (CUPTI off and no id pushed anywhere): two relaxed loads, no thread-local access. An op
// entered on the fast path is not on the depth stack; its exit finds depth 0 (or takes the fast
// path) and pops nothing, which is right since it pushed nothing.
void gpu_external_push(uint64_t external_id) {
  if (!g_correlating.load(std::memory_order_relaxed) &&
      g_outstanding_pushes.load(std::memory_order_relaxed) == 0)
    return;
  CorrelationStack& c = tl_corr;
  const uint32_t d = c.depth++;
  // Acquire: pairs with gpu_start's release store, so g_push (written before it) is seen set on
  // every CPU, weakly ordered ones (Grace/aarch64) included. Only taken while CUPTI is on, where
  // the push into CUPTI costs far more than the barrier.
  if (d < 64 && external_id != 0 && g_correlating.load(std::memory_order_acquire)) {
    g_push(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, external_id);
    c.pushed |= uint64_t(1) << d;
    if (__builtin_expect(!c.thread_known, 0)) note_thread(c);
    g_outstanding_pushes.fetch_add(1, std::memory_order_relaxed);
  } else if (d < 64) {
    c.pushed &= ~(uint64_t(1) << d);   // a stale bit (an exit that ran on another thread) must not pop
  }
}

void gpu_external_pop() {
  if (!g_correlating.load(std::memory_order_relaxed) &&
      g_outstanding_pushes.load(std::memory_order_relaxed) == 0)
    return;
  CorrelationStack& c = tl_corr;
  if (c.depth == 0) return;
  const uint32_t d = --c.depth;
  if (d < 64 && (c.pushed & (uint64_t(1) << d))) {
    c.pushed &= ~(uint64_t(1) << d);
    uint64_t last = 0;
    g_pop(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
    g_outstanding_pushes.fetch_sub(1, std::memory_order_relaxed);
  }
}

}  // namespace gpuprof::collect
