// The host-to-device copy of each step's batch (docs/metrics.md, "Input pipeline"): what the
// training loop runs right after the DataLoader hands it the batch.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "gpuprof/core/trace.h"

namespace gpuprof {

// Per step: after each DataLoader `__next__` range that starts in the step, the copy operators
// (aten::to, aten::_to_copy, aten::copy_) its thread runs at the top level before any other top-level
// operator or range: `x.to(device)` and `y.to(device)` of `for x, y in loader`. On a GPU, the
// host-to-device copies those operators launched (linked by their runtime calls' correlation), and
// the part of those copies' time that a kernel of the same device ran beside.
struct StepTransfer {
  int64_t batches = 0;             // DataLoader ranges starting in the step
  int64_t copy_ops = 0;            // top-level copy operators counted
  int64_t host_ns = 0;             // their host time
  int64_t device_copies = 0;       // host-to-device copies they launched
  int64_t device_ns = 0;           // those copies' device time
  int64_t overlap_ns = 0;          // the part of it a kernel ran beside
};

std::vector<StepTransfer> batch_transfers(const Trace& trace,
                                          const std::vector<std::pair<int64_t, int64_t>>& steps);

}  // namespace gpuprof
