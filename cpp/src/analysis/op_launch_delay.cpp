#include "gpuprof/analysis/op_launch_delay.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "name_sequences.h"

namespace gpuprof {

bool is_kernel_launch_name(std::string_view n) {
  if (n.substr(0, 4) == "cuda" && n.find("LaunchKernel") != std::string_view::npos) return true;
  return n.substr(0, 14) == "cuLaunchKernel" || n.substr(0, 11) == "runFunction";
}

std::vector<OpLaunchDelayRow> op_launch_delay_table(const Trace& t, const LaunchLinks& links,
                                                    int64_t launched_before_ns) {
  std::vector<int8_t> launch_name(t.strings.size(), -1);   // each name classified once
  std::vector<int8_t> aten_name(t.strings.size(), -1);
  // Each operator's launches, by (op, call start, call, device activity).
  std::vector<OpLaunch> launches;
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
    if (op != kNoIndex) launches.push_back({op, call.start_ns, c, i});
  }
  sort_launches(launches, t.events.size());
  struct Sums {
    int64_t calls = 0, op_delay = 0, runtime_delay = 0;
  };
  // Each distinct (operator name, sequence of activity names) summed by its number first.
  NameSequences sequences;
  std::vector<Sums> by_sequence;
  std::vector<uint32_t> names;
  for (size_t a = 0; a < launches.size();) {
    const uint32_t op = launches[a].op;
    size_t b = a;
    names.clear();
    for (; b < launches.size() && launches[b].op == op; ++b) names.push_back(t.events[launches[b].event].name);
    const uint32_t k = sequences.intern(t.events[op].name, names);
    if (k == by_sequence.size()) by_sequence.emplace_back();
    Sums& s = by_sequence[k];
    ++s.calls;
    s.op_delay += launches[a].at - t.events[op].start_ns;
    s.runtime_delay += t.events[launches[a].event].start_ns - launches[a].at;
    a = b;
  }
  std::map<std::pair<uint32_t, std::string>, Sums> sums;   // by (operator name id, sequence)
  for (uint32_t k = 0; k < by_sequence.size(); ++k) {
    Sums& s = sums[{sequences.head(k), sequences.joined(t, k)}];
    s.calls += by_sequence[k].calls;
    s.op_delay += by_sequence[k].op_delay;
    s.runtime_delay += by_sequence[k].runtime_delay;
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
