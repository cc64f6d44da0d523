// gpuprof._core: the torch-free native core (events, Trace, analysis, collector).
// Only translation lives here; every computation is in cpp/src.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string_view>
#include <tuple>

#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/step_journal.h"
#include "gpuprof/collect/collector.h"
#include "gpuprof/core/trace.h"

namespace py = pybind11;
using namespace gpuprof;

void bind_collect(py::module_& m);   // collect_bindings.cpp (GPU collection)
void bind_io(py::module_& m);        // io_bindings.cpp (trace import/export)
void bind_analysis(py::module_& m);  // analysis_bindings.cpp (GPU metrics and tables)
void bind_critical_path(py::module_& m);   // critical_path_bindings.cpp (the path's pieces)
void bind_json_writer(py::module_& m);   // json_writer_bindings.cpp (the report's indented JSON)
void bind_window_parts(py::module_& m);   // window_bindings.cpp (a window's parts of HTA's tables)

namespace {

EventKind parse_kind(const std::string& s) {
  EventKind k;
  if (parse_event_kind(s, &k)) return k;
  throw py::value_error("unknown event kind '" + s +
                        "': use one of host_op, user_range, step, python_function, runtime, driver, "
                        "kernel, memcpy, memset, sync, nvtx, gpu_user_range, overhead, other");
}

// One event as a dict, with its launch or copy properties (for tests and tools, not hot paths).
py::dict event_dict(const Trace& t, const Event& e) {
  py::dict d;
  d["kind"] = event_kind_key(e.kind);
  d["name"] = t.name_of(e);
  d["start_ns"] = e.start_ns;
  d["dur_ns"] = e.dur_ns;
  d["correlation"] = e.correlation;
  d["external_id"] = e.external_id;
  d["tid"] = e.tid;
  d["device"] = e.device;
  if (e.kind == EventKind::Kernel && e.aux < t.kernels.size()) {
    const KernelInfo& k = t.kernels[e.aux];
    d["grid"] = py::make_tuple(k.grid[0], k.grid[1], k.grid[2]);
    d["block"] = py::make_tuple(k.block[0], k.block[1], k.block[2]);
    d["registers_per_thread"] = k.registers_per_thread;
    d["shared_mem_bytes"] = k.shared_mem_bytes;
    d["blocks_per_sm"] = k.blocks_per_sm;
    d["warps_per_sm"] = k.warps_per_sm;
    d["est_occupancy_pct"] = k.est_occupancy_pct;
    d["graph_id"] = k.graph_id;
  } else if ((e.kind == EventKind::Memcpy || e.kind == EventKind::Memset) && e.aux < t.copies.size()) {
    const CopyInfo& c = t.copies[e.aux];
    d["bytes"] = c.bytes;
    d["copy_kind"] = copy_kind_key(c.kind);
    d["src_kind"] = memory_kind_key(c.src);
    d["dst_kind"] = memory_kind_key(c.dst);
  }
  return d;
}

}  // namespace

// Shared with analysis_bindings.cpp, which returns the breakdown beside the tables.
py::dict breakdown_to_dict(const BreakdownResult& r) {
  py::list steps;
  for (const StepBreakdown& s : r.steps) {
    py::dict d;
    d["step"] = s.step;
    d["start_ns"] = s.start_ns;
    d["end_ns"] = s.end_ns;
    d["host_start_ns"] = s.host_start_ns;
    d["host_end_ns"] = s.host_end_ns;
    d["device_activities"] = s.device_activities;
    d["total_ns"] = s.total_ns();
    for (int c = 0; c < kNumCategories; ++c)
      d[py::str(std::string(category_key(static_cast<Category>(c))) + "_ns")] = s.ns[c];
    steps.append(d);
  }
  py::dict out;
  out["steps"] = steps;
  out["had_step_markers"] = r.had_step_markers;
  out["dropped_trailing_steps"] = r.dropped_trailing_steps;
  out["dropped_incomplete_last"] = r.dropped_incomplete_last;
  out["duplicate_step_markers"] = r.duplicate_step_markers;
  out["nested_step_markers"] = r.nested_step_markers;
  out["malformed_step_markers"] = r.malformed_step_markers;
  out["malformed_step_example"] = r.malformed_step_example;
  out["skewed_device_events"] = r.skewed_device_events;
  out["max_launch_skew_ns"] = r.max_launch_skew_ns;
  return out;
}

namespace {

// The Trace, its events as dicts, the breakdown and the name classifiers.
void bind_trace(py::module_& m) {
  py::class_<Trace>(m, "Trace")
      .def(py::init<>())
      .def(
          "add_event",
          [](Trace& t, const std::string& kind, const std::string& name, int64_t start_ns, int64_t dur_ns,
             uint64_t correlation, uint64_t external_id, int device, uint32_t tid) {
            if (dur_ns < 0)
              throw py::value_error("event '" + name + "' has a negative duration (" + std::to_string(dur_ns) +
                                    " ns)");
            Event& e = t.add(parse_kind(kind), name, start_ns, dur_ns);
            e.correlation = correlation;
            e.external_id = external_id;
            e.device = static_cast<int16_t>(device);
            e.tid = tid;
          },
          py::arg("kind"), py::arg("name"), py::arg("start_ns"), py::arg("dur_ns"), py::arg("correlation") = 0,
          py::arg("external_id") = 0, py::arg("device") = -1, py::arg("tid") = 0)
      .def_property_readonly("num_events", [](const Trace& t) { return t.events.size(); })
      .def_property_readonly(
          "num_strings", [](const Trace& t) { return t.strings.size(); },
          "Distinct names and texts the trace holds (its string table).")
      .def_readwrite("dropped_events", &Trace::dropped_events)
      .def_readwrite("skipped_events", &Trace::skipped_events)
      .def_readwrite("metadata", &Trace::metadata)
      .def(
          "event_names",
          [](const Trace& t, const std::string& kind) {
            const EventKind k = parse_kind(kind);
            std::vector<std::string> out;
            for (const Event& e : t.events)
              if (e.kind == k) out.push_back(t.name_of(e));
            return out;
          },
          py::arg("kind"), "Names of the events of one kind, in recording order (for tests and tools).")
      .def("thread_ids",
           [](const Trace& t) {
             std::vector<uint32_t> tids;
             for (const Event& e : t.events)
               if (!e.on_device()) tids.push_back(e.tid);
             std::sort(tids.begin(), tids.end());
             tids.erase(std::unique(tids.begin(), tids.end()), tids.end());
             return tids;
           })
      .def_property_readonly(
          "compiled_launches",
          [](const Trace& t) {
            py::list out;
            for (const CompiledLaunch& c : t.compiled_launches) {
              py::dict row;
              row["name"] = c.name;
              row["backend"] = c.backend;
              row["kernel_file"] = c.file;
              row["kernel_hash"] = c.hash;
              row["grid"] = c.grid;
              row["launches"] = c.launches;
              out.append(std::move(row));
            }
            return out;
          },
          "The launches of kernels torch.compile's Inductor generated that the trace records with their "
          "args (kernel_backend, kernel_file, kernel_hash, grid): one dict per distinct name and args, with "
          "its launches, in first-seen order; [] for a trace without them (and for live sessions).");

  m.def(
      "trace_events",
      [](const Trace& t, std::optional<std::string> kind, std::optional<size_t> limit) {
        std::optional<EventKind> k;
        if (kind) k = parse_kind(*kind);
        py::list out;
        for (const Event& e : t.events) {
          if (limit && out.size() >= *limit) break;
          if (!k || e.kind == *k) out.append(event_dict(t, e));
        }
        return out;
      },
      py::arg("trace"), py::arg("kind") = py::none(), py::arg("limit") = py::none(),
      "The trace's events as dicts (optionally one kind, at most `limit`), in stored order.");

  m.def(
      "compute_breakdown",
      [](const Trace& t, bool drop_incomplete_last_step) {
        BreakdownOptions o;
        o.drop_incomplete_last_step = drop_incomplete_last_step;
        BreakdownResult r;
        {
          py::gil_scoped_release release;
          r = compute_breakdown(t, o);
        }
        return breakdown_to_dict(r);
      },
      py::arg("trace"), py::arg("drop_incomplete_last_step") = true,
      "Per-step breakdown with the TensorBoard plugin's step rules and category priority.");

  m.def(
      "step_marks",
      [](const Trace& t) {
        BreakdownOptions o;
        o.drop_incomplete_last_step = false;
        BreakdownResult r;
        {
          py::gil_scoped_release release;
          r = compute_breakdown(t, o);
        }
        std::string numbers(r.steps.size() * sizeof(int64_t), '\0');
        std::string starts(r.steps.size() * sizeof(int64_t), '\0');
        for (size_t i = 0; i < r.steps.size(); ++i) {
          std::memcpy(&numbers[i * sizeof(int64_t)], &r.steps[i].step, sizeof(int64_t));
          std::memcpy(&starts[i * sizeof(int64_t)], &r.steps[i].host_start_ns, sizeof(int64_t));
        }
        r.steps.clear();
        py::dict out = breakdown_to_dict(r);
        out.attr("pop")("steps");
        out["step_numbers"] = py::bytes(numbers);
        out["host_starts_ns"] = py::bytes(starts);
        return out;
      },
      py::arg("trace"),
      "compute_breakdown(trace, False) without its per-step rows: the step rules, and each step's "
      "number and host start as native int64 bytes (step_numbers, host_starts_ns), 16 bytes a step "
      "(a windowed read's scan of millions of steps).");

  py::list cats;
  for (int c = 0; c < kNumCategories; ++c)
    cats.append(py::make_tuple(category_key(static_cast<Category>(c)), category_name(static_cast<Category>(c))));
  m.attr("CATEGORIES") = cats;
  m.def("is_dataloader_name", [](const std::string& s) { return is_dataloader_name(s); });
  m.def("is_communication_op_name", [](const std::string& s) { return is_communication_op_name(s); });
}

// The live collector on the host: its clock, sessions, records and ranges.
void bind_collector(py::module_& m) {
  m.def("now_ns", &collect::now_ns, "The profiler's clock (CLOCK_MONOTONIC, ns).");
  m.def(
      "collector_start",
      [](uint64_t max_events) {
        collect::SessionConfig c;
        c.max_events = max_events;
        collect::start(c);
      },
      py::arg("max_events"));
  m.def("collector_ticks", &collect::ticks,
        "The collector's timestamp (TSC ticks or ns); drained traces are converted to now_ns().");
  m.def("collector_ticks_are_tsc", &collect::ticks_are_tsc,
        "True where the hot path stamps TSC ticks (the kernel's clocksource is the TSC).");
  m.def("collector_stop", &collect::stop);
  m.def("collector_active", &collect::active);
  m.def("collector_open_collectives", &collect::open_collectives,
        "Backend collective ranges (gloo:all_reduce ...) entered in this epoch and not exited yet.");
  m.def("collector_drain", [] {
    py::gil_scoped_release release;
    return collect::drain();
  });
  m.def(
      "collector_record",
      [](const std::string& kind, const std::string& name, int64_t start_ticks, int64_t end_ticks,
         uint64_t external_id) { collect::record(parse_kind(kind), name, start_ticks, end_ticks, external_id); },
      py::arg("kind"), py::arg("name"), py::arg("start_ticks"), py::arg("end_ticks"), py::arg("external_id") = 0,
      "Record a complete event; times are collector_ticks() values. external_id: the id the GPU records "
      "it launched carry (their CUPTI external correlation), 0 for none.");
  m.def(
      "collector_range_enter",
      [](uint64_t key, const std::string& name) {
        return collect::host_enter(reinterpret_cast<const void*>(key), name, EventKind::UserRange,
                                   collect::ticks());
      },
      py::arg("key"), py::arg("name"));
  m.def(
      "collector_range_exit",
      [](uint64_t key) { collect::host_exit(reinterpret_cast<const void*>(key), collect::ticks()); },
      py::arg("key"));
  // The module view's hooks (collect/modules.py): one range per nn.Module call, named
  // "nn.Module: <segment> (<Type>)" (modules.h). A str is read in place, not copied.
  m.def(
      "collector_module_enter",
      [](uint64_t key, std::string_view name) {
        collect::host_enter(reinterpret_cast<const void*>(key), name, EventKind::PythonFunction, collect::ticks());
      },
      py::arg("key"), py::arg("name"));
  m.def(
      "collector_module_exit",
      [](uint64_t key) { collect::host_exit(reinterpret_cast<const void*>(key), collect::ticks()); },
      py::arg("key"));
  m.def(
      "collector_record_host_rss", [](int64_t ts_ticks) { collect::record_host_rss(ts_ticks); },
      py::arg("ts_ticks"), "Sample the process's resident set size at a step boundary.");
  m.def("host_rss_bytes", &collect::host_rss_bytes, "The process's resident set size now (-1: unreadable).");
  m.def("collector_record_memory", &collect::record_memory, py::arg("ts_ticks"), py::arg("bytes_delta"),
        py::arg("total_allocated"), py::arg("total_reserved"), py::arg("device"), py::arg("addr") = 0,
        "Record one level of a device allocator (its totals after a change of bytes_delta; -1: not "
        "known) and the block's address (0: not known).");
  m.def(
      "collector_record_storages",
      [](int64_t ts_ticks, const std::vector<std::tuple<uint64_t, int64_t, int, int>>& storages) {
        for (const auto& [addr, bytes, device, role] : storages) {
          if (role < 0 || role > static_cast<int>(StorageRole::OptimizerState))
            throw py::value_error("storage role must be 0 (parameter), 1 (gradient) or 2 (optimizer state), got " +
                                  std::to_string(role));
          collect::record_storage(ts_ticks, addr, bytes, device, static_cast<StorageRole>(role));
        }
      },
      py::arg("ts_ticks"), py::arg("storages"),
      "Record storages of known roles seen at ts_ticks: (address, bytes, device (-1: host), role: 0 "
      "parameter, 1 gradient, 2 optimizer state).");
  // The step journal's per-step summary (gpuprof/analysis/step_journal.h).
  py::class_<StepSummarizer>(m, "StepSummarizer",
                             "At each recorded step's end, the step's breakdown, operators and memory from "
                             "the events recorded since the step before, as JSON text (bytes).")
      .def(py::init<>())
      .def("next", [](StepSummarizer& s) { return py::bytes(s.next()); })
      .def_property_readonly("last_events", &StepSummarizer::last_events);
  m.def("collector_stats", [] {
    const collect::Stats s = collect::stats();
    py::dict d;
    d["events"] = s.events;
    d["dropped"] = s.dropped;
    d["threads"] = s.threads;
    return d;
  });
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "gpuprof native core: events, traces, analysis (no torch, no CUDA needed)";
  bind_trace(m);
  bind_io(m);
  bind_analysis(m);
  bind_critical_path(m);
  bind_json_writer(m);
  bind_window_parts(m);
  bind_collector(m);
  bind_collect(m);   // GPU collection: CUPTI, NVML, NVTX
}
