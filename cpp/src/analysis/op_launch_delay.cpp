#include "gpuprof/analysis/op_launch_delay.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace gpuprof {

bool is_kernel_launch_name(std::string_view n) {
  if (n.substr(0, 4) == "cuda" && n.find("LaunchKernel") != std::string_view::npos) return true;
  return n.substr(0, 14) == "cuLaunchKernel" || n.substr(0, 11) == "runFunction";
}

std::vector<OpLaunchDelayRow> op_launch_delay_table(const Trace& t, const LaunchLinks& links,
                                                    int64_t launched_before_ns) {
  std::vector<int8_t> launch_name(t.strings.size(), -1);   // each name classified once
  std::vector<int8_t> aten_name(t.strings.size(), -1);
  // Each operator's launches: (call start, call, device activity).
  std::unordered_map<uint32_t, std::vector<std::tuple<int64_t, uint32_t, uint32_t>>> by_op;
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (!e.on_device()) continue;
    const uint32_t c = links.call_before(t, i, launched_before_ns);
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
    if (op != kNoIndex) by_op[op].emplace_back(call.start_ns, c, i);
  }
  struct Sums {
    int64_t calls = 0, op_delay = 0, runtime_delay = 0;
  };
  std::map<std::pair<uint32_t, std::string>, Sums> sums;   // by (operator name id, sequence)
  for (auto& [op, launches] : by_op) {
    std::sort(launches.begin(), launches.end());
    std::string sequence;
    for (const auto& [start, call, activity] : launches) {
      if (!sequence.empty()) sequence += " -> ";
      sequence += t.name_of(t.events[activity]);
    }
    const auto& [first_start, first_call, first_activity] = launches.front();
    Sums& s = sums[{t.events[op].name, std::move(sequence)}];
    ++s.calls;
    s.op_delay += first_start - t.events[op].start_ns;
    s.runtime_delay += t.events[first_activity].start_ns - first_start;
  }
  std::vector<OpLaunchDelayRow> rows;
  rows.reserve(sums.size());
  for (auto& [key, s] : sums) {
    OpLaunchDelayRow& r = rows.emplace_back();
    r.op = t.strings.at(key.first);
    r.kernels = key.second;
    r.calls = s.calls;
    r.op_delay_ns = double(s.op_delay) / double(s.calls);
    r.runtime_delay_ns = double(s.runtime_delay) / double(s.calls);
  }
  std::sort(rows.begin(), rows.end(), [](const OpLaunchDelayRow& a, const OpLaunchDelayRow& b) {
    return std::tie(b.calls, a.op, a.kernels) < std::tie(a.calls, b.op, b.kernels);
  });
  return rows;
}

}  // namespace gpuprof
