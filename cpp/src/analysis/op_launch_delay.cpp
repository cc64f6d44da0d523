#include "gpuprof/analysis/op_launch_delay.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "launch_walks.h"
#include "name_sequences.h"

namespace gpuprof {

bool is_kernel_launch_name(std::string_view n) {
  if (n.substr(0, 4) == "cuda" && n.find("LaunchKernel") != std::string_view::npos) return true;
  return n.substr(0, 14) == "cuLaunchKernel" || n.substr(0, 11) == "runFunction";
}

std::vector<OpLaunchDelayRow> op_launch_delay_table(const Trace& t, const LaunchLinks& links,
                                                    int64_t launched_before_ns) {
  const std::vector<OpLaunch> launches =
      collect_op_launches(t, links, launched_before_ns, [](uint32_t) { return true; });
  struct Sums {
    int64_t calls = 0, op_delay = 0, runtime_delay = 0;
  };
  // Each distinct (operator name, sequence of activity names) summed by its number first.
  NameSequences sequences;
  std::vector<Sums> by_sequence;
  for_each_op_sequence(t, launches, 1, sequences, [&](uint32_t op, const OpLaunch& first, uint32_t k, int64_t) {
    if (k == by_sequence.size()) by_sequence.emplace_back();
    Sums& s = by_sequence[k];
    ++s.calls;
    s.op_delay += first.at - t.events[op].start_ns;
    s.runtime_delay += t.events[first.event].start_ns - first.at;
  });
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
