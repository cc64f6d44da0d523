// Decoding CUPTI activity records into gpuprof Events: a pure function of the record (plus the
// API-name lookup CUPTI provides), so every field mapping is unit-tested on the CPU with records
// built by hand from the CUPTI headers' structs.
//
// Record layouts are those of the CUPTI headers this file is compiled against (CUDA 13:
// CUpti_ActivityKernel10, Memcpy6, MemcpyPtoP4, Memset4, API, Synchronization2, Overhead3,
// ExternalCorrelation, Marker2);
// cupti_library.cpp refuses a libcupti of another major version for that reason.
#pragma once

#include <cupti.h>

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gpuprof/core/trace.h"

namespace gpuprof::collect::cupti {

// Runtime/driver API names by callback id, cached (cuptiGetCallbackName is not free, and a run
// makes millions of calls with a few dozen distinct ids). The version suffix CUPTI appends
// ("cudaLaunchKernel_v7000") is stripped, as Kineto does, so names match torch.profiler traces.
class ApiNames {
 public:
  // Returns the raw CUPTI name of (domain, cbid), or "" when unknown.
  using Resolver = std::function<std::string(CUpti_CallbackDomain, uint32_t)>;
  explicit ApiNames(Resolver resolver) : resolver_(std::move(resolver)) {}
  const std::string& name(CUpti_CallbackDomain domain, uint32_t cbid);
  // False when CUPTI has no name for the id (name() then answers "cuda driver api #N").
  bool named(CUpti_CallbackDomain domain, uint32_t cbid);

  // Demangled kernel name, cached: demangling costs microseconds and a training step launches the
  // same few hundred kernels over and over. CUPTI shares one name string among all records of a
  // kernel, so the cache is keyed by its address, and checked against its text (a module unloaded
  // and another loaded at the same address must not inherit a stale name).
  const std::string& kernel_name(const char* mangled);

 private:
  struct KernelName {
    std::string mangled;
    std::string demangled;
  };
  Resolver resolver_;
  std::unordered_map<uint64_t, std::string> cache_;
  std::unordered_set<uint64_t> unnamed_;
  std::unordered_map<const char*, KernelName> kernels_;
};

// "cudaLaunchKernel_v7000" -> "cudaLaunchKernel"; "cuMemcpyHtoD_v2" -> "cuMemcpyHtoD".
std::string strip_version_suffix(std::string_view name);

// Runtime calls that torch makes around nearly every op to query state (cudaGetDevice,
// cudaGetLastError, ...): they never launch device work, cost well under a microsecond each, and
// Kineto leaves them out of torch.profiler traces, so they are left out here too to keep the
// Runtime share comparable.
bool is_state_query_runtime_api(std::string_view name);

// CUPTI's DRIVER activity also reports the many bookkeeping calls libraries make (context and
// attribute queries, module loading, ...). Kept: calls that launch work, move or set memory, or
// wait (cuLaunchKernel from Triton and other JIT launchers, cuMemcpy*, cuMemset*, cuGraphLaunch,
// synchronisations); these are what a timeline needs beside the runtime calls.
bool is_work_driver_api(std::string_view name);

// The callback ids in [0, count) of `domain` whose records the decoder leaves out (runtime: state
// queries; driver: everything but work), so that the collector can tell CUPTI not to record them
// at all (cuptiActivityEnableRuntimeApi / cuptiActivityEnableDriverApi, CUPTI 12.5+), as Kineto
// does for a few: a training step makes several such calls per op, each costing CUPTI a record.
std::vector<uint32_t> unused_api_cbids(ApiNames& names, CUpti_CallbackDomain domain, uint32_t count);

// "_Z10spin_kernelx" -> "spin_kernel(long long)"; names that are not mangled come back unchanged.
std::string demangle(const char* name);

// Names we give activities that CUPTI does not name: Kineto's "Memcpy HtoD (Pageable -> Device)",
// with copy_kind_key() (event.h) for the direction and these capitalised memory kinds.
const char* memory_kind_name(MemoryKind kind);     // "Pageable", "Pinned", "Device", ...
CopyKind copy_kind_of(uint8_t cupti_copy_kind);
MemoryKind memory_kind_of(uint8_t cupti_memory_kind);
const char* sync_type_name(CUpti_ActivitySynchronizationType type);
const char* overhead_kind_name(CUpti_ActivityOverheadKind kind);

struct DecodeResult {
  enum class What : uint8_t {
    Event,                 // an Event (and its KernelInfo / CopyInfo) was appended to `out`
    ExternalCorrelation,   // `correlation` was made inside the host op `external_id`
    Ignored,               // a kind we do not use, or a filtered state query
    // A kernel, copy or set without a start time: CUPTI could not time it (its records carry 0
    // then), or a forced flush handed it over before the device ran it. No event (at time 0 it
    // would sit at the clock's origin, before every step); the collector counts it as dropped.
    Untimed,
  };
  What what = What::Ignored;
  uint32_t correlation = 0;
  uint64_t external_id = 0;
};

// NVTX ranges and marks from CUPTI_ACTIVITY_KIND_MARKER records (CUpti_ActivityMarker2), which
// CUPTI makes when it is the process's NVTX injection library (NVTX_INJECTION64_PATH). A range
// comes as two records, START (name, domain) and END (name NULL), with the same marker id, possibly
// in different buffers: starts wait here until their end arrives, and the pair becomes one Nvtx
// event on the starting thread. An INSTANTANEOUS marker (nvtxMark) is a zero-length Nvtx event.
// Markers of gpuprof's own NVTX domain (kOwnNvtxDomain: ProfilerStep#N and gpuprof.range, already
// StepMarker / UserRange events) are left out, so they are not counted twice.
inline constexpr const char* kOwnNvtxDomain = "gpuprof";

class MarkerRanges {
 public:
  // Event: a range closed or a mark was appended to `out`. Ignored: a start now waiting for its
  // end, gpuprof's own marker, an end whose start was never seen (made before collection began),
  // a sync marker. Untimed: CUPTI gave no timestamp (a start is then forgotten, an end closes
  // nothing), counted as dropped by the collector.
  DecodeResult decode(const CUpti_ActivityMarker2& marker, Trace& out);
  size_t open_ranges() const { return open_.size(); }
  // End of a span: ranges started and not ended are dropped; returns how many.
  size_t close_span() {
    const size_t n = open_.size();
    open_.clear();
    return n;
  }

 private:
  struct Open {
    std::string name;   // copied: CUPTI's string need not outlive the record's buffer
    uint64_t start_ns;
    uint32_t tid;
  };
  std::unordered_map<uint32_t, Open> open_;   // by marker id
};

// Appends the event `record` describes to `out` (names interned in out.strings, KernelInfo /
// CopyInfo in out.kernels / out.copies referenced by Event::aux). Timestamps are used as they
// come: the collector registers a timestamp callback so they are already on gpuprof's clock.
// MARKER records go to `markers` (ignored when it is null: they need state across records).
DecodeResult decode_record(const CUpti_Activity& record, ApiNames& names, Trace& out,
                           MarkerRanges* markers = nullptr);

// Correlation id -> the external id (host op) it was made in, from EXTERNAL_CORRELATION records.
using ExternalIds = std::unordered_map<uint32_t, uint64_t>;

// Moves the decoded events of `staged` into `into`: names re-interned into into.strings, aux
// indices rebased onto into.kernels / into.copies, and every event whose correlation appears in
// `external_ids` gets that host op's id as Event::external_id (runtime and driver calls and the
// device work they launched), which is how device time is attributed to operators.
void merge_decoded(Trace& into, Trace&& staged, const ExternalIds& external_ids);

// One clock: the collector registers a timestamp callback returning ticks(), the clock host
// events are stamped with, and `clock` is the very tick -> CLOCK_MONOTONIC line collector drain()
// used for them (collector.h ticks_to_ns), so a kernel and the host op that launched it are
// converted alike, with no second interpolation. A record CUPTI stamped without the callback
// carries CUPTI's Linux default, CLOCK_REALTIME (cupti_activity.h,
// cuptiActivityRegisterTimestampCallback; device records are converted from GPU time with a base
// CUPTI may have set before the callback existed, e.g. a CUDA context torch created earlier): a
// realtime stamp lies within a month before `realtime_now_ns`, which no tick count reaches (a
// 3 GHz TSC would need 18 years of uptime), and is moved by -`realtime_minus_monotonic_ns`
// instead. Returns how many records were realtime-stamped.
struct TickLine {
  virtual ~TickLine() = default;
  virtual int64_t time(int64_t ticks) const = 0;
  virtual int64_t duration(int64_t ticks) const = 0;
};
size_t put_on_host_clock(Trace& staged, const TickLine& clock, int64_t realtime_now_ns,
                         int64_t realtime_minus_monotonic_ns);

// CUPTI names the calling thread of API records by the low 32 bits of pthread_self() (Kineto
// reads them the same way); host events carry the OS thread id (gettid). Rewrites Runtime, Driver,
// thread-scoped Overhead and Nvtx (marker) events' tid through `os_tid_by_cupti_tid`; unknown ids
// stay as they are.
void map_api_threads(Trace& trace, const std::unordered_map<uint32_t, uint32_t>& os_tid_by_cupti_tid,
                     size_t first_event = 0);

}  // namespace gpuprof::collect::cupti
