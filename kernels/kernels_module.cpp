// gpuprof._kernels: the validation kernels for Python (python -m gpuprof.roofline, tests/gpu).
// Calls release the GIL: they block on CUDA events.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "validation_kernels.h"

namespace py = pybind11;
namespace k = gpuprof::kernels;

namespace {
template <typename Fn, typename... Args>
auto nogil(Fn fn, Args... args) {
  py::gil_scoped_release release;
  return fn(args...);
}
}  // namespace

PYBIND11_MODULE(_kernels, m) {
  m.doc() = "gpuprof validation kernels (CUDA): spin, polynomial roofline, H2D copies, GEMMs";
  m.def(
      "device_info",
      [](int device) {
        const k::DeviceInfo d = k::device_info(device);
        py::dict out;
        out["name"] = d.name;
        out["sm_count"] = d.sm_count;
        out["compute_capability"] = py::make_tuple(d.compute_major, d.compute_minor);
        out["clock_khz"] = d.clock_khz;
        out["memory_clock_khz"] = d.memory_clock_khz;
        out["memory_bus_bits"] = d.memory_bus_bits;
        return out;
      },
      py::arg("device") = 0);
  m.def(
      "spin_ns", [](int64_t ns, int blocks, int repeats) { return nogil(k::spin_ns, ns, blocks, repeats); },
      py::arg("duration_ns"), py::arg("blocks") = 1, py::arg("repeats") = 1,
      "Spin kernel of `duration_ns` (global timer); CUDA-event ms per run.");
  m.def(
      "spin_cycles", [](int64_t c, int blocks, int repeats) { return nogil(k::spin_cycles, c, blocks, repeats); },
      py::arg("cycles"), py::arg("blocks") = 1, py::arg("repeats") = 1,
      "Spin kernel of `cycles` SM clock cycles (clock64); CUDA-event ms per run.");
  m.def(
      "polynomial", [](int64_t n, int kk, int repeats) { return nogil(k::polynomial, n, kk, repeats); },
      py::arg("n"), py::arg("k"), py::arg("repeats") = 1,
      "b[i] = a[i] + ... + a[i]^k over n floats (2k flop per 8 bytes); CUDA-event ms per run.");
  m.def(
      "host_to_device",
      [](int64_t bytes, bool pinned, int repeats) { return nogil(k::host_to_device, bytes, pinned, repeats); },
      py::arg("bytes"), py::arg("pinned"), py::arg("repeats") = 1,
      "cudaMemcpyAsync of `bytes` from pageable or pinned host memory; CUDA-event ms per run.");
  m.def(
      "gemm_fp32", [](int n, int repeats) { return nogil(k::gemm_fp32, n, repeats); }, py::arg("n"),
      py::arg("repeats") = 1, "n x n FP32 SIMT GEMM; CUDA-event ms per run.");
  m.def(
      "gemm_tensor_core", [](int n, int repeats) { return nogil(k::gemm_tensor_core, n, repeats); }, py::arg("n"),
      py::arg("repeats") = 1, "n x n FP16->FP32 WMMA GEMM; CUDA-event ms per run.");
  m.def(
      "gemm_check", [](int n, bool tc) { return nogil(k::gemm_check, n, tc); }, py::arg("n"),
      py::arg("tensor_core"), "The n*n result of ones x halves (every value n/2).");
}
