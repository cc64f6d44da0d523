#include "cupti_decode.h"

#include <cxxabi.h>

#include <cstdlib>
#include <cstring>

namespace gpuprof::collect::cupti {

std::string strip_version_suffix(std::string_view name) {
  const size_t v = name.rfind("_v");
  if (v != std::string_view::npos && v + 2 < name.size()) {
    bool digits = true;
    for (size_t i = v + 2; i < name.size(); ++i) digits = digits && name[i] >= '0' && name[i] <= '9';
    if (digits) name = name.substr(0, v);
  }
  return std::string(name);
}

const std::string& ApiNames::name(CUpti_CallbackDomain domain, uint32_t cbid) {
  const uint64_t key = (uint64_t(domain) << 32) | cbid;
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  std::string raw = resolver_ ? resolver_(domain, cbid) : std::string();
  if (raw.empty()) {
    unnamed_.insert(key);
    raw = std::string(domain == CUPTI_CB_DOMAIN_DRIVER_API ? "cuda driver api #" : "cuda runtime api #") +
          std::to_string(cbid);
  }
  return cache_.emplace(key, strip_version_suffix(raw)).first->second;
}

bool ApiNames::named(CUpti_CallbackDomain domain, uint32_t cbid) {
  name(domain, cbid);
  return unnamed_.count((uint64_t(domain) << 32) | cbid) == 0;
}

const std::string& ApiNames::kernel_name(const char* mangled) {
  static const std::string& kUnnamed =
      *new std::string("<unnamed kernel>");   // leaked: callbacks may run during exit
  if (mangled == nullptr) return kUnnamed;
  KernelName& k = kernels_[mangled];
  if (k.demangled.empty() || k.mangled != mangled) {
    k.mangled = mangled;
    k.demangled = demangle(mangled);
  }
  return k.demangled;
}

bool is_state_query_runtime_api(std::string_view name) {
  static constexpr std::string_view kQueries[] = {
      "cudaGetDevice",         "cudaSetDevice",          "cudaGetLastError",      "cudaPeekAtLastError",
      "cudaGetDeviceCount",    "cudaDeviceGetAttribute", "cudaStreamIsCapturing", "cudaStreamGetCaptureInfo",
      "cudaFuncGetAttributes", "cudaDriverGetVersion",   "cudaRuntimeGetVersion", "cudaGetDeviceProperties"};
  for (std::string_view q : kQueries)
    if (name == q) return true;
  return false;
}

bool is_work_driver_api(std::string_view name) {
  static constexpr std::string_view kPrefixes[] = {"cuLaunch",           "cuGraphLaunch",       "cuMemcpy",
                                                   "cuMemset",           "cuStreamSynchronize", "cuCtxSynchronize",
                                                   "cuEventSynchronize", "cuStreamWaitEvent"};
  for (std::string_view p : kPrefixes)
    if (name.substr(0, p.size()) == p) return true;
  return false;
}

std::vector<uint32_t> unused_api_cbids(ApiNames& names, CUpti_CallbackDomain domain, uint32_t count) {
  std::vector<uint32_t> out;
  const bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
  for (uint32_t cbid = 0; cbid < count; ++cbid) {
    const std::string& name = names.name(domain, cbid);
    // An id CUPTI gives no name is no API (INVALID = 0, the gaps the headers leave): CUPTI
    // documents cuptiActivityEnable{Runtime,Driver}Api for the cbid headers' ids only.
    if (!names.named(domain, cbid)) continue;
    if (runtime ? is_state_query_runtime_api(name) : !is_work_driver_api(name)) out.push_back(cbid);
  }
  return out;
}

std::string demangle(const char* name) {
  if (name == nullptr) return "<unnamed kernel>";
  int status = 0;
  char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) return name;
  std::string s(out);
  std::free(out);
  return s;
}

CopyKind copy_kind_of(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return CopyKind::HtoD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return CopyKind::DtoH;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return CopyKind::DtoD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return CopyKind::HtoH;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return CopyKind::PtoP;
    default: return CopyKind::Unknown;
  }
}

MemoryKind memory_kind_of(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE: return MemoryKind::Pageable;
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED: return MemoryKind::Pinned;
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE:
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC: return MemoryKind::Device;
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED:
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC: return MemoryKind::Managed;
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY: return MemoryKind::Array;
    default: return MemoryKind::Unknown;
  }
}

const char* memory_kind_name(MemoryKind k) {
  switch (k) {
    case MemoryKind::Pageable: return "Pageable";
    case MemoryKind::Pinned: return "Pinned";
    case MemoryKind::Device: return "Device";
    case MemoryKind::Managed: return "Managed";
    case MemoryKind::Array: return "Array";
    default: return "Unknown";
  }
}

const char* sync_type_name(CUpti_ActivitySynchronizationType t) {
  switch (t) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE: return "Event Sync";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT: return "Stream Wait Event";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE: return "Stream Sync";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE: return "Context Sync";
    default: return "Unknown Sync";
  }
}

const char* overhead_kind_name(CUpti_ActivityOverheadKind k) {
  switch (k) {
    case CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER: return "Driver compiler";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH: return "CUPTI buffer flush";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION: return "CUPTI instrumentation";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE: return "CUPTI resource";
    case CUPTI_ACTIVITY_OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING: return "Module loading";
    case CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING: return "Lazy function loading";
    case CUPTI_ACTIVITY_OVERHEAD_COMMAND_BUFFER_FULL: return "Command buffer full";
    case CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST: return "CUPTI buffer request";
    case CUPTI_ACTIVITY_OVERHEAD_UVM_ACTIVITY_INIT: return "UVM activity init";
    default: return "Unknown overhead";
  }
}

namespace {

// CUPTI timestamps are unsigned; a record that never completed has end < start (or 0).
int64_t duration(uint64_t start, uint64_t end) { return end > start ? int64_t(end - start) : 0; }

Event& add(Trace& out, EventKind kind, std::string_view name, uint64_t start, uint64_t end) {
  return out.add(kind, name, int64_t(start), duration(start, end));
}

// A copy, named as Kineto names it ("Memcpy HtoD (Pageable -> Device)") so that tables read the
// same as torch.profiler's, with its properties beside it.
void add_copy(Trace& out, const CopyInfo& info, uint64_t start, uint64_t end, uint32_t device, uint32_t stream,
              uint64_t correlation) {
  thread_local std::string name;   // reused: no allocation per record once warm
  name.assign("Memcpy ").append(copy_kind_key(info.kind)).append(" (");
  name.append(memory_kind_name(info.src)).append(" -> ").append(memory_kind_name(info.dst)).append(")");
  Event& e = add(out, EventKind::Memcpy, name, start, end);
  e.device = int16_t(device);
  e.tid = stream;
  e.correlation = correlation;
  e.aux = uint32_t(out.copies.size());
  out.copies.push_back(info);
}

DecodeResult untimed() {
  DecodeResult r;
  r.what = DecodeResult::What::Untimed;
  return r;
}

}  // namespace

DecodeResult MarkerRanges::decode(const CUpti_ActivityMarker2& m, Trace& out) {
  DecodeResult r;
  const bool own = m.domain != nullptr && std::strcmp(m.domain, kOwnNvtxDomain) == 0;
  const uint32_t tid = m.objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? m.objectId.pt.threadId : 0;
  if (m.flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
    if (own) return r;
    if (m.timestamp == 0) return untimed();
    open_[m.id] = Open{m.name != nullptr ? std::string(m.name) : std::string(), m.timestamp, tid};
    return r;
  }
  if (m.flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
    auto it = open_.find(m.id);
    if (it == open_.end()) return r;   // gpuprof's own, or started before collection began
    if (m.timestamp == 0) {
      open_.erase(it);
      return untimed();
    }
    Event& e = add(out, EventKind::Nvtx, it->second.name, it->second.start_ns, m.timestamp);
    e.tid = it->second.tid;
    open_.erase(it);
    r.what = DecodeResult::What::Event;
    return r;
  }
  if (m.flags & CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS) {
    if (own) return r;
    if (m.timestamp == 0) return untimed();
    Event& e = add(out, EventKind::Nvtx, m.name != nullptr ? m.name : "", m.timestamp, m.timestamp);
    e.tid = tid;
    r.what = DecodeResult::What::Event;
  }
  return r;
}

DecodeResult decode_record(const CUpti_Activity& record, ApiNames& names, Trace& out, MarkerRanges* markers) {
  DecodeResult r;
  switch (record.kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto& k = reinterpret_cast<const CUpti_ActivityKernel10&>(record);
      if (k.start == 0) return untimed();
      KernelInfo info;
      info.grid[0] = k.gridX, info.grid[1] = k.gridY, info.grid[2] = k.gridZ;
      info.block[0] = k.blockX, info.block[1] = k.blockY, info.block[2] = k.blockZ;
      info.registers_per_thread = k.registersPerThread;
      info.shared_mem_bytes = int64_t(k.staticSharedMemory) + int64_t(k.dynamicSharedMemory);
      info.graph_id = k.graphId;
      Event& e = add(out, EventKind::Kernel, names.kernel_name(k.name), k.start, k.end);
      e.device = int16_t(k.deviceId);
      e.tid = k.streamId;
      e.correlation = k.correlationId;
      e.aux = uint32_t(out.kernels.size());
      out.kernels.push_back(info);
      r.what = DecodeResult::What::Event;
      return r;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto& m = reinterpret_cast<const CUpti_ActivityMemcpy6&>(record);
      if (m.start == 0) return untimed();
      CopyInfo info;
      info.bytes = int64_t(m.bytes);
      info.kind = copy_kind_of(m.copyKind);
      info.src = memory_kind_of(m.srcKind);
      info.dst = memory_kind_of(m.dstKind);
      // A copy's correlationId is that of the driver call that made it; runtimeCorrelationId that
      // of the runtime call (0 when the copy was made through the driver API directly). Runtime
      // calls are what the breakdown links device work to, as for kernels.
      add_copy(out, info, m.start, m.end, m.deviceId, m.streamId,
               m.runtimeCorrelationId != 0 ? m.runtimeCorrelationId : m.correlationId);
      r.what = DecodeResult::What::Event;
      return r;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY2: {
      // Peer-to-peer copies come only as MEMCPY2 records (cupti_activity.h: "For peer to peer
      // memory copy, use the kind CUPTI_ACTIVITY_KIND_MEMCPY2"), with their own layout.
      const auto& m = reinterpret_cast<const CUpti_ActivityMemcpyPtoP4&>(record);
      if (m.start == 0) return untimed();
      CopyInfo info;
      info.bytes = int64_t(m.bytes);
      info.kind = copy_kind_of(m.copyKind);
      if (m.srcDeviceId != m.dstDeviceId && (info.kind == CopyKind::DtoD || info.kind == CopyKind::Unknown))
        info.kind = CopyKind::PtoP;   // between two GPUs, whatever CUPTI calls the direction
      info.src = memory_kind_of(m.srcKind);
      info.dst = memory_kind_of(m.dstKind);
      add_copy(out, info, m.start, m.end, m.deviceId, m.streamId, m.correlationId);
      r.what = DecodeResult::What::Event;
      return r;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto& m = reinterpret_cast<const CUpti_ActivityMemset4&>(record);
      if (m.start == 0) return untimed();
      CopyInfo info;   // a set writes `bytes` into memory of kind `dst`
      info.bytes = int64_t(m.bytes);
      info.dst = memory_kind_of(uint8_t(m.memoryKind));
      thread_local std::string name;
      name.assign("Memset (").append(memory_kind_name(info.dst)).append(")");
      Event& e = add(out, EventKind::Memset, name, m.start, m.end);
      e.device = int16_t(m.deviceId);
      e.tid = m.streamId;
      e.correlation = m.correlationId;
      e.aux = uint32_t(out.copies.size());
      out.copies.push_back(info);
      r.what = DecodeResult::What::Event;
      return r;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const auto& a = reinterpret_cast<const CUpti_ActivityAPI&>(record);
      const bool runtime = record.kind == CUPTI_ACTIVITY_KIND_RUNTIME;
      const std::string& name =
          names.name(runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, a.cbid);
      if (runtime ? is_state_query_runtime_api(name) : !is_work_driver_api(name)) return r;
      Event& e = add(out, runtime ? EventKind::Runtime : EventKind::Driver, name, a.start, a.end);
      e.tid = a.threadId;
      e.correlation = a.correlationId;
      r.what = DecodeResult::What::Event;
      return r;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      const auto& s = reinterpret_cast<const CUpti_ActivitySynchronization2&>(record);
      Event& e = add(out, EventKind::Sync, sync_type_name(s.type), s.start, s.end);
      e.tid = s.streamId;   // the stream waited on (0xffffffff for context syncs, as CUPTI gives)
      e.correlation = s.correlationId;
      r.what = DecodeResult::What::Event;
      return r;
    }
    case CUPTI_ACTIVITY_KIND_OVERHEAD: {
      const auto& o = reinterpret_cast<const CUpti_ActivityOverhead3&>(record);
      Event& e = add(out, EventKind::Overhead, overhead_kind_name(o.overheadKind), o.start, o.end);
      if (o.objectKind == CUPTI_ACTIVITY_OBJECT_THREAD || o.objectKind == CUPTI_ACTIVITY_OBJECT_PROCESS) {
        e.tid = o.objectId.pt.threadId;
      } else if (o.objectKind == CUPTI_ACTIVITY_OBJECT_DEVICE || o.objectKind == CUPTI_ACTIVITY_OBJECT_CONTEXT ||
                 o.objectKind == CUPTI_ACTIVITY_OBJECT_STREAM) {
        e.tid = o.objectId.dcs.streamId;
      }
      e.correlation = o.correlationId;
      r.what = DecodeResult::What::Event;
      return r;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      const auto& x = reinterpret_cast<const CUpti_ActivityExternalCorrelation&>(record);
      if (x.externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) return r;
      r.what = DecodeResult::What::ExternalCorrelation;
      r.correlation = x.correlationId;
      r.external_id = x.externalId;
      return r;
    }
    case CUPTI_ACTIVITY_KIND_MARKER:
      if (markers == nullptr) return r;
      return markers->decode(reinterpret_cast<const CUpti_ActivityMarker2&>(record), out);
    default: return r;
  }
}

void merge_decoded(Trace& into, Trace&& staged, const ExternalIds& external_ids) {
  std::vector<uint32_t> name_map(staged.strings.size());
  for (uint32_t i = 0; i < name_map.size(); ++i) name_map[i] = into.strings.intern(staged.strings.at(i));
  const uint32_t kernel_base = uint32_t(into.kernels.size());
  const uint32_t copy_base = uint32_t(into.copies.size());
  into.kernels.insert(into.kernels.end(), staged.kernels.begin(), staged.kernels.end());
  into.copies.insert(into.copies.end(), staged.copies.begin(), staged.copies.end());
  into.events.reserve(into.events.size() + staged.events.size());
  for (Event e : staged.events) {
    e.name = name_map[e.name];
    if (e.aux != kNoIndex) {
      if (e.kind == EventKind::Kernel) e.aux += kernel_base;
      else if (e.kind == EventKind::Memcpy || e.kind == EventKind::Memset) e.aux += copy_base;
    }
    if (e.external_id == 0 && e.correlation != 0) {
      auto it = external_ids.find(uint32_t(e.correlation));
      if (it != external_ids.end()) e.external_id = it->second;
    }
    into.events.push_back(e);
  }
  into.dropped_events += staged.dropped_events;
  staged = Trace();
}

size_t put_on_host_clock(Trace& staged, const TickLine& clock, int64_t realtime_now_ns,
                         int64_t realtime_minus_monotonic_ns) {
  constexpr int64_t kHour = int64_t(3600) * 1'000'000'000;
  size_t realtime = 0;
  for (Event& e : staged.events) {
    if (e.start_ns > realtime_now_ns - 24 * 31 * kHour && e.start_ns < realtime_now_ns + kHour) {
      e.start_ns -= realtime_minus_monotonic_ns;   // nanoseconds already: duration stays
      ++realtime;
    } else {
      e.start_ns = clock.time(e.start_ns);
      e.dur_ns = clock.duration(e.dur_ns);
    }
  }
  return realtime;
}

void map_api_threads(Trace& trace, const std::unordered_map<uint32_t, uint32_t>& os_tid_by_cupti_tid,
                     size_t first_event) {
  if (os_tid_by_cupti_tid.empty()) return;
  for (size_t i = first_event; i < trace.events.size(); ++i) {
    Event& e = trace.events[i];
    if (e.kind != EventKind::Runtime && e.kind != EventKind::Driver && e.kind != EventKind::Overhead &&
        e.kind != EventKind::Nvtx)
      continue;
    auto it = os_tid_by_cupti_tid.find(e.tid);
    if (it != os_tid_by_cupti_tid.end()) e.tid = it->second;
  }
}

}  // namespace gpuprof::collect::cupti
