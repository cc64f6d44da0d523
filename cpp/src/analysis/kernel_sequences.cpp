#include "gpuprof/analysis/kernel_sequences.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "name_sequences.h"

namespace gpuprof {

std::vector<KernelSequenceRow> kernel_sequence_table(const Trace& t, const LaunchLinks& links,
                                                     int64_t launched_before_ns, int64_t min_kernels,
                                                     const std::vector<uint32_t>* outer_first) {
  const size_t n = t.events.size();
  if (links.parent_op.size() != n) return {};
  // Each host op's nesting depth (0: outermost), and each name's least depth.
  std::vector<int32_t> depth(n, -1);
  std::vector<int32_t> least_depth(t.strings.size(), -1);
  const std::vector<uint32_t> sorted_here = outer_first ? std::vector<uint32_t>() : host_ops_outer_first(t);
  for (uint32_t i : outer_first ? *outer_first : sorted_here) {
    if (t.events[i].start_ns >= launched_before_ns) continue;
    const uint32_t p = links.parent_op[i];
    depth[i] = p == kNoIndex || depth[p] < 0 ? 0 : depth[p] + 1;
    int32_t& least = least_depth[t.events[i].name];
    if (least < 0 || depth[i] < least) least = depth[i];
  }
  // The kernels of each op that is a root (at its name's least depth), by (op, start, event).
  std::vector<OpLaunch> kernels;
  for (uint32_t i = 0; i < n; ++i) {
    const Event& e = t.events[i];
    if (!e.on_device()) continue;
    const uint32_t c = links.call_before(t, i, launched_before_ns);
    if (c == kNoIndex) continue;
    for (uint32_t op = links.op_of[c]; op != kNoIndex; op = links.parent_op[op]) {
      if (depth[op] >= 0 && depth[op] == least_depth[t.events[op].name]) kernels.push_back({op, e.start_ns, 0, i});
    }
  }
  sort_launches(kernels, t.events.size());
  // Each distinct (op name, kernel names) summed by its number first, then by its text.
  NameSequences sequences;
  std::vector<KernelSequenceRow> by_sequence;
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
    if (int64_t(names.size()) < min_kernels) continue;
    const uint32_t k = sequences.intern(t.events[op].name, names);
    if (k == by_sequence.size()) by_sequence.emplace_back();
    KernelSequenceRow& r = by_sequence[k];
    ++r.count;
    r.gpu_ns += gpu;
    r.cpu_ns += t.events[op].dur_ns;
  }
  std::map<std::pair<uint32_t, std::string>, KernelSequenceRow> rows_by_key;
  for (uint32_t k = 0; k < by_sequence.size(); ++k) {
    std::string sequence = sequences.joined(t, k);
    KernelSequenceRow& r = rows_by_key[{sequences.head(k), sequence}];
    if (r.count == 0) {
      r.op = t.strings.at(sequences.head(k));
      r.kernels = std::move(sequence);
    }
    r.count += by_sequence[k].count;
    r.gpu_ns += by_sequence[k].gpu_ns;
    r.cpu_ns += by_sequence[k].cpu_ns;
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
