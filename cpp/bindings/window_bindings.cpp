// A window's parts of Holistic Trace Analysis's tables for Python's windowed merge
// (gpuprof/analysis/window_parts.h; python/gpuprof/analysis/windowed_hta.py), as tuples in the
// order the merge reads them. Translation only.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpuprof/analysis/gpu_summary.h"
#include "gpuprof/analysis/hta_counters.h"
#include "gpuprof/analysis/idle_time.h"
#include "gpuprof/analysis/launch_stats.h"
#include "gpuprof/analysis/memory.h"
#include "gpuprof/analysis/tables.h"
#include "gpuprof/analysis/window_parts.h"
#include "gpuprof/core/trace.h"

namespace py = pybind11;
using namespace gpuprof;

namespace {

using Carried = std::vector<std::tuple<std::string, double, double, std::vector<std::pair<int64_t, double>>>>;

py::dict parts_dict(const WindowParts& w) {
  py::list idle, launches, queue, copies, delays, sequences;
  for (const IdleTimePart& p : w.idle_time)
    idle.append(py::make_tuple(p.device, p.stream, p.activities, p.host_wait_ns, p.kernel_wait_ns, p.other_ns,
                               p.first_start_ns, p.first_call_start_ns, p.last_end_ns));
  for (const LaunchStatsPart& p : w.launch_stats)
    launches.append(py::make_tuple(p.name, p.launches, p.cpu_total_ns, p.gpu_total_ns, p.delay_total_ns,
                                   p.delay_max_ns, p.short_kernels, p.runtime_outliers, p.delay_outliers,
                                   std::vector<std::pair<int64_t, int64_t>>(p.delays.begin(), p.delays.end())));
  for (const QueueLengthPart& p : w.queue_length)
    queue.append(py::make_tuple(p.device, p.stream, p.samples, p.sum, p.max, p.blocked_ns, p.first_ns, p.last_ns,
                                p.last_length));
  for (const CopyBandwidthPart& p : w.copy_bandwidth) {
    std::vector<std::pair<int64_t, double>> open;
    for (const OpenCopy& o : p.carry.open) open.emplace_back(o.end_ns, o.gbps);
    copies.append(py::make_tuple(p.carry.kind, p.copies, p.bytes, p.time_ns, p.samples,
                                 std::vector<std::pair<double, int64_t>>(p.levels.begin(), p.levels.end()),
                                 p.carry.level, p.carry.levels_sum, open));
  }
  for (const OpLaunchDelayPart& p : w.op_launch_delay)
    delays.append(py::make_tuple(p.op, p.kernels, p.calls, p.op_delay_ns, p.runtime_delay_ns));
  for (const KernelSequencePart& p : w.kernel_sequences)
    sequences.append(py::make_tuple(p.op, p.kernels, p.depth, p.count, p.gpu_ns, p.cpu_ns));
  py::dict out;
  out["idle_time"] = idle;
  out["launch_stats"] = launches;
  out["queue_length"] = queue;
  out["copy_bandwidth"] = copies;
  out["op_launch_delay"] = delays;
  out["kernel_sequences"] = sequences;
  out["least_depth"] = w.least_depth;
  return out;
}

}  // namespace

void bind_window_parts(py::module_& m) {
  // The thresholds the merge of the windows' parts applies at their edges, as the whole tables do.
  m.attr("KERNEL_WAIT_THRESHOLD_NS") = kKernelWaitThresholdNs;
  m.attr("MAX_LAUNCH_QUEUE") = kMaxLaunchQueue;
  m.def(
      "window_hta_parts",
      [](const Trace& t, int64_t own_from, int64_t own_to, int64_t launched_before, const Carried& carried) {
        std::vector<CopyCarry> carry;
        for (const auto& [kind, level, levels_sum, open] : carried) {
          CopyCarry& c = carry.emplace_back();
          c.kind = kind;
          c.level = level;
          c.levels_sum = levels_sum;
          for (const auto& [end, gbps] : open) c.open.push_back({end, gbps});
        }
        WindowParts w;
        {
          py::gil_scoped_release release;
          w = window_parts(t, OwnedSpan{own_from, own_to}, launched_before, carry);
        }
        return parts_dict(w);
      },
      py::arg("trace"), py::arg("own_from"), py::arg("own_to"), py::arg("launched_before"), py::arg("carried"),
      "A window's parts of HTA's six tables (idle_time, launch_stats, queue_length, copy_bandwidth, "
      "op_launch_delay, kernel_sequences) over the span [own_from, own_to) it owns, in the scope of "
      "launches made before `launched_before` (the whole trace's last step start); `carried`: the copy "
      "bandwidth's (kind, level, sum of the levels, [(end_ns, gbps)]) from the window before.");
  m.def(
      "last_step_start",
      [](const Trace& t) -> py::object {
        const int64_t s = last_step_start(t);
        return s == kNoEndNs ? py::object(py::none()) : py::object(py::int_(s));
      },
      "The start of the trace's last step marker (HTA's scope ends there); None with fewer than two.");
  m.def(
      "gpu_timeline_parts",
      [](const Trace& t, int64_t lo, const std::vector<int64_t>& widths, int64_t own_from, int64_t own_to) {
        std::vector<GpuTimelinePart> parts;
        {
          py::gil_scoped_release release;
          parts = gpu_timeline_parts(t, lo, widths, own_from, own_to);
        }
        py::dict out;
        for (const GpuTimelinePart& p : parts) {
          py::list by_width;
          for (const std::vector<GpuBucketPart>& buckets : p.by_width) {
            py::list rows;
            for (const GpuBucketPart& b : buckets)
              rows.append(py::make_tuple(b.bucket, b.busy_ns, b.sm_weighted_ns));
            by_width.append(rows);
          }
          out[py::int_(p.device)] = by_width;
        }
        return out;
      },
      py::arg("trace"), py::arg("lo"), py::arg("widths"), py::arg("own_from"), py::arg("own_to"),
      "A window's share of the GPU timeline over the time [own_from, own_to) it owns: {device: one list "
      "per width of [(bucket, busy_ns, sm_weighted_ns)]}, bucket b being [lo + b * width, lo + (b + 1) * "
      "width), for the buckets its kernels overlap there.");
  m.def(
      "event_extent",
      [](const Trace& t) -> py::object {
        int64_t lo = 0, hi = 0;
        if (!event_extent(t, &lo, &hi)) return py::none();
        return py::make_tuple(lo, hi);
      },
      py::arg("trace"), "(first event start, last event end) in ns; None without events.");
  m.def(
      "memory_op_calls",
      [](const Trace& t) {
        std::vector<std::pair<std::string, int64_t>> calls;
        {
          py::gil_scoped_release release;
          calls = owned_memory_op_calls(t);
        }
        py::dict out;
        for (const auto& [name, n] : calls) out[py::str(name)] = n;
        return out;
      },
      py::arg("trace"),
      "A window's calls of each memory operator it owns (not its context), {name: calls}, rows in "
      "memory_ops or not (python/gpuprof/analysis/window_memory.py).");
  m.def(
      "memory_blocks",
      [](const Trace& t) {
        std::vector<DeviceMemory> devices;
        {
          py::gil_scoped_release release;
          devices = device_memory(t, /*attributed=*/true);
        }
        auto time = [](int64_t ns) -> py::object {
          if (ns == kBeforeTrace || ns == kNeverFreed) return py::none();
          return py::int_(ns);
        };
        py::dict out;
        for (const DeviceMemory& d : devices) {
          py::list blocks;
          for (const MemoryBlock& b : d.blocks) {
            py::object outer = py::none();
            if (b.outer_op != kNoIndex) outer = py::str(t.name_of(t.events[b.outer_op]));
            blocks.append(py::make_tuple(b.addr, b.bytes, time(b.alloc_ns), time(b.free_ns), b.role,
                                         time(b.scope_end_ns), b.in_optimizer_step, outer,
                                         b.node == kNoIndex ? int64_t(-1) : int64_t(b.node),
                                         b.module == kNoIndex ? int64_t(-1) : int64_t(b.module)));
          }
          out[py::str(std::to_string(d.device))] = blocks;
        }
        return out;
      },
      py::arg("trace"),
      "A window's memory blocks by device (-1: the host), in allocation order: (addr, bytes, alloc_ns or "
      "None before the trace, free_ns or None never freed, role or -1, scope_end_ns or None outside any "
      "operator, in_optimizer_step, outermost operator's name or None, innermost node's event index or "
      "-1, innermost module call's event index or -1) (python/gpuprof/analysis/window_peak.py).");
  m.def("display_name", &display_name, "The name the tables show for a name (itself up to 1,024 bytes).");
}
