// Holistic Trace Analysis's frequent CUDA kernel sequences (docs/metrics.md, "Kernel sequences"):
// for each operator name, the kernels each of its outermost calls launched (itself and the
// operators inside it), in start order, and how often each such sequence recurs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/launch_stats.h"
#include "gpuprof/core/trace.h"

namespace gpuprof {

// HTA's `min_pattern_len`: a call that launched fewer kernels makes no sequence.
constexpr int64_t kMinKernelSequence = 3;

struct KernelSequenceRow {
  std::string op;
  std::string kernels;   // the kernels, by start on the device, joined by " -> "
  int64_t count = 0;     // calls of the operator that launched exactly this sequence
  int64_t gpu_ns = 0;    // summed durations of those kernels over the calls
  int64_t cpu_ns = 0;    // summed durations of the calls
};

// One row per (operator name, sequence) that recurs (count >= 2), the most frequent first (then
// by operator and sequence). For each operator name, its calls at the least nesting depth at
// which the name occurs (LaunchLinks::parent_op) that launched at least `min_kernels` kernels;
// a kernel belongs to every operator around its launch call. HTA's scope: operators that started,
// and kernels whose launch call started, before `launched_before_ns`. `outer_first`: the host ops
// as host_ops_outer_first gives them, when the caller has them already.
std::vector<KernelSequenceRow> kernel_sequence_table(const Trace& trace, const LaunchLinks& links,
                                                     int64_t launched_before_ns = kNoEndNs,
                                                     int64_t min_kernels = kMinKernelSequence,
                                                     const std::vector<uint32_t>* outer_first = nullptr);

}  // namespace gpuprof
