#include "gpuprof/analysis/window_parts.h"

#include <algorithm>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "gpuprof/analysis/hta_counters.h"
#include "gpuprof/analysis/idle_time.h"
#include "gpuprof/analysis/kernel_sequences.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/launch_stats.h"
#include "gpuprof/analysis/op_launch_delay.h"
#include "name_sequences.h"

namespace gpuprof {

namespace {

bool owned(const Event& e) { return (e.flags & kContextFlag) == 0; }

// idle_time_table over the owned activities; the gap before a stream's first one is the merge's.
std::vector<IdleTimePart> idle_parts(const Trace& t, const LaunchLinks& links, int64_t launched_before) {
  std::map<std::pair<int, uint32_t>, std::vector<uint32_t>> by_stream;
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (!e.on_device() || !owned(e) || i >= links.runtime_of.size()) continue;
    const uint32_t call = links.runtime_of[i];
    if (call != kNoIndex && t.events[call].start_ns < launched_before) by_stream[{e.device, e.tid}].push_back(i);
  }
  std::vector<IdleTimePart> parts;
  for (auto& [key, items] : by_stream) {
    std::sort(items.begin(), items.end(), [&](uint32_t a, uint32_t b) {
      const Event& ea = t.events[a];
      const Event& eb = t.events[b];
      return ea.start_ns != eb.start_ns ? ea.start_ns < eb.start_ns : a < b;
    });
    IdleTimePart p;
    p.device = key.first;
    p.stream = key.second;
    p.activities = int64_t(items.size());
    p.first_start_ns = t.events[items.front()].start_ns;
    p.first_call_start_ns = t.events[links.runtime_of[items.front()]].start_ns;
    p.last_end_ns = t.events[items.back()].end_ns();
    for (size_t k = 1; k < items.size(); ++k) {
      const int64_t prev_end = t.events[items[k - 1]].end_ns();
      const Event& e = t.events[items[k]];
      const int64_t gap = std::max<int64_t>(0, e.start_ns - prev_end);
      if (t.events[links.runtime_of[items[k]]].start_ns > prev_end) p.host_wait_ns += gap;
      else if (gap < kKernelWaitThresholdNs) p.kernel_wait_ns += gap;
      else p.other_ns += gap;
    }
    parts.push_back(p);
  }
  return parts;
}

// launch_stats_table's sums over the owned activities, each delay counted by value.
std::vector<LaunchStatsPart> launch_parts(const Trace& t, const LaunchLinks& links, int64_t launched_before) {
  std::vector<int8_t> launch_name(t.strings.size(), -1);
  std::unordered_map<uint32_t, size_t> part_of_name;
  std::vector<LaunchStatsPart> parts;
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (!e.on_device() || !owned(e) || i >= links.runtime_of.size()) continue;
    const uint32_t c = links.runtime_of[i];
    if (c == kNoIndex) continue;
    const Event& call = t.events[c];
    if (call.kind != EventKind::Runtime || call.start_ns >= launched_before) continue;
    int8_t& is_launch = launch_name[call.name];
    if (is_launch < 0) is_launch = is_launch_call(t.name_of(call)) ? 1 : 0;
    if (!is_launch) continue;
    const auto [it, added] = part_of_name.try_emplace(e.name, parts.size());
    if (added) parts.emplace_back().name = std::string(t.name_of(e));
    LaunchStatsPart& p = parts[it->second];
    const int64_t delay = std::max<int64_t>(0, e.start_ns - call.end_ns());
    ++p.launches;
    p.cpu_total_ns += call.dur_ns;
    p.gpu_total_ns += e.dur_ns;
    p.delay_total_ns += delay;
    p.delay_max_ns = std::max(p.delay_max_ns, delay);
    if (call.dur_ns > kLaunchRuntimeCutoffNs) ++p.runtime_outliers;
    else if (e.dur_ns < call.dur_ns) ++p.short_kernels;
    if (delay > kLaunchDelayCutoffNs) ++p.delay_outliers;
    ++p.delays[delay];
  }
  return parts;
}

// queue_length_table's points in the owned span. Every launch the window sees moves the length,
// so that the launches made before the span and started in it (or after it) are counted in.
std::vector<QueueLengthPart> queue_parts(const Trace& t, const LaunchLinks& links, const OwnedSpan& own,
                                         int64_t launched_before) {
  std::vector<int8_t> launch_name(t.strings.size(), -1);
  std::map<std::pair<int, uint32_t>, std::vector<std::pair<int64_t, int>>> by_stream;   // (ts, order)
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (!e.on_device()) continue;
    const uint32_t c = links.call_before(t, i, launched_before);
    if (c == kNoIndex) continue;
    const Event& call = t.events[c];
    int8_t& is_launch = launch_name[call.name];
    if (is_launch < 0) is_launch = is_queue_launch_call(t.name_of(call)) ? 1 : 0;
    if (!is_launch) continue;
    auto& points = by_stream[{e.device, e.tid}];
    points.emplace_back(e.start_ns, 0);   // an activity's start: -1, before a call at the same instant
    points.emplace_back(call.start_ns, 1);
  }
  std::vector<QueueLengthPart> parts;
  for (auto& [key, points] : by_stream) {
    std::sort(points.begin(), points.end());
    QueueLengthPart p;
    p.device = key.first;
    p.stream = key.second;
    int64_t length = 0;
    for (const auto& [ts, order] : points) {
      length += order ? 1 : -1;
      if (!own.owns(ts)) continue;
      if (p.samples == 0) p.first_ns = ts;
      else if (p.last_length >= kMaxLaunchQueue) p.blocked_ns += ts - p.last_ns;
      p.max = p.samples++ ? std::max(p.max, length) : length;
      p.sum += length;
      p.last_ns = ts;
      p.last_length = length;
    }
    if (p.samples) parts.push_back(p);
  }
  return parts;
}

struct Change {
  int64_t ts;
  int order;   // 0: an end, 1: a start (ends first at one instant)
  double delta;
};

// copy_bandwidth_table's counts over the owned copies and its points in the owned span, the
// running sum continued from the window before's carry.
std::vector<CopyBandwidthPart> copy_parts(const Trace& t, const LaunchLinks& links, const OwnedSpan& own,
                                          int64_t launched_before, const std::vector<CopyCarry>& carried) {
  std::map<std::string, std::pair<CopyBandwidthPart, std::vector<Change>>> by_kind;
  for (const CopyCarry& c : carried) {
    auto& [part, changes] = by_kind[c.kind];
    part.carry.level = c.level;
    part.carry.levels_sum = c.levels_sum;
    for (const OpenCopy& o : c.open) changes.push_back({o.end_ns, 0, -o.gbps});
  }
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if ((e.kind != EventKind::Memcpy && e.kind != EventKind::Memset) || !owned(e)) continue;
    if (links.call_before(t, i, launched_before) == kNoIndex) continue;
    auto& [part, changes] = by_kind[copy_bandwidth_kind(t.name_of(e))];
    const int64_t bytes = e.aux < t.copies.size() ? t.copies[e.aux].bytes : 0;
    const int64_t dur = std::max<int64_t>(e.dur_ns, 1);
    ++part.copies;
    part.bytes += bytes;
    part.time_ns += e.dur_ns;
    const double gbps = double(bytes) / double(dur);
    changes.push_back({e.start_ns, 1, gbps});
    changes.push_back({e.start_ns + dur, 0, -gbps});
  }
  std::vector<CopyBandwidthPart> parts;
  for (auto& [kind, entry] : by_kind) {
    auto& [part, changes] = entry;
    std::stable_sort(changes.begin(), changes.end(), [](const Change& a, const Change& b) {
      return a.ts != b.ts ? a.ts < b.ts : a.order < b.order;
    });
    part.carry.kind = kind;
    double level = part.carry.level;
    for (const Change& c : changes) {
      if (!own.owns(c.ts)) {   // an end after the span: the next window's
        part.carry.open.push_back({c.ts, -c.delta});
        continue;
      }
      level += c.delta;
      if (level > 0) {
        ++part.samples;
        part.carry.levels_sum += level;
        ++part.levels[level];
      }
    }
    part.carry.level = level;
    parts.push_back(std::move(part));
  }
  return parts;
}

// op_launch_delay_table's sums over the owned operators' launches.
std::vector<OpLaunchDelayPart> op_delay_parts(const Trace& t, const LaunchLinks& links, int64_t launched_before) {
  std::vector<int8_t> launch_name(t.strings.size(), -1);
  std::vector<int8_t> aten_name(t.strings.size(), -1);
  std::vector<OpLaunch> launches;
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (!e.on_device()) continue;
    const uint32_t c = links.call_before(t, i, launched_before);
    if (c == kNoIndex) continue;
    const Event& call = t.events[c];
    int8_t& is_launch = launch_name[call.name];
    if (is_launch < 0) is_launch = is_kernel_launch_name(t.name_of(call)) ? 1 : 0;
    if (!is_launch) continue;
    uint32_t op = links.op_of[c];
    while (op != kNoIndex) {
      const Event& o = t.events[op];
      int8_t& is_aten = aten_name[o.name];
      if (is_aten < 0) is_aten = t.name_of(o).rfind("aten::", 0) == 0 ? 1 : 0;
      if (is_aten && o.start_ns <= call.start_ns && o.end_ns() >= call.end_ns()) break;
      op = links.parent_op[op];
    }
    if (op != kNoIndex && owned(t.events[op])) launches.push_back({op, call.start_ns, c, i});
  }
  sort_launches(launches, t.events.size());
  NameSequences sequences;
  std::vector<OpLaunchDelayPart> by_sequence;
  std::vector<uint32_t> names;
  for (size_t a = 0; a < launches.size();) {
    const uint32_t op = launches[a].op;
    size_t b = a;
    names.clear();
    for (; b < launches.size() && launches[b].op == op; ++b) names.push_back(t.events[launches[b].event].name);
    const uint32_t k = sequences.intern(t.events[op].name, names);
    if (k == by_sequence.size()) {
      OpLaunchDelayPart& p = by_sequence.emplace_back();
      p.op = t.strings.at(sequences.head(k));
      p.kernels = sequences.joined(t, k);
    }
    OpLaunchDelayPart& p = by_sequence[k];
    ++p.calls;
    p.op_delay_ns += launches[a].at - t.events[op].start_ns;
    p.runtime_delay_ns += t.events[launches[a].event].start_ns - launches[a].at;
    a = b;
  }
  return by_sequence;
}

// kernel_sequence_table's rows over the owned operators, at every depth (the merge keeps the
// least of each name's over the whole trace), and each owned name's least depth.
std::vector<KernelSequencePart> sequence_parts(const Trace& t, const LaunchLinks& links, int64_t launched_before,
                                               std::map<std::string, int32_t>* least_depth) {
  const size_t n = t.events.size();
  if (links.parent_op.size() != n) return {};
  std::vector<int32_t> depth(n, -1);
  for (uint32_t i : host_ops_outer_first(t)) {
    if (t.events[i].start_ns >= launched_before) continue;
    const uint32_t p = links.parent_op[i];
    depth[i] = p == kNoIndex || depth[p] < 0 ? 0 : depth[p] + 1;
    if (!owned(t.events[i])) continue;
    const auto [it, added] = least_depth->try_emplace(std::string(t.name_of(t.events[i])), depth[i]);
    if (!added) it->second = std::min(it->second, depth[i]);
  }
  std::vector<OpLaunch> kernels;
  for (uint32_t i = 0; i < n; ++i) {
    const Event& e = t.events[i];
    if (!e.on_device()) continue;
    const uint32_t c = links.call_before(t, i, launched_before);
    if (c == kNoIndex) continue;
    for (uint32_t op = links.op_of[c]; op != kNoIndex; op = links.parent_op[op])
      if (depth[op] >= 0 && owned(t.events[op])) kernels.push_back({op, e.start_ns, 0, i});
  }
  sort_launches(kernels, n);
  NameSequences sequences;
  std::map<std::pair<int32_t, uint32_t>, size_t> part_of;   // (depth, sequence) -> its part
  std::vector<KernelSequencePart> parts;
  std::vector<uint32_t> names;
  for (size_t a = 0; a < kernels.size();) {
    const uint32_t op = kernels[a].op;
    size_t b = a;
    int64_t gpu = 0;
    names.clear();
    for (; b < kernels.size() && kernels[b].op == op; ++b) {
      const Event& k = t.events[kernels[b].event];
      names.push_back(k.name);
      gpu += k.dur_ns;
    }
    a = b;
    if (int64_t(names.size()) < kMinKernelSequence) continue;
    const uint32_t k = sequences.intern(t.events[op].name, names);
    const auto [it, added] = part_of.try_emplace({depth[op], k}, parts.size());
    if (added) {
      KernelSequencePart& p = parts.emplace_back();
      p.op = t.strings.at(sequences.head(k));
      p.kernels = sequences.joined(t, k);
      p.depth = depth[op];
    }
    KernelSequencePart& p = parts[it->second];
    ++p.count;
    p.gpu_ns += gpu;
    p.cpu_ns += t.events[op].dur_ns;
  }
  return parts;
}

}  // namespace

WindowParts window_parts(const Trace& t, const OwnedSpan& own, int64_t launched_before_ns,
                         const std::vector<CopyCarry>& carried) {
  const LaunchLinks links = link_launches(t);
  WindowParts w;
  w.idle_time = idle_parts(t, links, launched_before_ns);
  w.launch_stats = launch_parts(t, links, launched_before_ns);
  w.queue_length = queue_parts(t, links, own, launched_before_ns);
  w.copy_bandwidth = copy_parts(t, links, own, launched_before_ns, carried);
  w.op_launch_delay = op_delay_parts(t, links, launched_before_ns);
  w.kernel_sequences = sequence_parts(t, links, launched_before_ns, &w.least_depth);
  return w;
}

}  // namespace gpuprof
