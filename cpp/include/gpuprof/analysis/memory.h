// The memory view (docs/metrics.md, "Memory"): from the allocator's records in a Trace, each
// device's level over time, its allocations matched to their frees and attributed to the operator
// that made them, the plugin's per-operator statistics, what was live at the peak, and growth across
// steps. One pass of sorts over the records and the host events: O(n log n).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/modules.h"
#include "gpuprof/core/trace.h"

namespace gpuprof {

constexpr int64_t kNeverFreed = std::numeric_limits<int64_t>::max();
constexpr int64_t kBeforeTrace = std::numeric_limits<int64_t>::min();

// One block of memory: an allocation matched to its free (same device, same address, the next
// free after it). A block freed in the trace whose allocation is not in it (made before the
// recording started) starts at kBeforeTrace; so does a known storage (a parameter...) that no
// recorded allocation made.
struct MemoryBlock {
  uint64_t addr = 0;
  int64_t bytes = 0;
  int64_t alloc_ns = kBeforeTrace;
  int64_t free_ns = kNeverFreed;
  uint32_t op = kNoIndex;          // the innermost operator open on the allocating thread (events index)
  uint32_t outer_op = kNoIndex;    // the outermost one: what a user called (aten::linear, a backward node)
  uint32_t node = kNoIndex;        // the innermost node of its thread's op tree around the allocation
  uint32_t module = kNoIndex;      // the innermost module call around the allocation
  int8_t role = -1;                // a StorageRole, or -1: none known
  bool in_optimizer_step = false;  // made inside an optimizer's step (Optimizer.step#...)
  // The end of what a temporary is freed within: the optimizer step it was made in, else its
  // outermost operator; kBeforeTrace: made outside any operator.
  int64_t scope_end_ns = kBeforeTrace;

  bool before_trace() const { return alloc_ns == kBeforeTrace; }
  bool live_at(int64_t t) const { return alloc_ns <= t && t < free_ns; }
};

// One device's allocator (-1: the host) over the trace.
struct DeviceMemory {
  int device = -1;
  std::vector<uint32_t> samples;     // indices into Trace::memory, in time order
  std::vector<int64_t> allocated;    // the level after each sample
  std::vector<int64_t> reserved;     // -1: not known
  // How the level is known: "recorded" (the allocator's own totals), "blocks" (rebuilt from the
  // blocks: the recorded allocations live plus those known to predate the trace; live host
  // allocations, which carry addresses), "rebuilt" (the running sum of sizes lifted to a lowest
  // point of 0: records without addresses, as the TensorBoard plugin did).
  std::string level_source;
  std::vector<MemoryBlock> blocks;   // ordered by allocation time
};

// Each device's levels and blocks, ordered by device. Allocations and frees are matched by address
// per device; each block is attributed to the operators and module open on its allocating thread
// (the TensorBoard plugin's rule: the innermost node containing the record; `attributed` = false
// leaves that out: the levels and blocks alone, as the curve needs); known storages give their
// blocks a role.
std::vector<DeviceMemory> device_memory(const Trace& trace, bool attributed = true);

// Is this host event an operator in the plugin's memory view: a host op, not the DataParallel /
// DistributedDataParallel forward wrappers, not an Optimizer.* range, not the DataLoader's range.
bool is_memory_operator(const Trace& trace, const Event& e);
// Is this host event a module's range (`nn.Module: Name`, as torch's profiler names it)?
bool is_module_range(const Trace& trace, const Event& e);

// The plugin's per-operator memory statistics, one row per operator name and device: records are
// attributed to the innermost host event on their thread that contains them, and count only when
// that event is an operator; "self" counts the records attributed to the op itself, the others
// also those of every operator inside it. Sizes are summed over frees too (a free counts its
// negative size); allocations count only positive records.
struct MemoryOpRow {
  std::string name;
  int device = -1;
  int64_t calls = 0;   // the operator's calls in the whole trace
  int64_t size_increase_bytes = 0;
  int64_t self_size_increase_bytes = 0;
  int64_t alloc_count = 0;
  int64_t self_alloc_count = 0;
  int64_t alloc_bytes = 0;
  int64_t self_alloc_bytes = 0;
};
std::vector<MemoryOpRow> memory_op_table(const Trace& trace);

// Bytes live at one moment by what they are (docs/metrics.md, "Memory composition").
struct MemoryComposition {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;
  int64_t activations = 0;   // made by an operator outside the optimizer's step, outliving it
  int64_t temporary = 0;     // freed before the operator (or the optimizer step) it was made in returns
  int64_t unknown = 0;       // the rest of the level: made before the trace, outside any operator,
                         // or by an optimizer step and outliving it without being known state
};

// Who made the memory live at one moment: by operator (the outermost, what a user called) or
// module (its path in the module view: modules.h), with the bytes and blocks.
struct MemoryOwner {
  std::string name;
  int64_t bytes = 0;
  int64_t count = 0;
};

// A device's memory at one moment (its peak, or the end of the trace).
struct MemoryMoment {
  int device = -1;
  int64_t ts_ns = 0;
  int64_t step = -1;   // the step whose host range holds ts_ns; -1: none
  int64_t bytes = 0;   // the level
  int64_t reserved_bytes = -1;
  MemoryComposition composition;
  std::vector<MemoryOwner> top_ops;
  std::vector<MemoryOwner> top_modules;
};

// Growth across steps: the level at each step's end (after the first step, which makes lazily
// allocated state), its least-squares slope, and the operators and modules whose allocations in a
// step were still live at the end of the last step.
struct MemoryGrowth {
  int device = -1;
  std::vector<int64_t> steps;   // step numbers whose end levels were read
  std::vector<int64_t> end_bytes;   // the level at each of those steps' ends
  double bytes_per_step = 0.0;   // least-squares slope over them
  int64_t rising = 0;   // transitions that rose
  bool flagged = false;
  std::vector<MemoryOwner> ops;   // bytes each op left live, summed over the steps counted
  std::vector<MemoryOwner> modules;
  int64_t steps_counted = 0;   // steps whose surviving allocations ops/modules sum
  // Which blocks those are: made in one of these host ranges (the counted steps but the last) and
  // still live at last_end_ns (the last counted step's end).
  std::vector<std::pair<int64_t, int64_t>> survivor_windows;
  int64_t last_end_ns = 0;
};

// The thresholds growth is flagged at (docs/metrics.md, "Memory growth").
constexpr int kGrowthMinLevels = 4;   // step ends after the first step
constexpr double kGrowthMinRisingShare = 0.75;   // of the transitions between them
constexpr double kGrowthMinBytesPerStep = 64.0 * 1024;

struct MemoryView {
  std::vector<MemoryOpRow> ops;   // memory_op_table
  std::vector<DeviceMemory> devices;   // device_memory
  std::vector<MemoryMoment> peaks;   // per device with a level, at its highest level (first reached)
  std::vector<MemoryMoment> ends;   // per device with a level, at its last record
  std::vector<MemoryGrowth> growth;   // per device with a level and enough steps
};
// Everything above from one attribution pass. Peaks and ends are given for devices whose level is
// recorded or rebuilt from blocks (a level rebuilt from sizes alone starts at an arbitrary 0). The
// owners by module are left empty: they need the module view (name_memory_modules).
MemoryView memory_view(const Trace& trace, const BreakdownResult& steps, size_t top = 10);

// The owners by module of each peak, end and growth of `memory` (top_modules, modules), from the
// module view of the same trace: a block belongs to the module row of the innermost event around
// its allocation (module_view's row_of: the module call an op ran in, or, for a backward op, the
// module whose forward made its autograd node), named by the row's path ("layer1.0.conv1"; "" the
// model itself). Empty when the trace has no module calls. Run after memory_view and module_view,
// which analyse_tables builds on two threads.
void name_memory_modules(const Trace& trace, const ModuleView& modules, MemoryView& memory, size_t top = 10);

// A windowed import's window: each memory operator's calls it owns (not marked kContextFlag), by
// name, whether it has a row in memory_op_table or not (a windowed report's rows count every window's
// calls of their name); merged calls count once, as memory_op_table counts them.
std::vector<std::pair<std::string, int64_t>> owned_memory_op_calls(const Trace& trace);

// memory_ops bounded like the name tables: per device, the `max_rows` - 1 rows that allocated the
// most and one "other names (N)" row with the rest's sums, last among the device's rows.
void cap_memory_ops(std::vector<MemoryOpRow>& rows, size_t max_rows);

}   // namespace gpuprof
