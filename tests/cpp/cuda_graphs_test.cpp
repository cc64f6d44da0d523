// Specifications of the cuda_graphs table on hand-built timelines (nanoseconds): a graph's kernels
// share the correlation id of the cudaGraphLaunch call that replayed them (CUPTI's records), so
// each distinct correlation is one launch; every expected number is worked out beside it.
#include <gtest/gtest.h>

#include "gpuprof/analysis/cuda_graphs.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/tables.h"

using namespace gpuprof;

namespace {

uint32_t add(Trace& t, EventKind kind, const char* name, int64_t start, int64_t end, uint32_t tid = 1,
             uint64_t correlation = 0, uint64_t external_id = 0) {
  Event& e = t.add(kind, name, start, end - start);
  e.tid = tid;
  e.correlation = correlation;
  e.external_id = external_id;
  return uint32_t(t.events.size() - 1);
}

uint32_t graph_kernel(Trace& t, const char* name, int64_t start, int64_t end, uint64_t correlation,
                      uint32_t graph) {
  Event& e = t.add(EventKind::Kernel, name, start, end - start);
  e.device = 0;
  e.tid = 7;   // the stream
  e.correlation = correlation;
  KernelInfo k;
  k.graph_id = graph;
  e.aux = uint32_t(t.kernels.size());
  t.kernels.push_back(k);
  return uint32_t(t.events.size() - 1);
}

}  // namespace

TEST(CudaGraphs, LaunchesKernelsDeviceTimeAndTheInnermostHostCodeAroundTheLaunch) {
  Trace t;
  add(t, EventKind::UserRange, "outer", 0, 10'000);
  add(t, EventKind::UserRange, "replay", 100, 5'000);   // inside "outer"
  // Graph 3, replayed twice inside "replay" (no operator around the calls): 2 kernels a replay,
  // 100 + 200 ns each time: 2 launches, 4 kernels, 600 ns, 2 kernels a launch.
  add(t, EventKind::Runtime, "cudaGraphLaunch", 200, 300, 1, 1);
  add(t, EventKind::Runtime, "cudaGraphLaunch", 400, 500, 1, 2);
  graph_kernel(t, "node_a", 1'000, 1'100, 1, 3);
  graph_kernel(t, "node_b", 1'100, 1'300, 1, 3);
  graph_kernel(t, "node_a", 1'300, 1'400, 2, 3);
  graph_kernel(t, "node_b", 1'400, 1'600, 2, 3);
  // Graph 5, replayed once by an operator (its call carries the op's external id), 3 kernels of
  // 1000 ns, and once more by a call that was not recorded (a kernel whose correlation leads
  // nowhere): 2 launches, 4 kernels, 4000 ns; launched from the operator (the one known place).
  const uint32_t op = add(t, EventKind::HostOp, "CompiledFunction", 6'900, 7'500, 1, 0, 60);
  add(t, EventKind::Runtime, "cudaGraphLaunch", 7'000, 7'100, 1, 3, 60);
  const uint32_t k1 = graph_kernel(t, "node_c", 8'000, 9'000, 3, 5);
  const uint32_t k2 = graph_kernel(t, "node_c", 9'000, 10'000, 3, 5);
  const uint32_t k3 = graph_kernel(t, "node_c", 10'000, 11'000, 3, 5);
  graph_kernel(t, "node_c", 11'000, 12'000, 4, 5);
  // An ordinary launch (graph id 0) is no graph's.
  add(t, EventKind::Runtime, "cudaLaunchKernel", 7'200, 7'300, 1, 9, 60);
  graph_kernel(t, "gemm", 12'000, 13'000, 9, 0);

  const LaunchLinks links = link_launches(t);
  // The replayed kernels are the operator's as any launch is: through the call's correlation.
  for (uint32_t k : {k1, k2, k3}) EXPECT_EQ(links.launching_op(k), op);

  const std::vector<CudaGraphRow> rows = cuda_graph_table(t, links);
  ASSERT_EQ(rows.size(), 2u);
  const CudaGraphRow& five = rows[0];   // most device time first
  EXPECT_EQ(five.graph_id, 5u);
  EXPECT_EQ(five.launches, 2);
  EXPECT_EQ(five.kernels, 4);
  EXPECT_EQ(five.device_ns, 4'000);
  EXPECT_DOUBLE_EQ(five.kernels_per_launch(), 2.0);
  EXPECT_EQ(five.launched_from, "CompiledFunction");
  const CudaGraphRow& three = rows[1];
  EXPECT_EQ(three.graph_id, 3u);
  EXPECT_EQ(three.launches, 2);
  EXPECT_EQ(three.kernels, 4);
  EXPECT_EQ(three.device_ns, 600);
  EXPECT_DOUBLE_EQ(three.kernels_per_launch(), 2.0);
  EXPECT_EQ(three.launched_from, "replay");   // the innermost of "outer" and "replay"
}

TEST(CudaGraphs, TheHostCodeMostLaunchesShareIsNamedAndModuleCallsCount) {
  Trace t;
  // Graph 1: launched twice inside a module call, once inside a user range on another thread.
  add(t, EventKind::PythonFunction, "nn.Module: block (Block)", 0, 1'000, 1);
  add(t, EventKind::PythonFunction, "print", 0, 1'000, 1);   // a Python function that is no module
  add(t, EventKind::Runtime, "cudaGraphLaunch", 100, 200, 1, 1);
  add(t, EventKind::Runtime, "cudaGraphLaunch", 300, 400, 1, 2);
  add(t, EventKind::UserRange, "aaa", 0, 1'000, 2);
  add(t, EventKind::Runtime, "cudaGraphLaunch", 500, 600, 2, 3);
  for (uint64_t c = 1; c <= 3; ++c) graph_kernel(t, "node", 1'000 * int64_t(c), 1'000 * int64_t(c) + 10, c, 1);
  const std::vector<CudaGraphRow> rows = cuda_graph_table(t, link_launches(t));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].launches, 3);
  EXPECT_EQ(rows[0].kernels, 3);
  EXPECT_EQ(rows[0].device_ns, 30);
  EXPECT_EQ(rows[0].launched_from, "nn.Module: block (Block)");   // 2 launches there, 1 in "aaa"
}

TEST(CudaGraphs, NoGraphKernelsNoRowsAndAnalyseTablesCarriesThem) {
  Trace t;
  add(t, EventKind::Runtime, "cudaLaunchKernel", 0, 100, 1, 1);
  graph_kernel(t, "gemm", 100, 200, 1, 0);
  EXPECT_TRUE(cuda_graph_table(t, link_launches(t)).empty());
  add(t, EventKind::Runtime, "cudaGraphLaunch", 300, 400, 1, 2);
  graph_kernel(t, "node", 400, 450, 2, 9);
  const AnalysisTables a = analyse_tables(t, BreakdownOptions{});
  ASSERT_EQ(a.cuda_graphs.size(), 1u);
  EXPECT_EQ(a.cuda_graphs[0].graph_id, 9u);
  EXPECT_EQ(a.cuda_graphs[0].launched_from, "");   // no host code recorded around the call
  // The graph's kernel counts in the kernel table as any kernel does.
  int64_t calls = 0;
  for (const KernelRow& r : a.kernels) calls += r.calls;
  EXPECT_EQ(calls, 2);
}
