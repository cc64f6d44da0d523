#include "gpuprof/analysis/gpu_summary.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>

#include "gpuprof/analysis/intervals.h"
#include "gpuprof/analysis/memory.h"
#include "gpuprof/analysis/occupancy.h"
#include "gpuprof/analysis/tensor_cores.h"
#include "gpuprof/core/names.h"
#include "run_sort.h"

namespace gpuprof {

namespace {

// The part of an event inside the window.
int64_t clipped_ns(const Event& e, const TimeWindow& w) {
  const int64_t lo = std::max(e.start_ns, w.start_ns);
  const int64_t hi = std::min(e.end_ns(), w.end_ns);
  return hi > lo ? hi - lo : 0;
}

const KernelInfo* kernel_info(const Trace& t, const Event& e) {
  return e.aux < t.kernels.size() ? &t.kernels[e.aux] : nullptr;
}

// min(blocks / SMs, 1): the share of the SMs one kernel can keep busy. Kernels without a block
// count (or a device without an SM count, and no recorded blocks per SM) count as 0.
double sm_share(const KernelInfo* k, const DeviceProps* d) {
  if (k == nullptr) return 0.0;
  double blocks_per_sm = -1.0;
  if (d != nullptr && d->num_sms > 0 && k->blocks() > 0) blocks_per_sm = double(k->blocks()) / d->num_sms;
  else if (k->blocks_per_sm >= 0.0f) blocks_per_sm = k->blocks_per_sm;
  if (blocks_per_sm <= 0.0) return 0.0;
  return std::min(blocks_per_sm, 1.0);
}

}  // namespace

TimeWindow steps_window(const BreakdownResult& r) {
  TimeWindow w;
  if (r.steps.empty()) return w;
  w.start_ns = r.steps.front().start_ns;
  w.end_ns = r.steps.back().end_ns;
  return w;
}

double utilization_pct(const Trace& t, const std::vector<uint32_t>& kernels, const TimeWindow& w) {
  if (w.length_ns() == 0) return 0.0;
  IntervalList busy;
  busy.reserve(kernels.size());
  for (uint32_t i : kernels) busy.push_back({t.events[i].start_ns, t.events[i].end_ns()});
  merge_intervals(busy);
  return 100.0 * double(length_within(busy, w.start_ns, w.end_ns)) / double(w.length_ns());
}

namespace {

// Sweep over kernel starts and ends within `w`: between two consecutive edges the SMs' busy share
// is the sum of the running kernels' shares, capped at 1; `visit(from, to, level)` sees each such
// stretch in time order. Starts and ends are kept apart, each sorted only when not already in order
// (a stream's kernels are), then walked together, ends first at equal times.
template <class Visit>
void sweep_sm_levels(const Trace& t, const std::vector<uint32_t>& kernels, const DeviceProps* d,
                     const TimeWindow& w, Visit visit) {
  struct Edge {
    int64_t ts;
    double share;
  };
  std::vector<Edge> starts, ends;
  starts.reserve(kernels.size());
  ends.reserve(kernels.size());
  for (uint32_t i : kernels) {
    const Event& e = t.events[i];
    const double share = sm_share(kernel_info(t, e), d);
    if (share <= 0.0 || e.dur_ns <= 0) continue;
    const int64_t lo = std::max(e.start_ns, w.start_ns), hi = std::min(e.end_ns(), w.end_ns);
    if (hi <= lo) continue;
    starts.push_back({lo, share});
    ends.push_back({hi, share});
  }
  const auto by_ts = [](const Edge& a, const Edge& b) { return a.ts < b.ts; };
  for (std::vector<Edge>* v : {&starts, &ends}) sort_runs(*v, by_ts);
  double running = 0.0;
  size_t s = 0, e = 0;
  const auto end_next = [&] { return e < ends.size() && (s == starts.size() || ends[e].ts <= starts[s].ts); };
  const auto next_ts = [&] { return end_next() ? ends[e].ts : starts[s].ts; };
  while (s < starts.size() || e < ends.size()) {
    const int64_t ts = next_ts();
    running += end_next() ? -ends[e++].share : starts[s++].share;
    if (s == starts.size() && e == ends.size()) break;
    const int64_t next = next_ts();
    // Float sums of added and removed shares can leave a tiny residue; never negative.
    if (next > ts) visit(ts, next, std::min(std::max(running, 0.0), 1.0));
  }
}

}  // namespace

namespace {

// The SMs' busy share summed over the window's time (share x ns): sm_efficiency_pct's numerator.
double sm_weighted_ns(const Trace& t, const std::vector<uint32_t>& kernels, const DeviceProps* d,
                      const TimeWindow& w) {
  double weighted_ns = 0.0;
  sweep_sm_levels(t, kernels, d, w,
                  [&](int64_t from, int64_t to, double level) { weighted_ns += level * double(to - from); });
  return weighted_ns;
}

// achieved_occupancy_pct's sums: occupancy x ns, and ns, over the kernels with a known occupancy.
std::pair<double, double> occupancy_sums(const Trace& t, const std::vector<uint32_t>& kernels,
                                         const DeviceProps* d, const TimeWindow& w) {
  double weighted = 0.0, weight_ns = 0.0;
  for (uint32_t i : kernels) {
    const Event& e = t.events[i];
    const KernelInfo* k = kernel_info(t, e);
    if (k == nullptr) continue;
    const double occ = kernel_occupancy_pct(d, *k);
    const int64_t ns = clipped_ns(e, w);
    if (occ < 0.0 || ns == 0) continue;
    weighted += occ * double(ns);
    weight_ns += double(ns);
  }
  return {weighted, weight_ns};
}

}  // namespace

double sm_efficiency_pct(const Trace& t, const std::vector<uint32_t>& kernels, const DeviceProps* d,
                         const TimeWindow& w) {
  if (w.length_ns() == 0) return 0.0;
  return 100.0 * sm_weighted_ns(t, kernels, d, w) / double(w.length_ns());
}

std::vector<SmLevel> sm_efficiency_levels(const Trace& t, const std::vector<uint32_t>& kernels,
                                          const DeviceProps* d, const TimeWindow& w) {
  std::vector<SmLevel> out;
  sweep_sm_levels(t, kernels, d, w, [&](int64_t from, int64_t to, double level) {
    if (level > 0.0) out.push_back({from, to, 100.0 * level});
  });
  return out;
}

double achieved_occupancy_pct(const Trace& t, const std::vector<uint32_t>& kernels, const DeviceProps* d,
                              const TimeWindow& w) {
  const auto [weighted, weight_ns] = occupancy_sums(t, kernels, d, w);
  return weight_ns > 0.0 ? weighted / weight_ns : -1.0;
}

OwnSteps own_steps_window(const Trace& t, const BreakdownResult& r) {
  std::vector<int64_t> context_starts;   // the host starts of the context's step markers
  std::vector<int8_t> marker_by_name(t.strings.size(), -1);
  for (const Event& e : t.events) {
    if (!(e.flags & kContextFlag)) continue;
    if (e.kind != EventKind::StepMarker) {
      if ((e.kind != EventKind::HostOp && e.kind != EventKind::UserRange) || e.name >= marker_by_name.size())
        continue;
      if (marker_by_name[e.name] < 0) marker_by_name[e.name] = is_step_marker_name(t.strings.at(e.name)) ? 1 : 0;
      if (marker_by_name[e.name] != 1) continue;
    }
    context_starts.push_back(e.start_ns);
  }
  if (context_starts.empty()) return {steps_window(r)};
  std::sort(context_starts.begin(), context_starts.end());
  const auto context = [&](const StepBreakdown& s) {
    return std::binary_search(context_starts.begin(), context_starts.end(), s.host_start_ns);
  };
  TimeWindow w;
  bool any = false, context_before = false, context_after = false;
  for (const StepBreakdown& s : r.steps) {
    if (context(s)) {
      context_before = context_before || !any;
      // The time up to the next step's start is this window's: the steps' window has no gaps.
      if (any && !context_after) w.end_ns = std::max(w.end_ns, s.start_ns);
      context_after = context_after || any;
      continue;
    }
    if (!any) w.start_ns = s.start_ns;
    w.end_ns = s.end_ns;
    any = true;
  }
  if (!any) return {};
  return {w, context_before ? w.start_ns : INT64_MIN};
}

std::vector<DeviceSummary> summarize_devices(const Trace& t, const TimeWindow& w, const LaunchLinks& links) {
  return summarize_devices(t, OwnSteps{w}, links);
}

std::vector<DeviceSummary> summarize_devices(const Trace& t, const OwnSteps& own, const LaunchLinks& links) {
  const TimeWindow& w = own.window;
  const int64_t counted_from_ns = own.counted_from_ns;
  // The devices this run used: those that ran a kernel or allocated memory (a trace lists the
  // properties of every GPU in the machine, used or not).
  std::map<int, std::vector<uint32_t>> kernels_by_device;
  for (uint32_t i = 0; i < t.events.size(); ++i)
    if (t.events[i].kind == EventKind::Kernel && t.events[i].device >= 0)
      kernels_by_device[t.events[i].device].push_back(i);

  std::map<int, int64_t> peak_allocated;
  for (const MemorySample& m : t.memory) {
    if (m.device < 0) continue;
    kernels_by_device[m.device];
    if (m.total_allocated < 0) continue;   // a delta-only sample says nothing of the level
    auto [it, inserted] = peak_allocated.emplace(m.device, m.total_allocated);
    if (!inserted) it->second = std::max(it->second, m.total_allocated);
  }

  // Classify each distinct kernel name once: traces repeat a few hundred names over many kernels.
  std::vector<int8_t> tensor_core_by_name(t.strings.size(), -1);
  auto on_tensor_cores = [&](uint32_t name) {
    if (tensor_core_by_name[name] < 0)
      tensor_core_by_name[name] = is_tensor_core_kernel(t.strings.at(name)) ? 1 : 0;
    return tensor_core_by_name[name] == 1;
  };
  std::vector<int8_t> communication_by_name(t.strings.size(), -1);
  auto communication_kernel = [&](uint32_t name) {
    if (communication_by_name[name] < 0)
      communication_by_name[name] = is_communication_kernel_name(t.strings.at(name)) ? 1 : 0;
    return communication_by_name[name] == 1;
  };
  std::vector<int8_t> eligible_by_name(t.strings.size(), -1);
  auto eligible_kernel = [&](uint32_t name) {
    if (eligible_by_name[name] < 0)
      eligible_by_name[name] = is_tensor_core_eligible_kernel(t.strings.at(name)) ? 1 : 0;
    return eligible_by_name[name] == 1;
  };

  // Copies per device, for the communication they ran beside.
  std::map<int, IntervalList> copies_by_device;
  for (const Event& e : t.events)
    if (e.kind == EventKind::Memcpy && e.device >= 0)
      copies_by_device[e.device].push_back({e.start_ns, e.end_ns()});

  std::vector<DeviceSummary> out;
  for (const auto& [id, kernels] : kernels_by_device) {
    const DeviceProps* d = t.device(id);
    DeviceSummary s;
    s.id = id;
    if (d != nullptr) {
      s.name = d->name;
      s.compute_major = d->compute_major;
      s.compute_minor = d->compute_minor;
      s.memory_total_bytes = d->total_global_mem;
    }
    s.window_ns = w.length_ns();
    s.sm_weighted_ns = sm_weighted_ns(t, kernels, d, w);
    if (s.window_ns > 0) s.sm_efficiency_pct = 100.0 * s.sm_weighted_ns / double(s.window_ns);
    std::tie(s.occupancy_weighted_ns, s.occupancy_weight_ns) = occupancy_sums(t, kernels, d, w);
    if (s.occupancy_weight_ns > 0.0) s.achieved_occupancy_pct = s.occupancy_weighted_ns / s.occupancy_weight_ns;

    IntervalList busy, comm, compute;
    busy.reserve(kernels.size());
    compute.reserve(kernels.size());
    int64_t tensor_core_ns = 0, eligible_ns = 0;
    for (uint32_t i : kernels) {
      const Event& e = t.events[i];
      const int64_t ns = clipped_ns(e, w);
      if (ns == 0) continue;
      if (e.start_ns >= counted_from_ns) ++s.kernels;
      s.kernel_ns += ns;
      busy.push_back({e.start_ns, e.end_ns()});
      (communication_kernel(e.name) ? comm : compute).push_back({e.start_ns, e.end_ns()});
      if (on_tensor_cores(e.name)) tensor_core_ns += ns;
      const uint32_t op = links.launching_op(i);
      // Eligible: launched by an eligible operator, or matrix/convolution work by its own name
      // (torch.compile graphs and CUDA graph replays have no eligible operator above their kernels).
      if ((op != kNoIndex && links.eligible_root[op] != kNoIndex) || eligible_kernel(e.name)) eligible_ns += ns;
    }
    merge_intervals(busy);
    s.kernel_busy_ns = length_within(busy, w.start_ns, w.end_ns);
    // utilization_pct's figure: kernels outside the window add nothing to the union within it.
    if (w.length_ns() > 0) s.utilization_pct = 100.0 * double(s.kernel_busy_ns) / double(w.length_ns());
    if (!comm.empty()) {
      // |comm ∩ other| = |comm| - |comm \ other|, each a union of intervals clipped to the window.
      merge_intervals(comm);
      merge_intervals(compute);
      const IntervalList in_window = clip(comm, w.start_ns, w.end_ns);
      s.comm_kernel_ns = total_length(in_window);
      s.comm_overlap_compute_ns = s.comm_kernel_ns - total_length(subtract(in_window, compute));
      auto copies = copies_by_device.find(id);
      if (copies != copies_by_device.end()) {
        merge_intervals(copies->second);
        s.comm_overlap_copy_ns = s.comm_kernel_ns - total_length(subtract(in_window, copies->second));
      }
    }
    s.tensor_core_ns = tensor_core_ns;
    s.tc_eligible_ns = eligible_ns;
    if (s.kernel_ns > 0) {
      s.tensor_core_pct = 100.0 * double(tensor_core_ns) / double(s.kernel_ns);
      s.tc_eligible_pct = 100.0 * double(eligible_ns) / double(s.kernel_ns);
    }
    auto peak = peak_allocated.find(id);
    if (peak != peak_allocated.end()) s.peak_allocated_bytes = peak->second;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<GpuTimeline> gpu_timelines(const Trace& t, bool with_sm_levels) {
  int64_t lo = 0, hi = 0;
  bool any = false;
  std::map<int, std::vector<uint32_t>> kernels_by_device;
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    lo = any ? std::min(lo, e.start_ns) : e.start_ns;
    hi = any ? std::max(hi, e.end_ns()) : e.end_ns();
    any = true;
    if (e.kind == EventKind::Kernel && e.device >= 0) kernels_by_device[e.device].push_back(i);
  }
  std::vector<GpuTimeline> out;
  if (!any || hi <= lo || kernels_by_device.empty()) return out;
  // The plugin's buckets: 1, 10, 100... us, the first that makes at most 100 of them.
  int64_t bucket_ns = 1000;
  while ((hi - lo) / bucket_ns > kMaxTimelineBuckets) bucket_ns *= 10;
  const int64_t n = std::max<int64_t>(1, (hi - lo) / bucket_ns);
  const auto bucket_end = [&](int64_t b) { return b + 1 < n ? lo + (b + 1) * bucket_ns : hi; };
  for (const auto& [id, kernels] : kernels_by_device) {
    // Each kernel joins the buckets it overlaps (one or two, as a rule), so that each bucket's
    // figures are the summary's own functions over its window.
    std::vector<std::vector<uint32_t>> in_bucket(static_cast<size_t>(n));
    for (uint32_t i : kernels) {
      const Event& e = t.events[i];
      if (e.dur_ns <= 0) continue;
      const int64_t first = std::min(n - 1, (e.start_ns - lo) / bucket_ns);
      for (int64_t b = first; b < n && lo + b * bucket_ns < e.end_ns(); ++b) in_bucket[size_t(b)].push_back(i);
    }
    GpuTimeline tl;
    tl.device = id;
    const DeviceProps* d = t.device(id);
    for (int64_t b = 0; b < n; ++b) {
      const TimeWindow w{lo + b * bucket_ns, bucket_end(b)};
      GpuBucket g;
      g.start_ns = w.start_ns;
      g.dur_ns = w.length_ns();
      const std::vector<uint32_t>& ks = in_bucket[size_t(b)];
      if (!ks.empty()) {
        g.utilization_pct = utilization_pct(t, ks, w);
        g.sm_efficiency_pct = sm_efficiency_pct(t, ks, d, w);
      }
      tl.buckets.push_back(g);
    }
    if (with_sm_levels) tl.sm_levels = sm_efficiency_levels(t, kernels, d, TimeWindow{lo, hi});
    out.push_back(std::move(tl));
  }
  return out;
}

bool event_extent(const Trace& t, int64_t* first_start_ns, int64_t* last_end_ns) {
  if (t.events.empty()) return false;
  int64_t lo = t.events.front().start_ns, hi = t.events.front().end_ns();
  for (const Event& e : t.events) {
    lo = std::min(lo, e.start_ns);
    hi = std::max(hi, e.end_ns());
  }
  *first_start_ns = lo;
  *last_end_ns = hi;
  return true;
}

std::vector<GpuTimelinePart> gpu_timeline_parts(const Trace& t, int64_t lo, const std::vector<int64_t>& widths,
                                                int64_t own_from, int64_t own_to) {
  std::map<int, std::vector<uint32_t>> kernels_by_device;
  for (uint32_t i = 0; i < t.events.size(); ++i)
    if (t.events[i].kind == EventKind::Kernel && t.events[i].device >= 0)
      kernels_by_device[t.events[i].device].push_back(i);
  // A bucket's edge, held within the int64 range (a width past the trace's span makes one bucket).
  const auto edge = [lo](int64_t b, int64_t width) {
    const int64_t room = lo >= 0 ? INT64_MAX - lo : INT64_MAX;
    return b > room / width ? INT64_MAX : lo + b * width;
  };
  std::vector<GpuTimelinePart> out;
  for (const auto& [id, kernels] : kernels_by_device) {
    GpuTimelinePart part;
    part.device = id;
    const DeviceProps* d = t.device(id);
    for (const int64_t width : widths) {
      std::map<int64_t, std::vector<uint32_t>> in_bucket;
      for (uint32_t i : kernels) {
        const Event& e = t.events[i];
        const int64_t from = std::max({e.start_ns, own_from, lo}), to = std::min(e.end_ns(), own_to);
        if (e.dur_ns <= 0 || to <= from || width <= 0) continue;
        for (int64_t b = (from - lo) / width; b <= (to - 1 - lo) / width; ++b) in_bucket[b].push_back(i);
      }
      std::vector<GpuBucketPart>& buckets = part.by_width.emplace_back();
      for (const auto& [b, ks] : in_bucket) {
        const TimeWindow w{std::max(edge(b, width), own_from), std::min(edge(b + 1, width), own_to)};
        IntervalList busy;
        busy.reserve(ks.size());
        for (uint32_t i : ks) busy.push_back({t.events[i].start_ns, t.events[i].end_ns()});
        merge_intervals(busy);
        buckets.push_back({b, length_within(busy, w.start_ns, w.end_ns), sm_weighted_ns(t, ks, d, w)});
      }
    }
    out.push_back(std::move(part));
  }
  return out;
}

std::vector<MemoryCurve> memory_curves(const Trace& t, size_t max_points) {
  std::vector<MemoryCurve> out;
  for (const DeviceMemory& d : device_memory(t, /*attributed=*/false)) {
    MemoryCurve c;
    c.device = d.device;
    c.samples = d.samples.size();
    std::vector<MemoryPoint> all(d.samples.size());
    for (size_t i = 0; i < d.samples.size(); ++i)
      all[i] = {t.memory[d.samples[i]].ts_ns, d.allocated[i], d.reserved[i]};
    if (max_points >= 2 && all.size() > max_points) {
      const size_t slices = max_points / 2;
      for (size_t k = 0; k < slices; ++k) {
        const size_t lo = all.size() * k / slices, hi = all.size() * (k + 1) / slices;
        if (lo >= hi) continue;
        size_t low = lo, high = lo;
        for (size_t i = lo; i < hi; ++i) {
          if (all[i].allocated_bytes < all[low].allocated_bytes) low = i;
          if (all[i].allocated_bytes > all[high].allocated_bytes) high = i;
        }
        c.points.push_back(all[std::min(low, high)]);
        if (low != high) c.points.push_back(all[std::max(low, high)]);
      }
    } else {
      c.points = std::move(all);
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<DeviceSummary> summarize_devices(const Trace& t) {
  const BreakdownResult steps = compute_breakdown(t);
  return summarize_devices(t, steps_window(steps), link_launches(t));
}

}  // namespace gpuprof
