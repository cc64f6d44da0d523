// The cuda_graphs table's fields (docs/metrics.md, "CUDA graphs"), in analysis/fields.py's order.
#pragma once

#include <pybind11/pybind11.h>

#include <vector>

#include "gpuprof/analysis/cuda_graphs.h"
#include "rows.h"

namespace gpuprof::bindings {

inline const std::vector<Field<CudaGraphRow>> kCudaGraphFields = {
    member("graph_id", &CudaGraphRow::graph_id),
    member("launches", &CudaGraphRow::launches),
    member("kernels", &CudaGraphRow::kernels),
    {"kernels_per_launch", [](const CudaGraphRow& r) { return or_none(r.kernels_per_launch()); }},
    micros("device_us", &CudaGraphRow::device_ns),
    nonempty("launched_from", &CudaGraphRow::launched_from),
};

}  // namespace gpuprof::bindings
