// The one record type for every timed thing gpuprof sees, live or imported.
// Plain C++: no Python, no torch, no CUDA types (docs/design.md, "The core").
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>

namespace gpuprof {

// What produced an event. The category an event falls into (Kernel, DataLoader, ...) is derived
// from its kind and its name by the breakdown (gpuprof/analysis/breakdown.h, docs/breakdown.md), never stored.
enum class EventKind : uint8_t {
  HostOp = 0,        // a RecordFunction operator (aten::*) or Kineto `cpu_op` / `Operator`
  UserRange,         // user annotation: gpuprof.range, record_function, DataLoader __next__
  StepMarker,        // ProfilerStep#N
  PythonFunction,    // Kineto `python_function`
  Runtime,           // CUDA/HIP runtime API call on the host (cudaLaunchKernel, ...)
  Driver,            // CUDA driver API call (cuLaunchKernel, ...): not Runtime in the breakdown
  Kernel,            // GPU kernel
  Memcpy,            // GPU copy
  Memset,            // GPU set
  Sync,              // CUDA synchronisation activity (stream/event/device/context)
  Nvtx,              // NVTX range
  GpuUserRange,      // Kineto `gpu_user_annotation`: device-side view of a user range
  Overhead,          // profiler overhead (CUPTI buffer flush, ...)
  // A stage of the input pipeline (a batch's loading, transforming or collating in a DataLoader
  // worker, its pinning): `device` holds the worker id (-1: the main process), `tid` the worker's
  // process id (or the main process's thread). Counted in no category: the training loop's wait
  // for the batch is the DataLoader range.
  InputStage,
  Other,             // anything else we keep but never put in a category
};

constexpr uint32_t kNoIndex = std::numeric_limits<uint32_t>::max();

// FLOPs: Event::flags bits of a host op
// The op ran with autograd recording (Kineto's "Sequence number"; live: grad mode on and an input
// that requires grad). Inside a backward pass this marks a forward op recomputed by activation
// checkpointing: the ops that compute gradients run with recording off (docs/metrics.md, "FLOPs").
constexpr uint8_t kGradRecordedFlag = 0x01;

// Event::flags bit of any event: kept by a windowed import as the context of its window (before or
// after the time the window owns), counted in the name-keyed tables of the window that owns it.
constexpr uint8_t kContextFlag = 0x80;

struct Event {
  int64_t start_ns = 0;
  int64_t dur_ns = 0;
  // Links a runtime call to the device activity it launched (CUPTI correlation id). A host op,
  // which launches nothing itself, keeps its autograd link here instead (autograd_link() below).
  uint64_t correlation = 0;
  // Links a host op to the runtime calls made inside it (RecordFunction handle / Kineto External id).
  uint64_t external_id = 0;
  uint32_t name = 0;         // id in Trace::strings
  uint32_t tid = 0;          // host thread id; for device events the stream id
  uint32_t aux = kNoIndex;   // index into Trace::kernels / Trace::copies; shapes string for host ops
  int16_t device = -1;       // GPU index; -1 for host events
  EventKind kind = EventKind::Other;
  uint8_t flags = 0;

  int64_t end_ns() const { return start_ns + dur_ns; }
  bool on_device() const {
    return kind == EventKind::Kernel || kind == EventKind::Memcpy || kind == EventKind::Memset;
  }
};

// Autograd's link between a backward op and the forward op it differentiates: a forward op records
// the sequence number autograd gave the node it created, and the backward op that runs that node
// records the same number and the forward op's thread (RecordFunction's thread id, not the OS's).
// Kineto writes them as a host op's `Sequence number` and `Fwd thread id` (0 on forward ops);
// live hooks read them from the RecordFunction (seqNr(), forwardThreadId(), threadId()).
// Packed into a host op's Event::correlation: 0 = no link; bits 0..46 the sequence number + 1,
// bits 47..62 the thread (0: unknown; a forward op's own thread, a backward op's forward thread),
// bit 63 set on a backward op.
struct AutogradLink {
  bool present = false;
  bool backward = false;
  uint64_t sequence_nr = 0;
  uint32_t thread = 0;   // 0: unknown
};
constexpr uint64_t kAutogradSequenceMask = (uint64_t{1} << 47) - 1;
constexpr uint64_t pack_autograd_link(int64_t sequence_nr, uint64_t thread, bool backward) {
  if (sequence_nr < 0 || uint64_t(sequence_nr) >= kAutogradSequenceMask) return 0;
  const uint64_t t = thread < (uint64_t{1} << 16) ? thread : 0;
  return (uint64_t(sequence_nr) + 1) | (t << 47) | (uint64_t(backward) << 63);
}
inline AutogradLink autograd_link(const Event& e) {
  AutogradLink l;
  if (e.kind != EventKind::HostOp || (e.correlation & kAutogradSequenceMask) == 0) return l;
  l.present = true;
  l.backward = (e.correlation >> 63) != 0;
  l.sequence_nr = (e.correlation & kAutogradSequenceMask) - 1;
  l.thread = uint32_t((e.correlation >> 47) & 0xFFFF);
  return l;
}

// Launch properties of one kernel, beside its Event (Event::aux).
struct KernelInfo {
  int32_t grid[3] = {0, 0, 0};
  int32_t block[3] = {0, 0, 0};
  int32_t registers_per_thread = -1;
  int64_t shared_mem_bytes = -1;       // static + dynamic
  float blocks_per_sm = -1.0f;         // as written by Kineto, -1 if absent
  float warps_per_sm = -1.0f;
  float est_occupancy_pct = -1.0f;     // Kineto's `est. achieved occupancy %`, -1 if absent
  // The CUDA graph the kernel was replayed from (CUPTI's graphId; 0: launched on its own). Its
  // Event::correlation is then that of the cudaGraphLaunch call, shared by the graph's kernels.
  uint32_t graph_id = 0;

  int64_t blocks() const { return int64_t(grid[0]) * grid[1] * grid[2]; }
  int64_t threads_per_block() const { return int64_t(block[0]) * block[1] * block[2]; }
};

enum class CopyKind : uint8_t { Unknown = 0, HtoD, DtoH, DtoD, HtoH, PtoP };
enum class MemoryKind : uint8_t { Unknown = 0, Pageable, Pinned, Device, Managed, Array };

// Properties of one copy, beside its Event (Event::aux).
struct CopyInfo {
  int64_t bytes = 0;
  CopyKind kind = CopyKind::Unknown;
  MemoryKind src = MemoryKind::Unknown;
  MemoryKind dst = MemoryKind::Unknown;
};

// The names these enums have in Python dicts, JSON and error messages ("host_op", "HtoD",
// "pageable", ...). Parsing is case-insensitive; false for a name that is none of them.
const char* event_kind_key(EventKind k);
bool parse_event_kind(std::string_view s, EventKind* out);
const char* copy_kind_key(CopyKind k);       // "HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "unknown"
bool parse_copy_kind(std::string_view s, CopyKind* out);
const char* memory_kind_key(MemoryKind k);   // "pageable", "pinned", "device", "managed", "array", "unknown"
bool parse_memory_kind(std::string_view s, MemoryKind* out);

// One sample of the device (or host) allocator's state (Kineto `[memory]` instant events,
// torch's allocator reports and statistics in a live session). A sample made by an allocation or a
// free carries the block's address and the allocating (freeing) thread, so that an allocation can
// be matched to its free and attributed to the operator open on that thread.
struct MemorySample {
  int64_t ts_ns = 0;
  int64_t bytes_delta = 0;
  int64_t total_allocated = -1;   // -1: not recorded (old Kineto traces carry only the delta)
  int64_t total_reserved = -1;
  int16_t device = -1;   // -1: host
  uint8_t flags = 0;     // kContextFlag: kept by a windowed import as its window's context
  uint64_t addr = 0;     // 0: not recorded (traces before torch 1.10, allocator statistics)
  uint32_t tid = 0;      // the thread that allocated or freed; 0: not recorded
};

// What a live session knows a storage to be (docs/metrics.md, "Memory composition").
enum class StorageRole : uint8_t { Parameter = 0, Gradient, OptimizerState };

// One tensor storage of a known role, seen at ts_ns: a module's parameter, its gradient, or an
// optimizer's state. The memory analysis gives an allocation this role when its block is the one at
// `addr` on `device` at that time.
struct KnownStorage {
  int64_t ts_ns = 0;
  uint64_t addr = 0;
  int64_t bytes = 0;
  int16_t device = -1;   // -1: host
  StorageRole role = StorageRole::Parameter;
};

}  // namespace gpuprof
