// The CUPTI activity session behind gpu_collect.h, in three parts:
//   Correlation (cupti_correlation.h): host op external ids pushed into CUPTI, per thread;
//   BufferPool (cupti_buffers.h): the activity buffers lent to CUPTI;
//   CuptiSession (here): subscription, activity kinds, staging of decoded records, drain.
//
// Buffer lifetime: CUPTI asks for a buffer (buffer_requested), fills it, and hands it back
// (buffer_completed) on its own worker thread or inside cuptiActivityFlushAll. Completed buffers
// are decoded at once into a staging Trace under one mutex, then returned to the BufferPool, so
// the number of buffers alive is bounded by max_buffers and no record outlives its buffer. A
// buffer this pool did not lend (torch.profiler's, when both registered callbacks) is left alone.
//
// Locks: CUPTI may hold its own lock while it calls buffer_requested / buffer_completed, so no
// CUPTI function is ever called with stage_mutex_ held (the ABBA deadlock libkineto removed):
// buffer_completed reads the dropped count before taking it, and flushes are made with only
// mutex_ (the session's, never taken by a callback) held.
//
// Every object here is leaked on purpose: CUPTI may call back until the process exits, after
// static destructors have run.
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "cupti_buffers.h"
#include "cupti_correlation.h"
#include "cupti_decode.h"
#include "cupti_library.h"
#include "gpuprof/collect/collector.h"
#include "gpuprof/collect/gpu_collect.h"
#include "nvml_sampler.h"

namespace gpuprof::collect {
namespace {

const CUpti_ActivityKind kRequiredKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL};
const CUpti_ActivityKind kOptionalKinds[] = {
    CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMCPY2,   // MEMCPY2: peer-to-peer copies
    CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
    CUPTI_ACTIVITY_KIND_OVERHEAD, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
    // NVTX ranges and marks; CUPTI makes these records only when it is the NVTX injection library
    // (NVTX_INJECTION64_PATH, which the user sets before Python starts: docs/gpu.md).
    CUPTI_ACTIVITY_KIND_MARKER};

cupti::Correlation& correlation() { return cupti::Correlation::instance(); }

cupti::BufferPool& buffer_pool() {
  static cupti::BufferPool* pool = new cupti::BufferPool;   // leaked, as the session
  return *pool;
}

// gpuprof's clock while a session holds CUPTI: ticks(), the clock host events are stamped with,
// so device records are converted by the same line at drain (as libkineto does with its own host
// clock). The callback cannot be unregistered, so once the session releases CUPTI it answers with
// CUPTI's own Linux default (CLOCK_REALTIME), and a later torch.profiler in the same process sees
// the timestamps it would have seen without us.
std::atomic<bool> g_session_clock{false};

uint64_t CUPTIAPI timestamp_callback() {
  if (g_session_clock.load(std::memory_order_relaxed)) return uint64_t(ticks());
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

void CUPTIAPI noop_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}
void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records);
void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t size,
                               size_t valid_bytes);

// Decoded records of the current epoch, written by buffer_completed (any thread) under one mutex.
struct Staging {
  Trace trace;
  cupti::ExternalIds external_ids;
  cupti::MarkerRanges markers;   // NVTX ranges started and not yet ended, across buffers of a span
  std::set<int> devices;
  GpuCounters counters;          // buffers_refused and buffers_in_use are kept elsewhere
  uint64_t launches = 0;         // runtime / driver kernel launches recorded
  uint64_t kernels = 0;          // kernel records
};

class CuptiSession {
 public:
  static CuptiSession& instance() {
    static CuptiSession* s = new CuptiSession;   // leaked: CUPTI may call back during process exit
    return *s;
  }

  GpuStatus start(const GpuConfig& config);
  void flush();
  void stop();
  void release();
  GpuStatus status() {
    std::lock_guard<std::mutex> lock(mutex_);
    return status_with_error();
  }
  void drain(Trace& trace);
  void sample_energy() {
    std::lock_guard<std::mutex> lock(mutex_);
    nvml_.sample_energy();
  }
  void read_energy() {
    std::lock_guard<std::mutex> lock(mutex_);
    nvml_.read_energy_now();
  }
  GpuCounters counters();
  std::vector<int> devices_seen() {
    std::lock_guard<std::mutex> lock(stage_mutex_);
    return {all_devices_.begin(), all_devices_.end()};
  }
  // At process exit (atexit): no CUPTI call (the driver may be half torn down), only our own state
  // off, so callbacks still to come find nothing to do.
  void at_exit() {
    correlation().end();
    exiting_.store(true, std::memory_order_release);
    nvml_.stop();
  }

  void note_failure(CUptiResult r, const char* call) { check(r, call); }

  // CUPTI callbacks.
  void on_buffer_requested(uint8_t** buffer, size_t* size);
  void on_buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t size,
                           size_t valid_bytes);

 private:
  // The one checked-call helper: false on failure, and the first failure of the session is kept
  // (gpu_status().error, shown in the report).
  bool check(CUptiResult r, const char* call) {
    if (r == CUPTI_SUCCESS) return true;
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (error_.empty()) error_ = std::string(call) + ": " + (api_ ? api_->describe(r) : std::to_string(int(r)));
    return false;
  }
  GpuStatus status_with_error() {
    GpuStatus s = status_;
    std::lock_guard<std::mutex> lock(error_mutex_);
    s.error = error_;
    return s;
  }
  bool subscribe();
  bool enable();
  void set_kinds(bool on);
  void skip_unused_apis();
  void flush_all();
  void clear_staged();
  void start_nvml();

  std::mutex mutex_;   // the session thread's calls; never taken by a CUPTI callback
  const cupti::CuptiApi* api_ = nullptr;
  CUpti_SubscriberHandle subscriber_ = nullptr;
  bool subscribed_ = false;
  bool enabled_ = false;
  GpuConfig config_;
  GpuStatus status_;
  std::unique_ptr<cupti::ApiNames> names_;
  std::vector<uint32_t> unused_runtime_cbids_;   // API records CUPTI is told not to make
  std::vector<uint32_t> unused_driver_cbids_;
  NvmlSampler nvml_;
  bool atexit_registered_ = false;

  std::mutex stage_mutex_;   // guards staging_ and all_devices_; no CUPTI call is made under it
  Staging staging_;
  std::set<int> all_devices_;   // every device seen since the first start (flush synchronises them)

  std::atomic<uint64_t> buffers_refused_{0};
  std::atomic<bool> exiting_{false};
  std::mutex error_mutex_;
  std::string error_;
};

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;   // as many records as fit
  CuptiSession::instance().on_buffer_requested(buffer, size);
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t size,
                               size_t valid_bytes) {
  CuptiSession::instance().on_buffer_completed(context, stream_id, buffer, size, valid_bytes);
}

void CuptiSession::on_buffer_requested(uint8_t** buffer, size_t* size) {
  *buffer = buffer_pool().acquire(size);
  if (*buffer == nullptr) buffers_refused_.fetch_add(1, std::memory_order_relaxed);
}

bool is_launch(const std::string& api_name) { return api_name.find("Launch") != std::string::npos; }

void CuptiSession::on_buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t size,
                                       size_t valid_bytes) {
  if (!buffer_pool().lent(buffer)) return;   // another CUPTI client's buffer: not ours to read or free
  const cupti::CuptiApi* api = api_;
  // CUPTI calls first, without stage_mutex_ (see the top of this file).
  size_t dropped = 0;
  if (api != nullptr && !check(api->cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped),
                               "cuptiActivityGetNumDroppedRecords"))
    dropped = 0;
  if (api != nullptr && valid_bytes > 0 && !exiting_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(stage_mutex_);
    Staging& st = staging_;
    CUpti_Activity* record = nullptr;
    for (;;) {
      const CUptiResult r = api->cuptiActivityGetNextRecord(buffer, valid_bytes, &record);
      if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;   // the end of the buffer
      if (!check(r, "cuptiActivityGetNextRecord")) break;   // a bad record: the rest is unreadable
      ++st.counters.records;
      if (st.trace.events.size() >= config_.max_events) {
        if (record->kind != CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) ++st.counters.events_dropped;
        continue;
      }
      const cupti::DecodeResult d = cupti::decode_record(*record, *names_, st.trace, &st.markers);
      if (d.what == cupti::DecodeResult::What::Event) {
        ++st.counters.events;
        const Event& e = st.trace.events.back();
        if (e.device >= 0) {
          st.devices.insert(e.device);
          all_devices_.insert(e.device);
        }
        if (e.kind == EventKind::Kernel) ++st.kernels;
        else if ((e.kind == EventKind::Runtime || e.kind == EventKind::Driver) && is_launch(st.trace.name_of(e)))
          ++st.launches;
      } else if (d.what == cupti::DecodeResult::What::ExternalCorrelation) {
        st.external_ids[d.correlation] = d.external_id;
      } else if (d.what == cupti::DecodeResult::What::Untimed) {
        ++st.counters.untimed;
      }
    }
    st.counters.cupti_dropped += dropped;
  }
  buffer_pool().release(buffer, size);
}

std::vector<std::string> cuda_pci_bus_ids() {
  std::vector<std::string> ids;
  const cupti::CudaDriver& d = cupti::driver();
  for (int i = 0; d.ok && i < d.device_count; ++i) ids.push_back(d.pci_bus_id(i));
  return ids;
}

void CuptiSession::set_kinds(bool on) {
  const cupti::CuptiApi& api = *api_;
  auto apply = on ? api.cuptiActivityEnable : api.cuptiActivityDisable;
  const char* name = on ? "cuptiActivityEnable" : "cuptiActivityDisable";
  for (CUpti_ActivityKind k : kOptionalKinds) apply(k);   // optional: unavailable ones are noted at start
  if (config_.driver_api) check(apply(CUPTI_ACTIVITY_KIND_DRIVER), name);
  else if (!on) apply(CUPTI_ACTIVITY_KIND_DRIVER);   // never enabled by us: whatever CUPTI answers
  for (CUpti_ActivityKind k : kRequiredKinds) check(apply(k), name);
}

// Tells CUPTI not to record the runtime and driver calls the decoder would drop anyway.
void CuptiSession::skip_unused_apis() {
  const cupti::CuptiApi& api = *api_;
  if (unused_runtime_cbids_.empty() && unused_driver_cbids_.empty()) {
    std::lock_guard<std::mutex> lock(stage_mutex_);   // ApiNames is shared with buffer_completed
    unused_runtime_cbids_ =
        cupti::unused_api_cbids(*names_, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE);
    unused_driver_cbids_ =
        cupti::unused_api_cbids(*names_, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE);
  }
  if (api.cuptiActivityEnableRuntimeApi != nullptr)
    for (uint32_t cbid : unused_runtime_cbids_)
      if (!check(api.cuptiActivityEnableRuntimeApi(cbid, 0), "cuptiActivityEnableRuntimeApi")) break;
  if (api.cuptiActivityEnableDriverApi != nullptr && config_.driver_api)
    for (uint32_t cbid : unused_driver_cbids_)
      if (!check(api.cuptiActivityEnableDriverApi(cbid, 0), "cuptiActivityEnableDriverApi")) break;
}

bool CuptiSession::subscribe() {
  if (subscribed_) return true;
  const CUptiResult r = api_->cuptiSubscribe(&subscriber_, noop_callback, nullptr);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    status_.message =
        "another CUDA profiler already holds CUPTI in this process (torch.profiler, Nsight Systems "
        "or Nsight Compute: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED); profiling host-side "
        "only. Run gpuprof without the other profiler for GPU timings; torch.profiler keeps CUPTI "
        "after its first use until the process exits unless TEARDOWN_CUPTI=1 is set in the "
        "environment before torch starts";
    return false;
  }
  if (r != CUPTI_SUCCESS) {
    status_.message =
        "CUPTI could not start (cuptiSubscribe: " + api_->describe(r) + "); profiling host-side only";
    return false;
  }
  subscribed_ = true;
  return true;
}

// Registers our callbacks and turns the activities on; on failure leaves everything off and says
// why. Run at every gpu_start, new epochs included: another CUPTI client (torch.profiler) may have
// registered its own callbacks or disabled kinds since (CUPTI's registrations are process-wide).
bool CuptiSession::enable() {
  const cupti::CuptiApi& api = *api_;
  // Device and host timestamps on one clock: CUPTI asks us for every timestamp.
  g_session_clock.store(true, std::memory_order_relaxed);
  CUptiResult r = api.cuptiActivityRegisterTimestampCallback(timestamp_callback);
  if (r == CUPTI_SUCCESS) r = api.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  for (CUpti_ActivityKind k : kRequiredKinds)
    if (r == CUPTI_SUCCESS) r = api.cuptiActivityEnable(k);
  if (r != CUPTI_SUCCESS) {
    if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES || r == CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES) {
      status_.message =
          "GPU profiling is restricted to admin users on this machine "
          "(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES); profiling host-side only. Run as root, or allow "
          "all users: `options nvidia NVreg_RestrictProfilingToAdminUsers=0` in "
          "/etc/modprobe.d/nvidia-profiling.conf, then reboot (in a container: start it with "
          "--cap-add=SYS_ADMIN or the host setting above)";
    } else {
      status_.message = "CUPTI refused kernel tracing (" + api.describe(r) + "); profiling host-side only";
    }
    set_kinds(false);
    return false;
  }
  std::string notes = api.note;
  for (CUpti_ActivityKind k : kOptionalKinds) {
    const CUptiResult ok = api.cuptiActivityEnable(k);
    if (k == CUPTI_ACTIVITY_KIND_MARKER) status_.nvtx_markers = ok == CUPTI_SUCCESS;
    if (ok != CUPTI_SUCCESS)
      notes += (notes.empty() ? "" : "; ") + std::string("activity kind ") + std::to_string(int(k)) +
               " unavailable: " + api.describe(ok);
  }
  if (config_.driver_api) check(api.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER), "cuptiActivityEnable");
  skip_unused_apis();   // after the kinds: enabling RUNTIME / DRIVER resets the per-API switches
  if (!notes.empty()) status_.message = notes;
  return true;
}

void CuptiSession::flush_all() {
  if (api_ != nullptr && api_->ok && subscribed_)
    check(api_->cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
}

void CuptiSession::clear_staged() {
  std::lock_guard<std::mutex> lock(stage_mutex_);
  staging_.markers.close_span();   // a new epoch: ranges of the old one never close here
  staging_ = Staging();
}

void CuptiSession::start_nvml() {
  status_.nvml = false;
  status_.nvml_message.clear();
  if (config_.nvml_interval_ms <= 0) return;
  std::string why;
  if (nvml_.start(cuda_pci_bus_ids(), config_.nvml_devices, config_.nvml_interval_ms, why)) status_.nvml = true;
  else status_.nvml_message = why;
}

void exit_handler() { CuptiSession::instance().at_exit(); }

GpuStatus CuptiSession::start(const GpuConfig& config) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (enabled_) {
    // New epoch (warmup -> active): whatever CUPTI holds belongs to the old one.
    flush_all();
    clear_staged();
    nvml_.take();
    // Again: torch.profiler may have taken the callbacks or turned kinds off meanwhile.
    if (!enable()) {   // CUPTI refuses now: off, with the reason in the message
      correlation().end();
      enabled_ = false;
      status_.enabled = false;
    }
    return status_with_error();
  }
  config_ = config;
  status_ = GpuStatus();
  {
    std::lock_guard<std::mutex> e(error_mutex_);
    error_.clear();
  }
  buffer_pool().configure(std::max<size_t>(config.buffer_bytes, 64 << 10),
                          std::max<size_t>(config.max_buffers, 2));

  const cupti::CudaDriver& drv = cupti::driver();
  if (!drv.ok) {
    status_.message = drv.error + "; profiling host-side only";
    status_.nvml_message = drv.error;
    return status_;
  }
  api_ = &cupti::cupti(config.search_dirs);
  if (!api_->ok) {
    status_.message = api_->error + "; profiling host-side only";
    start_nvml();
    return status_;
  }
  status_.cupti_library = api_->path;
  status_.cupti_version = api_->version;
  if (!names_) {
    const cupti::CuptiApi* api = api_;
    names_ = std::make_unique<cupti::ApiNames>([api](CUpti_CallbackDomain d, uint32_t cbid) {
      const char* n = nullptr;
      return api->cuptiGetCallbackName(d, cbid, &n) == CUPTI_SUCCESS && n ? std::string(n) : std::string();
    });
  }
  clear_staged();
  if (subscribe() && enable()) {
    enabled_ = true;
    status_.enabled = true;
    exiting_.store(false, std::memory_order_release);
    g_gpu_correlation_used.store(true, std::memory_order_release);   // before the first push
    correlation().begin(api_->cuptiActivityPushExternalCorrelationId, api_->cuptiActivityPopExternalCorrelationId);
    if (!atexit_registered_) {
      atexit_registered_ = true;
      std::atexit(exit_handler);
    }
  } else if (subscribed_) {
    check(api_->cuptiUnsubscribe(subscriber_), "cuptiUnsubscribe");   // leave CUPTI to whoever can use it
    subscribed_ = false;
    g_session_clock.store(false, std::memory_order_relaxed);
  } else {
    g_session_clock.store(false, std::memory_order_relaxed);
  }
  start_nvml();
  return status_with_error();
}

void CuptiSession::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (enabled_) flush_all();
}

void CuptiSession::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  nvml_.stop();
  if (!enabled_) return;
  correlation().end();
  set_kinds(false);
  flush_all();
  enabled_ = false;
}

void CuptiSession::release() {
  stop();
  std::lock_guard<std::mutex> lock(mutex_);
  if (subscribed_) {
    check(api_->cuptiUnsubscribe(subscriber_), "cuptiUnsubscribe");
    subscribed_ = false;
  }
  g_session_clock.store(false, std::memory_order_relaxed);
  buffer_pool().trim();   // CUPTI has handed every buffer back (stop flushed)
}

GpuCounters CuptiSession::counters() {
  GpuCounters c;
  {
    std::lock_guard<std::mutex> stage(stage_mutex_);
    c = staging_.counters;
  }
  c.buffers_refused = buffers_refused_.load(std::memory_order_relaxed);
  c.buffers_in_use = buffer_pool().in_use();
  return c;
}

// The line collector drain() used for the host events of this span.
struct DrainedLine : cupti::TickLine {
  int64_t time(int64_t t) const override { return drained_ticks_to_ns(t); }
  int64_t duration(int64_t d) const override { return drained_tick_duration_to_ns(d); }
};

void CuptiSession::drain(Trace& trace) {
  std::lock_guard<std::mutex> lock(mutex_);
  Staging st;
  {
    std::lock_guard<std::mutex> stage(stage_mutex_);
    // End of the span: an NVTX range still open now is dropped (its end, if it comes, finds no
    // start and is ignored).
    staging_.counters.nvtx_unclosed += staging_.markers.close_span();
    std::swap(st.trace, staging_.trace);
    std::swap(st.external_ids, staging_.external_ids);
    std::swap(st.devices, staging_.devices);
    st.counters = staging_.counters;
    st.launches = staging_.launches;
    st.kernels = staging_.kernels;
    staging_.counters = GpuCounters();
    staging_.launches = staging_.kernels = 0;
  }
  GpuCounters& counters = st.counters;
  counters.buffers_refused = buffers_refused_.exchange(0, std::memory_order_relaxed);
  st.trace.dropped_events =
      counters.cupti_dropped + counters.events_dropped + counters.untimed + counters.nvtx_unclosed;
  timespec real, mono;
  clock_gettime(CLOCK_REALTIME, &real);
  clock_gettime(CLOCK_MONOTONIC, &mono);   // now_ns()'s clock
  const int64_t real_ns = int64_t(real.tv_sec) * 1'000'000'000 + int64_t(real.tv_nsec);
  const int64_t real_minus_mono = real_ns - (int64_t(mono.tv_sec) * 1'000'000'000 + int64_t(mono.tv_nsec));
  const size_t realtime_stamped = cupti::put_on_host_clock(st.trace, DrainedLine(), real_ns, real_minus_mono);
  const size_t first_gpu_event = trace.events.size();
  cupti::merge_decoded(trace, std::move(st.trace), st.external_ids);
  cupti::map_api_threads(trace, correlation().threads(), first_gpu_event);
  const cupti::CudaDriver& drv = cupti::driver();
  for (int id : st.devices) {
    if (trace.device(id) != nullptr) continue;
    DeviceProps p;
    if (drv.properties(id, p)) trace.devices.push_back(p);
  }
  std::vector<GpuSample> samples = nvml_.take();
  trace.gpu_samples.insert(trace.gpu_samples.end(), samples.begin(), samples.end());
  if (status_.nvml && !nvml_.energy_note().empty()) trace.metadata["gpu_energy"] = nvml_.energy_note();
  if (st.launches > 0 && st.kernels == 0)
    status_.warning =
        std::to_string(st.launches) +
        " kernel launches were recorded but no kernel record arrived: "
        "another CUPTI client in this process (torch.profiler) probably turned kernel records off or "
        "took the activity buffers; run gpuprof outside torch.profiler, or set TEARDOWN_CUPTI=1 "
        "before torch starts";
  if (status_.enabled) {
    trace.metadata["cupti_library"] = status_.cupti_library;
    trace.metadata["cupti_records"] = std::to_string(counters.records);
    trace.metadata["cupti_dropped_records"] = std::to_string(counters.cupti_dropped);
    trace.metadata["cupti_buffers_refused"] = std::to_string(counters.buffers_refused);
    trace.metadata["cupti_untimed_records"] = std::to_string(counters.untimed);
    if (counters.nvtx_unclosed > 0)
      trace.metadata["nvtx_ranges_unclosed"] = std::to_string(counters.nvtx_unclosed);
    if (realtime_stamped > 0)   // the timestamp callback did not reach these: worth knowing on a new setup
      trace.metadata["cupti_realtime_records_realigned"] = std::to_string(realtime_stamped);
  }
}

}  // namespace

GpuStatus gpu_start(const GpuConfig& config) { return CuptiSession::instance().start(config); }
void gpu_flush() { CuptiSession::instance().flush(); }
void gpu_stop() { CuptiSession::instance().stop(); }
void gpu_release() { CuptiSession::instance().release(); }
bool gpu_enabled() { return correlation().on(); }
GpuStatus gpu_status() { return CuptiSession::instance().status(); }
void gpu_drain(Trace& trace) { CuptiSession::instance().drain(trace); }
GpuCounters gpu_counters() { return CuptiSession::instance().counters(); }
void gpu_sample_energy() { CuptiSession::instance().sample_energy(); }
void gpu_read_energy() { CuptiSession::instance().read_energy(); }
std::vector<int> gpu_devices_seen() { return CuptiSession::instance().devices_seen(); }

std::string cupti_library_path(const std::vector<std::string>& search_dirs, std::string& why) {
  const cupti::CuptiApi& api = cupti::cupti(search_dirs);
  if (!api.ok) why = api.error;
  return api.ok ? api.path : std::string();
}

std::atomic<bool> g_gpu_correlation_used{false};

// Hot path: the checks cost a predicted branch; a refusal (rare) is recorded once as the session's error.
void gpu_external_push(uint64_t external_id) {
  const CUptiResult r = correlation().push(external_id);
  if (__builtin_expect(r != CUPTI_SUCCESS, 0))
    CuptiSession::instance().note_failure(r, "cuptiActivityPushExternalCorrelationId");
}
void gpu_external_pop() {
  const CUptiResult r = correlation().pop();
  if (__builtin_expect(r != CUPTI_SUCCESS, 0))
    CuptiSession::instance().note_failure(r, "cuptiActivityPopExternalCorrelationId");
}

}  // namespace gpuprof::collect
