#include "gpuprof/analysis/kernel_sequences.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

namespace gpuprof {

std::vector<KernelSequenceRow> kernel_sequence_table(const Trace& t, const LaunchLinks& links,
                                                     int64_t launched_before_ns, int64_t min_kernels) {
  const size_t n = t.events.size();
  if (links.parent_op.size() != n) return {};
  // Each host op's nesting depth (0: outermost), and each name's least depth.
  std::vector<int32_t> depth(n, -1);
  std::vector<int32_t> least_depth(t.strings.size(), -1);
  for (uint32_t i : host_ops_outer_first(t)) {
    if (t.events[i].start_ns >= launched_before_ns) continue;
    const uint32_t p = links.parent_op[i];
    depth[i] = p == kNoIndex || depth[p] < 0 ? 0 : depth[p] + 1;
    int32_t& least = least_depth[t.events[i].name];
    if (least < 0 || depth[i] < least) least = depth[i];
  }
  // The kernels of each op that is a root (at its name's least depth).
  std::map<uint32_t, std::vector<uint32_t>> kernels_of;
  for (uint32_t i = 0; i < n; ++i) {
    const Event& e = t.events[i];
    if (!e.on_device()) continue;
    const uint32_t c = links.call_before(t, i, launched_before_ns);
    if (c == kNoIndex) continue;
    for (uint32_t op = links.op_of[c]; op != kNoIndex; op = links.parent_op[op]) {
      if (depth[op] >= 0 && depth[op] == least_depth[t.events[op].name]) kernels_of[op].push_back(i);
    }
  }
  std::map<std::pair<uint32_t, std::string>, KernelSequenceRow> rows_by_key;
  for (auto& [op, kernels] : kernels_of) {
    if (int64_t(kernels.size()) < min_kernels) continue;
    std::stable_sort(kernels.begin(), kernels.end(),
                     [&](uint32_t a, uint32_t b) { return t.events[a].start_ns < t.events[b].start_ns; });
    std::string sequence;
    int64_t gpu = 0;
    for (uint32_t k : kernels) {
      if (!sequence.empty()) sequence += " -> ";
      sequence += t.name_of(t.events[k]);
      gpu += t.events[k].dur_ns;
    }
    KernelSequenceRow& r = rows_by_key[{t.events[op].name, sequence}];
    ++r.count;
    r.gpu_ns += gpu;
    r.cpu_ns += t.events[op].dur_ns;
    if (r.count == 1) {
      r.op = t.name_of(t.events[op]);
      r.kernels = std::move(sequence);
    }
  }
  std::vector<KernelSequenceRow> rows;
  for (auto& [key, r] : rows_by_key)
    if (r.count >= 2) rows.push_back(std::move(r));
  std::sort(rows.begin(), rows.end(), [](const KernelSequenceRow& a, const KernelSequenceRow& b) {
    return std::tie(b.count, a.op, a.kernels) < std::tie(a.count, b.op, b.kernels);
  });
  return rows;
}

}  // namespace gpuprof
