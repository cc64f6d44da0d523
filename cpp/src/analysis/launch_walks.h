#pragma once

// The walks over a trace's launches that a whole-trace table and a window's part of it
// (window_parts.cpp) both make. What differs between the two (which operators or activities a
// window owns) comes in as a predicate, so that each counting rule is written once.

#include <algorithm>
#include <cstdint>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "gpuprof/analysis/hta_counters.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/launch_stats.h"
#include "gpuprof/analysis/op_launch_delay.h"
#include "gpuprof/core/trace.h"
#include "name_sequences.h"
#include "run_sort.h"

namespace gpuprof {

// Calls fn(i, c) for each device activity i whose launch call c (links.call_before) started
// before `launched_before` and has a name is_call accepts (each name asked once).
template <typename Fn>
void for_each_named_launch(const Trace& t, const LaunchLinks& links, int64_t launched_before,
                           bool (*is_call)(std::string_view), Fn&& fn) {
  std::vector<int8_t> call_name(t.strings.size(), -1);
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    if (!t.events[i].on_device()) continue;
    const uint32_t c = links.call_before(t, i, launched_before);
    if (c == kNoIndex) continue;
    int8_t& is = call_name[t.events[c].name];
    if (is < 0) is = is_call(t.name_of(t.events[c])) ? 1 : 0;
    if (is) fn(i, c);
  }
}

// launch_stats_table's launches: fn(i, c) for each device activity i that keep(event) accepts
// whose runtime call c (links.runtime_of) started before `launched_before` and is_launch_call
// names.
template <typename Keep, typename Fn>
void for_each_runtime_launch(const Trace& t, const LaunchLinks& links, int64_t launched_before, Keep&& keep,
                             Fn&& fn) {
  std::vector<int8_t> launch_name(t.strings.size(), -1);
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (!e.on_device() || !keep(e) || i >= links.runtime_of.size()) continue;
    const uint32_t c = links.runtime_of[i];
    if (c == kNoIndex) continue;
    const Event& call = t.events[c];
    if (call.kind != EventKind::Runtime || call.start_ns >= launched_before) continue;
    int8_t& is_launch = launch_name[call.name];
    if (is_launch < 0) is_launch = is_launch_call(t.name_of(call)) ? 1 : 0;
    if (is_launch) fn(i, c);
  }
}

// Adds activity e, launched by `call`, to launch_stats_table's sums in s (a row or a window's
// part); returns its launch delay.
template <typename Sums>
int64_t add_launch(Sums& s, const Event& e, const Event& call) {
  const int64_t delay = std::max<int64_t>(0, e.start_ns - call.end_ns());
  ++s.launches;
  s.cpu_total_ns += call.dur_ns;
  s.gpu_total_ns += e.dur_ns;
  s.delay_total_ns += delay;
  s.delay_max_ns = std::max(s.delay_max_ns, delay);
  if (call.dur_ns > kLaunchRuntimeCutoffNs) ++s.runtime_outliers;
  else if (e.dur_ns < call.dur_ns) ++s.short_kernels;
  if (delay > kLaunchDelayCutoffNs) ++s.delay_outliers;
  return delay;
}

// op_launch_delay_table's launches: each kernel launch (is_kernel_launch_name) under the innermost
// "aten::" operator around its call that holds the call whole, as (op, call start, call,
// activity), where keep(op) accepts the operator; sorted.
template <typename Keep>
std::vector<OpLaunch> collect_op_launches(const Trace& t, const LaunchLinks& links, int64_t launched_before,
                                          Keep&& keep) {
  std::vector<int8_t> aten_name(t.strings.size(), -1);   // each name classified once
  std::vector<OpLaunch> launches;
  for_each_named_launch(t, links, launched_before, is_kernel_launch_name, [&](uint32_t i, uint32_t c) {
    const Event& call = t.events[c];
    uint32_t op = links.op_of[c];
    while (op != kNoIndex) {
      const Event& o = t.events[op];
      int8_t& is_aten = aten_name[o.name];
      if (is_aten < 0) is_aten = t.name_of(o).rfind("aten::", 0) == 0 ? 1 : 0;
      if (is_aten && o.start_ns <= call.start_ns && o.end_ns() >= call.end_ns()) break;
      op = links.parent_op[op];
    }
    if (op != kNoIndex && keep(op)) launches.push_back({op, call.start_ns, c, i});
  });
  sort_launches(launches, t.events.size());
  return launches;
}

// kernel_sequence_table's depths: each host op's nesting depth (0: outermost), from the ops in
// outer-first order (host_ops_outer_first), -1 for those started at or after `launched_before`;
// fn(op, depth) is told each one given.
template <typename Fn>
std::vector<int32_t> op_depths(const Trace& t, const LaunchLinks& links, const std::vector<uint32_t>& outer_first,
                               int64_t launched_before, Fn&& fn) {
  std::vector<int32_t> depth(t.events.size(), -1);
  for (uint32_t i : outer_first) {
    if (t.events[i].start_ns >= launched_before) continue;
    const uint32_t p = links.parent_op[i];
    depth[i] = p == kNoIndex || depth[p] < 0 ? 0 : depth[p] + 1;
    fn(i, depth[i]);
  }
  return depth;
}

// kernel_sequence_table's kernels: each device activity whose call started before
// `launched_before`, once under each op around the call that keep(op) accepts, as (op, activity
// start, 0, activity); sorted.
template <typename Keep>
std::vector<OpLaunch> collect_op_kernels(const Trace& t, const LaunchLinks& links, int64_t launched_before,
                                         Keep&& keep) {
  std::vector<OpLaunch> kernels;
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (!e.on_device()) continue;
    const uint32_t c = links.call_before(t, i, launched_before);
    if (c == kNoIndex) continue;
    for (uint32_t op = links.op_of[c]; op != kNoIndex; op = links.parent_op[op])
      if (keep(op)) kernels.push_back({op, e.start_ns, 0, i});
  }
  sort_launches(kernels, t.events.size());
  return kernels;
}

// For each op's run of launches in sorted `launches` with at least `min_launches` of them:
// fn(op, its first launch, the number in `sequences` of (the op's name, the launched names in
// order), the launched activities' summed device time).
template <typename Fn>
void for_each_op_sequence(const Trace& t, const std::vector<OpLaunch>& launches, int64_t min_launches,
                          NameSequences& sequences, Fn&& fn) {
  std::vector<uint32_t> names;
  for (size_t a = 0; a < launches.size();) {
    const uint32_t op = launches[a].op;
    size_t b = a;
    int64_t gpu = 0;
    names.clear();
    for (; b < launches.size() && launches[b].op == op; ++b) {
      const Event& k = t.events[launches[b].event];
      names.push_back(k.name);
      gpu += k.dur_ns;
    }
    if (int64_t(names.size()) >= min_launches)
      fn(op, launches[a], sequences.intern(t.events[op].name, names), gpu);
    a = b;
  }
}

// idle_time_table's activities: each device activity that keep(event) accepts whose runtime call
// (links.runtime_of) started before `launched_before`, by (device, stream), each stream's in order
// of start (then of index).
template <typename Keep>
std::map<std::pair<int, uint32_t>, std::vector<uint32_t>> activities_by_stream(const Trace& t,
                                                                               const LaunchLinks& links,
                                                                               int64_t launched_before,
                                                                               Keep&& keep) {
  std::map<std::pair<int, uint32_t>, std::vector<uint32_t>> by_stream;
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (!e.on_device() || !keep(e) || i >= links.runtime_of.size()) continue;
    const uint32_t call = links.runtime_of[i];
    if (call != kNoIndex && t.events[call].start_ns < launched_before) by_stream[{e.device, e.tid}].push_back(i);
  }
  for (auto& [key, items] : by_stream) {
    auto before = [&](uint32_t a, uint32_t b) {
      const Event& ea = t.events[a];
      const Event& eb = t.events[b];
      return ea.start_ns != eb.start_ns ? ea.start_ns < eb.start_ns : a < b;
    };
    sort_runs(items, before);
  }
  return by_stream;
}

// Adds the gaps between one stream's consecutive activities (in order of start) to idle_time_table's
// sums in s (a row or a window's part): host wait where the next one's call started after the gap
// began, else kernel wait below `kernel_wait_threshold`, else other.
template <typename Sums>
void add_idle_gaps(Sums& s, const Trace& t, const LaunchLinks& links, const std::vector<uint32_t>& items,
                   int64_t kernel_wait_threshold) {
  for (size_t k = 1; k < items.size(); ++k) {
    const int64_t prev_end = t.events[items[k - 1]].end_ns();
    const Event& e = t.events[items[k]];
    const int64_t gap = std::max<int64_t>(0, e.start_ns - prev_end);
    if (t.events[links.runtime_of[items[k]]].start_ns > prev_end) s.host_wait_ns += gap;
    else if (gap < kernel_wait_threshold) s.kernel_wait_ns += gap;
    else s.other_ns += gap;
  }
}

// copy_bandwidth_table's copies: fn(e) for each copy or set e that keep(e) accepts whose launch
// call (links.call_before) started before `launched_before`.
template <typename Keep, typename Fn>
void for_each_copy(const Trace& t, const LaunchLinks& links, int64_t launched_before, Keep&& keep, Fn&& fn) {
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if ((e.kind != EventKind::Memcpy && e.kind != EventKind::Memset) || !keep(e)) continue;
    if (links.call_before(t, i, launched_before) == kNoIndex) continue;
    fn(e);
  }
}

// Adds copy or set e to copy_bandwidth_table's counts in s (a row or a window's part); returns its
// duration (0 ns counted as 1, as in HTA) and bandwidth over it (bytes per ns = GB/s).
template <typename Sums>
std::pair<int64_t, double> add_copy(Sums& s, const Trace& t, const Event& e) {
  const int64_t bytes = e.aux < t.copies.size() ? t.copies[e.aux].bytes : 0;
  const int64_t dur = std::max<int64_t>(e.dur_ns, 1);
  ++s.copies;
  s.bytes += bytes;
  s.time_ns += e.dur_ns;
  return {dur, double(bytes) / double(dur)};
}

}  // namespace gpuprof
