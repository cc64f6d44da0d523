// The store every producer (live collector, trace importer) fills and every analysis reads.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpuprof/core/event.h"

namespace gpuprof {

// Interned names: an event carries a 32-bit id, the text lives here once.
// Storage is a deque so that references to interned text stay valid as the table grows (the
// collector's per-thread caches key on them).
class StringTable {
 public:
  StringTable();   // id 0 is the empty string
  StringTable(const StringTable& other);
  StringTable& operator=(const StringTable& other);
  StringTable(StringTable&&) = default;
  StringTable& operator=(StringTable&&) = default;

  uint32_t intern(std::string_view s);
  // kNoIndex when absent.
  uint32_t find(std::string_view s) const;
  const std::string& at(uint32_t id) const { return strings_[id]; }
  size_t size() const { return strings_.size(); }

 private:
  std::deque<std::string> strings_;
  std::unordered_map<std::string_view, uint32_t> ids_;
};

// What the CUDA occupancy rules and the GPU summary need to know of a device.
struct DeviceProps {
  int id = 0;
  std::string name;
  int64_t total_global_mem = 0;
  int compute_major = 0;
  int compute_minor = 0;
  int max_threads_per_block = 0;
  int max_threads_per_sm = 0;
  int regs_per_block = 0;
  int regs_per_sm = 0;
  int warp_size = 32;
  int64_t shared_mem_per_block = 0;
  int64_t shared_mem_per_sm = 0;
  int64_t shared_mem_per_block_optin = 0;
  int num_sms = 0;
  int max_blocks_per_sm = 0;   // 0: derive from the compute capability
};

// GPU samples (GPU collection)
// One NVML reading of a device during active steps (what `nvidia-smi dmon` shows). -1: not reported.
struct GpuSample {
  int64_t ts_ns = 0;
  int16_t device = -1;            // CUDA ordinal
  int32_t gpu_util_pct = -1;      // % of the last sample period with a kernel running
  int32_t mem_util_pct = -1;      // % of the period device memory was read or written
  int64_t memory_used_bytes = -1;
  int32_t power_mw = -1;
  int32_t sm_clock_mhz = -1;
  int32_t temperature_c = -1;
  // NVML's total-energy counter (nvmlDeviceGetTotalEnergyConsumption: millijoules since the driver
  // loaded; Volta and later). Read with the periodic samples and at every step boundary (a boundary
  // reading carries only this field), so a step's energy is the counter's difference across it.
  int64_t energy_mj = -1;
};

// The profiled process's resident set size (live sessions sample it at every step boundary).
struct HostMemorySample {
  int64_t ts_ns = 0;
  int64_t rss_bytes = 0;
};

// FLOPs: what a host op's FLOP rule reads besides its name and shapes (Event::aux)
// Kept only for host ops that have any of it, sorted by `event`. The texts are written as Python
// prints a list, in Kineto's form: types "['float', 'float', 'Scalar']" ("Input type"), scalar
// and list inputs "['', '', '[2, 2]', 'False']" ("Concrete Inputs"); live sessions write the same
// for the ops whose FLOPs need them (torch_hooks.cpp).
struct OpArgs {
  uint32_t event = 0;      // index in Trace::events
  uint32_t types = 0;      // string id; 0 (the empty string): not recorded
  uint32_t concrete = 0;   // string id; 0: not recorded
  int64_t trace_flops = -1;   // a `flops` arg the trace carries (with_flops); -1: none
};

// What one collective call records of itself, joined to its event by external id: torch's
// ParamCommsDebugInfo (live, read when the `record_param_comms` RecordFunction starts; Kineto
// writes the same facts as args of that op, and of NCCL kernels: "Collective name",
// "In msg nelems", "Out msg nelems", "Group size", "dtype", "Process Group Name",
// "Process Group Description", "Process Group Ranks"), or, for a backend's own range
// (`gloo:all_reduce`), only its input tensors' elements and type. Strings are "" and numbers -1
// when not recorded. A few per step: plain strings, not interned (so a split import appends the
// second half's as they are).
struct CollectiveInfo {
  uint64_t external_id = 0;
  std::string name;          // the collective as torch names it: "allreduce", "_allgather_base", ...
  std::string dtype;         // "Float", "BFloat16" (torch's ScalarType names) or "float" (Kineto's Input type)
  std::string pg_name;       // the process group's name: "0" for the default group, "1", ...
  std::string pg_desc;       // its description: "default_pg", or the group_desc given to new_group
  std::string group_ranks;   // its global ranks as torch writes them: "[0, 1, 2, 3]"
  int32_t group_size = -1;
  int64_t in_nelems = -1;    // elements in and out on this rank
  int64_t out_nelems = -1;
};

// A kernel torch.compile's Inductor generated, as torch.profiler records its launches: a cpu_op
// named after the kernel with the args `kernel_backend` ("triton"), `kernel_file` (the kernel's
// module in Inductor's cache), `kernel_hash` (that file's name) and, in older torch, `grid`
// ("grid(1024)"); torch/_inductor/runtime/triton_heuristics.py, get_profiler_kwargs. One row per
// distinct name and args, with its launches counted: a trace holds a handful of generated kernels
// and millions of launches, so nothing is kept per event, and nothing at all for a trace without
// these args (live sessions have none either). Plain strings, not interned, so that a split import
// merges the second half's rows as they are.
struct CompiledLaunch {
  std::string name;      // the kernel ("triton_poi_fused_add_cos_0")
  std::string backend;   // kernel_backend
  std::string file;      // kernel_file
  std::string hash;      // kernel_hash
  std::string grid;      // grid, "" when not recorded
  int64_t launches = 0;
};

struct Trace {
  StringTable strings;
  std::vector<Event> events;
  std::vector<KernelInfo> kernels;
  std::vector<CopyInfo> copies;
  std::vector<MemorySample> memory;
  std::vector<KnownStorage> storages;   // live sessions: parameters, gradients, optimizer state
  std::vector<DeviceProps> devices;
  std::vector<GpuSample> gpu_samples;   // NVML samples (GPU collection)
  std::vector<HostMemorySample> host_memory;   // live sessions only
  std::vector<CollectiveInfo> collectives;     // by external id: the collective calls' own facts
  std::vector<OpArgs> op_args;   // FLOPs: host ops' input types and scalar inputs, by event index
  std::vector<CompiledLaunch> compiled_launches;   // Inductor's kernels' launch args, in first-seen order
  std::map<std::string, std::string> metadata;   // distributedInfo, source file, torch version, ...
  uint64_t dropped_events = 0;   // lost to full buffers (ours) or CUPTI's own count
  uint64_t skipped_events = 0;   // imported records we could not use (documented reasons)

  Event& add(EventKind kind, std::string_view name, int64_t start_ns, int64_t dur_ns) {
    Event e;
    e.kind = kind;
    e.name = strings.intern(name);
    e.start_ns = start_ns;
    e.dur_ns = dur_ns;
    events.push_back(e);
    return events.back();
  }
  const std::string& name_of(const Event& e) const { return strings.at(e.name); }
  // FLOPs: the extra inputs of host op `event`, or null.
  const OpArgs* op_args_of(uint32_t event) const;
  const DeviceProps* device(int id) const {
    for (const auto& d : devices)
      if (d.id == id) return &d;
    return nullptr;
  }
};

}  // namespace gpuprof
