// GPU metrics for Python: the per-device summary, the detail tables, the occupancy calculator and
// the tensor-core classifiers, plus the few Trace builders that let Python hand us kernels,
// copies, devices and memory samples. Translation only; the numbers come from cpp/src/analysis.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <optional>
#include <string_view>

#include "gpuprof/breakdown.h"
#include "gpuprof/gpu_summary.h"
#include "gpuprof/launch_links.h"
#include "gpuprof/occupancy.h"
#include "gpuprof/tables.h"
#include "gpuprof/tensor_cores.h"
#include "gpuprof/trace.h"

namespace py = pybind11;
using namespace gpuprof;

py::dict breakdown_to_dict(const BreakdownResult& r);   // core_module.cpp

namespace {

double us(int64_t ns) { return double(ns) / 1000.0; }

// Unknown numbers are None in Python (and null in JSON), never a sentinel like -1.
py::object or_none(double v) { return v < 0.0 ? py::none() : py::object(py::float_(v)); }
py::object or_none(int64_t v) { return v < 0 ? py::none() : py::object(py::int_(v)); }

CopyKind copy_kind_arg(const std::string& s) {
  CopyKind k;
  if (parse_copy_kind(s, &k)) return k;
  throw py::value_error("unknown copy kind '" + s + "': use one of HtoD, DtoH, DtoD, HtoH, PtoP, unknown");
}

MemoryKind memory_kind_arg(const std::string& s) {
  MemoryKind k;
  if (parse_memory_kind(s, &k)) return k;
  throw py::value_error("unknown memory kind '" + s +
                        "': use one of pageable, pinned, device, managed, array, unknown");
}

std::array<int32_t, 3> dims(const std::vector<int64_t>& v, const char* what, const std::string& kernel) {
  if (v.empty()) return {0, 0, 0};
  if (v.size() != 3)
    throw py::value_error(std::string(what) + " of kernel '" + kernel + "' must have 3 numbers (x, y, z), got " +
                          std::to_string(v.size()));
  return {int32_t(v[0]), int32_t(v[1]), int32_t(v[2])};
}

py::dict summary_to_dict(const DeviceSummary& s) {
  py::dict d;
  d["id"] = s.id;
  d["name"] = s.name;
  d["compute_capability"] =
      s.compute_major > 0 ? py::object(py::str(std::to_string(s.compute_major) + "." + std::to_string(s.compute_minor)))
                          : py::object(py::none());
  d["utilization_pct"] = s.utilization_pct;
  d["sm_efficiency_pct"] = s.sm_efficiency_pct;
  d["achieved_occupancy_pct"] = or_none(s.achieved_occupancy_pct);
  d["tensor_core_pct"] = s.tensor_core_pct;
  d["tc_eligible_pct"] = s.tc_eligible_pct;
  d["memory_total_bytes"] = or_none(s.memory_total_bytes > 0 ? s.memory_total_bytes : int64_t(-1));
  d["peak_allocated_bytes"] = or_none(s.peak_allocated_bytes);
  d["window_us"] = us(s.window_ns);
  d["kernel_us"] = us(s.kernel_ns);
  d["kernels"] = s.kernels;
  return d;
}

py::dict tables_to_dict(const Trace& t, bool drop_incomplete_last_step) {
  AnalysisTables a;
  {
    py::gil_scoped_release release;
    BreakdownOptions o;
    o.drop_incomplete_last_step = drop_incomplete_last_step;
    a = analyse_tables(t, o);
  }
  py::dict out;
  out["breakdown"] = breakdown_to_dict(a.steps);   // the steps the GPU window was taken from
  // For step_event_tables later (one byte per event), so that it need not link launches again.
  out["repeated_op_calls"] = py::bytes(reinterpret_cast<const char*>(a.repeated_ops.data()), a.repeated_ops.size());
  py::list dl;
  for (const DeviceSummary& s : a.devices) dl.append(summary_to_dict(s));
  out["devices"] = dl;

  py::list kl;
  for (const KernelRow& r : a.kernels) {
    py::dict d;
    d["name"] = r.name;
    d["calls"] = r.calls;
    d["total_us"] = us(r.total_ns);
    d["mean_us"] = r.mean_ns() / 1000.0;
    d["min_us"] = us(r.min_ns);
    d["max_us"] = us(r.max_ns);
    d["mean_blocks_per_sm"] = or_none(r.mean_blocks_per_sm);
    d["mean_occupancy_pct"] = or_none(r.mean_occupancy_pct);
    d["tensor_cores"] = r.tensor_cores;
    kl.append(d);
  }
  out["kernels"] = kl;

  py::list ol;
  for (const OperatorRow& r : a.operators) {
    py::dict d;
    d["name"] = r.name;
    d["input_shapes"] = r.input_shapes;
    d["calls"] = r.calls;
    d["host_self_us"] = us(r.host_self_ns);
    d["host_total_us"] = us(r.host_total_ns);
    d["device_self_us"] = us(r.device_self_ns);
    d["device_total_us"] = us(r.device_total_ns);
    d["tc_eligible"] = r.tc_eligible;
    ol.append(d);
  }
  out["operators"] = ol;

  py::list rl;
  for (const RangeRow& r : a.ranges) {
    py::dict d;
    d["name"] = r.name;
    d["calls"] = r.calls;
    d["host_total_us"] = us(r.host_total_ns);
    d["closure_us"] = us(r.closure_ns);
    rl.append(d);
  }
  out["ranges"] = rl;

  py::list cl;
  for (const CopyRow& r : a.copies) {
    py::dict d;
    d["kind"] = r.kind;
    d["host_memory"] = r.host_memory.empty() ? py::object(py::none()) : py::object(py::str(r.host_memory));
    d["count"] = r.count;
    d["bytes"] = r.bytes;
    d["total_us"] = us(r.total_ns);
    d["gb_per_s"] = r.gb_per_s();
    cl.append(d);
  }
  out["copies"] = cl;

  py::list sl;
  for (const SyncRow& r : a.syncs) {
    py::dict d;
    d["name"] = r.name;
    d["op"] = r.op;
    d["count"] = r.count;
    d["total_us"] = us(r.total_ns);
    sl.append(d);
  }
  out["syncs"] = sl;

  py::list ml;
  for (const StepMemoryRow& r : a.memory) {
    py::dict d;
    d["step"] = r.step;
    d["ts_ns"] = r.start_ns;   // a time column, so renderers can draw the peaks over the run
    d["device"] = r.device;
    d["peak_allocated_bytes"] = or_none(r.peak_allocated_bytes);
    d["peak_reserved_bytes"] = or_none(r.peak_reserved_bytes);
    d["capacity_bytes"] = or_none(r.capacity_bytes > 0 ? r.capacity_bytes : int64_t(-1));
    d["peak_rss_bytes"] = or_none(r.peak_rss_bytes);
    ml.append(d);
  }
  out["memory"] = ml;
  return out;
}

}  // namespace

void bind_analysis(py::module_& m) {
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

  py::class_<Trace> trace = py::reinterpret_borrow<py::class_<Trace>>(m.attr("Trace"));
  trace.def("add_device", [](Trace& t, const DeviceProps& d) {
    for (DeviceProps& old : t.devices)
      if (old.id == d.id) {
        old = d;
        return;
      }
    t.devices.push_back(d);
  }, py::arg("device"), "Add (or replace) the properties of one device.");

  trace.def(
      "add_kernel",
      [](Trace& t, const std::string& name, int64_t start_ns, int64_t dur_ns, int device, uint32_t stream,
         uint64_t correlation, uint64_t external_id, const std::vector<int64_t>& grid,
         const std::vector<int64_t>& block, int registers_per_thread, int64_t shared_mem_bytes,
         float blocks_per_sm, float warps_per_sm, float est_occupancy_pct) {
        if (dur_ns < 0)
          throw py::value_error("kernel '" + name + "' has a negative duration (" + std::to_string(dur_ns) + " ns)");
        KernelInfo k;
        const auto g = dims(grid, "grid", name), b = dims(block, "block", name);
        for (int i = 0; i < 3; ++i) {
          k.grid[i] = g[i];
          k.block[i] = b[i];
        }
        k.registers_per_thread = registers_per_thread;
        k.shared_mem_bytes = shared_mem_bytes;
        k.blocks_per_sm = blocks_per_sm;
        k.warps_per_sm = warps_per_sm;
        k.est_occupancy_pct = est_occupancy_pct;
        Event& e = t.add(EventKind::Kernel, name, start_ns, dur_ns);
        e.device = static_cast<int16_t>(device);
        e.tid = stream;
        e.correlation = correlation;
        e.external_id = external_id;
        e.aux = static_cast<uint32_t>(t.kernels.size());
        t.kernels.push_back(k);
      },
      py::arg("name"), py::arg("start_ns"), py::arg("dur_ns"), py::arg("device") = 0, py::arg("stream") = 0,
      py::arg("correlation") = 0, py::arg("external_id") = 0, py::arg("grid") = std::vector<int64_t>{},
      py::arg("block") = std::vector<int64_t>{}, py::arg("registers_per_thread") = -1,
      py::arg("shared_mem_bytes") = -1, py::arg("blocks_per_sm") = -1.0f, py::arg("warps_per_sm") = -1.0f,
      py::arg("est_occupancy_pct") = -1.0f,
      "Add a kernel with its launch shape (-1 / empty: not known).");

  trace.def(
      "add_copy",
      [](Trace& t, const std::string& name, int64_t start_ns, int64_t dur_ns, int64_t bytes,
         const std::string& copy_kind, const std::string& src_kind, const std::string& dst_kind, int device,
         uint32_t stream, uint64_t correlation, uint64_t external_id, bool memset) {
        if (dur_ns < 0)
          throw py::value_error("copy '" + name + "' has a negative duration (" + std::to_string(dur_ns) + " ns)");
        CopyInfo c;
        c.bytes = bytes;
        c.kind = copy_kind_arg(copy_kind);
        c.src = memory_kind_arg(src_kind);
        c.dst = memory_kind_arg(dst_kind);
        Event& e = t.add(memset ? EventKind::Memset : EventKind::Memcpy, name, start_ns, dur_ns);
        e.device = static_cast<int16_t>(device);
        e.tid = stream;
        e.correlation = correlation;
        e.external_id = external_id;
        e.aux = static_cast<uint32_t>(t.copies.size());
        t.copies.push_back(c);
      },
      py::arg("name"), py::arg("start_ns"), py::arg("dur_ns"), py::arg("bytes") = 0, py::arg("copy_kind") = "",
      py::arg("src_kind") = "", py::arg("dst_kind") = "", py::arg("device") = 0, py::arg("stream") = 0,
      py::arg("correlation") = 0, py::arg("external_id") = 0, py::arg("memset") = false,
      "Add a device copy (or, with memset=True, a set) with its size and memory kinds.");

  trace.def(
      "set_input_shapes",
      [](Trace& t, size_t event_index, const std::string& shapes) {
        if (event_index >= t.events.size())
          throw py::index_error("event " + std::to_string(event_index) + " does not exist (the trace has " +
                                std::to_string(t.events.size()) + " events)");
        Event& e = t.events[event_index];
        if (e.kind != EventKind::HostOp)
          throw py::value_error("input shapes belong to host ops; event " + std::to_string(event_index) +
                                " ('" + t.name_of(e) + "') is not one");
        e.aux = t.strings.intern(shapes);
      },
      py::arg("event_index"), py::arg("shapes"),
      "Record the input shapes of a host op (the event's position in the trace, as add order).");

  trace.def(
      "add_memory_sample",
      [](Trace& t, int64_t ts_ns, int64_t total_allocated, int64_t total_reserved, int device,
         int64_t bytes_delta) {
        MemorySample s;
        s.ts_ns = ts_ns;
        s.total_allocated = total_allocated;
        s.total_reserved = total_reserved;
        s.device = static_cast<int16_t>(device);
        s.bytes_delta = bytes_delta;
        t.memory.push_back(s);
      },
      py::arg("ts_ns"), py::arg("total_allocated"), py::arg("total_reserved"), py::arg("device") = 0,
      py::arg("bytes_delta") = 0, "Add one allocator sample (device -1: host).");
  trace.def(
      "add_host_memory_sample",
      [](Trace& t, int64_t ts_ns, int64_t rss_bytes) { t.host_memory.push_back({ts_ns, rss_bytes}); },
      py::arg("ts_ns"), py::arg("rss_bytes"), "Add one sample of the process's resident set size.");

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
  m.def("is_tensor_core_eligible_op", [](const std::string& s) { return is_tensor_core_eligible_op(s); },
        py::arg("name"));
  m.def(
      "gpu_summary",
      [](const Trace& t) {
        std::vector<DeviceSummary> devices;
        {
          py::gil_scoped_release release;
          devices = summarize_devices(t);
        }
        py::list out;
        for (const DeviceSummary& s : devices) out.append(summary_to_dict(s));
        return out;
      },
      py::arg("trace"), "Per-device GPU summary (utilization, SM efficiency, occupancy, tensor cores).");
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
      [](const Trace& t, int64_t start_ns, int64_t end_ns, size_t cap) {
        StepTimeline tl;
        {
          py::gil_scoped_release release;
          tl = step_timeline(t, start_ns, end_ns, cap);
        }
        // One Python string per category and kind, shared by every row.
        std::vector<py::str> cats, kinds;
        for (int c = 0; c < kNumCategories; ++c) cats.emplace_back(category_key(static_cast<Category>(c)));
        for (int k = 0; k <= static_cast<int>(EventKind::Other); ++k)
          kinds.emplace_back(event_kind_key(static_cast<EventKind>(k)));
        py::list rows(tl.events.size());
        for (size_t i = 0; i < tl.events.size(); ++i) {
          const TimelineEvent& e = tl.events[i];
          py::list r(6);
          r[0] = py::int_(e.lane);
          r[1] = py::int_(e.name);
          r[2] = py::float_(static_cast<double>(e.offset_ns) / 1000.0);
          r[3] = py::float_(static_cast<double>(e.dur_ns) / 1000.0);
          r[4] = cats[static_cast<size_t>(e.category)];
          r[5] = kinds[static_cast<size_t>(e.kind)];
          rows[i] = std::move(r);
        }
        py::dict counts;
        for (const auto& [kind, n] : tl.counts) counts[kinds[static_cast<size_t>(kind)]] = n;
        py::dict out;
        out["lane_order"] = tl.lanes;
        out["names"] = tl.names;
        out["events"] = rows;
        out["counts"] = counts;
        out["total"] = tl.total;
        return out;
      },
      py::arg("trace"), py::arg("start_ns"), py::arg("end_ns"), py::arg("cap"),
      "The HTML timeline of one step [start_ns, end_ns): lane_order and names (first seen), events as "
      "[lane, name, start_us (from start_ns), dur_us, category, kind] sorted by start, counts per kind, "
      "and total (events before the cap: device work kept first, then the longest).");
  m.def("gpu_tables", &tables_to_dict, py::arg("trace"), py::arg("drop_incomplete_last_step") = true,
        "The step breakdown, the GPU summary over its steps, and the kernel, operator, copy, sync and "
        "per-step memory tables, as lists of rows: every analysis of a Report, from one breakdown.");
}
