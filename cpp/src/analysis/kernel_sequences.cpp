#include "gpuprof/analysis/kernel_sequences.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "launch_walks.h"
#include "name_sequences.h"

namespace gpuprof {

std::vector<KernelSequenceRow> kernel_sequence_table(const Trace& t, const LaunchLinks& links,
                                                     int64_t launched_before_ns, int64_t min_kernels,
                                                     const std::vector<uint32_t>* outer_first) {
  const size_t n = t.events.size();
  if (links.parent_op.size() != n) return {};
  // Each host op's nesting depth (0: outermost), and each name's least depth.
  std::vector<int32_t> least_depth(t.strings.size(), -1);
  const std::vector<uint32_t> sorted_here = outer_first ? std::vector<uint32_t>() : host_ops_outer_first(t);
  auto note_least = [&](uint32_t i, int32_t d) {
    int32_t& least = least_depth[t.events[i].name];
    if (least < 0 || d < least) least = d;
  };
  const std::vector<int32_t> depth =
      op_depths(t, links, outer_first ? *outer_first : sorted_here, launched_before_ns, note_least);
  // The kernels of each op that is a root (at its name's least depth), by (op, start, event).
  const std::vector<OpLaunch> kernels = collect_op_kernels(t, links, launched_before_ns, [&](uint32_t op) {
    return depth[op] >= 0 && depth[op] == least_depth[t.events[op].name];
  });
  // Each distinct (op name, kernel names) summed by its number first, then by its text.
  NameSequences sequences;
  std::vector<KernelSequenceRow> by_sequence;
  for_each_op_sequence(t, kernels, min_kernels, sequences,
                       [&](uint32_t op, const OpLaunch&, uint32_t k, int64_t gpu) {
                         if (k == by_sequence.size()) by_sequence.emplace_back();
                         KernelSequenceRow& r = by_sequence[k];
                         ++r.count;
                         r.gpu_ns += gpu;
                         r.cpu_ns += t.events[op].dur_ns;
                       });
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
