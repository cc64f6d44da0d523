// The Kineto vocabulary: which `cat` values, event keys and args keys the importer knows, and what
// each means (the event kinds of event.h, copy directions and memory kinds from copy names).
// docs/analyze.md lists the dialects. The key and category lookups run for every key of every
// event, so they are inline here, beside the handler that calls them (kineto_handler.cpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "gpuprof/core/event.h"
#include "gpuprof/core/trace.h"

namespace gpuprof::kineto {

inline bool eq_ci(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i];
    if (x >= 'A' && x <= 'Z') x = char(x - 'A' + 'a');
    if (x != b[i]) return false;   // b is lower case
  }
  return true;
}

// Kineto's `cat` values, old and new spellings, compared case-insensitively.
enum class Cat : uint8_t {
  None,
  CpuOp,
  UserAnnotation,
  PythonFunction,
  Runtime,
  Driver,
  Kernel,
  Memcpy,
  Memset,
  Sync,
  GpuUserAnnotation,
  Overhead,
  Nvtx,
  InputStage,
  Derived,   // gpuprof's own drawing of an analysis (the critical path's track): not read back
  Unknown
};

// The phases the importer reads past, counting them as ignored records: metadata, flows,
// counters, async and object events.
inline bool is_passed_over_phase(char ph) {
  switch (ph) {
    case 'M':
    case 's':
    case 't':
    case 'f':
    case 'C':
    case 'b':
    case 'e':
    case 'n':
    case 'N':
    case 'O':
    case 'D':
    case 'P':
    case 'R':
    case 'c': return true;
    default: return false;
  }
}

inline EventKind kind_of(Cat c) {
  switch (c) {
    case Cat::CpuOp: return EventKind::HostOp;
    case Cat::UserAnnotation: return EventKind::UserRange;
    case Cat::PythonFunction: return EventKind::PythonFunction;
    case Cat::Runtime: return EventKind::Runtime;
    case Cat::Driver: return EventKind::Driver;
    case Cat::Kernel: return EventKind::Kernel;
    case Cat::Memcpy: return EventKind::Memcpy;
    case Cat::Memset: return EventKind::Memset;
    case Cat::Sync: return EventKind::Sync;
    case Cat::GpuUserAnnotation: return EventKind::GpuUserRange;
    case Cat::Overhead: return EventKind::Overhead;
    case Cat::Nvtx: return EventKind::Nvtx;
    case Cat::InputStage: return EventKind::InputStage;
    default: return EventKind::Other;   // `Trace` spans, unknown categories: kept, never counted
  }
}

inline bool is_device_kind(EventKind k) {
  return k == EventKind::Kernel || k == EventKind::Memcpy || k == EventKind::Memset ||
         k == EventKind::GpuUserRange || k == EventKind::Sync;
}

// Copy direction and memory kinds from a name like "Memcpy HtoD (Pageable -> Device)"
// (kineto_vocabulary.cpp: once per distinct copy name, not per event).
CopyInfo copy_info_from_name(std::string_view name);
// The memory kind a name's text names ("Pageable", "Pinned", "Device", ...), or Unknown.
MemoryKind memory_kind_from(std::string_view s);

// The keys of an event object, and of its args, that the importer reads.
enum class Field : uint8_t { Ignore, Ph, Cat, Name, Pid, Tid, Ts, Dur, Args };
enum class Arg : uint8_t {
  Ignore,
  Correlation,
  ExternalId,
  Device,
  Stream,
  Registers,
  SharedMem,
  BlocksPerSm,
  WarpsPerSm,
  Grid,
  Block,
  Occupancy,
  Bytes,
  TotalAllocated,
  TotalReserved,
  DeviceType,
  DeviceId,
  InputDims,
  SequenceNumber,
  FwdThreadId,
  InputType,        // "Input type" (collectives' dtype; the FLOP rules read the whole list)
  ConcreteInputs,   // FLOPs: "Concrete Inputs"
  Flops,            // FLOPs: "flops" (with_flops, in the torch releases that write it)
  // A collective's own facts (record_param_comms ops and NCCL kernels; gpuprof's export writes
  // them on any event they describe).
  CollectiveName,
  InMsgNelems,
  OutMsgNelems,
  GroupSize,
  Dtype,
  PgName,
  PgDesc,
  PgRanks,
  Addr,
  Worker,   // an input stage's DataLoader worker id (gpuprof's export)
  Batch,    // an input stage's batch number in its worker (gpuprof's export)
  // An Inductor-generated kernel's launch (Trace::compiled_launches); its `grid` is a text there.
  KernelBackend,
  KernelFile,
  KernelHash
};

// `k` is the literal `lit`: compared as whole machine words loaded from both (a word of a length
// known when compiling is a constant), with no memcmp call: GCC calls memcmp for most of these
// lengths, once per key of every event (1.7% of an import's instructions). Every load is of 2, 4
// or 8 bytes straight into a register; a length in between is two overlapping loads. (Copying 3,
// 5, 6 or 7 bytes into a zeroed word made GCC build the word on the stack and read it back
// whole, a store-forwarding stall on every key: 13% of an import's time.)
template <class W>
inline W load(const char* p) {
  W w;
  std::memcpy(&w, p, sizeof(W));
  return w;
}

template <class W, size_t L>
inline bool same_words(const char* p, const char* lit) {   // L bytes as two overlapping W loads
  return load<W>(p) == load<W>(lit) && load<W>(p + L - sizeof(W)) == load<W>(lit + L - sizeof(W));
}

template <size_t N>
inline bool is(std::string_view k, const char (&lit)[N]) {
  constexpr size_t L = N - 1;
  static_assert(L >= 2, "keys of one byte are not compared this way");
  if (k.size() != L) return false;
  const char* const p = k.data();
  if constexpr (L < 4) {
    return same_words<uint16_t, L>(p, lit);
  } else if constexpr (L < 8) {
    return same_words<uint32_t, L>(p, lit);
  } else {
    // Whole words, then the last 8 bytes (overlapping the previous word when L is not a multiple).
    for (size_t i = 0; i + 8 <= L; i += 8)
      if (load<uint64_t>(p + i) != load<uint64_t>(lit + i)) return false;
    return L % 8 == 0 || load<uint64_t>(p + L - 8) == load<uint64_t>(lit + L - 8);
  }
}

// `k` is the lower-case literal `lit`, its first letter in either case ("kernel", "Kernel": new
// and old Kineto): the first byte folded, the rest compared as words (two overlapping loads).
template <size_t N>
inline bool is_cat(std::string_view k, const char (&lit)[N]) {
  constexpr size_t L = N - 1;
  static_assert(L >= 4, "categories of fewer than four bytes are not compared this way");
  if (k.size() != L || char(k[0] | 0x20) != lit[0]) return false;
  const char* const p = k.data() + 1;
  static_assert(L - 1 <= 16, "two words cover the rest");
  if constexpr (L - 1 < 4) {
    return same_words<uint16_t, L - 1>(p, lit + 1);
  } else if constexpr (L - 1 < 8) {
    return same_words<uint32_t, L - 1>(p, lit + 1);
  } else {
    return same_words<uint64_t, L - 1>(p, lit + 1);
  }
}

Cat classify_cat_any_case(std::string_view c);   // any spelling, case-folded (kineto_vocabulary.cpp)

// Kineto's categories by length, as written (lower case, or an old trace's capital first letter);
// another spelling of a known length goes through the case-folding loop, any other length is none.
inline Cat classify_cat(std::string_view c) {
  switch (c.size()) {
    case 4:
      if (is_cat(c, "nvtx")) return Cat::Nvtx;
      break;
    case 6:
      if (is_cat(c, "cpu_op")) return Cat::CpuOp;
      if (is_cat(c, "kernel")) return Cat::Kernel;
      if (is_cat(c, "memcpy")) return Cat::Memcpy;
      if (is_cat(c, "memset")) return Cat::Memset;
      break;
    case 7:
      if (is_cat(c, "runtime")) return Cat::Runtime;
      break;
    case 8:
      if (is_cat(c, "operator")) return Cat::CpuOp;
      if (is_cat(c, "overhead")) return Cat::Overhead;
      break;
    case 9:
      if (is_cat(c, "cuda_sync")) return Cat::Sync;
      break;
    case 10:
      if (is_cat(c, "gpu_memcpy")) return Cat::Memcpy;
      if (is_cat(c, "gpu_memset")) return Cat::Memset;
      break;
    case 11:
      if (is_cat(c, "cuda_driver")) return Cat::Driver;
      break;
    case 12:
      if (is_cat(c, "cuda_runtime")) return Cat::Runtime;
      break;
    case 15:
      if (is_cat(c, "user_annotation")) return Cat::UserAnnotation;
      if (is_cat(c, "python_function")) return Cat::PythonFunction;
      break;
    case 13:
    case 19:
    case 21: break;   // gpuprof_input; gpu_user_annotation, cuda_profiler_range; gpuprof_critical_path
    default: return Cat::Unknown;   // no category is this long
  }
  return classify_cat_any_case(c);
}

inline Field field_of(std::string_view k) {
  switch (k.size()) {
    case 2:
      if (is(k, "ph")) return Field::Ph;
      if (is(k, "ts")) return Field::Ts;
      break;
    case 3:
      if (is(k, "cat")) return Field::Cat;
      if (is(k, "pid")) return Field::Pid;
      if (is(k, "tid")) return Field::Tid;
      if (is(k, "dur")) return Field::Dur;
      break;
    case 4:
      if (is(k, "name")) return Field::Name;
      if (is(k, "args")) return Field::Args;
      break;
  }
  return Field::Ignore;
}

inline Arg arg_of(std::string_view k) {
  // By length first: an event has several args and most are not ours ("Ev Idx", "cbid", ...).
  switch (k.size()) {
    case 4:
      if (is(k, "grid")) return Arg::Grid;
      if (is(k, "Addr")) return Arg::Addr;
      break;
    case 5:
      if (is(k, "block")) return Arg::Block;
      if (is(k, "bytes") || is(k, "Bytes")) return Arg::Bytes;
      if (is(k, "dtype")) return Arg::Dtype;
      if (is(k, "batch")) return Arg::Batch;
      if (is(k, "flops")) return Arg::Flops;
      break;
    case 6:
      if (is(k, "device")) return Arg::Device;
      if (is(k, "stream")) return Arg::Stream;
      if (is(k, "worker")) return Arg::Worker;
      break;
    case 9:
      if (is(k, "Device Id")) return Arg::DeviceId;
      break;
    case 10:
      if (is(k, "Input Dims") || is(k, "Input dims")) return Arg::InputDims;
      if (is(k, "Input type")) return Arg::InputType;
      if (is(k, "Group size")) return Arg::GroupSize;
      break;
    case 11:
      if (is(k, "correlation")) return Arg::Correlation;
      if (is(k, "External id") || is(k, "external id")) return Arg::ExternalId;
      if (is(k, "Device Type")) return Arg::DeviceType;
      if (is(k, "kernel_file")) return Arg::KernelFile;
      if (is(k, "kernel_hash")) return Arg::KernelHash;
      break;
    case 12:
      if (is(k, "warps per SM")) return Arg::WarpsPerSm;
      break;
    case 13:
      if (is(k, "shared memory")) return Arg::SharedMem;
      if (is(k, "blocks per SM")) return Arg::BlocksPerSm;
      if (is(k, "In msg nelems")) return Arg::InMsgNelems;
      if (is(k, "Fwd thread id")) return Arg::FwdThreadId;
      break;
    case 14:
      if (is(k, "Total Reserved")) return Arg::TotalReserved;
      if (is(k, "Out msg nelems")) return Arg::OutMsgNelems;
      if (is(k, "kernel_backend")) return Arg::KernelBackend;
      break;
    case 15:
      if (is(k, "Total Allocated")) return Arg::TotalAllocated;
      if (is(k, "Sequence number")) return Arg::SequenceNumber;
      if (is(k, "Concrete Inputs")) return Arg::ConcreteInputs;
      if (is(k, "Collective name")) return Arg::CollectiveName;
      break;
    case 18:
      if (is(k, "Process Group Name")) return Arg::PgName;
      break;
    case 19:
      if (is(k, "Process Group Ranks")) return Arg::PgRanks;
      break;
    case 20:
      if (is(k, "registers per thread")) return Arg::Registers;
      break;
    case 25:
      if (is(k, "est. achieved occupancy %")) return Arg::Occupancy;
      if (is(k, "Process Group Description")) return Arg::PgDesc;
      break;
  }
  return Arg::Ignore;
}

}  // namespace gpuprof::kineto
