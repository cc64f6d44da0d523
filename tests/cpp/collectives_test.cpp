// Specifications of the collectives table on hand-built timelines (nanoseconds): which events are
// calls, how each is timed and sized, how calls group by kind and process group, and nccl-tests'
// bandwidths with the formulas written out beside the numbers.
#include <gtest/gtest.h>

#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/collectives.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/tables.h"
#include "trace_builders.h"

using namespace gpuprof;

namespace {

Event& add(Trace& t, EventKind kind, const char* name, int64_t start, int64_t end, uint64_t correlation = 0,
           uint64_t external_id = 0, uint32_t tid = 1) {
  Event& e = t.add(kind, name, start, end - start);
  e.correlation = correlation;
  e.external_id = external_id;
  e.tid = tid;
  return e;
}

CollectiveInfo info(uint64_t id, const char* name, int64_t in, int64_t out, const char* dtype, int32_t n,
                    const char* pg = "0", const char* desc = "default_pg", const char* ranks = "[0, 1]") {
  CollectiveInfo c;
  c.external_id = id;
  c.name = name;
  c.in_nelems = in;
  c.out_nelems = out;
  c.dtype = dtype;
  c.group_size = n;
  c.pg_name = pg;
  c.pg_desc = desc;
  c.group_ranks = ranks;
  return c;
}

// An NCCL call as torch records it: record_param_comms on the host thread (its facts by external
// id), the launch inside it, and the kernel on the device.
void nccl_call(Trace& t, uint64_t id, int64_t host_start, int64_t kernel_start, int64_t kernel_end,
               const CollectiveInfo& facts, const char* kernel = "ncclKernel_AllReduce_RING_LL_Sum_float") {
  add(t, EventKind::HostOp, "record_param_comms", host_start, host_start + 50'000, 0, id);
  add(t, EventKind::Runtime, "cudaLaunchKernel", host_start + 10'000, host_start + 20'000, id, id);
  Event& k = spec::add_kernel(t, kernel, kernel_start, kernel_end, id, 8, -1.0f);
  k.tid = 7;
  t.collectives.push_back(facts);
}

CollectiveTable table(const Trace& t, const std::vector<ProcessGroupInfo>& groups = {}) {
  return collective_table(t, link_launches(t), compute_breakdown(t), groups);
}

}  // namespace

TEST(CollectiveKind, TorchSpellingsMapToNcclTestsKinds) {
  EXPECT_EQ(collective_kind("allreduce"), "all_reduce");
  EXPECT_EQ(collective_kind("allreduce_coalesced"), "all_reduce");
  EXPECT_EQ(collective_kind("_allgather_base"), "all_gather");
  EXPECT_EQ(collective_kind("allgather_into_tensor_coalesced"), "all_gather");
  EXPECT_EQ(collective_kind("_reduce_scatter_base"), "reduce_scatter");
  EXPECT_EQ(collective_kind("alltoall_base"), "all_to_all");
  EXPECT_EQ(collective_kind("gloo:all_reduce"), "all_reduce");
  EXPECT_EQ(collective_kind("nccl:all_to_all"), "all_to_all");
  EXPECT_EQ(collective_kind("reduce"), "reduce");
  EXPECT_EQ(collective_kind("broadcast"), "broadcast");
  EXPECT_EQ(collective_kind("gather"), "gather");
  EXPECT_EQ(collective_kind("recvAnysource"), "recv");
  EXPECT_EQ(collective_kind("barrier"), "barrier");
  EXPECT_EQ(collective_kind("wait"), "");   // a wait moves no data of its own
  EXPECT_EQ(collective_kind("coalesced"), "coalesced");
}

TEST(CollectiveBandwidth, NcclTestsFormulas) {
  // nccl-tests (doc/PERFORMANCE.md): algbw = S / t; busbw = algbw x factor(n).
  // S = 1 GB in t = 10 ms: algbw = 1e9 B / 1e7 ns = 100 B/ns = 100 GB/s.
  EXPECT_DOUBLE_EQ(algbw_gbps(1'000'000'000, 10'000'000), 100.0);
  // all_reduce, n = 8: 2(n-1)/n = 14/8 = 1.75 -> 175 GB/s.
  EXPECT_DOUBLE_EQ(busbw_gbps("all_reduce", 1'000'000'000, 10'000'000, 8), 175.0);
  // all_gather, reduce_scatter and all_to_all, n = 4: (n-1)/n = 0.75 -> 75 GB/s.
  EXPECT_DOUBLE_EQ(busbw_gbps("all_gather", 1'000'000'000, 10'000'000, 4), 75.0);
  EXPECT_DOUBLE_EQ(busbw_gbps("reduce_scatter", 1'000'000'000, 10'000'000, 4), 75.0);
  EXPECT_DOUBLE_EQ(busbw_gbps("all_to_all", 1'000'000'000, 10'000'000, 4), 75.0);
  // broadcast, reduce, send, recv: factor 1, whatever n.
  EXPECT_DOUBLE_EQ(busbw_gbps("broadcast", 1'000'000'000, 10'000'000, 16), 100.0);
  EXPECT_DOUBLE_EQ(busbw_gbps("reduce", 1'000'000'000, 10'000'000, 2), 100.0);
  EXPECT_DOUBLE_EQ(busbw_gbps("send", 1'000'000'000, 10'000'000, 2), 100.0);
  // One rank moves nothing over a bus: all_reduce's factor is 2 x 0 / 1 = 0.
  EXPECT_DOUBLE_EQ(busbw_gbps("all_reduce", 1'000'000'000, 10'000'000, 1), 0.0);
  // No factor for a barrier, an unknown group size, an unknown size or no time.
  EXPECT_LT(busbw_gbps("barrier", 0, 10'000'000, 2), 0.0);
  EXPECT_LT(busbw_gbps("all_reduce", 1'000'000'000, 10'000'000, -1), 0.0);
  EXPECT_LT(algbw_gbps(-1, 10'000'000), 0.0);
  EXPECT_LT(algbw_gbps(1000, 0), 0.0);
}

TEST(CollectiveTable, RowsPerKindAndGroupTimedByTheirKernelsWithBandwidths) {
  // One step [0, 10 ms). Two all_reduces of 25,000,000 floats (100 MB each) in the default group
  // of 4 ranks, kernels of 2 ms and 3 ms; one all_gather in a second group of 2 ranks: each rank
  // sends 1,000,000 bf16 (2 MB), the gathered output is 2,000,000 bf16 = 4 MB, kernel 1 ms.
  Trace t;
  t.devices.push_back(spec::small_gpu());
  add(t, EventKind::StepMarker, "ProfilerStep#3", 0, 10'000'000);
  nccl_call(t, 11, 100'000, 1'000'000, 3'000'000,
            info(11, "allreduce", 25'000'000, 25'000'000, "Float", 4, "0", "default_pg", "[0, 1, 2, 3]"));
  nccl_call(t, 12, 4'000'000, 5'000'000, 8'000'000,
            info(12, "allreduce", 25'000'000, 25'000'000, "Float", 4, "0", "default_pg", "[0, 1, 2, 3]"));
  nccl_call(t, 13, 8'100'000, 8'500'000, 9'500'000,
            info(13, "_allgather_base", 1'000'000, 2'000'000, "BFloat16", 2, "1", "tp", "[0, 1]"),
            "ncclKernel_AllGather_RING_LL_Sum_bf16");
  const CollectiveTable c = table(t);
  ASSERT_EQ(c.rows.size(), 2u);
  const CollectiveRow& ar = c.rows[0];   // 5 ms: the larger total first
  EXPECT_EQ(ar.name, "all_reduce");
  EXPECT_EQ(ar.process_group, "0");
  EXPECT_EQ(ar.pg_desc, "default_pg");
  EXPECT_EQ(ar.group_ranks, "[0, 1, 2, 3]");
  EXPECT_EQ(ar.group_size, 4);
  EXPECT_EQ(ar.calls, 2);
  EXPECT_EQ(ar.bytes, 200'000'000);   // 2 x 25e6 x 4 bytes
  EXPECT_EQ(ar.total_ns, 5'000'000);  // the kernels: 2 ms + 3 ms (not the host ranges)
  EXPECT_TRUE(ar.on_device);
  // algbw = 200e6 B / 5e6 ns = 40 GB/s; busbw = 40 x 2 x 3 / 4 = 60 GB/s.
  EXPECT_DOUBLE_EQ(algbw_gbps(ar.bytes, ar.total_ns), 40.0);
  EXPECT_DOUBLE_EQ(busbw_gbps(ar.name, ar.bytes, ar.total_ns, ar.group_size), 60.0);
  const CollectiveRow& ag = c.rows[1];
  EXPECT_EQ(ag.name, "all_gather");
  EXPECT_EQ(ag.process_group, "1");
  EXPECT_EQ(ag.pg_desc, "tp");
  EXPECT_EQ(ag.bytes, 4'000'000);      // S = the gathered output: 2e6 x 2 bytes
  EXPECT_EQ(ag.total_ns, 1'000'000);
  // algbw = 4e6 / 1e6 = 4 GB/s; busbw = 4 x (2 - 1) / 2 = 2 GB/s.
  EXPECT_DOUBLE_EQ(busbw_gbps(ag.name, ag.bytes, ag.total_ns, ag.group_size), 2.0);
  // Every call, in start order, with its step, time and size.
  ASSERT_EQ(c.calls.size(), 3u);
  EXPECT_EQ(c.calls[0].step, 3);
  EXPECT_EQ(c.calls[0].dur_ns, 2'000'000);
  EXPECT_EQ(c.calls[0].end_ns, 3'000'000);
  EXPECT_EQ(c.calls[0].bytes, 100'000'000);
  EXPECT_EQ(c.calls[2].row, 1u);
}

TEST(CollectiveTable, BackendRangesAreCallsOnceAndGlooIsTimedOnTheHost) {
  // NCCL: record_param_comms [0.1, 0.15) ms holds nccl:all_reduce (the same call: counted once).
  // gloo: a gloo:broadcast range [2, 5) ms on the group's worker thread (tid 9), its inputs 256
  // floats, no group recorded: the job's only group (4 ranks) is its group.
  Trace t;
  add(t, EventKind::StepMarker, "ProfilerStep#0", 0, 10'000'000);
  nccl_call(t, 21, 100'000, 1'000'000, 1'500'000, info(21, "allreduce", 10, 10, "Float", 4));
  add(t, EventKind::UserRange, "nccl:all_reduce", 110'000, 140'000, 0, 22);
  add(t, EventKind::UserRange, "gloo:broadcast", 2'000'000, 5'000'000, 0, 23, 9);
  CollectiveInfo g;
  g.external_id = 23;
  g.in_nelems = 256;
  g.dtype = "float";   // Kineto's Input type
  t.collectives.push_back(g);
  // A range outside every step is not counted.
  add(t, EventKind::UserRange, "gloo:broadcast", 12'000'000, 13'000'000, 0, 24, 9);
  const std::vector<ProcessGroupInfo> groups = {{"0", "default_pg", 4, "[0, 1, 2, 3]"}};
  const CollectiveTable c = table(t, groups);
  ASSERT_EQ(c.rows.size(), 2u);
  const CollectiveRow& bc = c.rows[0];   // 3 ms
  EXPECT_EQ(bc.name, "broadcast");
  EXPECT_EQ(bc.calls, 1);
  EXPECT_EQ(bc.total_ns, 3'000'000);   // the host range: gloo runs on the CPU
  EXPECT_FALSE(bc.on_device);
  EXPECT_EQ(bc.bytes, 1024);           // 256 x 4
  EXPECT_EQ(bc.process_group, "0");    // from the job's only group
  EXPECT_EQ(bc.group_size, 4);
  EXPECT_EQ(bc.group_ranks, "[0, 1, 2, 3]");
  const CollectiveRow& ar = c.rows[1];
  EXPECT_EQ(ar.name, "all_reduce");
  EXPECT_EQ(ar.calls, 1);   // not twice: nccl:all_reduce is inside its record
  EXPECT_EQ(ar.total_ns, 500'000);
}

TEST(CollectiveTable, WithSeveralGroupsAnUnrecordedGroupStaysUnknown) {
  // gloo records no group; with two groups in the job, guessing one would be wrong.
  Trace t;
  add(t, EventKind::StepMarker, "ProfilerStep#0", 0, 10'000'000);
  add(t, EventKind::UserRange, "gloo:all_gather", 1'000'000, 2'000'000, 0, 31, 9);
  CollectiveInfo g;
  g.external_id = 31;
  g.in_nelems = 100;
  g.dtype = "Float";
  t.collectives.push_back(g);
  const std::vector<ProcessGroupInfo> groups = {{"0", "default_pg", 2, "[0, 1]"}, {"1", "tp", 2, "[0, 1]"}};
  const CollectiveTable c = table(t, groups);
  ASSERT_EQ(c.rows.size(), 1u);
  EXPECT_EQ(c.rows[0].process_group, "");
  EXPECT_EQ(c.rows[0].group_size, -1);
  // An all_gather's size is its gathered output: n x the 100 inputs, and n is not known.
  EXPECT_EQ(c.rows[0].bytes, -1);
}

TEST(CollectiveTable, AnalyseTablesCarriesThem) {
  Trace t;
  add(t, EventKind::StepMarker, "ProfilerStep#0", 0, 10'000'000);
  nccl_call(t, 41, 100'000, 1'000'000, 1'400'000, info(41, "broadcast", 5, 5, "Long", 2));
  const AnalysisTables a = analyse_tables(t, BreakdownOptions{});
  ASSERT_EQ(a.collectives.rows.size(), 1u);
  EXPECT_EQ(a.collectives.rows[0].bytes, 40);   // 5 x 8
  EXPECT_EQ(a.collectives.rows[0].total_ns, 400'000);
}
