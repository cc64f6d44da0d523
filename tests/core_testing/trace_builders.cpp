// gpuprof._core_testing: the test suite's trace builders. What lets a Python test hand the native
// Trace (gpuprof._core.Trace) devices, kernels, copies, op arguments, collective calls, allocator and
// NVML samples, as functions taking the trace first: builders.add_kernel(trace, "gemm", 0, 100).
// Built with the tests (CMakeLists.txt, GPUPROF_TESTING_MODULE), never installed by a wheel.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "gpuprof/core/trace.h"

namespace py = pybind11;
using namespace gpuprof;
namespace {

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

// The events a trace holds: devices, kernels, copies, operators' shapes and arguments, collective calls.
void bind_event_builders(py::module_& m) {
  m.def(
      "add_device",
      [](Trace& t, const DeviceProps& d) {
        for (DeviceProps& old : t.devices)
          if (old.id == d.id) {
            old = d;
            return;
          }
        t.devices.push_back(d);
      },
      py::arg("trace"), py::arg("device"), "Add (or replace) the properties of one device.");

  m.def(
      "add_kernel",
      [](Trace& t, const std::string& name, int64_t start_ns, int64_t dur_ns, int device, uint32_t stream,
         uint64_t correlation, uint64_t external_id, const std::vector<int64_t>& grid,
         const std::vector<int64_t>& block, int registers_per_thread, int64_t shared_mem_bytes,
         float blocks_per_sm, float warps_per_sm, float est_occupancy_pct, uint32_t graph_id) {
        if (dur_ns < 0)
          throw py::value_error("kernel '" + name + "' has a negative duration (" + std::to_string(dur_ns) +
                                " ns)");
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
        k.graph_id = graph_id;
        Event& e = t.add(EventKind::Kernel, name, start_ns, dur_ns);
        e.device = static_cast<int16_t>(device);
        e.tid = stream;
        e.correlation = correlation;
        e.external_id = external_id;
        e.aux = static_cast<uint32_t>(t.kernels.size());
        t.kernels.push_back(k);
      },
      py::arg("trace"), py::arg("name"), py::arg("start_ns"), py::arg("dur_ns"), py::arg("device") = 0, py::arg("stream") = 0,
      py::arg("correlation") = 0, py::arg("external_id") = 0, py::arg("grid") = std::vector<int64_t>{},
      py::arg("block") = std::vector<int64_t>{}, py::arg("registers_per_thread") = -1,
      py::arg("shared_mem_bytes") = -1, py::arg("blocks_per_sm") = -1.0f, py::arg("warps_per_sm") = -1.0f,
      py::arg("est_occupancy_pct") = -1.0f, py::arg("graph_id") = 0,
      "Add a kernel with its launch shape (-1 / empty: not known) and the CUDA graph it was replayed from "
      "(0: none).");

  m.def(
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
      py::arg("trace"), py::arg("name"), py::arg("start_ns"), py::arg("dur_ns"), py::arg("bytes") = 0, py::arg("copy_kind") = "",
      py::arg("src_kind") = "", py::arg("dst_kind") = "", py::arg("device") = 0, py::arg("stream") = 0,
      py::arg("correlation") = 0, py::arg("external_id") = 0, py::arg("memset") = false,
      "Add a device copy (or, with memset=True, a set) with its size and memory kinds.");

  m.def(
      "set_input_shapes",
      [](Trace& t, size_t event_index, const std::string& shapes) {
        if (event_index >= t.events.size())
          throw py::index_error("event " + std::to_string(event_index) + " does not exist (the trace has " +
                                std::to_string(t.events.size()) + " events)");
        Event& e = t.events[event_index];
        if (e.kind != EventKind::HostOp)
          throw py::value_error("input shapes belong to host ops; event " + std::to_string(event_index) + " ('" +
                                t.name_of(e) + "') is not one");
        e.aux = t.strings.intern(shapes);
      },
      py::arg("trace"), py::arg("event_index"), py::arg("shapes"),
      "Record the input shapes of a host op (the event's position in the trace, as add order).");

  m.def(
      "set_op_args",
      [](Trace& t, size_t event_index, const std::string& types, const std::string& concrete, int64_t trace_flops,
         bool grad_recorded) {
        if (event_index >= t.events.size())
          throw py::index_error("event " + std::to_string(event_index) + " does not exist (the trace has " +
                                std::to_string(t.events.size()) + " events)");
        Event& e = t.events[event_index];
        if (e.kind != EventKind::HostOp)
          throw py::value_error("op args belong to host ops; event " + std::to_string(event_index) + " ('" +
                                t.name_of(e) + "') is not one");
        if (grad_recorded) e.flags |= kGradRecordedFlag;
        OpArgs a;
        a.event = static_cast<uint32_t>(event_index);
        a.types = types.empty() ? 0 : t.strings.intern(types);
        a.concrete = concrete.empty() ? 0 : t.strings.intern(concrete);
        a.trace_flops = trace_flops;
        auto it = std::lower_bound(t.op_args.begin(), t.op_args.end(), a.event,
                                   [](const OpArgs& x, uint32_t ev) { return x.event < ev; });
        if (it != t.op_args.end() && it->event == a.event) *it = a;
        else t.op_args.insert(it, a);
      },
      py::arg("trace"), py::arg("event_index"), py::arg("types") = "", py::arg("concrete") = "", py::arg("trace_flops") = -1,
      py::arg("grad_recorded") = false,
      "Record a host op's input types and concrete inputs (Kineto's 'Input type' and 'Concrete Inputs' "
      "lists, as Python prints them), a trace's `flops` arg (-1: none), and whether it recorded autograd "
      "history (Kineto's 'Sequence number').");

  m.def(
      "add_collective_info",
      [](Trace& t, uint64_t external_id, const std::string& name, int64_t in_nelems, int64_t out_nelems,
         const std::string& dtype, int32_t group_size, const std::string& pg_name, const std::string& pg_desc,
         const std::string& group_ranks) {
        CollectiveInfo c;
        c.external_id = external_id;
        c.name = name;
        c.in_nelems = in_nelems;
        c.out_nelems = out_nelems;
        c.dtype = dtype;
        c.group_size = group_size;
        c.pg_name = pg_name;
        c.pg_desc = pg_desc;
        c.group_ranks = group_ranks;
        t.collectives.push_back(std::move(c));
      },
      py::arg("trace"), py::arg("external_id"), py::arg("name") = "", py::arg("in_nelems") = -1, py::arg("out_nelems") = -1,
      py::arg("dtype") = "", py::arg("group_size") = -1, py::arg("pg_name") = "", py::arg("pg_desc") = "",
      py::arg("group_ranks") = "",
      "Add what a collective call records of itself (torch's record_param_comms args), for the event "
      "with this external id.");
}

// The samples a trace holds: the device allocator's and NVML's.
void bind_sample_builders(py::module_& m) {
  m.def(
      "add_memory_sample",
      [](Trace& t, int64_t ts_ns, int64_t total_allocated, int64_t total_reserved, int device, int64_t bytes_delta,
         uint64_t addr, uint32_t tid) {
        MemorySample s;
        s.ts_ns = ts_ns;
        s.total_allocated = total_allocated;
        s.total_reserved = total_reserved;
        s.device = static_cast<int16_t>(device);
        s.bytes_delta = bytes_delta;
        s.addr = addr;
        s.tid = tid;
        t.memory.push_back(s);
      },
      py::arg("trace"), py::arg("ts_ns"), py::arg("total_allocated"), py::arg("total_reserved"), py::arg("device") = 0,
      py::arg("bytes_delta") = 0, py::arg("addr") = 0, py::arg("tid") = 0,
      "Add one allocator sample (device -1: host; totals -1: not known), with the block's address "
      "and the allocating thread (0: not known).");
  m.def(
      "add_gpu_sample",
      [](Trace& t, int64_t ts_ns, int device, int gpu_util_pct, int mem_util_pct, int64_t memory_used_bytes,
         int power_mw, int sm_clock_mhz, int temperature_c, int64_t energy_mj) {
        GpuSample s;
        s.ts_ns = ts_ns;
        s.device = static_cast<int16_t>(device);
        s.gpu_util_pct = gpu_util_pct;
        s.mem_util_pct = mem_util_pct;
        s.memory_used_bytes = memory_used_bytes;
        s.power_mw = power_mw;
        s.sm_clock_mhz = sm_clock_mhz;
        s.temperature_c = temperature_c;
        s.energy_mj = energy_mj;
        t.gpu_samples.push_back(s);
      },
      py::arg("trace"), py::arg("ts_ns"), py::arg("device") = 0, py::arg("gpu_util_pct") = -1, py::arg("mem_util_pct") = -1,
      py::arg("memory_used_bytes") = -1, py::arg("power_mw") = -1, py::arg("sm_clock_mhz") = -1,
      py::arg("temperature_c") = -1, py::arg("energy_mj") = -1,
      "Add one device sample as NVML gives it (-1: not reported; energy_mj: the total-energy "
      "counter).");
}

}  // namespace

PYBIND11_MODULE(_core_testing, m) {
  m.doc() = "gpuprof's test suite's trace builders: hand a native Trace devices, kernels, copies, op "
            "arguments, collective calls and samples (built with the tests, never shipped)";
  py::module_::import("gpuprof._core");   // the Trace and DeviceProps types these take
  bind_event_builders(m);
  bind_sample_builders(m);
}
