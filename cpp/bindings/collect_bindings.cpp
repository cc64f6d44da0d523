// GPU collection bindings (CUPTI session, NVML samples, NVTX) and read access to the GPU side of a
// Trace. Translation only; the work is in cpp/src/collect.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "gpuprof/collect/gpu_collect.h"
#include "gpuprof/core/trace.h"

namespace py = pybind11;
using namespace gpuprof;

namespace {

py::dict status_dict(const collect::GpuStatus& s) {
  py::dict d;
  d["enabled"] = s.enabled;
  d["message"] = s.message;
  d["cupti_library"] = s.cupti_library;
  d["cupti_version"] = s.cupti_version;
  d["nvtx_markers"] = s.nvtx_markers;   // CUPTI's NVTX marker activity is on
  d["nvml"] = s.nvml;
  d["nvml_message"] = s.nvml_message;
  d["error"] = s.error;       // the first CUPTI call that failed after collection started
  d["warning"] = s.warning;   // e.g. launches recorded but no kernel arrived
  return d;
}

}  // namespace

void bind_collect(py::module_& m) {
  m.def(
      "gpu_start",
      [](std::vector<std::string> search_dirs, size_t buffer_bytes, size_t max_buffers, uint64_t max_events,
         bool driver_api, int64_t nvml_interval_ms, std::vector<int> nvml_devices) {
        collect::GpuConfig c;
        c.search_dirs = std::move(search_dirs);
        c.buffer_bytes = buffer_bytes;
        c.max_buffers = max_buffers;
        c.max_events = max_events;
        c.driver_api = driver_api;
        c.nvml_interval_ms = nvml_interval_ms;
        c.nvml_devices = std::move(nvml_devices);
        collect::GpuStatus s;
        {
          py::gil_scoped_release release;
          s = collect::gpu_start(c);
        }
        return status_dict(s);
      },
      py::arg("search_dirs") = std::vector<std::string>{}, py::arg("buffer_bytes") = size_t(4) << 20,
      py::arg("max_buffers") = 32, py::arg("max_events") = 4'000'000, py::arg("driver_api") = true,
      py::arg("nvml_interval_ms") = 100, py::arg("nvml_devices") = std::vector<int>{},
      "Start CUPTI activity collection and NVML sampling; returns a status dict (enabled, message, ...).");
  m.def("gpu_flush", [] {
    py::gil_scoped_release r;
    collect::gpu_flush();
  });
  m.def("gpu_stop", [] {
    py::gil_scoped_release r;
    collect::gpu_stop();
  });
  m.def("gpu_release", [] {
    py::gil_scoped_release r;
    collect::gpu_release();
  });
  m.def("gpu_external_push", &collect::gpu_external_push, py::arg("external_id"),
        "What the RecordFunction hooks call on an op's enter: CUDA work launched on this thread until "
        "the matching gpu_external_pop() carries external_id (a no-op while GPU collection is off).");
  m.def("gpu_external_pop", &collect::gpu_external_pop, "What the hooks call on the op's exit.");
  m.def("gpu_enabled", &collect::gpu_enabled);
  m.def("gpu_devices_seen", &collect::gpu_devices_seen,
        "CUDA ordinals whose records arrived since the first gpu_start (synchronised before a flush).");
  m.def("gpu_status", [] { return status_dict(collect::gpu_status()); });
  m.def(
      "gpu_drain",
      [](Trace& t) {
        py::gil_scoped_release r;
        collect::gpu_drain(t);
      },
      py::arg("trace"), "Merge the GPU records staged since gpu_start into `trace` (after collector_drain()).");
  m.def(
      "gpu_sample_energy",
      [] {
        py::gil_scoped_release r;
        collect::gpu_sample_energy();
      },
      "At a step boundary: ask the NVML sampler's thread for a reading of the total-energy counter of each "
      "sampled device that has one, without waiting for it.");
  m.def(
      "gpu_read_energy",
      [] {
        py::gil_scoped_release r;
        collect::gpu_read_energy();
      },
      "Read NVML's total-energy counter of each sampled device that has one, on this thread (where a span's "
      "first step starts).");
  m.def("gpu_counters", [] {
    const collect::GpuCounters c = collect::gpu_counters();
    py::dict d;
    d["records"] = c.records;
    d["events"] = c.events;
    d["cupti_dropped"] = c.cupti_dropped;
    d["buffers_refused"] = c.buffers_refused;
    d["events_dropped"] = c.events_dropped;
    d["buffers_in_use"] = c.buffers_in_use;
    d["untimed"] = c.untimed;   // device records CUPTI delivered without a start time: dropped
    d["nvtx_unclosed"] = c.nvtx_unclosed;   // NVTX ranges still open at a span's end: dropped
    return d;
  });
  m.def(
      "cupti_library_path",
      [](std::vector<std::string> search_dirs) {
        std::string why;
        std::string path;
        {
          py::gil_scoped_release release;
          path = collect::cupti_library_path(search_dirs, why);
        }
        return py::make_tuple(path, why);
      },
      py::arg("search_dirs") = std::vector<std::string>{},
      "(path, why): the libcupti GPU collection loads (loaded now if it was not), or ('', reason). "
      "NVTX_INJECTION64_PATH must name it for CUPTI to see the process's NVTX ranges.");
  m.def("nvtx_push", [](const std::string& name) { collect::nvtx_push(name.c_str()); }, py::arg("name"));
  m.def("nvtx_pop", &collect::nvtx_pop);

  m.def(
      "gpu_samples",
      [](const Trace& t) {
        py::list out;
        for (const GpuSample& s : t.gpu_samples) {
          py::dict d;
          d["ts_ns"] = s.ts_ns;
          d["device"] = s.device;
          d["gpu_util_pct"] = s.gpu_util_pct;
          d["mem_util_pct"] = s.mem_util_pct;
          d["memory_used_bytes"] = s.memory_used_bytes;
          d["power_mw"] = s.power_mw;
          d["sm_clock_mhz"] = s.sm_clock_mhz;
          d["temperature_c"] = s.temperature_c;
          d["energy_mj"] = s.energy_mj;
          out.append(d);
        }
        return out;
      },
      py::arg("trace"), "NVML samples of the span (-1: not reported by the device).");
  m.def(
      "trace_devices",
      [](const Trace& t) {
        py::list out;
        for (const DeviceProps& p : t.devices) {
          py::dict d;
          d["id"] = p.id;
          d["name"] = p.name;
          d["total_global_mem"] = p.total_global_mem;
          d["compute_major"] = p.compute_major;
          d["compute_minor"] = p.compute_minor;
          d["num_sms"] = p.num_sms;
          d["max_threads_per_block"] = p.max_threads_per_block;
          d["max_threads_per_sm"] = p.max_threads_per_sm;
          d["regs_per_block"] = p.regs_per_block;
          d["regs_per_sm"] = p.regs_per_sm;
          d["warp_size"] = p.warp_size;
          d["shared_mem_per_block"] = p.shared_mem_per_block;
          d["shared_mem_per_sm"] = p.shared_mem_per_sm;
          d["shared_mem_per_block_optin"] = p.shared_mem_per_block_optin;
          d["max_blocks_per_sm"] = p.max_blocks_per_sm;
          out.append(d);
        }
        return out;
      },
      py::arg("trace"), "Properties of the devices in the trace.");
}
