// The batch's copy to the device, step by step (gpuprof/analysis/input_transfer.h). One pass to sort each
// thread's host items and each device's kernels, then a short walk after each DataLoader range.
#include "gpuprof/analysis/input_transfer.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/intervals.h"

namespace gpuprof {

namespace {

bool is_copy_op(std::string_view name) {
  return name == "aten::to" || name == "aten::_to_copy" || name == "aten::copy_";
}

}  // namespace

std::vector<StepTransfer> batch_transfers(const Trace& t, const std::vector<std::pair<int64_t, int64_t>>& steps) {
  std::vector<StepTransfer> out(steps.size());
  if (steps.empty()) return out;
  // First the DataLoader ranges and their threads: a trace without them costs one look per event.
  std::vector<uint32_t> loader_ranges;
  std::vector<int8_t> loader_name(t.strings.size(), -1);
  std::unordered_map<uint32_t, std::vector<uint32_t>> by_thread;   // host items of those threads
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (e.kind != EventKind::HostOp && e.kind != EventKind::UserRange) continue;
    int8_t& dl = loader_name[e.name];
    if (dl < 0) dl = is_dataloader_name(t.name_of(e)) ? 1 : 0;
    if (dl) {
      loader_ranges.push_back(i);
      by_thread[e.tid];
    }
  }
  if (loader_ranges.empty()) return out;
  // Host items of those threads (ops, ranges, runtime calls), host-to-device copies by their
  // correlation, and each device's kernels as a union.
  std::unordered_map<uint64_t, std::vector<uint32_t>> copies_by_correlation;
  std::unordered_map<int, IntervalList> kernels_by_device;
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    switch (e.kind) {
      case EventKind::HostOp:
      case EventKind::UserRange:
      case EventKind::Runtime:
      case EventKind::Driver: {
        auto th = by_thread.find(e.tid);
        if (th != by_thread.end()) th->second.push_back(i);
        break;
      }
      case EventKind::Memcpy:
        if (e.correlation != 0 && e.aux < t.copies.size() && t.copies[e.aux].kind == CopyKind::HtoD)
          copies_by_correlation[e.correlation].push_back(i);
        break;
      case EventKind::Kernel: kernels_by_device[e.device].push_back({e.start_ns, e.end_ns()}); break;
      default: break;
    }
  }
  for (auto& [tid, items] : by_thread)
    std::sort(items.begin(), items.end(), [&](uint32_t a, uint32_t b) {
      const Event& ea = t.events[a];
      const Event& eb = t.events[b];
      if (ea.start_ns != eb.start_ns) return ea.start_ns < eb.start_ns;
      if (ea.dur_ns != eb.dur_ns) return ea.dur_ns > eb.dur_ns;
      return a < b;
    });
  for (auto& [device, list] : kernels_by_device) merge_intervals(list);

  // Steps by start, to find the step of each DataLoader range.
  std::vector<size_t> step_order(steps.size());
  for (size_t k = 0; k < steps.size(); ++k) step_order[k] = k;
  std::sort(step_order.begin(), step_order.end(),
            [&](size_t a, size_t b) { return steps[a].first < steps[b].first; });

  for (uint32_t li : loader_ranges) {
    const Event& d = t.events[li];
    auto it = std::upper_bound(step_order.begin(), step_order.end(), d.start_ns,
                               [&](int64_t ts, size_t k) { return ts < steps[k].first; });
    if (it == step_order.begin()) continue;
    const size_t k = *(it - 1);
    const int64_t step_end = steps[k].second;
    if (d.start_ns >= step_end) continue;
    StepTransfer& s = out[k];
    ++s.batches;
    const std::vector<uint32_t>& items = by_thread[d.tid];
    auto from = std::lower_bound(items.begin(), items.end(), d.end_ns(),
                                 [&](uint32_t i, int64_t ts) { return t.events[i].start_ns < ts; });
    int64_t top_end = INT64_MIN;   // end of the top-level copy op being walked
    for (auto p = from; p != items.end(); ++p) {
      const Event& e = t.events[*p];
      if (e.start_ns >= step_end) break;
      if (e.start_ns < top_end) {   // inside the copy op: its runtime calls launched the copies
        if ((e.kind == EventKind::Runtime || e.kind == EventKind::Driver) && e.correlation != 0) {
          auto c = copies_by_correlation.find(e.correlation);
          if (c == copies_by_correlation.end()) continue;
          for (uint32_t ci : c->second) {
            const Event& copy = t.events[ci];
            ++s.device_copies;
            s.device_ns += copy.dur_ns;
            auto kl = kernels_by_device.find(copy.device);
            if (kl != kernels_by_device.end())
              s.overlap_ns += length_within(kl->second, copy.start_ns, copy.end_ns());
          }
        }
        continue;
      }
      // A runtime or driver call of no operator (the DataLoader's cudaEventRecordWithFlags between
      // the batch's arrival and its copy, seen on an H200) and the profiler's own overhead (CUPTI
      // asking for a buffer) are not the step going on.
      if (e.kind == EventKind::Runtime || e.kind == EventKind::Driver || e.kind == EventKind::Overhead) continue;
      if (e.kind != EventKind::HostOp || !is_copy_op(t.name_of(e))) break;   // the step goes on
      ++s.copy_ops;
      s.host_ns += e.dur_ns;
      top_end = e.end_ns();
    }
  }
  return out;
}

}  // namespace gpuprof
