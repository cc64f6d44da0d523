// Python face of trace import and export (cpp/src/io). Translation only.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "gpuprof/analysis/chrome_export.h"
#include "gpuprof/core/trace.h"
#include "gpuprof/io/kineto_import.h"

namespace py = pybind11;
using namespace gpuprof;

namespace {

PYBIND11_CONSTINIT py::gil_safe_call_once_and_store<py::object> import_error_type;

py::dict stats_to_dict(const ImportStats& s) {
  py::dict d;
  d["json_bytes"] = s.json_bytes;
  d["records"] = s.records;
  d["ignored_records"] = s.ignored_records;
  d["skipped_by_reason"] = s.skipped_by_reason;
  d["compressed"] = s.compressed;
  d["time_unit"] = s.timestamps_ns ? "ns" : "us";
  d["read_s"] = s.decompress_parse_s;
  d["threads"] = s.split ? 2 : 1;   // parsing threads (a large text is read in two halves)
  d["outside_window"] = s.outside_window;   // windowed reads (ImportOptions::scan_steps, windowed)
  d["context_events"] = s.context_events;
  if (!s.start_histogram.empty()) {   // a scan's events by start: [(bucket's first ns, events)]
    py::list h;
    for (const auto& [bucket, n] : s.start_histogram)
      h.append(py::make_tuple(py::int_(bucket * (int64_t(1) << s.histogram_shift)), py::int_(n)));
    d["start_histogram"] = h;
    d["histogram_bucket_ns"] = int64_t(1) << s.histogram_shift;
  }
  return d;
}

// The import's settings, as Python passes them (python/gpuprof/analyze.py reads them from the
// environment: GPUPROF_MAX_TOKEN_MIB, GPUPROF_IMPORT_CPUS; docs/analyze.md). 0 keeps the default.
struct ImportSettings {
  int64_t max_token_bytes = 0;   // the longest single JSON string or number; 0: 64 MiB
  int64_t import_cpus = 0;       // the CPUs the import may count on; 0: those the process may use
};

constexpr int64_t kMiB = int64_t(1) << 20;
constexpr int64_t kMaxTokenMiB = (int64_t(1) << 24) - 1;   // errors give the limit in MiB
constexpr int64_t kMaxImportCpus = 65535;

ImportOptions options(uint64_t max_bytes, uint64_t max_events, const ImportSettings& settings) {
  ImportOptions o;
  o.max_bytes = max_bytes;
  o.max_events = max_events;
  const int64_t token = settings.max_token_bytes;
  if (token != 0) {
    if (token < kMiB || token % kMiB != 0 || token / kMiB > kMaxTokenMiB)
      throw py::value_error("max_token_bytes must be 0 (the default, 64 MiB) or a whole number of MiB from 1 to " +
                            std::to_string(kMaxTokenMiB) + " MiB, got " + std::to_string(token));
    o.max_token_bytes = uint64_t(token);
  }
  const int64_t cpus = settings.import_cpus;
  if (cpus < 0 || cpus > kMaxImportCpus)
    throw py::value_error("import_cpus must be 0 (the CPUs this process may run on) or 1 to " +
                          std::to_string(kMaxImportCpus) + ", got " + std::to_string(cpus));
  // A folder's worker processes pass their share, so that they do not each start threads for all.
  o.cpus = uint32_t(cpus);
  // Ctrl-C during a long import: Python's handler runs here (it needs the GIL), and the import
  // stops at its next chunk; the binding then raises the KeyboardInterrupt it left.
  o.interrupted = [] {
    py::gil_scoped_acquire gil;
    return PyErr_CheckSignals() != 0;
  };
  return o;
}

// An import that stopped because Python has an exception pending (a KeyboardInterrupt from the
// check above) raises that exception, not the importer's "interrupted".
template <class F>
auto run_releasing_gil(F&& import) {
  try {
    py::gil_scoped_release release;
    return import();
  } catch (const TraceImportError&) {
    if (PyErr_Occurred()) throw py::error_already_set();
    throw;
  }
}

// A window import's bounds (ImportOptions::windowed), checked.
void set_window(ImportOptions& o, const std::array<int64_t, 4>& w) {
  if (!(w[0] <= w[1] && w[1] <= w[2] && w[2] <= w[3]))
    throw py::value_error("window must be (keep_from, own_from, own_to, keep_to) in ns, in that order");
  o.windowed = true;
  o.keep_from_ns = w[0];
  o.own_from_ns = w[1];
  o.own_to_ns = w[2];
  o.keep_to_ns = w[3];
}

py::dict spill_windows_py(const std::string& path, int unit_ns,
                          const std::vector<std::tuple<int64_t, int64_t, std::string>>& windows,
                          int64_t max_token_bytes, ImportProgress* progress) {
  if (unit_ns != 1 && unit_ns != 1000) throw py::value_error("unit_ns must be 1 or 1000");
  ImportOptions o = options(0, 0, {max_token_bytes, 0});
  o.progress = progress;
  std::vector<SpillWindow> w;
  for (const auto& [from, to, file] : windows) w.push_back({from, to, file});
  const SpillStats st = run_releasing_gil([&] { return spill_windows(path, unit_ns, w, o); });
  py::dict d;
  d["json_bytes"] = st.json_bytes;
  d["records"] = st.records;
  d["copies"] = st.copies;
  d["unrouted"] = st.unrouted;
  return d;
}

// The Chrome-trace writers: one trace, several ranks' traces, a trace read in windows.
void bind_chrome_export(py::module_& m) {
  m.def(
      "export_chrome_trace",
      [](const Trace& t, const std::string& path) {
        py::gil_scoped_release release;
        export_chrome_trace(t, path);
      },
      py::arg("trace"), py::arg("path"),
      "Write a Trace as Kineto-style Chrome-trace JSON (gzip when the path ends in .gz).");
  m.def("export_chrome_json", [](const Trace& t) { return py::bytes(export_chrome_json(t)); }, py::arg("trace"));
  py::class_<MergedChromeTrace>(m, "MergedChromeTrace",
                                "Several ranks' traces written into one Chrome trace, one at a time "
                                "(gpuprof.traces.export.write_merged).")
      .def(py::init<const std::string&, const std::string&>(), py::arg("path"), py::arg("metadata_json") = "{}")
      .def(
          "add",
          [](MergedChromeTrace& m, const Trace& t, int64_t rank, int64_t offset_ns, const std::string& label) {
            py::gil_scoped_release release;
            m.add(t, rank, offset_ns, label);
          },
          py::arg("trace"), py::arg("rank"), py::arg("offset_ns"), py::arg("label"),
          "Add every event of one rank's trace, as process `rank` named `label`, shifted by offset_ns.")
      .def("close", &MergedChromeTrace::close, "End the file.");
  py::class_<WindowedChromeTrace>(m, "WindowedChromeTrace",
                                  "A trace read in windows written into one Chrome trace, a window at a time "
                                  "(gpuprof.analysis.windowed_export).")
      .def(py::init([](const std::string& path, const Trace& header) {
             py::gil_scoped_release release;
             return std::make_unique<WindowedChromeTrace>(path, header);
           }),
           py::arg("path"), py::arg("header"),
           "Open the file and write what precedes the windows: the scan's devices, metadata and GPU "
           "samples, with their power track.")
      .def(
          "add",
          [](WindowedChromeTrace& m, const Trace& t, int64_t own_from_ns, int64_t own_to_ns) {
            py::gil_scoped_release release;
            m.add(t, own_from_ns, own_to_ns);
          },
          py::arg("trace"), py::arg("own_from_ns"), py::arg("own_to_ns"),
          "Add what one window owns: its events without the context flag, its memory samples and the "
          "critical path of its steps in [own_from_ns, own_to_ns).")
      .def("utilization", &WindowedChromeTrace::utilization, py::arg("device"), py::arg("buckets"),
           py::arg("end_ns"), py::call_guard<py::gil_scoped_release>(),
           "Write a device's utilization counter track: (start ns, %) per bucket, 0 at end_ns.")
      .def("close", &WindowedChromeTrace::close, py::call_guard<py::gil_scoped_release>(),
           "Name the lanes and end the file (its last block compressed and written).");
}

}  // namespace

void bind_io(py::module_& m) {
  import_error_type.call_once_and_store_result(
      [&]() { return py::object(py::exception<TraceImportError>(m, "TraceImportError", PyExc_ValueError)); });
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const TraceImportError& e) {
      py::object type = import_error_type.get_stored();
      // File names are bytes to the OS and may not be UTF-8: the message shows such bytes as
      // \xNN escapes, and `path` is what os.fsdecode would give (it round-trips to the file).
      const std::string what = e.what();
      py::object message = py::reinterpret_steal<py::object>(
          PyUnicode_DecodeUTF8(what.data(), Py_ssize_t(what.size()), "backslashreplace"));
      py::object path = py::reinterpret_steal<py::object>(
          PyUnicode_DecodeFSDefaultAndSize(e.path.data(), Py_ssize_t(e.path.size())));
      if (!message || !path) throw py::error_already_set();
      py::object err = type(message);
      err.attr("path") = path;
      err.attr("byte_offset") = e.byte_offset >= 0 ? py::object(py::int_(e.byte_offset)) : py::none();
      err.attr("event_index") = e.event_index >= 0 ? py::object(py::int_(e.event_index)) : py::none();
      PyErr_SetObject(type.ptr(), err.ptr());
    } catch (const TraceExportError& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    }
  });

  py::class_<ImportProgress>(m, "ImportProgress",
                             "How far a running import has got; another Python thread reads it while "
                             "import_trace runs with the GIL released (gpuprof/cli/progress.py).")
      .def(py::init<>())
      .def_property_readonly(
          "bytes", [](const ImportProgress& p) { return p.total_bytes(); },
          "bytes of the file read so far (compressed bytes for a gzip file)")
      .def_property_readonly(
          "events", [](const ImportProgress& p) { return p.total_events(); }, "traceEvents entries parsed so far");
  m.def(
      "import_trace",
      [](const std::string& path, uint64_t max_bytes, uint64_t max_events, int64_t max_token_bytes,
         int64_t import_cpus, ImportProgress* progress, bool scan_steps,
         std::optional<std::array<int64_t, 4>> window) {
        ImportOptions o = options(max_bytes, max_events, {max_token_bytes, import_cpus});
        o.progress = progress;
        o.scan_steps = scan_steps;
        if (window) set_window(o, *window);
        ImportStats stats;
        Trace t = run_releasing_gil([&] { return import_kineto_trace(path, o, &stats); });
        return py::make_tuple(py::cast(std::move(t)), stats_to_dict(stats));
      },
      py::arg("path"), py::arg("max_bytes") = 0, py::arg("max_events") = 0, py::kw_only(),
      py::arg("max_token_bytes") = 0, py::arg("import_cpus") = 0, py::arg("progress") = nullptr,
      py::arg("scan_steps") = false, py::arg("window") = py::none(),
      "Read a Kineto Chrome trace (.json or gzip) into a Trace; returns (trace, import stats). "
      "scan_steps: keep only the step markers, and count the other events by start time in "
      "stats['start_histogram']; window: (keep_from, own_from, own_to, keep_to) in ns, keep only the "
      "events overlapping [keep_from, keep_to), those not starting in [own_from, own_to) as context "
      "(ImportOptions, gpuprof/io/kineto_import.h). "
      "max_token_bytes: the longest single JSON string or number, a whole number of MiB (0: 64 MiB); "
      "import_cpus: the CPUs the import may count on for its threads (0: those this process may run on); "
      "progress: an ImportProgress the import keeps up to date.");
  m.def("spill_windows", &spill_windows_py, py::arg("path"), py::arg("unit_ns"), py::arg("windows"), py::kw_only(),
        py::arg("max_token_bytes") = 0, py::arg("progress") = nullptr,
        "Copy each traceEvents entry of the trace at `path` to the file of every window it overlaps: "
        "windows are (keep_from_ns, keep_to_ns, file path); unit_ns: 1000 when ts and dur are "
        "microseconds, 1 when nanoseconds; progress: an ImportProgress whose bytes follow the read. "
        "Returns stats (records, copies, unrouted).");
  m.def(
      "import_trace_json",
      [](py::bytes data, const std::string& label, uint64_t max_bytes, uint64_t max_events,
         int64_t max_token_bytes, int64_t import_cpus) {
        const std::string_view text = data;
        const ImportOptions o = options(max_bytes, max_events, {max_token_bytes, import_cpus});
        ImportStats stats;
        Trace t = run_releasing_gil([&] { return import_kineto_json(text, label, o, &stats); });
        return py::make_tuple(py::cast(std::move(t)), stats_to_dict(stats));
      },
      py::arg("data"), py::arg("label") = "<memory>", py::arg("max_bytes") = 0, py::arg("max_events") = 0,
      py::kw_only(), py::arg("max_token_bytes") = 0, py::arg("import_cpus") = 0,
      "Read Kineto Chrome-trace JSON text (bytes) into a Trace; returns (trace, import stats). "
      "max_token_bytes and import_cpus as for import_trace.");
  bind_chrome_export(m);
  m.def(
      "trace_contents",
      [](const Trace& t) {
        py::dict kinds;
        std::array<uint64_t, 14> counts{};
        for (const Event& e : t.events) ++counts[static_cast<size_t>(e.kind)];
        for (size_t i = 0; i < counts.size(); ++i)
          if (counts[i]) kinds[event_kind_key(static_cast<EventKind>(i))] = counts[i];
        py::list devices;
        for (const DeviceProps& d : t.devices) {
          py::dict dd;
          dd["id"] = d.id;
          dd["name"] = d.name;
          dd["total_global_mem"] = d.total_global_mem;
          dd["compute_capability"] = py::make_tuple(d.compute_major, d.compute_minor);
          dd["num_sms"] = d.num_sms;
          dd["max_threads_per_sm"] = d.max_threads_per_sm;
          dd["regs_per_sm"] = d.regs_per_sm;
          dd["shared_mem_per_sm"] = d.shared_mem_per_sm;
          dd["warp_size"] = d.warp_size;
          devices.append(dd);
        }
        py::dict out;
        out["kinds"] = kinds;
        out["devices"] = devices;
        out["kernels"] = t.kernels.size();
        out["copies"] = t.copies.size();
        out["memory_samples"] = t.memory.size();
        out["strings"] = t.strings.size();
        return out;
      },
      py::arg("trace"), "Counts of what a Trace holds (events per kind, devices, side tables).");
  m.def(
      "trace_memory",
      [](const Trace& t) {
        py::list out;
        for (const MemorySample& s : t.memory)
          out.append(py::make_tuple(s.ts_ns, s.bytes_delta, s.total_allocated, s.total_reserved, s.device));
        return out;
      },
      py::arg("trace"), "Memory samples as (ts_ns, bytes_delta, total_allocated, total_reserved, device).");
}
