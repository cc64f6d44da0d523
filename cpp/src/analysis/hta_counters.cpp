#include "gpuprof/analysis/hta_counters.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "launch_walks.h"

namespace gpuprof {

namespace {

// One change of a step function: at `ts`, by `delta`; `order` breaks ties at one instant.
template <typename T>
struct Change {
  int64_t ts;
  int order;
  T delta;
};

template <typename T>
void sort_changes(std::vector<Change<T>>& changes) {
  std::stable_sort(changes.begin(), changes.end(), [](const Change<T>& a, const Change<T>& b) {
    return a.ts != b.ts ? a.ts < b.ts : a.order < b.order;
  });
}

// The q-quantile of sorted values, interpolating linearly between the two nearest ranks.
double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double h = q * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - double(lo)) * (sorted[hi] - sorted[lo]);
}

}  // namespace

bool is_queue_launch_call(std::string_view n) {
  return is_launch_call(n) || n == "cuLaunchKernel" || n == "cuLaunchKernelEx" || n == "hipMemcpyWithStream";
}

std::vector<QueueLengthRow> queue_length_table(const Trace& t, const LaunchLinks& links,
                                               int64_t launched_before_ns, int64_t max_queue) {
  // Per stream, the kernels' starts (-1) and their calls' starts (+1) apart: each list is mostly in
  // order already, so each is sorted only when not, and the two are merged (a kernel's start before
  // a call's at the same instant), which is the order sort_changes gives.
  struct Starts {
    std::vector<int64_t> kernels, calls;
  };
  std::map<std::pair<int, uint32_t>, Starts> by_stream;
  std::pair<int, uint32_t> last_key{0, 0};
  Starts* last = nullptr;
  for_each_named_launch(t, links, launched_before_ns, is_queue_launch_call, [&](uint32_t i, uint32_t c) {
    const Event& e = t.events[i];
    const std::pair<int, uint32_t> key{e.device, e.tid};
    if (last == nullptr || key != last_key) {
      last = &by_stream[key];
      last_key = key;
    }
    last->kernels.push_back(e.start_ns);
    last->calls.push_back(t.events[c].start_ns);
  });
  std::vector<QueueLengthRow> rows;
  rows.reserve(by_stream.size());
  std::vector<Change<int64_t>> changes;
  for (auto& [key, starts] : by_stream) {
    for (std::vector<int64_t>* v : {&starts.kernels, &starts.calls}) sort_runs(*v);
    changes.clear();
    changes.reserve(starts.kernels.size() + starts.calls.size());
    const std::vector<int64_t>& ks = starts.kernels;
    const std::vector<int64_t>& cs = starts.calls;
    for (size_t ki = 0, ci = 0; ki < ks.size() || ci < cs.size();) {
      if (ci == cs.size() || (ki < ks.size() && ks[ki] <= cs[ci])) changes.push_back({ks[ki++], 0, -1});
      else changes.push_back({cs[ci++], 1, +1});
    }
    QueueLengthRow row;
    row.device = key.first;
    row.stream = key.second;
    row.samples = int64_t(changes.size());
    int64_t length = 0, sum = 0;
    for (size_t k = 0; k < changes.size(); ++k) {
      length += changes[k].delta;
      sum += length;
      row.max = k ? std::max(row.max, length) : length;
      if (length >= max_queue && k + 1 < changes.size()) row.blocked_ns += changes[k + 1].ts - changes[k].ts;
    }
    row.mean = double(sum) / double(changes.size());
    rows.push_back(row);
  }
  return rows;
}

std::string copy_bandwidth_kind(std::string_view name) {
  if (name.substr(0, 6) == "Memset") return "Memset";
  if (name.substr(0, 6) != "Memcpy") return "Memcpy Unknown";
  return std::string(name.substr(0, 11));
}

std::vector<CopyBandwidthRow> copy_bandwidth_table(const Trace& t, const LaunchLinks& links,
                                                   int64_t launched_before_ns) {
  std::map<std::string, std::pair<CopyBandwidthRow, std::vector<Change<double>>>> by_kind;
  for_each_copy(
      t, links, launched_before_ns, [](const Event&) { return true; },
      [&](const Event& e) {
        auto& [row, changes] = by_kind[copy_bandwidth_kind(t.name_of(e))];
        const auto [dur, gbps] = add_copy(row, t, e);
        changes.push_back({e.start_ns, 1, gbps});
        changes.push_back({e.start_ns + dur, 0, -gbps});
      });
  std::vector<CopyBandwidthRow> rows;
  rows.reserve(by_kind.size());
  for (auto& [kind, entry] : by_kind) {
    auto& [row, changes] = entry;
    row.kind = kind;
    row.gbps = row.time_ns ? double(row.bytes) / double(row.time_ns) : 0.0;
    sort_changes(changes);
    std::vector<double> levels;
    double level = 0, sum = 0;
    for (const Change<double>& c : changes) {
      level += c.delta;
      if (level > 0) {
        levels.push_back(level);
        sum += level;
      }
    }
    if (!levels.empty()) {
      row.samples = int64_t(levels.size());
      row.mean_gbps = sum / double(levels.size());
      std::sort(levels.begin(), levels.end());
      row.min_gbps = levels.front();
      row.p50_gbps = quantile(levels, 0.5);
      row.max_gbps = levels.back();
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace gpuprof
