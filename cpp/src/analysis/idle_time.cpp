#include "gpuprof/analysis/idle_time.h"

#include <algorithm>
#include <map>
#include <utility>

#include "launch_walks.h"

namespace gpuprof {

std::vector<IdleTimeRow> idle_time_table(const Trace& t, const LaunchLinks& links, int64_t launched_before_ns,
                                         int64_t kernel_wait_threshold_ns) {
  auto by_stream = activities_by_stream(t, links, launched_before_ns, [](const Event&) { return true; });
  std::vector<IdleTimeRow> rows;
  rows.reserve(by_stream.size());
  for (const auto& [key, items] : by_stream) {
    IdleTimeRow row;
    row.device = key.first;
    row.stream = key.second;
    row.activities = int64_t(items.size());
    add_idle_gaps(row, t, links, items, kernel_wait_threshold_ns);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace gpuprof
