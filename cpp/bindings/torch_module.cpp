// _torchhooks: the LibTorch-linked piece, compiled for one torch build (on first use by
// python/gpuprof/_hooks.py, or prebuilt by CMake) and loaded only beside that build.
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "gpuprof/analysis/flops.h"
#include "torch_hooks.h"

namespace py = pybind11;

PYBIND11_MODULE(_torchhooks, m) {
  m.doc() = "gpuprof RecordFunction hooks (links LibTorch)";
  m.def(
      "install",
      [](bool record_shapes, bool autograd_links, bool flop_capture) {
        std::vector<std::string> matmul;
        if (flop_capture)
          for (const gpuprof::FlopRuleInfo& rule : gpuprof::flop_rules())
            if (rule.cls == gpuprof::FlopClass::Matmul) matmul.push_back(rule.name);
        gpuprof::collect::install_hooks(record_shapes, autograd_links, matmul);
      },
      py::arg("record_shapes") = false, py::arg("autograd_links") = false, py::arg("flop_capture") = true,
      "Install the operator hooks; autograd_links: also record each op's autograd sequence number "
      "and forward thread (the module view attributes backward ops by them); flop_capture: "
      "capture the matrix-class ops' inputs for their FLOPs (off only for the overhead bench).");
  m.def("remove", &gpuprof::collect::remove_hooks);
  m.def("installed", &gpuprof::collect::hooks_installed);
  m.def("flop_capture_installed", &gpuprof::collect::flop_capture_installed,
        "The matrix-class ops' input capture (their FLOPs without record_shapes) is registered.");
  m.def("_install_idle", &gpuprof::collect::install_idle_hooks, py::arg("needs_inputs") = false,
        "Bench only (bench/overhead_callgrind.py): callbacks that do nothing, to measure what "
        "LibTorch spends on running any callback.");
  m.def("_remove_idle", &gpuprof::collect::remove_idle_hooks);
  m.def("aten_has_global_callbacks", &gpuprof::collect::aten_has_global_callbacks);
  m.def("install_memory_reporter", &gpuprof::collect::install_memory_reporter, py::arg("host") = true,
        "Record every allocation and free of torch's device allocators (and, with host, of its CPU "
        "allocator) made on this thread and the autograd threads it starts; returns why not, or ''.");
  m.def("remove_memory_reporter", &gpuprof::collect::remove_memory_reporter);
  m.def("memory_reporter_installed", &gpuprof::collect::memory_reporter_installed);
  m.def("report_memory_usage", &gpuprof::collect::report_memory_usage, py::arg("alloc_size"),
        py::arg("total_allocated"), py::arg("total_reserved"), py::arg("device"), py::arg("addr") = 0,
        "Call c10::reportMemoryUsageToProfiler as an allocator does (device e.g. 'cuda:0', the block's "
        "address): tests feed the reporter on machines without CUDA.");
  m.def("memory_profiling_enabled", &gpuprof::collect::memory_profiling_enabled,
        "c10::memoryProfilingEnabled() on this thread: whether torch's CPU allocator reports now.");
}
