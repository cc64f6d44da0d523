// Holistic Trace Analysis's ATen operator -> kernel launch delays (docs/metrics.md, "Operator
// launch delay"): per aten operator and the sequence of kernels each call of it launched, how long
// after the operator started its first kernel launch call began, and how long after that call the
// kernel started on the device.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/launch_stats.h"
#include "gpuprof/core/trace.h"

namespace gpuprof {

// The calls HTA counts as kernel launches here: names starting "cuda" with "LaunchKernel" in them,
// or starting "cuLaunchKernel" or "runFunction" (no copy, set or HIP call).
bool is_kernel_launch_name(std::string_view name);

struct OpLaunchDelayRow {
  std::string op;        // the aten operator
  std::string kernels;   // the kernels one call of it launched, in launch order, joined by " -> "
  int64_t calls = 0;     // calls of the operator that launched exactly this sequence
  double op_delay_ns = 0;        // mean: first launch call's start - the operator's start
  double runtime_delay_ns = 0;   // mean: its kernel's start - the first launch call's start
};

// One row per (aten operator, kernel sequence), the most calls first (then by operator and
// sequence). A launch call belongs to the innermost operator named "aten::..." that contains it in
// time among the operators its linked operator is nested in (LaunchLinks::op_of and parent_op);
// launch calls that started before `launched_before_ns` (HTA's scope, as in idle_time.h).
std::vector<OpLaunchDelayRow> op_launch_delay_table(const Trace& trace, const LaunchLinks& links,
                                                    int64_t launched_before_ns = kNoEndNs);

}  // namespace gpuprof
