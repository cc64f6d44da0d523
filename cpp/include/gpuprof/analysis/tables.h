// The detail tables behind the GPU summary: kernels, operators, copies, host-blocking
// synchronisations and per-step device memory. Each is one pass (plus sorts) over a Trace.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/collectives.h"
#include "gpuprof/analysis/critical_path.h"
#include "gpuprof/analysis/cuda_graphs.h"
#include "gpuprof/analysis/flops.h"
#include "gpuprof/analysis/gpu_summary.h"
#include "gpuprof/analysis/hta_counters.h"
#include "gpuprof/analysis/idle_time.h"
#include "gpuprof/analysis/kernel_sequences.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/launch_stats.h"
#include "gpuprof/analysis/memory.h"
#include "gpuprof/analysis/modules.h"
#include "gpuprof/analysis/op_launch_delay.h"
#include "gpuprof/analysis/plausibility.h"
#include "gpuprof/core/trace.h"

namespace gpuprof {

// Bounded by design (docs/metrics.md, "Bounded tables and names"): the name tables (kernels,
// kernel_ops, operators, ranges, syncs; memory_ops per device) keep their kMaxNameRows heaviest
// rows; the others become one last row named "other names (N)" (N: the rows it stands for) that
// holds their sums, so a trace of a million distinct names gives a report of a few thousand rows.
// And a name (or input shapes, a device name) longer than kMaxNameBytes is shown as its first
// bytes and a note of its length and a hash, the same text wherever it appears; analyse_tables
// keeps each full text once.
constexpr size_t kMaxNameRows = 2000;
constexpr size_t kMaxNameBytes = 1024;

// The name shown for `full`: itself when it is at most kMaxNameBytes long, else its first bytes
// (cut on a UTF-8 character boundary) and "... [N bytes, #HASH]".
std::string display_name(const std::string& full);
// The name of the row that stands for `rows` rows left out of a capped table.
std::string other_names(size_t rows);

// One row per kernel name, largest total time first.
struct KernelRow {
  std::string name;
  int64_t calls = 0;
  int64_t total_ns = 0;
  int64_t min_ns = 0;
  int64_t max_ns = 0;
  double mean_blocks_per_sm = -1.0;   // duration-weighted; -1 when no call has a block count
  double mean_occupancy_pct = -1.0;   // duration-weighted; -1 when no call has an occupancy
  bool tensor_cores = false;
  double mean_ns() const { return calls > 0 ? double(total_ns) / double(calls) : 0.0; }
};
std::vector<KernelRow> kernel_table(const Trace& trace);

// The operator view, as the TensorBoard plugin shows it: one row per host operator name (its
// default view), and one per name and input shapes ("group by input shape"), largest host total
// first. Host self = the op's time minus that of the ops directly inside it and of the runtime calls
// it made itself (torch's key_averages and the plugin's definition). Device self = device work
// (kernels, copies, sets) launched by the op itself; device total adds that of the ops inside it.
// An op of a trace that lists one of torch's own ranges as an operator (is_torch_range_op_name) is
// no row of either: range_table has it.
struct OperatorRow {
  std::string name;
  std::string input_shapes;   // by_shape rows: "" when shapes were not recorded; by_name rows: ""
  int64_t calls = 0;
  int64_t host_self_ns = 0;
  int64_t host_total_ns = 0;
  int64_t device_self_ns = 0;
  int64_t device_total_ns = 0;
  bool tc_eligible = false;
  // Kernel time on tensor cores (is_tensor_core_kernel) within device self and device total: the
  // plugin's "Tensor Cores Self/Total (%)" as shares of them; -1 where there is no device time.
  int64_t tc_self_ns = 0;
  int64_t tc_total_ns = 0;
  double tc_self_pct() const {
    return device_self_ns > 0 ? 100.0 * double(tc_self_ns) / double(device_self_ns) : -1.0;
  }
  double tc_total_pct() const {
    return device_total_ns > 0 ? 100.0 * double(tc_total_ns) / double(device_total_ns) : -1.0;
  }
  // FLOPs (flops.h): counted at this operator's calls (0 where none counts here)
  int64_t flops = 0;
  int64_t flop_bytes = 0;   // the bytes those calls read and write; -1 where a call's are unknown
  FlopClass flop_class = FlopClass::None;
};
// Both from one pass over the ops: each row of by_name is the sum of that name's rows of by_shape
// (before the cap). by_shape is empty when no op of the trace has recorded input shapes (it would
// repeat by_name). Each is capped on its own (kMaxNameRows; the tail one "other names (N)" row).
// `flops`: the FLOPs counted per event (count_flops), or null for rows without them.
// `outer_first`: host_ops_outer_first(trace), and `repeated_ops`: repeated_op_calls(trace, links),
// when the caller has them (the latter used only with one entry per event).
// FLOPs: by_shape is also made when only the matrix-class ops carry shapes (the live FLOP
// capture's); shapes_recorded says whether any other op has them (record_shapes was on).
struct OperatorTables {
  std::vector<OperatorRow> by_name;
  std::vector<OperatorRow> by_shape;
  bool shapes_recorded = false;
};
OperatorTables operator_tables(const Trace& trace, const LaunchLinks& links, const FlopCounts* flops = nullptr,
                               const std::vector<uint32_t>* outer_first = nullptr,
                               const std::vector<uint8_t>* repeated_ops = nullptr);
// operator_tables(...).by_name.
std::vector<OperatorRow> operator_table(const Trace& trace, const LaunchLinks& links,
                                        const FlopCounts* flops = nullptr,
                                        const std::vector<uint32_t>* outer_first = nullptr);

// torch's own record_function ranges, which Kineto traces before torch 1.10 list as operators
// (cat "Operator"; later ones and live sessions record them as ranges): the DataLoader's
// `enumerate(DataLoader)#<Iter>.__next__` and `enumerate(DataPipe)#...`, the optimizer's
// `Optimizer.step#...` and `Optimizer.zero_grad#...`, `DataParallel.forward` and
// `DistributedDataParallel.forward`. The plugin's operator view leaves them out.
bool is_torch_range_op_name(std::string_view name);

// One row per kernel name, launching operator (the host op whose runtime call launched it; "" for
// none) and launch configuration (grid, block, registers per thread, shared memory): the plugin's
// kernel view grouped by operator. Largest total first. The means over the calls are weighted by
// duration, over the calls where they are known, as in kernel_table.
struct KernelOpRow {
  std::string kernel;
  std::string op;
  int32_t grid[3] = {0, 0, 0};
  int32_t block[3] = {0, 0, 0};
  int32_t registers_per_thread = -1;   // -1: not recorded
  int64_t shared_memory_bytes = -1;    // -1: not recorded
  int64_t calls = 0;
  int64_t total_ns = 0;
  int64_t min_ns = 0;
  int64_t max_ns = 0;
  double blocks_per_sm = -1.0;   // duration-weighted; -1 when no call has it
  double occupancy_pct = -1.0;   // duration-weighted; -1 when no call has it
  double mean_ns() const { return calls > 0 ? double(total_ns) / double(calls) : 0.0; }
};
std::vector<KernelOpRow> kernel_op_table(const Trace& trace, const LaunchLinks& links);

// torch.profiler's same-name rule (key_averages): 1 for a host op whose parent op has the same name
// and no other child op (the same call seen twice: an autograd-level and a kernel-level
// RecordFunction). The operator table and the per-step tables do not count such an op.
std::vector<uint8_t> repeated_op_calls(const Trace& trace, const LaunchLinks& links);

// Per step [start_ns, end_ns): the kernels and the counted host ops (repeated_op_calls and torch's
// ranges, is_torch_range_op_name, left out) that start in it, by name, the largest total first, at
// most `top` of each.
struct NameTotal {
  std::string name;
  int64_t calls = 0;
  int64_t total_ns = 0;
};
struct StepEventTables {
  int64_t kernel_calls = 0;
  int64_t operator_calls = 0;
  std::vector<NameTotal> kernels;
  std::vector<NameTotal> operators;
};
// `repeated`: repeated_op_calls of this trace when the caller has it (analyse_tables computes it),
// so the launches are not linked again; ignored unless it has one entry per event.
std::vector<StepEventTables> step_event_tables(const Trace& trace,
                                               const std::vector<std::pair<int64_t, int64_t>>& steps, size_t top,
                                               const std::vector<uint8_t>* repeated = nullptr);

// The events drawn in the HTML timeline of one step: host ops, user ranges, module calls,
// synchronisations, kernels, copies, sets and input-pipeline stages that start in [start_ns, end_ns). With more
// than `cap`, device work is kept first, then the longest host events (ties in stored order); `total` counts them
// all. Events come sorted by start (the longer first at equal starts, then stored order), each with its lane
// ("host thread T", "GPU D stream S"; module calls on a lane of their own, "modules, host thread
// T"; a DataLoader worker's stages on its own, "DataLoader worker W (pid P)") and name as indices
// into first-seen lists, and the breakdown category it is coloured as (a step marker and a user
// range are CPU Exec, a synchronisation Runtime, a module call Other, an input stage DataLoader;
// the rest as the breakdown classifies it). With `module_of` (ModuleView::row_of), each event also
// carries its module row (kNoIndex: none), so that the timeline can show a module's work.
struct TimelineEvent {
  uint32_t lane = 0;
  uint32_t name = 0;
  int64_t offset_ns = 0;   // start - start_ns
  int64_t dur_ns = 0;
  Category category = Category::Other;
  EventKind kind = EventKind::HostOp;
  uint32_t module = kNoIndex;
};
struct StepTimeline {
  std::vector<std::string> lanes;   // first-seen order; TimelineEvent::lane indexes it
  std::vector<std::string> names;   // first-seen order
  std::vector<TimelineEvent> events;
  std::vector<std::pair<EventKind, int64_t>> counts;   // events kept per kind, first-seen order
  int64_t total = 0;                                   // events of these kinds in the step
};
StepTimeline step_timeline(const Trace& trace, int64_t start_ns, int64_t end_ns, size_t cap,
                           const std::vector<uint32_t>* module_of = nullptr);

// One row per user range name (gpuprof.range, record_function, torch's Optimizer.step#... ranges,
// and the ops of an old trace that are torch's own ranges: is_torch_range_op_name; not the
// ProfilerStep#N markers). closure_ns: the part of the ranges that ends with the last
// backward op inside them (an optimizer stepped with a closure runs forward and backward there).
struct RangeRow {
  std::string name;
  int64_t calls = 0;
  int64_t host_total_ns = 0;
  int64_t closure_ns = 0;
};
std::vector<RangeRow> range_table(const Trace& trace);

// One row per copy direction and host-memory kind (Memset has its own row).
struct CopyRow {
  std::string kind;          // "HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "Memset", "Unknown"
  std::string host_memory;   // "pageable", "pinned", "" (no host side, or not recorded)
  int64_t count = 0;
  int64_t bytes = 0;
  int64_t total_ns = 0;
  double gb_per_s() const { return total_ns > 0 ? double(bytes) / double(total_ns) : 0.0; }
};
std::vector<CopyRow> copy_table(const Trace& trace);

// Calls that make the host wait for the device, grouped by call and by the outermost host op
// that made them (the op a user recognises, e.g. aten::item rather than _local_scalar_dense).
struct SyncRow {
  std::string name;
  std::string op;   // "" when made outside any host op
  int64_t count = 0;
  int64_t total_ns = 0;
};
bool is_host_blocking_call(const Trace& trace, const Event& e);
std::vector<SyncRow> sync_table(const Trace& trace, const LaunchLinks& links);

// Peak memory in each step, one row per device and step: from the allocator samples (the level
// carried into the step from the last sample before it counts too). Device -1 is the host: the CPU
// allocator's levels where a trace has them, and the process's resident set size (sampled at the
// step's boundaries in live sessions: the larger of the two, or of any sample taken inside it).
struct StepMemoryRow {
  int64_t step = 0;
  int64_t start_ns = 0;   // the step's start, on the trace's clock
  int device = 0;
  int64_t peak_allocated_bytes = -1;   // -1: the trace records no allocator levels
  int64_t peak_reserved_bytes = -1;
  int64_t capacity_bytes = 0;   // 0 when the device's properties are unknown
  int64_t peak_rss_bytes = -1;   // host rows only; -1: not sampled
};
std::vector<StepMemoryRow> step_memory_table(const Trace& trace, const BreakdownResult& steps);
// The same from the devices' levels already computed (gpuprof/analysis/memory.h).
std::vector<StepMemoryRow> step_memory_table(const Trace& trace, const BreakdownResult& steps,
                                             const std::vector<DeviceMemory>& devices);

// Every analysis a report shows, from one breakdown: the steps, the launch links, the GPU summary
// over the steps' window and the tables. On two threads (they only read the Trace): the breakdown
// on one and the launch links on the other, then the tables, each taken by whichever thread is
// free, the heaviest first (cpp/src/analysis/analyse_tables.cpp); where no thread can be started,
// one after the other. An exception from any of them reaches the caller once both threads stopped.
struct AnalysisTables {
  BreakdownResult steps;
  LaunchLinks links;
  std::vector<DeviceSummary> devices;
  std::vector<KernelRow> kernels;
  std::vector<KernelOpRow> kernel_ops;
  std::vector<OperatorRow> operators;            // by name (OperatorTables::by_name)
  std::vector<OperatorRow> operators_by_shape;   // by name and input shapes ([] without shapes)
  std::vector<CopyRow> copies;
  std::vector<RangeRow> ranges;
  std::vector<SyncRow> syncs;
  std::vector<StepMemoryRow> memory;
  std::vector<IdleTimeRow> idle_time;
  std::vector<LaunchStatsRow> launch_stats;
  std::vector<StepCriticalPath> critical_path;   // one per step of `steps`
  std::vector<QueueLengthRow> queue_length;
  std::vector<CopyBandwidthRow> copy_bandwidth;
  std::vector<OpLaunchDelayRow> op_launch_delay;
  std::vector<KernelSequenceRow> kernel_sequences;
  std::vector<CudaGraphRow> cuda_graphs;   // one per CUDA graph replayed ([] for none)
  MemoryView memory_view;   // the curve's levels, per-operator statistics, peaks, growth
  std::vector<uint8_t> repeated_ops;   // repeated_op_calls(trace, links), for step_event_tables
  ModuleView modules;                  // module rows, and each event's row (modules.h)
  CollectiveTable collectives;         // per kind x process group, with every call
  Plausibility plausibility;
  // Each name the rows above show shortened (display_name), once: the name shown and its full
  // text, as an id in the trace's string table (`full` then empty), or as text (a device's name).
  struct LongName {
    std::string shown;
    uint32_t id = kNoIndex;
    std::string full;
  };
  std::vector<LongName> long_names;
  // FLOPs
  FlopCounts flops;
  std::vector<StepFlops> step_flops;
  std::vector<RooflineRow> roofline;
};
// `process_groups`: the job's groups (distributedInfo's pg_config), for calls that record none.
AnalysisTables analyse_tables(const Trace& trace, const BreakdownOptions& options,
                              const std::vector<ProcessGroupInfo>& process_groups = {});

}  // namespace gpuprof
