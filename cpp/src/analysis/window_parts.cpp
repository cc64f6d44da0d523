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
#include "launch_walks.h"
#include "name_sequences.h"

namespace gpuprof {

namespace {

bool owned(const Event& e) { return (e.flags & kContextFlag) == 0; }

// idle_time_table over the owned activities; the gap before a stream's first one is the merge's.
std::vector<IdleTimePart> idle_parts(const Trace& t, const LaunchLinks& links, int64_t launched_before) {
  std::vector<IdleTimePart> parts;
  for (const auto& [key, items] : activities_by_stream(t, links, launched_before, owned)) {
    IdleTimePart p;
    p.device = key.first;
    p.stream = key.second;
    p.activities = int64_t(items.size());
    p.first_start_ns = t.events[items.front()].start_ns;
    p.first_call_start_ns = t.events[links.runtime_of[items.front()]].start_ns;
    p.last_end_ns = t.events[items.back()].end_ns();
    add_idle_gaps(p, t, links, items, kKernelWaitThresholdNs);
    parts.push_back(p);
  }
  return parts;
}

// launch_stats_table's sums over the owned activities, each delay counted by value.
std::vector<LaunchStatsPart> launch_parts(const Trace& t, const LaunchLinks& links, int64_t launched_before) {
  std::unordered_map<uint32_t, size_t> part_of_name;
  std::vector<LaunchStatsPart> parts;
  for_each_runtime_launch(t, links, launched_before, owned, [&](uint32_t i, uint32_t c) {
    const Event& e = t.events[i];
    const auto [it, added] = part_of_name.try_emplace(e.name, parts.size());
    if (added) parts.emplace_back().name = std::string(t.name_of(e));
    LaunchStatsPart& p = parts[it->second];
    ++p.delays[add_launch(p, e, t.events[c])];
  });
  return parts;
}

// queue_length_table's points in the owned span. Every launch the window sees moves the length,
// so that the launches made before the span and started in it (or after it) are counted in.
std::vector<QueueLengthPart> queue_parts(const Trace& t, const LaunchLinks& links, const OwnedSpan& own,
                                         int64_t launched_before) {
  std::map<std::pair<int, uint32_t>, std::vector<std::pair<int64_t, int>>> by_stream;   // (ts, order)
  for_each_named_launch(t, links, launched_before, is_queue_launch_call, [&](uint32_t i, uint32_t c) {
    const Event& e = t.events[i];
    auto& points = by_stream[{e.device, e.tid}];
    points.emplace_back(e.start_ns, 0);   // an activity's start: -1, before a call at the same instant
    points.emplace_back(t.events[c].start_ns, 1);
  });
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
  for_each_copy(t, links, launched_before, owned, [&](const Event& e) {
    auto& [part, changes] = by_kind[copy_bandwidth_kind(t.name_of(e))];
    const auto [dur, gbps] = add_copy(part, t, e);
    changes.push_back({e.start_ns, 1, gbps});
    changes.push_back({e.start_ns + dur, 0, -gbps});
  });
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
  const std::vector<OpLaunch> launches =
      collect_op_launches(t, links, launched_before, [&](uint32_t op) { return owned(t.events[op]); });
  NameSequences sequences;
  std::vector<OpLaunchDelayPart> by_sequence;
  for_each_op_sequence(t, launches, 1, sequences, [&](uint32_t op, const OpLaunch& first, uint32_t k, int64_t) {
    if (k == by_sequence.size()) {
      OpLaunchDelayPart& p = by_sequence.emplace_back();
      p.op = t.strings.at(sequences.head(k));
      p.kernels = sequences.joined(t, k);
    }
    OpLaunchDelayPart& p = by_sequence[k];
    ++p.calls;
    p.op_delay_ns += first.at - t.events[op].start_ns;
    p.runtime_delay_ns += t.events[first.event].start_ns - first.at;
  });
  return by_sequence;
}

// kernel_sequence_table's rows over the owned operators, at every depth (the merge keeps the
// least of each name's over the whole trace), and each owned name's least depth.
std::vector<KernelSequencePart> sequence_parts(const Trace& t, const LaunchLinks& links, int64_t launched_before,
                                               std::map<std::string, int32_t>* least_depth) {
  if (links.parent_op.size() != t.events.size()) return {};
  const std::vector<int32_t> depth =
      op_depths(t, links, host_ops_outer_first(t), launched_before, [&](uint32_t i, int32_t d) {
        if (!owned(t.events[i])) return;
        const auto [it, added] = least_depth->try_emplace(std::string(t.name_of(t.events[i])), d);
        if (!added) it->second = std::min(it->second, d);
      });
  const std::vector<OpLaunch> kernels = collect_op_kernels(
      t, links, launched_before, [&](uint32_t op) { return depth[op] >= 0 && owned(t.events[op]); });
  NameSequences sequences;
  std::map<std::pair<int32_t, uint32_t>, size_t> part_of;   // (depth, sequence) -> its part
  std::vector<KernelSequencePart> parts;
  for_each_op_sequence(t, kernels, kMinKernelSequence, sequences,
                       [&](uint32_t op, const OpLaunch&, uint32_t k, int64_t gpu) {
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
                       });
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
