// GPU metrics for Python: the per-device summary, the detail tables, the occupancy calculator and
// the tensor-core classifiers, plus the few Trace builders that let Python hand us kernels,
// copies, devices and memory samples. Translation only; the numbers come from cpp/src/analysis.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "critical_path_dict.h"
#include "cuda_graph_fields.h"
#include "device_sum_fields.h"
#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/collectives.h"
#include "gpuprof/analysis/energy.h"
#include "gpuprof/analysis/flops.h"
#include "gpuprof/analysis/gpu_summary.h"
#include "gpuprof/analysis/input_transfer.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/memory.h"
#include "gpuprof/analysis/modules.h"
#include "gpuprof/analysis/occupancy.h"
#include "gpuprof/analysis/tables.h"
#include "gpuprof/analysis/tensor_cores.h"
#include "gpuprof/core/trace.h"
#include "hta_quantity_fields.h"
#include "rows.h"

namespace py = pybind11;
using namespace gpuprof;

py::dict breakdown_to_dict(const BreakdownResult& r);   // core_module.cpp

namespace {

using namespace gpuprof::bindings;

const std::vector<Field<DeviceSummary>> kDeviceFields = {
    member("id", &DeviceSummary::id),
    member("name", &DeviceSummary::name),
    {"compute_capability",
     [](const DeviceSummary& s) {
       return s.compute_major > 0
                  ? py::object(py::str(std::to_string(s.compute_major) + "." + std::to_string(s.compute_minor)))
                  : py::object(py::none());
     }},
    member("utilization_pct", &DeviceSummary::utilization_pct),
    member("sm_efficiency_pct", &DeviceSummary::sm_efficiency_pct),
    known("achieved_occupancy_pct", &DeviceSummary::achieved_occupancy_pct),
    member("tensor_core_pct", &DeviceSummary::tensor_core_pct),
    member("tc_eligible_pct", &DeviceSummary::tc_eligible_pct),
    positive("memory_total_bytes", &DeviceSummary::memory_total_bytes),
    known("peak_allocated_bytes", &DeviceSummary::peak_allocated_bytes),
    micros("window_us", &DeviceSummary::window_ns),
    micros("kernel_us", &DeviceSummary::kernel_ns),
    member("kernels", &DeviceSummary::kernels),
    micros("comm_kernel_us", &DeviceSummary::comm_kernel_ns),
    micros("comm_overlap_compute_us", &DeviceSummary::comm_overlap_compute_ns),
    micros("comm_overlap_copy_us", &DeviceSummary::comm_overlap_copy_ns),
};

const std::vector<Field<KernelRow>> kKernelFields = {
    member("name", &KernelRow::name),
    member("calls", &KernelRow::calls),
    micros("total_us", &KernelRow::total_ns),
    {"mean_us", [](const KernelRow& r) { return py::object(py::float_(r.mean_ns() / 1000.0)); }},
    micros("min_us", &KernelRow::min_ns),
    micros("max_us", &KernelRow::max_ns),
    known("mean_blocks_per_sm", &KernelRow::mean_blocks_per_sm),
    known("mean_occupancy_pct", &KernelRow::mean_occupancy_pct),
    member("tensor_cores", &KernelRow::tensor_cores),
};

// A launch dimension as [x, y, z].
py::object xyz(const int32_t (&v)[3]) {
  py::list l;
  for (int32_t x : v) l.append(x);
  return std::move(l);
}

const std::vector<Field<KernelOpRow>> kKernelOpFields = {
    member("kernel", &KernelOpRow::kernel),
    member("operator", &KernelOpRow::op),
    {"grid", [](const KernelOpRow& r) { return xyz(r.grid); }},
    {"block", [](const KernelOpRow& r) { return xyz(r.block); }},
    {"registers_per_thread", [](const KernelOpRow& r) { return or_none(int64_t(r.registers_per_thread)); }},
    known("shared_memory_bytes", &KernelOpRow::shared_memory_bytes),
    member("calls", &KernelOpRow::calls),
    micros("total_us", &KernelOpRow::total_ns),
    {"mean_us", [](const KernelOpRow& r) { return py::object(py::float_(r.mean_ns() / 1000.0)); }},
    micros("min_us", &KernelOpRow::min_ns),
    micros("max_us", &KernelOpRow::max_ns),
    known("blocks_per_sm", &KernelOpRow::blocks_per_sm),
    known("occupancy_pct", &KernelOpRow::occupancy_pct),
};

const std::vector<Field<OperatorRow>> kOperatorFields = {
    member("name", &OperatorRow::name),
    member("calls", &OperatorRow::calls),
    micros("host_self_us", &OperatorRow::host_self_ns),
    micros("host_total_us", &OperatorRow::host_total_ns),
    micros("device_self_us", &OperatorRow::device_self_ns),
    micros("device_total_us", &OperatorRow::device_total_ns),
    member("tc_eligible", &OperatorRow::tc_eligible),
    {"tc_self_pct", [](const OperatorRow& r) { return or_none(r.tc_self_pct()); }},
    {"tc_total_pct", [](const OperatorRow& r) { return or_none(r.tc_total_pct()); }},
    // FLOPs
    member("flops", &OperatorRow::flops),
};

// FLOPs: the roofline's rows, and each step's FLOPs
const std::vector<Field<RooflineRow>> kRooflineFields = {
    member("name", &RooflineRow::name),
    member("input_shapes", &RooflineRow::input_shapes),
    {"flop_class", [](const RooflineRow& r) { return py::object(py::str(flop_class_key(r.cls))); }},
    member("calls", &RooflineRow::calls),
    member("flops", &RooflineRow::flops),
    known("bytes", &RooflineRow::bytes),
    micros("time_us", &RooflineRow::time_ns),
    member("on_device", &RooflineRow::on_device),
    {"intensity_flop_per_byte", [](const RooflineRow& r) { return or_none(r.intensity); }},
    {"achieved_tflops",
     [](const RooflineRow& r) { return py::object(py::float_(r.achieved_flops_per_s / 1e12)); }},
};

py::dict step_flops_dict(const StepFlops& s) {
  py::dict d;
  d["step"] = s.step;
  d["flops"] = s.total;
  d["matmul_flops"] = s.matmul;
  d["other_flops"] = s.other;
  d["matmul_forward_flops"] = s.matmul_forward;
  d["forward_flops"] = s.forward;
  d["backward_flops"] = s.backward;
  d["recompute_flops"] = s.recompute;
  d["other_calls"] = s.other_calls;
  d["uncounted_calls"] = s.uncounted_calls;
  d["uncounted_matmul_calls"] = s.uncounted_matmul_calls;
  d["backward_ran"] = s.backward_ran;
  py::dict by_dtype;
  for (int k = 0; k < kNumFlopDtypes; ++k)
    if (s.matmul_by_dtype[size_t(k)] != 0)
      by_dtype[flop_dtype_key(static_cast<FlopDtype>(k))] = s.matmul_by_dtype[size_t(k)];
  d["matmul_flops_by_dtype"] = by_dtype;
  return d;
}

py::dict flops_dict(const Trace& t, const AnalysisTables& a) {
  py::dict d;
  py::list steps;
  for (const StepFlops& s : a.step_flops) steps.append(step_flops_dict(s));
  d["steps"] = steps;
  d["roofline"] = row_dicts(a.roofline, kRooflineFields);   // every row: the bounds need the peak (Python)
  const auto owned = [&t](uint32_t i) { return !(t.events[i].flags & kContextFlag); };   // a window's own
  d["counted_calls"] =
      std::count_if(a.flops.ops.begin(), a.flops.ops.end(), [&](const CountedOp& c) { return owned(c.event); });
  d["uncounted_calls"] = std::count_if(a.flops.uncounted.begin(), a.flops.uncounted.end(), owned);
  std::map<std::string, int64_t> uncounted_by_op;   // which ops lacked their inputs
  for (uint32_t i : a.flops.uncounted) uncounted_by_op[t.name_of(t.events[i])] += owned(i) ? 1 : 0;
  d["uncounted_by_op"] = uncounted_by_op;
  d["trace_flops_checked"] = a.flops.trace_args_checked;
  d["trace_flops_differ"] = a.flops.trace_args_differ;
  return d;
}

const std::vector<Field<OperatorRow>> kOperatorShapeFields = {
    member("name", &OperatorRow::name),
    member("input_shapes", &OperatorRow::input_shapes),
    member("calls", &OperatorRow::calls),
    micros("host_self_us", &OperatorRow::host_self_ns),
    micros("host_total_us", &OperatorRow::host_total_ns),
    micros("device_self_us", &OperatorRow::device_self_ns),
    micros("device_total_us", &OperatorRow::device_total_ns),
    {"tc_self_pct", [](const OperatorRow& r) { return or_none(r.tc_self_pct()); }},
    {"tc_total_pct", [](const OperatorRow& r) { return or_none(r.tc_total_pct()); }},
    member("flops", &OperatorRow::flops),   // FLOPs
};

// The parent is named by its path (None for a root): the rows' own key, as in the JSON.
py::list module_dicts(const std::vector<ModuleRow>& rows) {
  const std::vector<Field<ModuleRow>> fields = {
      member("path", &ModuleRow::path),
      member("type", &ModuleRow::type),
      {"parent",
       [&rows](const ModuleRow& r) {
         return r.parent < rows.size() ? py::object(py::str(rows[r.parent].path)) : py::object(py::none());
       }},
      member("depth", &ModuleRow::depth),
      member("calls", &ModuleRow::calls),
      micros("host_total_us", &ModuleRow::host_total_ns),
      micros("host_self_us", &ModuleRow::host_self_ns),
      micros("device_total_us", &ModuleRow::device_total_ns),
      micros("device_self_us", &ModuleRow::device_self_ns),
      member("flops", &ModuleRow::flops),   // FLOPs
  };
  return row_dicts(rows, fields);
}

const std::vector<Field<RangeRow>> kRangeFields = {
    member("name", &RangeRow::name),
    member("calls", &RangeRow::calls),
    micros("host_total_us", &RangeRow::host_total_ns),
    micros("closure_us", &RangeRow::closure_ns),
};

const std::vector<Field<CopyRow>> kCopyFields = {
    member("kind", &CopyRow::kind),
    nonempty("host_memory", &CopyRow::host_memory),
    member("count", &CopyRow::count),
    member("bytes", &CopyRow::bytes),
    micros("total_us", &CopyRow::total_ns),
    {"gb_per_s", [](const CopyRow& r) { return py::object(py::float_(r.gb_per_s())); }},
};

const std::vector<Field<SyncRow>> kSyncFields = {
    member("name", &SyncRow::name),
    member("op", &SyncRow::op),
    member("count", &SyncRow::count),
    micros("total_us", &SyncRow::total_ns),
};

const std::vector<Field<StepMemoryRow>> kStepMemoryFields = {
    member("step", &StepMemoryRow::step),
    member("ts_ns", &StepMemoryRow::start_ns),   // a time column, so renderers can draw the peaks over the run
    member("device", &StepMemoryRow::device),
    known("peak_allocated_bytes", &StepMemoryRow::peak_allocated_bytes),
    known("peak_reserved_bytes", &StepMemoryRow::peak_reserved_bytes),
    positive("capacity_bytes", &StepMemoryRow::capacity_bytes),
    known("peak_rss_bytes", &StepMemoryRow::peak_rss_bytes),
};

const std::vector<Field<MemoryOpRow>> kMemoryOpFields = {
    member("name", &MemoryOpRow::name),
    member("device", &MemoryOpRow::device),
    member("calls", &MemoryOpRow::calls),
    member("size_increase_bytes", &MemoryOpRow::size_increase_bytes),
    member("self_size_increase_bytes", &MemoryOpRow::self_size_increase_bytes),
    member("alloc_count", &MemoryOpRow::alloc_count),
    member("self_alloc_count", &MemoryOpRow::self_alloc_count),
    member("alloc_bytes", &MemoryOpRow::alloc_bytes),
    member("self_alloc_bytes", &MemoryOpRow::self_alloc_bytes),
};

// Who made the memory live at a moment, or left it live across steps (memory_peak, memory_growth).
const std::vector<Field<MemoryOwner>> kMemoryOwnerFields = {
    member("name", &MemoryOwner::name),
    member("bytes", &MemoryOwner::bytes),
    member("count", &MemoryOwner::count),
};

const std::vector<Field<MemoryComposition>> kMemoryCompositionFields = {
    member("parameters", &MemoryComposition::parameters),
    member("gradients", &MemoryComposition::gradients),
    member("optimizer_state", &MemoryComposition::optimizer_state),
    member("activations", &MemoryComposition::activations),
    member("temporary", &MemoryComposition::temporary),
    member("unknown", &MemoryComposition::unknown),
};

const std::vector<Field<MemoryMoment>> kMemoryMomentFields = {
    micros("t_us", &MemoryMoment::ts_ns),
    {"step", [](const MemoryMoment& m) { return or_none(m.step); }},
    member("bytes", &MemoryMoment::bytes),
    known("reserved_bytes", &MemoryMoment::reserved_bytes),
    {"top_ops", [](const MemoryMoment& m) { return py::object(row_dicts(m.top_ops, kMemoryOwnerFields)); }},
    {"top_modules",
     [](const MemoryMoment& m) { return py::object(row_dicts(m.top_modules, kMemoryOwnerFields)); }},
};

const std::vector<Field<MemoryGrowth>> kMemoryGrowthFields = {
    member("steps", &MemoryGrowth::steps),
    member("end_bytes", &MemoryGrowth::end_bytes),
    member("bytes_per_step", &MemoryGrowth::bytes_per_step),
    member("rising_steps", &MemoryGrowth::rising),
    member("flagged", &MemoryGrowth::flagged),
    member("steps_counted", &MemoryGrowth::steps_counted),
    {"ops", [](const MemoryGrowth& g) { return py::object(row_dicts(g.ops, kMemoryOwnerFields)); }},
    {"modules", [](const MemoryGrowth& g) { return py::object(row_dicts(g.modules, kMemoryOwnerFields)); }},
};

// {device id as a string: the row's dict}, as memory_curve keys its devices.
template <class Row, class Of>
py::dict by_device(const std::vector<Row>& rows, const Of& of) {
  py::dict out;
  for (const Row& r : rows) out[py::str(std::to_string(r.device))] = of(r);
  return out;
}

const std::vector<Field<GpuBucket>> kGpuBucketFields = {
    micros("start_us", &GpuBucket::start_ns),
    micros("dur_us", &GpuBucket::dur_ns),
    member("utilization_pct", &GpuBucket::utilization_pct),
    member("sm_efficiency_pct", &GpuBucket::sm_efficiency_pct),
};

// A collective row's bandwidths are over its whole call time here; the cross-rank report gives the
// transfer time (the other ranks' calls are needed for it) and computes them again with
// collective_bandwidths below.
const std::vector<Field<CollectiveRow>> kCollectiveFields = {
    member("name", &CollectiveRow::name),
    member("process_group", &CollectiveRow::process_group),
    member("pg_desc", &CollectiveRow::pg_desc),
    {"group_size", [](const CollectiveRow& r) { return or_none(int64_t(r.group_size)); }},
    member("group_ranks", &CollectiveRow::group_ranks),
    member("calls", &CollectiveRow::calls),
    known("bytes", &CollectiveRow::bytes),
    micros("total_us", &CollectiveRow::total_ns),
    {"mean_us",
     [](const CollectiveRow& r) {
       return py::object(py::float_(r.calls > 0 ? us(r.total_ns) / double(r.calls) : 0.0));
     }},
    {"transfer_us", [](const CollectiveRow&) { return py::object(py::none()); }},
    {"wait_us", [](const CollectiveRow&) { return py::object(py::none()); }},
    {"algbw_gbps", [](const CollectiveRow& r) { return or_none(algbw_gbps(r.bytes, r.total_ns)); }},
    {"busbw_gbps",
     [](const CollectiveRow& r) { return or_none(busbw_gbps(r.name, r.bytes, r.total_ns, r.group_size)); }},
    {"timed_by", [](const CollectiveRow& r) { return py::object(py::str(r.on_device ? "device" : "host")); }},
};

std::vector<ProcessGroupInfo> process_groups_arg(const py::object& groups) {
  std::vector<ProcessGroupInfo> out;
  if (groups.is_none()) return out;
  for (const py::handle& h : groups) {
    const py::dict d = py::reinterpret_borrow<py::dict>(h);
    ProcessGroupInfo g;
    auto text = [&](const char* k) {
      return d.contains(k) && !d[k].is_none() ? py::str(d[k]).cast<std::string>() : "";
    };
    g.name = text("pg_name");
    g.desc = text("pg_desc");
    if (d.contains("pg_size") && !d["pg_size"].is_none()) g.size = d["pg_size"].cast<int32_t>();
    if (d.contains("ranks") && !d["ranks"].is_none()) {
      std::string r = "[";
      bool first = true;
      for (const py::handle& x : d["ranks"]) {
        r += (first ? "" : ", ") + std::to_string(x.cast<int64_t>());
        first = false;
      }
      g.ranks = r + "]";
    }
    out.push_back(std::move(g));
  }
  return out;
}
// energy per step (docs/metrics.md, "Energy")
const std::vector<Field<DeviceEnergy>> kEnergyFields = {
    member("device", &DeviceEnergy::device),
    {"method",
     [](const DeviceEnergy& r) {
       const std::string m = r.method();
       return m.empty() ? py::object(py::none()) : py::object(py::str(m));
     }},
    {"steps", [](const DeviceEnergy& r) { return py::object(py::int_(r.measured_steps())); }},
    known("energy_j", &DeviceEnergy::energy_j),
    {"energy_per_step_j", [](const DeviceEnergy& r) { return or_none(r.energy_per_step_j()); }},
    {"mean_power_w", [](const DeviceEnergy& r) { return or_none(r.mean_power_w()); }},
    member("note", &DeviceEnergy::note),
};

// ---- the result tables: one registration each ------------------------------------------------------
// A table of rows the analysis makes, by its key in the report (analysis/fields.py declares the same
// key, its fields in the same order): gpu_tables gives each, in this order, and RESULT_TABLES names
// them. A plain new table is one line here beside its field table.
struct ResultTable {
  const char* key;
  std::function<py::list(const AnalysisTables&)> rows;
};

template <class Row>
ResultTable result_table(const char* key, std::vector<Row> AnalysisTables::* rows,
                         const std::vector<Field<Row>>& fields) {
  return {key, [rows, &fields](const AnalysisTables& a) { return row_dicts(a.*rows, fields); }};
}

const std::vector<ResultTable>& result_tables() {
  static const std::vector<ResultTable> tables = {
      result_table("devices", &AnalysisTables::devices, kDeviceFields),
      result_table("kernels", &AnalysisTables::kernels, kKernelFields),
      result_table("kernel_ops", &AnalysisTables::kernel_ops, kKernelOpFields),
      result_table("operators", &AnalysisTables::operators, kOperatorFields),
      result_table("operators_by_shape", &AnalysisTables::operators_by_shape, kOperatorShapeFields),
      {"modules", [](const AnalysisTables& a) { return module_dicts(a.modules.rows); }},
      result_table("copies", &AnalysisTables::copies, kCopyFields),
      result_table("syncs", &AnalysisTables::syncs, kSyncFields),
      result_table("idle_time", &AnalysisTables::idle_time, kIdleTimeFields),
      result_table("launch_stats", &AnalysisTables::launch_stats, kLaunchStatsFields),
      result_table("queue_length", &AnalysisTables::queue_length, kQueueLengthFields),
      result_table("copy_bandwidth", &AnalysisTables::copy_bandwidth, kCopyBandwidthFields),
      result_table("op_launch_delay", &AnalysisTables::op_launch_delay, kOpLaunchDelayFields),
      result_table("kernel_sequences", &AnalysisTables::kernel_sequences, kKernelSequenceFields),
      result_table("cuda_graphs", &AnalysisTables::cuda_graphs, kCudaGraphFields),
      result_table("memory", &AnalysisTables::memory, kStepMemoryFields),
      result_table("ranges", &AnalysisTables::ranges, kRangeFields),
      {"memory_ops", [](const AnalysisTables& a) { return row_dicts(a.memory_view.ops, kMemoryOpFields); }},
      {"collectives", [](const AnalysisTables& a) { return row_dicts(a.collectives.rows, kCollectiveFields); }},
  };
  return tables;
}

py::dict tables_to_dict(const Trace& t, bool drop_incomplete_last_step, const py::object& process_groups) {
  AnalysisTables a;
  const std::vector<ProcessGroupInfo> groups = process_groups_arg(process_groups);
  {
    py::gil_scoped_release release;
    BreakdownOptions o;
    o.drop_incomplete_last_step = drop_incomplete_last_step;
    a = analyse_tables(t, o, groups);
  }
  py::dict out;
  out["breakdown"] = breakdown_to_dict(a.steps);   // the steps the GPU window was taken from
  // For step_event_tables later (one byte per event), so that it need not link launches again.
  out["repeated_op_calls"] =
      py::bytes(reinterpret_cast<const char*>(a.repeated_ops.data()), a.repeated_ops.size());
  for (const ResultTable& table : result_tables()) out[table.key] = table.rows(a);
  out["device_sums"] = row_dicts(a.devices, kDeviceSumFields);   // the GPU summary's sums, for windows
  // Each event's module row (uint32, native order; 0xffffffff none), for the step timelines: only
  // when the trace has module calls.
  if (!a.modules.row_of.empty())
    out["module_of_event"] = py::bytes(reinterpret_cast<const char*>(a.modules.row_of.data()),
                                       a.modules.row_of.size() * sizeof(uint32_t));
  out["flops"] = flops_dict(t, a);   // FLOPs
  out["critical_path"] = critical_path_dict(t, a.critical_path);
  // The drawn steps' paths, for step_views (moved out of a.critical_path: nothing reads it after).
  out["critical_path_kept"] = kept_drawn_paths(t, a.steps.steps, a.critical_path);
  const MemoryView& v = a.memory_view;
  out["memory_peak"] = by_device(v.peaks, [](const MemoryMoment& m) { return row_dict(m, kMemoryMomentFields); });
  out["memory_end"] = by_device(v.ends, [](const MemoryMoment& m) { return row_dict(m, kMemoryMomentFields); });
  // Composition only where the blocks are known (allocations with addresses, or known storages).
  py::dict composition, end_composition;
  for (size_t i = 0; i < v.peaks.size(); ++i) {
    const DeviceMemory* d = nullptr;
    for (const DeviceMemory& dm : v.devices)
      if (dm.device == v.peaks[i].device) d = &dm;
    if (d == nullptr || d->blocks.empty()) continue;
    const std::string key = std::to_string(v.peaks[i].device);
    composition[py::str(key)] = row_dict(v.peaks[i].composition, kMemoryCompositionFields);
    end_composition[py::str(key)] = row_dict(v.ends[i].composition, kMemoryCompositionFields);
  }
  out["memory_composition"] = composition;
  out["memory_end_composition"] = end_composition;
  out["memory_growth"] =
      by_device(v.growth, [](const MemoryGrowth& g) { return row_dict(g, kMemoryGrowthFields); });
  // Every call, for the cross-rank split of each row's time: [row, step, dur_us, end_us, bytes or None].
  py::list calls;
  for (const CollectiveCall& c : a.collectives.calls)
    calls.append(py::make_tuple(c.row, c.step, us(c.dur_ns), us(c.end_ns), or_none(c.bytes)));
  out["collective_calls"] = calls;
  const Plausibility& p = a.plausibility;
  py::dict plausibility;
  plausibility["occupancy_clamped_kernels"] = p.occupancy_clamped_kernels;
  plausibility["occupancy_max_pct"] = p.occupancy_max_pct;
  plausibility["memory_over_capacity_samples"] = p.memory_over_capacity_samples;
  plausibility["memory_over_capacity_max_bytes"] = p.memory_over_capacity_max_bytes;
  plausibility["memory_over_capacity_device_bytes"] = p.memory_over_capacity_device_bytes;
  plausibility["memory_over_capacity_device"] = p.memory_over_capacity_device;
  out["plausibility"] = plausibility;
  py::dict long_names;
  for (const AnalysisTables::LongName& n : a.long_names)
    long_names[py::str(n.shown)] = py::str(n.id != kNoIndex ? t.strings.at(n.id) : n.full);
  out["long_names"] = long_names;
  return out;
}

// The GPU's description, occupancy, the tensor-core classifiers, the per-device summary.
void bind_devices(py::module_& m) {
  py::class_<DeviceProps>(m, "DeviceProps",
                          "What the occupancy rules and the GPU summary need to know of one GPU "
                          "(field names follow cudaDeviceProp; Kineto's deviceProperties carry them).")
      .def(py::init<>())
      .def_readwrite("id", &DeviceProps::id)
      .def_readwrite("name", &DeviceProps::name)
      .def_readwrite("total_global_mem", &DeviceProps::total_global_mem)
      .def_readwrite("compute_major", &DeviceProps::compute_major)
      .def_readwrite("compute_minor", &DeviceProps::compute_minor)
      .def_readwrite("max_threads_per_block", &DeviceProps::max_threads_per_block)
      .def_readwrite("max_threads_per_sm", &DeviceProps::max_threads_per_sm)
      .def_readwrite("regs_per_block", &DeviceProps::regs_per_block)
      .def_readwrite("regs_per_sm", &DeviceProps::regs_per_sm)
      .def_readwrite("warp_size", &DeviceProps::warp_size)
      .def_readwrite("shared_mem_per_block", &DeviceProps::shared_mem_per_block)
      .def_readwrite("shared_mem_per_sm", &DeviceProps::shared_mem_per_sm)
      .def_readwrite("shared_mem_per_block_optin", &DeviceProps::shared_mem_per_block_optin)
      .def_readwrite("num_sms", &DeviceProps::num_sms)
      .def_readwrite("max_blocks_per_sm", &DeviceProps::max_blocks_per_sm);
  m.def(
      "occupancy",
      [](const DeviceProps& d, int64_t threads_per_block, int registers_per_thread, int64_t shared_mem_bytes,
         int64_t blocks, bool kineto_compatible) {
        LaunchResources launch{threads_per_block, registers_per_thread, shared_mem_bytes};
        const SharedMemLimit limit = kineto_compatible ? SharedMemLimit::DefaultOnly : SharedMemLimit::Auto;
        const OccupancyResult r = active_blocks_per_sm(d, launch, limit);
        py::dict out;
        if (!r.ok) {
          out["error"] = std::string(r.why_not);
          return out;
        }
        out["active_blocks_per_sm"] = r.active_blocks_per_sm;
        out["limit_warps"] = r.limit_warps;
        out["limit_registers"] = r.limit_registers;
        out["limit_shared_mem"] = r.limit_shared_mem;
        out["limit_blocks"] = r.limit_blocks;
        if (blocks > 0) {
          KernelInfo k;
          k.grid[0] = static_cast<int32_t>(blocks);
          k.grid[1] = k.grid[2] = 1;
          k.block[0] = static_cast<int32_t>(threads_per_block);
          k.block[1] = k.block[2] = 1;
          k.registers_per_thread = registers_per_thread;
          k.shared_mem_bytes = shared_mem_bytes;
          out["occupancy_pct"] = or_none(occupancy_pct(d, k, limit));
        }
        return out;
      },
      py::arg("device"), py::arg("threads_per_block"), py::arg("registers_per_thread"),
      py::arg("shared_mem_bytes"), py::arg("blocks") = 0, py::arg("kineto_compatible") = false,
      "Active blocks per SM (and their limits) for one launch; with blocks > 0 also the theoretical "
      "occupancy in percent. kineto_compatible=True applies the default per-block shared-memory "
      "limit even above it, as Kineto's estimate does. A device the rules do not cover gives "
      "{'error': <why>} instead of numbers.");

  m.def("is_tensor_core_kernel", [](const std::string& s) { return is_tensor_core_kernel(s); }, py::arg("name"));
  m.def(
      "is_tensor_core_eligible_op", [](const std::string& s) { return is_tensor_core_eligible_op(s); },
      py::arg("name"));
  m.def(
      "gpu_summary",
      [](const Trace& t) {
        std::vector<DeviceSummary> devices;
        {
          py::gil_scoped_release release;
          devices = summarize_devices(t);
        }
        return row_dicts(devices, kDeviceFields);
      },
      py::arg("trace"), "Per-device GPU summary (utilization, SM efficiency, occupancy, tensor cores).");
}

// What the HTML's step drill-down draws: per-step tops, and one step's timeline.
void bind_step_views(py::module_& m) {
  m.def(
      "step_event_tables",
      [](const Trace& t, const std::vector<std::pair<int64_t, int64_t>>& steps, size_t top,
         std::optional<py::bytes> repeated) {
        std::vector<uint8_t> given;
        if (repeated) {
          const std::string_view r = *repeated;
          given.assign(r.begin(), r.end());
        }
        std::vector<StepEventTables> tables;
        {
          py::gil_scoped_release release;
          tables = step_event_tables(t, steps, top, repeated ? &given : nullptr);
        }
        auto rows = [](const std::vector<NameTotal>& v) {
          py::list out;
          for (const NameTotal& r : v) out.append(py::make_tuple(r.name, r.calls, r.total_ns));
          return out;
        };
        py::list out;
        for (const StepEventTables& s : tables) {
          py::dict d;
          d["kernels_count"] = s.kernel_calls;
          d["operators_count"] = s.operator_calls;
          d["kernels"] = rows(s.kernels);
          d["operators"] = rows(s.operators);
          out.append(d);
        }
        return out;
      },
      py::arg("trace"), py::arg("steps"), py::arg("top"), py::arg("repeated") = py::none(),
      "Per step (start_ns, end_ns): kernel and counted operator calls, and the top kernels and "
      "operators by total time as (name, calls, total_ns). `repeated`: gpu_tables(...)['repeated_op_calls'] "
      "of this trace, which spares linking the launches again.");
  m.def(
      "step_timeline",
      [](const Trace& t, int64_t start_ns, int64_t end_ns, size_t cap, std::optional<py::bytes> module_of) {
        std::vector<uint32_t> rows;
        if (module_of) {
          const std::string_view b = *module_of;
          rows.resize(b.size() / sizeof(uint32_t));
          std::memcpy(rows.data(), b.data(), rows.size() * sizeof(uint32_t));
        }
        StepTimeline tl;
        {
          py::gil_scoped_release release;
          tl = step_timeline(t, start_ns, end_ns, cap, module_of ? &rows : nullptr);
        }
        // One Python string per category and kind, shared by every row.
        std::vector<py::str> cats, kinds;
        for (int c = 0; c < kNumCategories; ++c) cats.emplace_back(category_key(static_cast<Category>(c)));
        for (int k = 0; k <= static_cast<int>(EventKind::Other); ++k)
          kinds.emplace_back(event_kind_key(static_cast<EventKind>(k)));
        py::list events(tl.events.size());
        for (size_t i = 0; i < tl.events.size(); ++i) {
          const TimelineEvent& e = tl.events[i];
          py::list r(6);
          r[0] = py::int_(e.lane);
          r[1] = py::int_(e.name);
          r[2] = py::float_(static_cast<double>(e.offset_ns) / 1000.0);
          r[3] = py::float_(static_cast<double>(e.dur_ns) / 1000.0);
          r[4] = cats[static_cast<size_t>(e.category)];
          r[5] = kinds[static_cast<size_t>(e.kind)];
          events[i] = std::move(r);
        }
        py::dict counts;
        for (const auto& [kind, n] : tl.counts) counts[kinds[static_cast<size_t>(kind)]] = n;
        py::dict out;
        out["lane_order"] = tl.lanes;
        out["names"] = tl.names;
        out["events"] = events;
        if (module_of) {
          py::list modules(tl.events.size());
          for (size_t i = 0; i < tl.events.size(); ++i)
            modules[i] = py::int_(tl.events[i].module == kNoIndex ? -1 : int64_t(tl.events[i].module));
          out["module_of"] = modules;
        }
        out["counts"] = counts;
        out["total"] = tl.total;
        return out;
      },
      py::arg("trace"), py::arg("start_ns"), py::arg("end_ns"), py::arg("cap"), py::arg("module_of") = py::none(),
      "The HTML timeline of one step [start_ns, end_ns): lane_order and names (first seen), events as "
      "[lane, name, start_us (from start_ns), dur_us, category, kind] sorted by start, counts per kind, "
      "and total (events before the cap: device work kept first, then the longest). With module_of "
      "(gpu_tables(...)['module_of_event']), also module_of: each event's module row (-1: none).");
}

// Series over the span: batch transfers, the memory curve, the GPU timeline.
void bind_series(py::module_& m) {
  m.def(
      "batch_transfers",
      [](const Trace& t, const std::vector<std::pair<int64_t, int64_t>>& steps) {
        std::vector<StepTransfer> rows;
        {
          py::gil_scoped_release release;
          rows = batch_transfers(t, steps);
        }
        py::list out;
        for (const StepTransfer& r : rows) {
          py::dict d;
          d["batches"] = r.batches;
          d["copy_ops"] = r.copy_ops;
          d["host_ns"] = r.host_ns;
          d["device_copies"] = r.device_copies;
          d["device_ns"] = r.device_ns;
          d["overlap_ns"] = r.overlap_ns;
          out.append(d);
        }
        return out;
      },
      py::arg("trace"), py::arg("steps"),
      "Per step [(start_ns, end_ns)]: the batch's copy to the device after each DataLoader range "
      "(gpuprof/analysis/input_transfer.h): batches, copy_ops, host_ns, device_copies, device_ns, overlap_ns.");
  m.def(
      "memory_curve",
      [](const Trace& t, size_t max_points) {
        std::vector<MemoryCurve> curves;
        {
          py::gil_scoped_release release;
          curves = memory_curves(t, max_points);
        }
        py::dict out;
        for (const MemoryCurve& c : curves) {
          py::list points;
          for (const MemoryPoint& p : c.points)
            points.append(py::make_tuple(us(p.ts_ns), p.allocated_bytes, or_none(p.reserved_bytes)));
          out[py::str(std::to_string(c.device))] = points;
        }
        return out;
      },
      py::arg("trace"), py::arg("max_points") = 2000,
      "Each device's allocator level over time (-1: the host): {device: [(t_us, allocated_bytes, "
      "reserved_bytes or None)]}, down-sampled past max_points keeping each slice's lowest and highest "
      "sample (docs/metrics.md, \"Memory curve\").");
  m.def(
      "gpu_timeline",
      [](const Trace& t) {
        std::vector<GpuTimeline> timelines;
        {
          py::gil_scoped_release release;
          timelines = gpu_timelines(t, /*with_sm_levels=*/false);
        }
        py::dict out;
        for (const GpuTimeline& tl : timelines)
          out[py::str(std::to_string(tl.device))] = row_dicts(tl.buckets, kGpuBucketFields);
        return out;
      },
      py::arg("trace"),
      "Each device's utilization and Est. SM efficiency over the trace, in the TensorBoard plugin's "
      "buckets (a power of ten microseconds, at most 100): {device: [{start_us, dur_us, "
      "utilization_pct, sm_efficiency_pct}]}.");
}

// FLOPs (the devices' names for the peak, each op's FLOPs, the rules) and energy per step.
void bind_flops_energy(py::module_& m) {
  py::class_<Trace> trace = py::reinterpret_borrow<py::class_<Trace>>(m.attr("Trace"));
  trace.def_property_readonly(
      "device_names",
      [](const Trace& t) {
        py::dict out;
        for (const DeviceProps& d : t.devices) out[py::int_(d.id)] = d.name;
        return out;
      },
      "{device id: name} of the devices the trace describes (deviceProperties, or the live session's).");
  m.def(
      "op_flops",
      [](const std::string& name, const std::string& shapes, const std::string& types,
         const std::string& concrete) {
        const OpFlops f = op_flops(name, parse_op_inputs(shapes, types, concrete));
        py::dict d;
        d["flop_class"] = flop_class_key(f.cls);
        d["flops"] = or_none(f.flops);
        d["bytes"] = or_none(f.bytes);
        d["dtype"] = flop_dtype_key(f.dtype);
        return d;
      },
      py::arg("name"), py::arg("shapes"), py::arg("types") = "", py::arg("concrete") = "",
      "The FLOPs of one call of an operator from its input shapes (and types, and concrete inputs) as "
      "Kineto writes them: {flop_class ('matmul', 'other', '' for no rule), flops (None: the rule's "
      "inputs are missing), bytes, dtype}.");
  m.def(
      "flop_rules",
      [] {
        py::list out;
        for (const FlopRuleInfo& r : flop_rules())
          out.append(py::make_tuple(r.name, flop_class_key(r.cls), r.per_element, r.what));
        return out;
      },
      "Every FLOP rule: (operator name without aten::, class, FLOPs per element or 0, what it counts).");
  // energy per step (docs/metrics.md, "Energy")
  m.def(
      "step_energy",
      [](const Trace& t, const std::vector<std::pair<int64_t, int64_t>>& windows) {
        std::vector<TimeWindow> steps;
        steps.reserve(windows.size());
        for (const auto& [start, end] : windows) steps.push_back({start, end});
        EnergyResult r;
        {
          py::gil_scoped_release release;
          r = step_energy(t, steps);
        }
        py::list per_step;
        for (const std::vector<StepEnergy>& step : r.steps) {
          py::list joules;
          for (const StepEnergy& e : step) joules.append(or_none(e.energy_j));
          per_step.append(joules);
        }
        py::dict out;
        out["devices"] = row_dicts(r.devices, kEnergyFields);
        out["steps"] = per_step;
        return out;
      },
      py::arg("trace"), py::arg("steps"),
      "Each NVML-sampled device's energy over each step (start_ns, end_ns): {'devices': energy rows, "
      "'steps': [[J or None per device] per step]}; from the energy counter, else power samples "
      "integrated, else None (docs/metrics.md, \"Energy\").");
}

// The one pass over a trace (gpu_tables), the result tables it names, and the collectives' arithmetic.
void bind_tables(py::module_& m) {
  m.def("gpu_tables", &tables_to_dict, py::arg("trace"), py::arg("drop_incomplete_last_step") = true,
        py::arg("process_groups") = py::none(),
        "The step breakdown, the GPU summary over its steps, and the kernel, operator (by name, and by "
        "name and input shapes), module, copy, sync, per-step memory and collective tables, as lists of "
        "rows: every analysis of a Report, from one breakdown. process_groups: the job's groups as "
        "distributedInfo's pg_config lists them.");
  m.def(
      "collective_bandwidths",
      [](const std::string& kind, int64_t bytes, int64_t time_ns, int64_t group_size) {
        return py::make_tuple(or_none(algbw_gbps(bytes, time_ns)),
                              or_none(busbw_gbps(kind, bytes, time_ns, group_size)));
      },
      py::arg("kind"), py::arg("bytes"), py::arg("time_ns"), py::arg("group_size"),
      "nccl-tests' (algbw_gbps, busbw_gbps) of `bytes` moved by a collective of `kind` (all_reduce, "
      "all_gather, ...) in `time_ns` in a group of `group_size` ranks; None where not defined.");
  m.def("collective_kind", &collective_kind, py::arg("name"),
        "The collective kind a name says (all_reduce, ...; '' for wait and init).");
  m.def("bus_bandwidth_factor", &bus_bandwidth_factor, py::arg("kind"), py::arg("group_size"),
        "nccl-tests' bus bandwidth factor of a kind in a group of n ranks (-1: none).");
  py::tuple keys(result_tables().size());
  for (size_t i = 0; i < result_tables().size(); ++i) keys[i] = result_tables()[i].key;
  m.attr("RESULT_TABLES") = keys;
}

}  // namespace

void bind_analysis(py::module_& m) {
  bind_devices(m);
  bind_step_views(m);
  bind_series(m);
  bind_flops_energy(m);
  bind_tables(m);
}
