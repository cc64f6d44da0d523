#include "gpuprof/analysis/idle_time.h"

#include <algorithm>
#include <map>
#include <utility>

namespace gpuprof {

std::vector<IdleTimeRow> idle_time_table(const Trace& t, const LaunchLinks& links, int64_t launched_before_ns,
                                         int64_t kernel_wait_threshold_ns) {
  std::map<std::pair<int, uint32_t>, std::vector<uint32_t>> by_stream;
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (!e.on_device() || i >= links.runtime_of.size()) continue;
    const uint32_t call = links.runtime_of[i];
    if (call != kNoIndex && t.events[call].start_ns < launched_before_ns)
      by_stream[{e.device, e.tid}].push_back(i);
  }
  std::vector<IdleTimeRow> rows;
  rows.reserve(by_stream.size());
  for (auto& [key, items] : by_stream) {
    auto before = [&](uint32_t a, uint32_t b) {
      const Event& ea = t.events[a];
      const Event& eb = t.events[b];
      return ea.start_ns != eb.start_ns ? ea.start_ns < eb.start_ns : a < b;
    };
    if (!std::is_sorted(items.begin(), items.end(), before)) std::sort(items.begin(), items.end(), before);
    IdleTimeRow row;
    row.device = key.first;
    row.stream = key.second;
    row.activities = int64_t(items.size());
    for (size_t k = 1; k < items.size(); ++k) {
      const int64_t prev_end = t.events[items[k - 1]].end_ns();
      const Event& e = t.events[items[k]];
      const int64_t gap = std::max<int64_t>(0, e.start_ns - prev_end);
      if (t.events[links.runtime_of[items[k]]].start_ns > prev_end) row.host_wait_ns += gap;
      else if (gap < kernel_wait_threshold_ns) row.kernel_wait_ns += gap;
      else row.other_ns += gap;
    }
    rows.push_back(row);
  }
  return rows;
}

}  // namespace gpuprof
