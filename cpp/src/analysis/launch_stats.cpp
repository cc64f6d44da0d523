#include "gpuprof/analysis/launch_stats.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "launch_walks.h"

namespace gpuprof {

namespace {

// The q-quantile of sorted values, interpolating linearly between the two nearest ranks.
double quantile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double h = q * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return double(sorted[lo]) + (h - double(lo)) * double(sorted[hi] - sorted[lo]);
}

}  // namespace

bool is_launch_call(std::string_view n) {
  return n == "cudaLaunchKernel" || n == "cudaLaunchKernelExC" || n == "cudaMemcpyAsync" ||
         n == "cudaMemsetAsync" || n == "hipLaunchKernel" || n == "hipExtLaunchKernel" ||
         n == "hipModuleLaunchKernel" || n == "hipExtModuleLaunchKernel" || n == "hipMemcpyAsync" ||
         n == "hipMemsetAsync";
}

int64_t last_step_start(const Trace& t) {
  int64_t last = kNoEndNs;
  int markers = 0;
  for (const Event& e : t.events) {
    if (e.kind != EventKind::StepMarker) continue;
    last = markers++ ? std::max(last, e.start_ns) : e.start_ns;
  }
  return markers >= 2 ? last : kNoEndNs;
}

std::vector<LaunchStatsRow> launch_stats_table(const Trace& t, const LaunchLinks& links,
                                               int64_t launched_before_ns) {
  std::unordered_map<uint32_t, size_t> row_of_name;
  std::vector<LaunchStatsRow> rows;
  std::vector<std::vector<int64_t>> delays;
  for_each_runtime_launch(
      t, links, launched_before_ns, [](const Event&) { return true; },
      [&](uint32_t i, uint32_t c) {
        const Event& e = t.events[i];
        const auto [it, added] = row_of_name.try_emplace(e.name, rows.size());
        if (added) {
          rows.emplace_back().name = std::string(t.name_of(e));
          delays.emplace_back();
        }
        delays[it->second].push_back(add_launch(rows[it->second], e, t.events[c]));
      });
  for (size_t k = 0; k < rows.size(); ++k) {
    std::sort(delays[k].begin(), delays[k].end());
    rows[k].delay_p50_ns = quantile(delays[k], 0.50);
    rows[k].delay_p95_ns = quantile(delays[k], 0.95);
  }
  std::sort(rows.begin(), rows.end(), [](const LaunchStatsRow& a, const LaunchStatsRow& b) {
    return a.delay_total_ns != b.delay_total_ns ? a.delay_total_ns > b.delay_total_ns : a.name < b.name;
  });
  return rows;
}

}  // namespace gpuprof
