// The field tables of Holistic Trace Analysis's quantities (gpuprof/analysis/idle_time.h,
// launch_stats.h, hta_counters.h, op_launch_delay.h,
// kernel_sequences.h): one line a column, as in rows.h; registered as result tables
// in analysis_bindings.cpp.
#pragma once

#include <vector>

#include "gpuprof/analysis/hta_counters.h"
#include "gpuprof/analysis/idle_time.h"
#include "gpuprof/analysis/kernel_sequences.h"
#include "gpuprof/analysis/launch_stats.h"
#include "gpuprof/analysis/op_launch_delay.h"
#include "rows.h"

namespace gpuprof::bindings {

inline const std::vector<Field<IdleTimeRow>> kIdleTimeFields = {
    member("device", &IdleTimeRow::device),
    member("stream", &IdleTimeRow::stream),
    member("activities", &IdleTimeRow::activities),
    micros("host_wait_us", &IdleTimeRow::host_wait_ns),
    micros("kernel_wait_us", &IdleTimeRow::kernel_wait_ns),
    micros("other_us", &IdleTimeRow::other_ns),
    {"idle_us", [](const IdleTimeRow& r) { return py::object(py::float_(double(r.idle_ns()) / 1000.0)); }},
};

inline const std::vector<Field<LaunchStatsRow>> kLaunchStatsFields = {
    member("name", &LaunchStatsRow::name),
    member("launches", &LaunchStatsRow::launches),
    {"cpu_mean_us", [](const LaunchStatsRow& r) { return py::object(py::float_(r.cpu_mean_ns() / 1000.0)); }},
    {"gpu_mean_us", [](const LaunchStatsRow& r) { return py::object(py::float_(r.gpu_mean_ns() / 1000.0)); }},
    micros("delay_total_us", &LaunchStatsRow::delay_total_ns),
    {"delay_mean_us", [](const LaunchStatsRow& r) { return py::object(py::float_(r.delay_mean_ns() / 1000.0)); }},
    {"delay_p50_us", [](const LaunchStatsRow& r) { return py::object(py::float_(r.delay_p50_ns / 1000.0)); }},
    {"delay_p95_us", [](const LaunchStatsRow& r) { return py::object(py::float_(r.delay_p95_ns / 1000.0)); }},
    micros("delay_max_us", &LaunchStatsRow::delay_max_ns),
    member("short_kernels", &LaunchStatsRow::short_kernels),
    member("runtime_outliers", &LaunchStatsRow::runtime_outliers),
    member("delay_outliers", &LaunchStatsRow::delay_outliers),
};

inline const std::vector<Field<QueueLengthRow>> kQueueLengthFields = {
    member("device", &QueueLengthRow::device),   member("stream", &QueueLengthRow::stream),
    member("samples", &QueueLengthRow::samples), member("mean", &QueueLengthRow::mean),
    member("max", &QueueLengthRow::max),         micros("blocked_us", &QueueLengthRow::blocked_ns),
};

inline const std::vector<Field<CopyBandwidthRow>> kCopyBandwidthFields = {
    member("kind", &CopyBandwidthRow::kind),
    member("copies", &CopyBandwidthRow::copies),
    member("bytes", &CopyBandwidthRow::bytes),
    micros("time_us", &CopyBandwidthRow::time_ns),
    member("gb_per_s", &CopyBandwidthRow::gbps),
    member("samples", &CopyBandwidthRow::samples),
    member("mean_gb_per_s", &CopyBandwidthRow::mean_gbps),
    member("min_gb_per_s", &CopyBandwidthRow::min_gbps),
    member("p50_gb_per_s", &CopyBandwidthRow::p50_gbps),
    member("max_gb_per_s", &CopyBandwidthRow::max_gbps),
};

inline const std::vector<Field<OpLaunchDelayRow>> kOpLaunchDelayFields = {
    member("op", &OpLaunchDelayRow::op),
    member("kernels", &OpLaunchDelayRow::kernels),
    member("calls", &OpLaunchDelayRow::calls),
    {"op_delay_us", [](const OpLaunchDelayRow& r) { return py::object(py::float_(r.op_delay_ns / 1000.0)); }},
    {"runtime_delay_us",
     [](const OpLaunchDelayRow& r) { return py::object(py::float_(r.runtime_delay_ns / 1000.0)); }},
};

inline const std::vector<Field<KernelSequenceRow>> kKernelSequenceFields = {
    member("op", &KernelSequenceRow::op),         member("kernels", &KernelSequenceRow::kernels),
    member("count", &KernelSequenceRow::count),   micros("gpu_us", &KernelSequenceRow::gpu_ns),
    micros("cpu_us", &KernelSequenceRow::cpu_ns),
};

}   // namespace gpuprof::bindings
