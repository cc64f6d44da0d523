// CUDA graphs (docs/metrics.md, "CUDA graphs"): the kernels replayed from each captured graph, how
// many times it was launched, and the host code it was launched from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/core/trace.h"

namespace gpuprof {

struct CudaGraphRow {
  uint32_t graph_id = 0;
  int64_t launches = 0;    // distinct launch correlations (cudaGraphLaunch calls) among its kernels
  int64_t kernels = 0;     // kernel executions
  int64_t device_ns = 0;   // their summed durations
  // The innermost named host event (operator, user range or compiled region, module call) around
  // its launch calls on their thread, the one most launches share (then the first by name); the
  // launching operator when no event contains the call; "" when its calls were not recorded.
  std::string launched_from;
  double kernels_per_launch() const { return launches > 0 ? double(kernels) / double(launches) : -1.0; }
};

// One row per graph id (KernelInfo::graph_id, non-zero), most device time first (then by id);
// empty, at the cost of one pass over the events, when no kernel was replayed from a graph.
std::vector<CudaGraphRow> cuda_graph_table(const Trace& trace, const LaunchLinks& links);

}  // namespace gpuprof
