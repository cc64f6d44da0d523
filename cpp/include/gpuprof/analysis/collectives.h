// Collectives per kind and process group (docs/metrics.md, "Collectives"): every collective call in
// the steps, its bytes and its time, grouped by what it is (all_reduce, all_gather, ...) and the
// process group it ran in, with nccl-tests' algorithm and bus bandwidths.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/core/names.h"   // the name classifiers this stage's users read beside it
#include "gpuprof/core/trace.h"

namespace gpuprof {

// The kind a collective's name says, in nccl-tests' words: "all_reduce", "all_gather",
// "reduce_scatter", "all_to_all", "broadcast", "reduce", "gather", "scatter", "send", "recv",
// "barrier"; torch's spellings ("allreduce", "_allgather_base", "allgather_into_tensor_coalesced",
// "alltoall_base", "_reduce_scatter_base", "gloo:all_reduce", ...) map to them. Another name is
// returned as it is ("coalesced"); "" for "wait" and "init", which move no data of their own.
std::string collective_kind(std::string_view name);

// Bytes per element of a dtype as torch names it ("Float", "BFloat16", "Long") or as Kineto writes
// an input's type ("float", "c10::BFloat16", "long int"); -1 when unknown.
int64_t dtype_bytes(std::string_view dtype);

// nccl-tests' bus bandwidth factor for a kind in a group of n ranks (doc/PERFORMANCE.md there):
// all_reduce 2(n-1)/n; all_gather, reduce_scatter and all_to_all (n-1)/n; broadcast, reduce,
// send, recv 1. -1 for a kind without one (barrier, gather, scatter, unknown) or n < 1.
double bus_bandwidth_factor(std::string_view kind, int64_t n);

// The process groups of the job, as torch lists them (distributedInfo's pg_config): a call whose
// record names no group is put in the job's only group when there is exactly one (gloo records
// no group on its calls), and a recorded group's missing description, size or ranks come from
// its entry here.
struct ProcessGroupInfo {
  std::string name;
  std::string desc;
  int32_t size = -1;
  std::string ranks;   // "[0, 1]"
};

// One call: its time (the union of the communication kernels it launched, when it launched any;
// else its host range: for gloo the work on the group's own thread, waiting for peers included),
// and the step it starts in.
struct CollectiveCall {
  uint32_t row = 0;        // index into CollectiveTable::rows
  int64_t step = 0;        // the step number
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t dur_ns = 0;
  int64_t bytes = -1;      // nccl-tests' size S of the call; -1 when not recorded
};

// One row per kind x process group, in order of total time (largest first).
struct CollectiveRow {
  std::string name;            // the kind (collective_kind)
  std::string process_group;   // the group's name as torch records it ("0"); "" when not known
  std::string pg_desc;
  std::string group_ranks;
  int32_t group_size = -1;
  int64_t calls = 0;
  int64_t bytes = -1;          // summed nccl-tests sizes; -1 unless every call's size is recorded
  int64_t total_ns = 0;
  bool on_device = false;      // timed by its device kernels (else by its host range)
};

// nccl-tests' algorithm bandwidth of `bytes` moved in `time_ns` (bytes / time, GB/s), and its bus
// bandwidth (algbw x bus_bandwidth_factor); -1 when a figure is not known.
double algbw_gbps(int64_t bytes, int64_t time_ns);
double busbw_gbps(std::string_view kind, int64_t bytes, int64_t time_ns, int64_t group_size);

struct CollectiveTable {
  std::vector<CollectiveRow> rows;
  std::vector<CollectiveCall> calls;   // in start order
};

// The calls are the `record_param_comms` ops that record a collective (torch >= 1.13), and the
// backend ranges (nccl:..., gloo:...) not inside one on the same thread; only those that start in
// a step count. A call's kernels are the communication kernels whose runtime call it made (its
// thread, inside its range) or that carry its external id.
CollectiveTable collective_table(const Trace& trace, const LaunchLinks& links, const BreakdownResult& steps,
                                 const std::vector<ProcessGroupInfo>& groups = {});

}  // namespace gpuprof
