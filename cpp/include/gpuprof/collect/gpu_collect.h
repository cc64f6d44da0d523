// GPU collection for a live session: CUPTI activity records (kernels, copies, sets, runtime and
// driver calls, synchronisation, overhead, external correlation), NVML device samples and NVTX
// ranges. Torch-free: CUPTI, the CUDA driver and NVML are loaded at run time with dlopen, so this
// API exists (and says why collection is off) on machines with no GPU, no driver and no CUDA.
//
// Lifecycle, from the thread that owns the profiling session:
//   gpu_start(config) at the start of an active span (again when warmup ends: staged records of
//   the warmup are discarded), gpu_flush() + gpu_drain(trace) at the end of each span (after
//   collector drain()), gpu_stop() outside active steps, gpu_release() when the session ends so
//   another tool (torch.profiler, Nsight) can use CUPTI afterwards.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "gpuprof/core/trace.h"

namespace gpuprof::collect {

struct GpuConfig {
  size_t buffer_bytes = size_t(4) << 20;   // one CUPTI activity buffer
  size_t max_buffers = 32;                 // in CUPTI's hands at once; past it CUPTI drops records
  uint64_t max_events = 4'000'000;         // decoded events kept per span; past it counted as dropped
  bool driver_api = true;                  // also record CUDA driver API calls
  // Directories searched for libcupti before the CUDA toolkit's (Python passes torch's nvidia
  // wheel folders: site-packages/nvidia/cuda_cupti/lib, nvidia/cu13/lib, ...).
  std::vector<std::string> search_dirs;
  int64_t nvml_interval_ms = 100;          // 0: no NVML sampling
  // CUDA ordinals NVML samples (the devices this process uses); empty: every visible device.
  std::vector<int> nvml_devices;
};

struct GpuStatus {
  bool enabled = false;        // CUPTI activity collection is on
  std::string message;         // why not (one line a user can act on), or notes; "" when all is well
  std::string cupti_library;   // the libcupti that was loaded
  uint32_t cupti_version = 0;  // cuptiGetVersion()
  bool nvtx_markers = false;   // CUPTI's NVTX marker activity is on (records come only where
                               // libcupti is the NVTX injection library: NVTX_INJECTION64_PATH)
  bool nvml = false;   // NVML sampling is on
  std::string nvml_message;   // why not
  // The first CUPTI call of the session that failed after collection started ("cuptiActivityFlushAll:
  // CUPTI_ERROR_... (code n)"), "" when none did: collection goes on, but the records may be partial.
  std::string error;
  // A warning the report shows: e.g. kernel launches were recorded but no kernel arrived (another
  // CUPTI client, torch.profiler, turned kernel records off).
  std::string warning;
};

// Turns collection on (loading libraries and subscribing on first use). Never throws; on any
// failure GPU collection stays off and `message` says why. Calling it while on starts a new epoch:
// records staged so far are flushed and discarded.
GpuStatus gpu_start(const GpuConfig& config);
// CUDA ordinals of every device whose records arrived since the first gpu_start (the devices to
// synchronise before a flush so the last step's work on each is complete).
std::vector<int> gpu_devices_seen();
// Forces CUPTI to hand over every completed and in-flight record (CUPTI_ACTIVITY_FLAG_FLUSH_FORCED).
void gpu_flush();
// Flushes, then stops collecting (activities disabled, NVML sampler stopped). CUPTI stays subscribed.
void gpu_stop();
// gpu_stop() and unsubscribe, so other CUPTI clients can run later in this process. Also run at
// process exit (atexit) when a session was never released.
void gpu_release();
bool gpu_enabled();
// The status of the last gpu_start() (also explains a later failure, e.g. a flush error).
GpuStatus gpu_status();

// Moves the staged records of the current epoch into `trace`: device and API events (with
// KernelInfo / CopyInfo), external ids from external correlation, NVML samples, properties of the
// devices used, and the dropped counts (ours, CUPTI's, and device records CUPTI delivered without
// timestamps) into trace.dropped_events. With NVML on, metadata["gpu_energy"] says how each
// sampled device's energy is measured (counter, power samples, or not, with NVML's reason).
void gpu_drain(Trace& trace);
// At a step boundary (where the session closes a step): asks the NVML sampler's thread for one
// reading of the total-energy counter of each sampled device that has one, kept with the NVML
// samples, and returns at once (such a call took 2.2-2.8 ms on an H200, up to 16 ms). gpu_drain
// waits for the last one asked for. Nothing when NVML sampling is off.
void gpu_sample_energy();
// The same reading taken on the calling thread, returning when it is kept: where a span's first
// step starts, which the session makes start at the middle of this call.
void gpu_read_energy();

struct GpuCounters {
  uint64_t records = 0;   // activity records read from CUPTI buffers
  uint64_t events = 0;   // decoded into events
  uint64_t cupti_dropped = 0;   // cuptiActivityGetNumDroppedRecords
  uint64_t buffers_refused = 0;   // buffer requests refused (max_buffers in use)
  uint64_t events_dropped = 0;   // decoded events over max_events
  uint64_t untimed = 0;   // kernels, copies, sets, markers CUPTI delivered without a time
  uint64_t nvtx_unclosed = 0;   // NVTX ranges still open at the end of the span: dropped
  uint64_t buffers_in_use = 0;
};
GpuCounters gpu_counters();

// The libcupti gpu_start() would load (loading it, without subscribing), or "" with `why`. This is
// the path NVTX_INJECTION64_PATH must name for CUPTI to see NVTX ranges.
std::string cupti_library_path(const std::vector<std::string>& search_dirs, std::string& why);

// Hot path (RecordFunction enter/exit): pushes the host op's external id as CUPTI external
// correlation (CUSTOM0) for the calling thread, so the runtime calls it makes, and the device work
// they launch, carry it. One relaxed atomic load when CUPTI is off. Pops match pushes per thread
// even when collection starts or stops between an enter and its exit.
void gpu_external_push(uint64_t external_id);
void gpu_external_pop();
// False until GPU collection first starts correlating in this process, then true for good. While it
// is false no host op can have pushed an id, so the hooks skip gpu_external_push / pop altogether
// (a load instead of two calls per op); once true they always call them, and those calls keep
// pushes and pops matched as before.
extern std::atomic<bool> g_gpu_correlation_used;
inline bool gpu_correlation_used() { return g_gpu_correlation_used.load(std::memory_order_relaxed); }

// NVTX3 ranges in gpuprof's own NVTX domain ("gpuprof", kOwnNvtxDomain in cupti_decode.h), for
// Nsight Systems; gpuprof's CUPTI decoder leaves that domain out (the same ranges are already step
// and user-range events). Header-only NVTX: each call is an indirect call to a no-op when no NVTX
// tool is attached.
void nvtx_push(const char* name);
void nvtx_pop();

}   // namespace gpuprof::collect
