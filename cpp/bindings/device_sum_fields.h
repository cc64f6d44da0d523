// The GPU summary's sums per device, in nanoseconds (gpu_tables' "device_sums"; not in the report):
// what a windowed read adds up over its windows before it divides (analysis/windowed.py).
#pragma once

#include <pybind11/pybind11.h>

#include <vector>

#include "gpuprof/analysis/gpu_summary.h"
#include "rows.h"

namespace gpuprof::bindings {

inline const std::vector<Field<DeviceSummary>> kDeviceSumFields = {
    member("id", &DeviceSummary::id),
    member("window_ns", &DeviceSummary::window_ns),
    member("kernel_ns", &DeviceSummary::kernel_ns),
    member("kernel_busy_ns", &DeviceSummary::kernel_busy_ns),
    member("kernels", &DeviceSummary::kernels),
    member("sm_weighted_ns", &DeviceSummary::sm_weighted_ns),
    member("occupancy_weighted_ns", &DeviceSummary::occupancy_weighted_ns),
    member("occupancy_weight_ns", &DeviceSummary::occupancy_weight_ns),
    member("tensor_core_ns", &DeviceSummary::tensor_core_ns),
    member("tc_eligible_ns", &DeviceSummary::tc_eligible_ns),
    member("comm_kernel_ns", &DeviceSummary::comm_kernel_ns),
    member("comm_overlap_compute_ns", &DeviceSummary::comm_overlap_compute_ns),
    member("comm_overlap_copy_ns", &DeviceSummary::comm_overlap_copy_ns),
    member("peak_allocated_bytes", &DeviceSummary::peak_allocated_bytes),
};

}  // namespace gpuprof::bindings
