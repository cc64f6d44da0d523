// Specifications of the kernel, operator, copy, sync and per-step memory tables on hand-built
// timelines (nanoseconds); every expected number is worked out beside it.
#include <gtest/gtest.h>

#include <algorithm>

#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/tables.h"
#include "trace_builders.h"

using namespace gpuprof;

namespace {

// The specs' small GPU with a tiny capacity, so memory rows are easy to read against it.
DeviceProps gpu() {
  DeviceProps d = spec::small_gpu();
  d.total_global_mem = 1000;
  return d;
}

Event& add(Trace& t, EventKind kind, const char* name, int64_t start, int64_t end, uint64_t correlation = 0,
           uint64_t external_id = 0) {
  Event& e = t.add(kind, name, start, end - start);
  e.correlation = correlation;
  e.external_id = external_id;
  return e;
}

using spec::add_kernel;

void copy(Trace& t, EventKind kind, int64_t start, int64_t end, int64_t bytes, CopyKind ck, MemoryKind src,
          MemoryKind dst) {
  Event& e = add(t, kind, kind == EventKind::Memset ? "Memset (Device)" : "Memcpy", start, end);
  e.device = 0;
  CopyInfo c;
  c.bytes = bytes;
  c.kind = ck;
  c.src = src;
  c.dst = dst;
  e.aux = static_cast<uint32_t>(t.copies.size());
  t.copies.push_back(c);
}

}  // namespace

TEST(KernelTable, CallsTimesAndDurationWeightedMeans) {
  Trace t;
  t.devices = {gpu()};
  // "gemm": 3 calls of 100, 300, 200 ns; 20, 5 and 10 blocks on 10 SMs = 2, 0.5, 1 blocks per SM;
  // occupancy 50, 10, 40 %.
  add_kernel(t, "gemm", 0, 100, 0, 20, 50.0f);
  add_kernel(t, "gemm", 200, 500, 0, 5, 10.0f);
  add_kernel(t, "gemm", 600, 800, 0, 10, 40.0f);
  add_kernel(t, "volta_h884gemm_nn", 900, 1000, 0, 10, 25.0f);
  const std::vector<KernelRow> rows = kernel_table(t);
  ASSERT_EQ(rows.size(), 2u);
  const KernelRow& g = rows[0];   // largest total first
  EXPECT_EQ(g.name, "gemm");
  EXPECT_EQ(g.calls, 3);
  EXPECT_EQ(g.total_ns, 600);
  EXPECT_DOUBLE_EQ(g.mean_ns(), 200.0);
  EXPECT_EQ(g.min_ns, 100);
  EXPECT_EQ(g.max_ns, 300);
  // Blocks per SM weighted by duration: (2 x 100 + 0.5 x 300 + 1 x 200) / 600 = 550 / 600.
  EXPECT_DOUBLE_EQ(g.mean_blocks_per_sm, 550.0 / 600.0);
  // Occupancy: (50 x 100 + 10 x 300 + 40 x 200) / 600 = 16000 / 600.
  EXPECT_DOUBLE_EQ(g.mean_occupancy_pct, 16000.0 / 600.0);
  EXPECT_FALSE(g.tensor_cores);
  EXPECT_TRUE(rows[1].tensor_cores);
}

// Kernels by launching operator, the plugin's kernel view grouped by (kernel, operator, grid,
// block, registers, shared memory), on a 10-SM GPU:
//   aten::mm launches gemm with 20 blocks twice (100 ns at 50 % occupancy, 300 ns at 10 %) and
//   once with 40 blocks (50 ns at 40 %); aten::addmm launches gemm with 20 blocks (200 ns); one gemm
//   has no launch in the trace (operator "").
// Rows, largest total first: (gemm, aten::mm, [20,1,1]) 2 calls, 400 ns, 100..300, mean 200,
// 2 blocks per SM, occupancy (50 x 100 + 10 x 300) / 400 = 20 %; (gemm, aten::addmm) 200 ns;
// (gemm, aten::mm, [40,1,1]) 50 ns, 4 blocks per SM, 40 %; (gemm, "") 10 ns.
TEST(KernelOpTable, GroupedByKernelOperatorAndLaunchConfiguration) {
  Trace t;
  t.devices = {gpu()};
  add(t, EventKind::HostOp, "aten::mm", 0, 1000, 0, 1);
  add(t, EventKind::Runtime, "cudaLaunchKernel", 10, 20, 1, 1);
  add(t, EventKind::Runtime, "cudaLaunchKernel", 30, 40, 2, 1);
  add(t, EventKind::Runtime, "cudaLaunchKernel", 50, 60, 3, 1);
  add(t, EventKind::HostOp, "aten::addmm", 1000, 2000, 0, 2);
  add(t, EventKind::Runtime, "cudaLaunchKernel", 1010, 1020, 4, 2);
  add_kernel(t, "gemm", 100, 200, 1, 20, 50.0f);
  add_kernel(t, "gemm", 200, 500, 2, 20, 10.0f);
  add_kernel(t, "gemm", 500, 550, 3, 40, 40.0f);
  add_kernel(t, "gemm", 1100, 1300, 4, 20, 25.0f);
  add_kernel(t, "gemm", 3000, 3010, 0, 20, 25.0f);
  const std::vector<KernelOpRow> rows = kernel_op_table(t, link_launches(t));
  ASSERT_EQ(rows.size(), 4u);
  const KernelOpRow& a = rows[0];
  EXPECT_EQ(a.kernel, "gemm");
  EXPECT_EQ(a.op, "aten::mm");
  EXPECT_EQ(a.grid[0], 20);
  EXPECT_EQ(a.block[0], 128);
  EXPECT_EQ(a.registers_per_thread, 32);
  EXPECT_EQ(a.shared_memory_bytes, 0);
  EXPECT_EQ(a.calls, 2);
  EXPECT_EQ(a.total_ns, 400);
  EXPECT_EQ(a.min_ns, 100);
  EXPECT_EQ(a.max_ns, 300);
  EXPECT_DOUBLE_EQ(a.mean_ns(), 200.0);
  EXPECT_DOUBLE_EQ(a.blocks_per_sm, 2.0);
  EXPECT_DOUBLE_EQ(a.occupancy_pct, 20.0);
  EXPECT_EQ(rows[1].op, "aten::addmm");
  EXPECT_EQ(rows[1].total_ns, 200);
  EXPECT_EQ(rows[2].op, "aten::mm");
  EXPECT_EQ(rows[2].grid[0], 40);
  EXPECT_EQ(rows[2].total_ns, 50);
  EXPECT_DOUBLE_EQ(rows[2].blocks_per_sm, 4.0);
  EXPECT_DOUBLE_EQ(rows[2].occupancy_pct, 40.0);
  EXPECT_EQ(rows[3].op, "");
  EXPECT_EQ(rows[3].total_ns, 10);
}

TEST(OperatorTable, SelfAndTotalOnHostAndDevice) {
  Trace t;
  // aten::linear [0, 1000) holds aten::t [10, 110) and aten::addmm [200, 900); addmm launches a
  // kernel of 400 ns and a set of 50 ns; linear itself launches a 30 ns kernel (its own runtime
  // call, outside addmm). A second, separate aten::addmm [1000, 1100) launches 100 ns.
  add(t, EventKind::HostOp, "aten::linear", 0, 1000, 0, 1);
  add(t, EventKind::HostOp, "aten::t", 10, 110, 0, 2);
  add(t, EventKind::HostOp, "aten::addmm", 200, 900, 0, 3);
  add(t, EventKind::Runtime, "cudaLaunchKernel", 300, 310, 21, 3);
  add(t, EventKind::Runtime, "cudaMemsetAsync", 320, 330, 22, 3);
  add(t, EventKind::Runtime, "cudaLaunchKernel", 950, 960, 23, 1);
  add(t, EventKind::HostOp, "aten::addmm", 1000, 1100, 0, 4);
  add(t, EventKind::Runtime, "cudaLaunchKernel", 1010, 1020, 24, 4);
  add_kernel(t, "gemm", 400, 800, 21, 10, 50.0f);
  copy(t, EventKind::Memset, 800, 850, 64, CopyKind::Unknown, MemoryKind::Device, MemoryKind::Device);
  t.events.back().correlation = 22;
  add_kernel(t, "tail", 970, 1000, 23, 10, 50.0f);
  add_kernel(t, "gemm", 1100, 1200, 24, 10, 50.0f);

  const std::vector<OperatorRow> rows = operator_table(t, link_launches(t));
  ASSERT_EQ(rows.size(), 3u);
  // linear: host total 1000, self 1000 - 100 - 700 - 10 (its own launch) = 190; device self 30,
  // total 30 + 450 = 480.
  const OperatorRow& linear = rows[0];
  EXPECT_EQ(linear.name, "aten::linear");
  EXPECT_EQ(linear.host_total_ns, 1000);
  EXPECT_EQ(linear.host_self_ns, 190);
  EXPECT_EQ(linear.device_self_ns, 30);
  EXPECT_EQ(linear.device_total_ns, 480);
  EXPECT_TRUE(linear.tc_eligible);
  // addmm, two calls: host 700 + 100 = 800; no ops inside, so self is the total less its own
  // runtime calls, 10 + 10 + 10: 770; device 450 + 100.
  const OperatorRow& addmm = rows[1];
  EXPECT_EQ(addmm.name, "aten::addmm");
  EXPECT_EQ(addmm.calls, 2);
  EXPECT_EQ(addmm.host_total_ns, 800);
  EXPECT_EQ(addmm.host_self_ns, 770);
  EXPECT_EQ(addmm.device_self_ns, 550);
  EXPECT_EQ(addmm.device_total_ns, 550);
  const OperatorRow& tr = rows[2];
  EXPECT_EQ(tr.name, "aten::t");
  EXPECT_EQ(tr.device_total_ns, 0);
  EXPECT_FALSE(tr.tc_eligible);
}

// Host self time leaves out the runtime calls an op makes itself, as torch's key_averages and the
// plugin count it (their aten::add_ of 703 us was 883 us here when only child ops were taken out):
// a cudaLaunchKernel is the runtime's host work, not the op's.
//   aten::add_ [0, 1000): aten::empty [100, 200) inside; cudaLaunchKernel [300, 340) (external id)
//     and cudaMemsetAsync [400, 420) (no external id: found by time on the thread) of its own;
//     self = 1000 - 100 - 40 - 20 = 840.
//   cudaLaunchKernel [120, 130) inside aten::empty is empty's own: empty self = 100 - 10 = 90, and
//     add_ does not take it out twice (empty's whole 100 already went).
//   A driver call (cuLaunchKernel [500, 530)) is not a runtime call: the plugin never saw one; it
//     stays in the op's self time.
//   aten::mul_ [2000, 2500) holds only aten::mul_ [2100, 2400) (one call seen twice), whose runtime
//     call [2200, 2250) belongs to the counted outer call: self = 500 - 50 = 450.
TEST(OperatorTable, HostSelfLeavesOutTheOpsOwnRuntimeCalls) {
  Trace t;
  add(t, EventKind::HostOp, "aten::add_", 0, 1000, 0, 1);
  add(t, EventKind::HostOp, "aten::empty", 100, 200, 0, 2);
  add(t, EventKind::Runtime, "cudaLaunchKernel", 120, 130, 40, 2);
  add(t, EventKind::Runtime, "cudaLaunchKernel", 300, 340, 41, 1);
  add(t, EventKind::Runtime, "cudaMemsetAsync", 400, 420, 42, 0);
  add(t, EventKind::Driver, "cuLaunchKernel", 500, 530, 43, 1);
  add(t, EventKind::HostOp, "aten::mul_", 2000, 2500, 0, 3);
  add(t, EventKind::HostOp, "aten::mul_", 2100, 2400, 0, 4);
  add(t, EventKind::Runtime, "cudaLaunchKernel", 2200, 2250, 44, 4);
  const std::vector<OperatorRow> rows = operator_table(t, link_launches(t));
  auto row = [&](const char* name) {
    for (const OperatorRow& r : rows)
      if (r.name == name) return r;
    return OperatorRow{};
  };
  EXPECT_EQ(row("aten::add_").host_total_ns, 1000);
  EXPECT_EQ(row("aten::add_").host_self_ns, 840);
  EXPECT_EQ(row("aten::empty").host_self_ns, 90);
  EXPECT_EQ(row("aten::mul_").calls, 1);
  EXPECT_EQ(row("aten::mul_").host_self_ns, 450);
}

// Tensor cores per operator, the plugin's definition: the share of the op's own device time (self)
// and of its device time with that of the ops inside it (total) that tensor-core kernels ran.
//   aten::linear [0, 1000) launches a plain kernel of 100 ns itself and holds aten::addmm
//   [200, 900), which launches volta_h884gemm_nn (a tensor-core kernel) for 300 ns and a 100 ns set.
//   addmm: self 300 of 400 = 75 %, total the same. linear: self 0 of 100 = 0 %; total 300 of 500 =
//   60 %. aten::t [10, 110) has no device time: no share (-1, null in the report).
//   aten::mm [2000, 2500) holds only aten::mm [2100, 2400) (one call seen twice), whose 200 ns
//   tensor-core kernel is the counted call's: self and total 100 %.
TEST(OperatorTable, TensorCoreSharesOfSelfAndTotalDeviceTime) {
  Trace t;
  add(t, EventKind::HostOp, "aten::linear", 0, 1000, 0, 1);
  add(t, EventKind::HostOp, "aten::t", 10, 110, 0, 2);
  add(t, EventKind::HostOp, "aten::addmm", 200, 900, 0, 3);
  add(t, EventKind::Runtime, "cudaLaunchKernel", 300, 310, 51, 3);
  add(t, EventKind::Runtime, "cudaMemsetAsync", 320, 330, 52, 3);
  add(t, EventKind::Runtime, "cudaLaunchKernel", 950, 960, 53, 1);
  add_kernel(t, "volta_h884gemm_nn", 400, 700, 51, 10, 50.0f);
  copy(t, EventKind::Memset, 700, 800, 64, CopyKind::Unknown, MemoryKind::Device, MemoryKind::Device);
  t.events.back().correlation = 52;
  add_kernel(t, "elementwise_kernel", 970, 1070, 53, 10, 50.0f);
  add(t, EventKind::HostOp, "aten::mm", 2000, 2500, 0, 4);
  add(t, EventKind::HostOp, "aten::mm", 2100, 2400, 0, 5);
  add(t, EventKind::Runtime, "cudaLaunchKernel", 2200, 2210, 54, 5);
  add_kernel(t, "volta_h884gemm_nn", 2300, 2500, 54, 10, 50.0f);
  const std::vector<OperatorRow> rows = operator_table(t, link_launches(t));
  auto row = [&](const char* name) {
    for (const OperatorRow& r : rows)
      if (r.name == name) return r;
    return OperatorRow{};
  };
  EXPECT_DOUBLE_EQ(row("aten::addmm").tc_self_pct(), 75.0);
  EXPECT_DOUBLE_EQ(row("aten::addmm").tc_total_pct(), 75.0);
  EXPECT_DOUBLE_EQ(row("aten::linear").tc_self_pct(), 0.0);
  EXPECT_DOUBLE_EQ(row("aten::linear").tc_total_pct(), 60.0);
  EXPECT_EQ(row("aten::t").tc_self_pct(), -1.0);
  EXPECT_EQ(row("aten::t").tc_total_pct(), -1.0);
  EXPECT_EQ(row("aten::mm").calls, 1);
  EXPECT_DOUBLE_EQ(row("aten::mm").tc_self_pct(), 100.0);
  EXPECT_DOUBLE_EQ(row("aten::mm").tc_total_pct(), 100.0);
}

// The plugin's two operator views from one pass. aten::mm is called three times: twice on
// A = [[8, 16], [16, 32]] ([0, 100) launching a 60 ns "gemm", [200, 300) a 40 ns tensor-core
// "volta_h884gemm_nn") and once on B = [[64, 64], [64, 64]] ([400, 650), a 100 ns "gemm"); each
// launch is a 10 ns cudaLaunchKernel, out of the op's self time. aten::relu [700, 710) on [[8, 32]].
// By shape, largest host total first: (mm, B) 1 call, host 250 (self 240), device 100, no tensor
// cores (0 %); (mm, A) 2 calls, host 200 (self 180), device 100, of which 40 on tensor cores (40 %);
// (relu) 10, no device time (null shares: -1). By name: mm = the two mm rows summed, 3 calls, host
// 450 (self 420), device 200, tensor cores 40 / 200 = 20 %; relu as it is, its shapes not shown.
TEST(OperatorTables, ByNameAndByInputShapesFromOnePass) {
  auto build = [](bool shapes) {
    Trace t;
    const uint32_t a = t.strings.intern("[[8, 16], [16, 32]]"), b = t.strings.intern("[[64, 64], [64, 64]]");
    const uint32_t r = t.strings.intern("[[8, 32]]");
    add(t, EventKind::HostOp, "aten::mm", 0, 100, 0, 1).aux = shapes ? a : 0;
    add(t, EventKind::Runtime, "cudaLaunchKernel", 10, 20, 11, 1);
    add(t, EventKind::HostOp, "aten::mm", 200, 300, 0, 2).aux = shapes ? a : 0;
    add(t, EventKind::Runtime, "cudaLaunchKernel", 210, 220, 12, 2);
    add(t, EventKind::HostOp, "aten::mm", 400, 650, 0, 3).aux = shapes ? b : 0;
    add(t, EventKind::Runtime, "cudaLaunchKernel", 410, 420, 13, 3);
    add(t, EventKind::HostOp, "aten::relu", 700, 710, 0, 4).aux = shapes ? r : 0;
    add_kernel(t, "gemm", 30, 90, 11, 10, 50.0f);
    add_kernel(t, "volta_h884gemm_nn", 230, 270, 12, 10, 50.0f);
    add_kernel(t, "gemm", 430, 530, 13, 10, 50.0f);
    return t;
  };
  const Trace t = build(true);
  const OperatorTables tables = operator_tables(t, link_launches(t));
  const std::vector<OperatorRow>& shape = tables.by_shape;
  ASSERT_EQ(shape.size(), 3u);
  EXPECT_EQ(shape[0].name, "aten::mm");
  EXPECT_EQ(shape[0].input_shapes, "[[64, 64], [64, 64]]");
  EXPECT_EQ(shape[0].calls, 1);
  EXPECT_EQ(shape[0].host_total_ns, 250);
  EXPECT_EQ(shape[0].host_self_ns, 240);
  EXPECT_EQ(shape[0].device_self_ns, 100);
  EXPECT_EQ(shape[0].device_total_ns, 100);
  EXPECT_DOUBLE_EQ(shape[0].tc_self_pct(), 0.0);
  EXPECT_EQ(shape[1].input_shapes, "[[8, 16], [16, 32]]");
  EXPECT_EQ(shape[1].calls, 2);
  EXPECT_EQ(shape[1].host_total_ns, 200);
  EXPECT_EQ(shape[1].host_self_ns, 180);
  EXPECT_EQ(shape[1].device_total_ns, 100);
  EXPECT_DOUBLE_EQ(shape[1].tc_self_pct(), 40.0);
  EXPECT_DOUBLE_EQ(shape[1].tc_total_pct(), 40.0);
  EXPECT_EQ(shape[2].name, "aten::relu");
  EXPECT_EQ(shape[2].input_shapes, "[[8, 32]]");
  EXPECT_EQ(shape[2].tc_self_pct(), -1.0);

  const std::vector<OperatorRow>& name = tables.by_name;
  ASSERT_EQ(name.size(), 2u);
  EXPECT_EQ(name[0].name, "aten::mm");
  EXPECT_EQ(name[0].input_shapes, "");
  EXPECT_EQ(name[0].calls, 3);
  EXPECT_EQ(name[0].host_total_ns, 450);
  EXPECT_EQ(name[0].host_self_ns, 420);
  EXPECT_EQ(name[0].device_self_ns, 200);
  EXPECT_EQ(name[0].device_total_ns, 200);
  EXPECT_DOUBLE_EQ(name[0].tc_self_pct(), 20.0);
  EXPECT_DOUBLE_EQ(name[0].tc_total_pct(), 20.0);
  EXPECT_TRUE(name[0].tc_eligible);
  EXPECT_EQ(name[1].name, "aten::relu");
  EXPECT_EQ(name[1].input_shapes, "");
  EXPECT_EQ(name[1].calls, 1);

  // Without recorded shapes the by-name rows are the same and there is no by-shape table (it would
  // repeat them).
  const Trace plain = build(false);
  const OperatorTables unshaped = operator_tables(plain, link_launches(plain));
  EXPECT_TRUE(unshaped.by_shape.empty());
  ASSERT_EQ(unshaped.by_name.size(), 2u);
  EXPECT_EQ(unshaped.by_name[0].calls, 3);
  EXPECT_EQ(unshaped.by_name[0].host_self_ns, 420);
  EXPECT_DOUBLE_EQ(unshaped.by_name[0].tc_total_pct(), 20.0);
}

// Kineto traces before torch 1.10 list torch's own record_function ranges as operators (cat
// "Operator"). The plugin's operator view leaves them out, and so do the operator tables and the
// per-step tops: they are ranges (range_table), as newer traces and live sessions record them. The
// ops inside them are operators as usual. Step [0, 5000): the DataLoader's next() [0, 1000) holding
// aten::stack [100, 300); Optimizer.zero_grad [1000, 1100); Optimizer.step [2000, 3000) holding
// aten::add_ [2100, 2400); DistributedDataParallel.forward [3000, 4000) holding aten::conv2d
// [3100, 3900). Operators: conv2d 800, add_ 300, stack 200 (3 calls in the step); ranges: the four
// others with their host time.
TEST(OperatorTables, TorchRangesListedAsOperatorsAreRanges) {
  Trace t;
  add(t, EventKind::StepMarker, "ProfilerStep#1", 0, 5000);
  add(t, EventKind::HostOp, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 1000);
  add(t, EventKind::HostOp, "aten::stack", 100, 300).aux = t.strings.intern("[[3, 8], [3, 8]]");
  add(t, EventKind::HostOp, "Optimizer.zero_grad#SGD.zero_grad", 1000, 1100);
  add(t, EventKind::HostOp, "Optimizer.step#SGD.step", 2000, 3000);
  add(t, EventKind::HostOp, "aten::add_", 2100, 2400);
  add(t, EventKind::HostOp, "DistributedDataParallel.forward", 3000, 4000);
  add(t, EventKind::HostOp, "aten::conv2d", 3100, 3900);
  const LaunchLinks links = link_launches(t);
  const OperatorTables tables = operator_tables(t, links);
  std::vector<std::pair<std::string, int64_t>> ops, shaped;
  for (const OperatorRow& r : tables.by_name) ops.emplace_back(r.name, r.host_total_ns);
  for (const OperatorRow& r : tables.by_shape) shaped.emplace_back(r.name, r.host_total_ns);
  const std::vector<std::pair<std::string, int64_t>> want = {
      {"aten::conv2d", 800}, {"aten::add_", 300}, {"aten::stack", 200}};
  EXPECT_EQ(ops, want);
  EXPECT_EQ(shaped, want);

  std::vector<std::pair<std::string, int64_t>> ranges;
  for (const RangeRow& r : range_table(t)) ranges.emplace_back(r.name, r.host_total_ns);
  EXPECT_EQ(ranges, (std::vector<std::pair<std::string, int64_t>>{
                        {"DistributedDataParallel.forward", 1000},
                        {"Optimizer.step#SGD.step", 1000},
                        {"enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1000},
                        {"Optimizer.zero_grad#SGD.zero_grad", 100}}));

  const std::vector<StepEventTables> steps = step_event_tables(t, {{0, 5000}}, 5);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].operator_calls, 3);
  ASSERT_EQ(steps[0].operators.size(), 3u);
  EXPECT_EQ(steps[0].operators[0].name, "aten::conv2d");

  EXPECT_TRUE(is_torch_range_op_name("enumerate(DataPipe)#ShufflerIterDataPipe"));
  EXPECT_TRUE(is_torch_range_op_name("DataParallel.forward"));
  EXPECT_FALSE(is_torch_range_op_name("aten::add_"));
  EXPECT_FALSE(is_torch_range_op_name("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__init__"));
}

TEST(OperatorTable, SameNameOnlyChildIsOneCallAsInTorchProfiler) {
  Trace t;
  // aten::div_ [0, 1000) holds only aten::div_ [100, 900) (the same call seen twice), which holds
  // aten::empty [200, 300) and launches a 50 ns kernel: one div_ call, host total 1000, self
  // 1000 - 100 (empty, now its direct child) - 10 (the inner call's cudaLaunchKernel) = 890,
  // device self 50 (both lifted from the inner call).
  // aten::add_ [2000, 3000) holds aten::add_ [2100, 2200) beside aten::copy_ [2300, 2400): not an
  // only child, so a real nested call: two add_ calls, 1000 + 100.
  add(t, EventKind::HostOp, "aten::div_", 0, 1000, 0, 1);
  add(t, EventKind::HostOp, "aten::div_", 100, 900, 0, 2);
  add(t, EventKind::HostOp, "aten::empty", 200, 300, 0, 3);
  add(t, EventKind::Runtime, "cudaLaunchKernel", 400, 410, 31, 2);
  add_kernel(t, "div_kernel", 500, 550, 31, 10, 50.0f);
  add(t, EventKind::HostOp, "aten::add_", 2000, 3000, 0, 4);
  add(t, EventKind::HostOp, "aten::add_", 2100, 2200, 0, 5);
  add(t, EventKind::HostOp, "aten::copy_", 2300, 2400, 0, 6);
  const std::vector<OperatorRow> rows = operator_table(t, link_launches(t));
  auto row = [&](const char* name) {
    for (const OperatorRow& r : rows)
      if (r.name == name) return r;
    return OperatorRow{};
  };
  const OperatorRow div = row("aten::div_");
  EXPECT_EQ(div.calls, 1);
  EXPECT_EQ(div.host_total_ns, 1000);
  EXPECT_EQ(div.host_self_ns, 890);
  EXPECT_EQ(div.device_self_ns, 50);
  EXPECT_EQ(div.device_total_ns, 50);
  const OperatorRow add_ = row("aten::add_");
  EXPECT_EQ(add_.calls, 2);
  EXPECT_EQ(add_.host_total_ns, 1100);
  EXPECT_EQ(add_.host_self_ns, 1000 - 200 + 100);
  EXPECT_EQ(row("aten::empty").calls, 1);
}

// The HTML drill-down's per-step tables count what the operator table counts. Two steps,
// [0, 1500) and [1500, 3500): the first holds the div_ pair (one call) and a kernel starting at 500;
// the second holds the add_ pair with a sibling (two add_ calls, 1000 + 100), copy_, and a kernel
// starting at 3400. The kernel at 3600 starts after both steps: in neither. Operator calls: 2 in
// step 1 (div_, empty), 3 in step 2 (add_ twice, copy_); one kernel each. Top 1 keeps the longest.
TEST(StepEventTables, PerStepCallsFollowTheOperatorTablesRule) {
  Trace t;
  add(t, EventKind::HostOp, "aten::div_", 0, 1000);
  add(t, EventKind::HostOp, "aten::div_", 100, 900);
  add(t, EventKind::HostOp, "aten::empty", 200, 300);
  add_kernel(t, "div_kernel", 500, 550, 31, 10, 50.0f);
  add(t, EventKind::HostOp, "aten::add_", 2000, 3000);
  add(t, EventKind::HostOp, "aten::add_", 2100, 2200);
  add(t, EventKind::HostOp, "aten::copy_", 2300, 2400);
  add_kernel(t, "add_kernel", 3400, 3450, 32, 10, 50.0f);
  add_kernel(t, "late_kernel", 3600, 3700, 33, 10, 50.0f);
  const std::vector<uint8_t> repeated = repeated_op_calls(t, link_launches(t));
  EXPECT_EQ(std::vector<uint8_t>(repeated.begin(), repeated.begin() + 3), (std::vector<uint8_t>{0, 1, 0}));
  const auto steps = step_event_tables(t, {{0, 1500}, {1500, 3500}}, 1);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].operator_calls, 2);
  EXPECT_EQ(steps[0].kernel_calls, 1);
  ASSERT_EQ(steps[0].operators.size(), 1u);
  EXPECT_EQ(steps[0].operators[0].name, "aten::div_");
  EXPECT_EQ(steps[0].operators[0].calls, 1);
  EXPECT_EQ(steps[0].operators[0].total_ns, 1000);
  EXPECT_EQ(steps[1].operator_calls, 3);
  EXPECT_EQ(steps[1].kernel_calls, 1);
  EXPECT_EQ(steps[1].operators[0].name, "aten::add_");
  EXPECT_EQ(steps[1].operators[0].calls, 2);
  EXPECT_EQ(steps[1].operators[0].total_ns, 1100);
  EXPECT_EQ(steps[1].kernels[0].name, "add_kernel");
  // Operator table and steps agree: 1 div_ + 1 empty + 2 add_ + 1 copy_.
  int64_t table_calls = 0;
  for (const OperatorRow& r : operator_table(t, link_launches(t))) table_calls += r.calls;
  EXPECT_EQ(table_calls, steps[0].operator_calls + steps[1].operator_calls);
  // The analysis hands its repeated-call flags on (the same as computed here), and they are used:
  // flags saying no call repeats make the nested div_ count (3 operator calls in step 1); flags of
  // the wrong length are not trusted (computed again: 2).
  EXPECT_EQ(analyse_tables(t, BreakdownOptions{}).repeated_ops, repeated);
  const std::vector<uint8_t> none_repeated(t.events.size(), 0), wrong_length(2, 0);
  EXPECT_EQ(step_event_tables(t, {{0, 1500}}, 1, &repeated)[0].operator_calls, 2);
  EXPECT_EQ(step_event_tables(t, {{0, 1500}}, 1, &none_repeated)[0].operator_calls, 3);
  EXPECT_EQ(step_event_tables(t, {{0, 1500}}, 1, &wrong_length)[0].operator_calls, 2);
}

// The HTML timeline of the step [1000, 5000) on a host thread 7 and GPU 0 stream 3:
// - ProfilerStep#4 [1000, 5000) and the DataLoader range [1000, 1400) both start at 1000: the longer
//   comes first; the marker is drawn as CPU Exec, the range as DataLoader;
// - aten::mm [1500, 2500) (CPU Exec), record_param_comms [2600, 2900) (Communication), a
//   synchronisation [3000, 3200) (Runtime), a runtime call (not drawn), a memcpy and two kernels,
//   one of them NCCL's (Communication);
// - a kernel at 5000 is outside the step, and so is the op at 900.
// With a cap of 4, the three device events come first, then the longest host event (the marker):
// 4 kept of 8, in start order.
TEST(StepTimeline, LanesNamesCategoriesAndTheCap) {
  Trace t;
  auto host = [&](EventKind k, const char* name, int64_t s, int64_t e) { add(t, k, name, s, e).tid = 7; };
  host(EventKind::HostOp, "aten::early", 900, 950);
  host(EventKind::UserRange, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1000, 1400);
  host(EventKind::UserRange, "ProfilerStep#4", 1000, 5000);
  host(EventKind::HostOp, "aten::mm", 1500, 2500);
  host(EventKind::HostOp, "record_param_comms", 2600, 2900);
  host(EventKind::Sync, "cudaStreamSynchronize", 3000, 3200);
  host(EventKind::Runtime, "cudaLaunchKernel", 1600, 1610);
  copy(t, EventKind::Memcpy, 3300, 3400, 64, CopyKind::HtoD, MemoryKind::Pinned, MemoryKind::Device);
  add_kernel(t, "gemm", 1700, 2400, 1, 10, 50.0f).tid = 3;
  add_kernel(t, "ncclKernel_AllReduce_RING_LL_Sum_float", 2700, 4000, 2, 10, 50.0f).tid = 3;
  add_kernel(t, "gemm", 5000, 5100, 3, 10, 50.0f).tid = 3;
  t.events[7].tid = 3;   // the memcpy

  const StepTimeline all = step_timeline(t, 1000, 5000, 100);
  EXPECT_EQ(all.total, 8);
  ASSERT_EQ(all.events.size(), 8u);
  EXPECT_EQ(all.lanes, (std::vector<std::string>{"host thread 7", "GPU 0 stream 3"}));
  std::vector<std::string> names;
  std::vector<Category> cats;
  for (const TimelineEvent& e : all.events) {
    names.push_back(all.names.at(e.name));
    cats.push_back(e.category);
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "ProfilerStep#4", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "aten::mm",
                       "gemm", "record_param_comms", "ncclKernel_AllReduce_RING_LL_Sum_float",
                       "cudaStreamSynchronize", "Memcpy"}));
  EXPECT_EQ(cats, (std::vector<Category>{Category::CpuExec, Category::DataLoader, Category::CpuExec,
                                         Category::Kernel, Category::Communication, Category::Communication,
                                         Category::Runtime, Category::Memcpy}));
  EXPECT_EQ(all.events[3].lane, 1u);            // gemm on the GPU lane
  EXPECT_EQ(all.events[3].offset_ns, 700);      // 1700 - 1000
  EXPECT_EQ(all.events[3].dur_ns, 700);
  EXPECT_EQ(all.counts, (std::vector<std::pair<EventKind, int64_t>>{{EventKind::UserRange, 2},
                                                                    {EventKind::HostOp, 2},
                                                                    {EventKind::Kernel, 2},
                                                                    {EventKind::Sync, 1},
                                                                    {EventKind::Memcpy, 1}}));

  const StepTimeline capped = step_timeline(t, 1000, 5000, 4);
  EXPECT_EQ(capped.total, 8);
  names.clear();
  for (const TimelineEvent& e : capped.events) names.push_back(capped.names.at(e.name));
  EXPECT_EQ(names, (std::vector<std::string>{"ProfilerStep#4", "gemm", "ncclKernel_AllReduce_RING_LL_Sum_float",
                                             "Memcpy"}));
}

TEST(RangeTable, UserRangesWithTheClosureInsideAnOptimizerStep) {
  Trace t;
  // Two optimizer steps. The first [0, 1000) runs a closure whose backward op ends at 700: closure
  // 700. The second [2000, 2500) has no backward inside: closure 0. ProfilerStep#1 is a marker.
  add(t, EventKind::UserRange, "ProfilerStep#1", 0, 3000);
  add(t, EventKind::UserRange, "Optimizer.step#Adam.step", 0, 1000);
  add(t, EventKind::HostOp, "aten::addmm", 50, 200);
  add(t, EventKind::HostOp, "autograd::engine::evaluate_function: AddmmBackward0", 300, 700);
  add(t, EventKind::HostOp, "aten::add_", 800, 900);
  add(t, EventKind::UserRange, "Optimizer.step#Adam.step", 2000, 2500);
  add(t, EventKind::HostOp, "autograd::engine::evaluate_function: AddmmBackward0", 1500, 1900);
  const std::vector<RangeRow> rows = range_table(t);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].name, "Optimizer.step#Adam.step");
  EXPECT_EQ(rows[0].calls, 2);
  EXPECT_EQ(rows[0].host_total_ns, 1500);
  EXPECT_EQ(rows[0].closure_ns, 700);
}

TEST(CopyTable, DirectionsHostMemoryAndBandwidth) {
  Trace t;
  // Pageable HtoD: 2 copies, 1000 + 3000 bytes in 100 + 300 ns -> 4000 / 400 = 10 GB/s (bytes/ns).
  copy(t, EventKind::Memcpy, 0, 100, 1000, CopyKind::HtoD, MemoryKind::Pageable, MemoryKind::Device);
  copy(t, EventKind::Memcpy, 200, 500, 3000, CopyKind::HtoD, MemoryKind::Pageable, MemoryKind::Device);
  // Pinned HtoD: 2500 bytes in 100 ns -> 25 GB/s; pinned DtoH (the host side is the destination).
  copy(t, EventKind::Memcpy, 600, 700, 2500, CopyKind::HtoD, MemoryKind::Pinned, MemoryKind::Device);
  copy(t, EventKind::Memcpy, 700, 710, 100, CopyKind::DtoH, MemoryKind::Device, MemoryKind::Pinned);
  // Device to device: no host side.
  copy(t, EventKind::Memcpy, 800, 820, 4000, CopyKind::DtoD, MemoryKind::Device, MemoryKind::Device);
  copy(t, EventKind::Memset, 900, 905, 512, CopyKind::Unknown, MemoryKind::Unknown, MemoryKind::Unknown);
  const std::vector<CopyRow> rows = copy_table(t);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0].kind, "HtoD");
  EXPECT_EQ(rows[0].host_memory, "pageable");
  EXPECT_EQ(rows[0].count, 2);
  EXPECT_EQ(rows[0].bytes, 4000);
  EXPECT_DOUBLE_EQ(rows[0].gb_per_s(), 10.0);
  EXPECT_EQ(rows[1].host_memory, "pinned");
  EXPECT_DOUBLE_EQ(rows[1].gb_per_s(), 25.0);
  EXPECT_EQ(rows[2].kind, "DtoD");
  EXPECT_EQ(rows[2].host_memory, "");
  EXPECT_EQ(rows[3].kind, "DtoH");
  EXPECT_EQ(rows[3].host_memory, "pinned");
  EXPECT_EQ(rows[4].kind, "Memset");
}

TEST(SyncTable, HostBlockingCallsAttributedToTheOutermostOp) {
  Trace t;
  // loss.item(): aten::item [0, 500) > aten::_local_scalar_dense [10, 490) > cudaMemcpyAsync and
  // cudaStreamSynchronize [100, 480) (380 ns of waiting). CUPTI also reports the same wait as a
  // "Stream Sync" record with the call's correlation: counted once.
  add(t, EventKind::HostOp, "aten::item", 0, 500, 0, 1);
  add(t, EventKind::HostOp, "aten::_local_scalar_dense", 10, 490, 0, 2);
  add(t, EventKind::Runtime, "cudaMemcpyAsync", 20, 90, 31, 2);
  add(t, EventKind::Runtime, "cudaStreamSynchronize", 100, 480, 32, 2);
  add(t, EventKind::Sync, "Stream Sync", 100, 480, 32);
  // A second item() of 100 ns waiting.
  add(t, EventKind::HostOp, "aten::item", 600, 800, 0, 3);
  add(t, EventKind::Runtime, "cudaStreamSynchronize", 650, 750, 33, 3);
  // A synchronous copy inside aten::to (pageable source), and a device-wide sync outside any op.
  add(t, EventKind::HostOp, "aten::to", 1000, 1300, 0, 4);
  add(t, EventKind::Runtime, "cudaMemcpy", 1010, 1290, 34, 4);
  add(t, EventKind::Runtime, "cudaDeviceSynchronize", 2000, 2600, 35, 0);
  // Not host-blocking: a stream waiting on an event (device side), an async launch.
  add(t, EventKind::Sync, "Stream Wait Event", 3000, 3100, 0);
  add(t, EventKind::Runtime, "cudaLaunchKernel", 3100, 3110, 36, 0);

  const std::vector<SyncRow> rows = sync_table(t, link_launches(t));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].name, "cudaDeviceSynchronize");   // 600 ns
  EXPECT_EQ(rows[0].op, "");
  EXPECT_EQ(rows[1].name, "cudaStreamSynchronize");   // 380 + 100 = 480 ns, both under aten::item
  EXPECT_EQ(rows[1].op, "aten::item");
  EXPECT_EQ(rows[1].count, 2);
  EXPECT_EQ(rows[1].total_ns, 480);
  EXPECT_EQ(rows[2].name, "cudaMemcpy");              // 280 ns
  EXPECT_EQ(rows[2].op, "aten::to");
}

TEST(SyncTable, AWindowsContextCountsInTheWindowThatOwnsIt) {
  // Two item() waits; the first is a windowed import's context (kContextFlag: it started before
  // the time the window owns): only the second, 100 ns, counts here.
  Trace t;
  add(t, EventKind::HostOp, "aten::item", 0, 500, 0, 1).flags |= kContextFlag;
  add(t, EventKind::Runtime, "cudaStreamSynchronize", 100, 480, 32, 1).flags |= kContextFlag;
  add(t, EventKind::HostOp, "aten::item", 600, 800, 0, 3);
  add(t, EventKind::Runtime, "cudaStreamSynchronize", 650, 750, 33, 3);
  const std::vector<SyncRow> rows = sync_table(t, link_launches(t));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].op, "aten::item");
  EXPECT_EQ(rows[0].count, 1);
  EXPECT_EQ(rows[0].total_ns, 100);
}

TEST(SyncTable, CuptiSyncRecordsWithoutACallStillCount) {
  // A live session may keep only CUPTI's sync record (runtime API activity off): it still shows.
  Trace t;
  add(t, EventKind::HostOp, "aten::nonzero", 0, 100);
  add(t, EventKind::Sync, "Stream Sync", 10, 90);
  const std::vector<SyncRow> rows = sync_table(t, link_launches(t));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].op, "aten::nonzero");
  EXPECT_EQ(rows[0].total_ns, 80);
  EXPECT_TRUE(is_host_blocking_call(t, t.events[1]));
}

TEST(StepMemoryTable, PeakPerStepWithTheLevelCarriedIn) {
  Trace t;
  t.devices = {gpu()};
  // Two steps [0, 100) and [100, 200). Samples on GPU 0: 50 @ -10 (before), 80 @ 20, 60 @ 50,
  // 40 @ 150. Step 1's peak: max(50 carried in, 80, 60) = 80. Step 2 starts at 60 (the last level
  // before it) and falls to 40: peak 60. Reserved mirrors allocated x 2. One level of the host's
  // allocator, 1 GiB @ 30, makes the host rows (device -1, listed first): 1 GiB in step 1, carried
  // into step 2; they have no capacity (the host's is not in a trace) and no RSS sample.
  t.add(EventKind::StepMarker, "ProfilerStep#1", 0, 100);
  t.add(EventKind::StepMarker, "ProfilerStep#2", 100, 100);
  for (auto [ts, bytes] : {std::pair<int64_t, int64_t>{20, 80}, {-10, 50}, {150, 40}, {50, 60}}) {
    MemorySample m;
    m.ts_ns = ts;
    m.total_allocated = bytes;
    m.total_reserved = 2 * bytes;
    m.device = 0;
    t.memory.push_back(m);
  }
  MemorySample host;
  host.ts_ns = 30;
  host.total_allocated = 1 << 30;
  t.memory.push_back(host);
  const std::vector<StepMemoryRow> rows = step_memory_table(t, compute_breakdown(t));
  ASSERT_EQ(rows.size(), 4u);
  for (int i : {0, 1}) {
    EXPECT_EQ(rows[i].device, -1);
    EXPECT_EQ(rows[i].peak_allocated_bytes, 1 << 30);
    EXPECT_EQ(rows[i].capacity_bytes, 0);
    EXPECT_EQ(rows[i].peak_rss_bytes, -1);
  }
  EXPECT_EQ(rows[2].step, 1);
  EXPECT_EQ(rows[2].device, 0);
  EXPECT_EQ(rows[2].peak_allocated_bytes, 80);
  EXPECT_EQ(rows[2].peak_reserved_bytes, 160);
  EXPECT_EQ(rows[2].capacity_bytes, 1000);
  EXPECT_EQ(rows[2].peak_rss_bytes, -1);   // RSS is a host figure
  EXPECT_EQ(rows[3].step, 2);
  EXPECT_EQ(rows[3].start_ns, 100);
  EXPECT_EQ(rows[3].peak_allocated_bytes, 60);
  EXPECT_EQ(rows[3].peak_reserved_bytes, 120);
}

TEST(StepMemoryTable, ALevelRecordedAtTheStepsStartReplacesTheOneBefore) {
  // Allocator statistics read at the boundaries of steps [0, 100), [100, 200), [200, 300): 64 at
  // each boundary, and the peak of each step that raised the high-water mark stamped inside it
  // (96 @ 50, 192 @ 150). Step 3 set no new mark: it starts at the boundary's 64 (read at its
  // start), not at step 2's peak recorded before it, so its row is 64.
  Trace t;
  t.devices = {gpu()};
  for (int k = 0; k < 3; ++k)
    t.add(EventKind::StepMarker, ("ProfilerStep#" + std::to_string(k + 1)).c_str(), 100 * k, 100);
  for (auto [ts, bytes] :
       {std::pair<int64_t, int64_t>{0, 64}, {50, 96}, {100, 64}, {150, 192}, {200, 64}, {300, 64}}) {
    MemorySample m;
    m.ts_ns = ts;
    m.total_allocated = bytes;
    m.total_reserved = 256;
    m.device = 0;
    t.memory.push_back(m);
  }
  const std::vector<StepMemoryRow> rows = step_memory_table(t, compute_breakdown(t));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].peak_allocated_bytes, 96);
  EXPECT_EQ(rows[1].peak_allocated_bytes, 192);
  EXPECT_EQ(rows[2].peak_allocated_bytes, 64);
}

TEST(StepMemoryTable, HostRssIsThePeakOfTheSamplesAtAndInsideTheStep) {
  // A live session samples RSS at every step boundary: steps [0, 100) and [100, 200) with samples
  // 500 @ 0, 700 @ 100, 650 @ 200, and one taken inside step 2, 900 @ 150. Both ends belong to a
  // step: step 1 = max(500, 700) = 700, step 2 = max(700, 900, 650) = 900. A sample before the
  // first step (300 @ -50) is not carried in: RSS is not a level an allocator holds until changed.
  // No allocator levels: the host rows say so (-1), and no device row appears.
  Trace t;
  t.add(EventKind::StepMarker, "ProfilerStep#1", 0, 100);
  t.add(EventKind::StepMarker, "ProfilerStep#2", 100, 100);
  for (auto [ts, rss] : {std::pair<int64_t, int64_t>{150, 900}, {0, 500}, {100, 700}, {200, 650}, {-50, 300}})
    t.host_memory.push_back({ts, rss});
  const std::vector<StepMemoryRow> rows = step_memory_table(t, compute_breakdown(t));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].device, -1);
  EXPECT_EQ(rows[0].peak_rss_bytes, 700);
  EXPECT_EQ(rows[0].peak_allocated_bytes, -1);
  EXPECT_EQ(rows[1].device, -1);
  EXPECT_EQ(rows[1].peak_rss_bytes, 900);
}

// Bounded by design: 2500 operators of distinct names, op i lasting i + 1 ns, keep the 1999
// heaviest (2500 ns down to 502 ns) and one row "other names (501)" with the rest's sums: 501 calls,
// host time 1 + 2 + ... + 501 = 125751 ns. Every call is still counted.
TEST(BoundedTables, DistinctNamesPastTheCapBecomeOneRow) {
  Trace t;
  for (int i = 0; i < 2500; ++i)
    add(t, EventKind::HostOp, ("op" + std::to_string(i)).c_str(), 10000 * i, 10000 * i + i + 1);
  const std::vector<OperatorRow> rows = operator_table(t, link_launches(t));
  ASSERT_EQ(rows.size(), kMaxNameRows);
  EXPECT_EQ(rows.front().name, "op2499");
  EXPECT_EQ(rows[kMaxNameRows - 2].host_total_ns, 502);
  const OperatorRow& other = rows.back();
  EXPECT_EQ(other.name, "other names (501)");
  EXPECT_EQ(other.calls, 501);
  EXPECT_EQ(other.host_total_ns, 501 * 502 / 2);
  EXPECT_EQ(other.host_self_ns, 501 * 502 / 2);
  int64_t calls = 0;
  for (const OperatorRow& r : rows) calls += r.calls;
  EXPECT_EQ(calls, 2500);
}

// The by-shape table is capped on its own: one operator called on 2500 distinct shapes, call i
// lasting i + 1 ns, gives 1999 shape rows (2500 ns down to 502 ns) and "other names (501)" with the
// rest (501 calls, 1 + ... + 501 ns), while by name it stays one row of all 2500 calls.
TEST(BoundedTables, ShapesPastTheCapBecomeOneRowAndTheNameKeepsEveryCall) {
  Trace t;
  for (int i = 0; i < 2500; ++i)
    add(t, EventKind::HostOp, "aten::mm", 10000 * i, 10000 * i + i + 1).aux =
        t.strings.intern("[[" + std::to_string(i) + ", 4]]");
  const OperatorTables tables = operator_tables(t, link_launches(t));
  ASSERT_EQ(tables.by_shape.size(), kMaxNameRows);
  EXPECT_EQ(tables.by_shape.front().input_shapes, "[[2499, 4]]");
  EXPECT_EQ(tables.by_shape[kMaxNameRows - 2].host_total_ns, 502);
  const OperatorRow& other = tables.by_shape.back();
  EXPECT_EQ(other.name, "other names (501)");
  EXPECT_EQ(other.input_shapes, "");
  EXPECT_EQ(other.calls, 501);
  EXPECT_EQ(other.host_total_ns, 501 * 502 / 2);
  ASSERT_EQ(tables.by_name.size(), 1u);
  EXPECT_EQ(tables.by_name[0].calls, 2500);
  EXPECT_EQ(tables.by_name[0].host_total_ns, 2500 * 2501 / 2);
}

// A name longer than kMaxNameBytes is shown as its first bytes (never half a UTF-8 character), its
// length and a hash: at most kMaxNameBytes, the same text for the same name, another for another
// name with the same first bytes and length. analyse_tables shows the short form in the rows and
// keeps the full text once, by its id in the trace's strings.
TEST(BoundedTables, LongNamesAreShownShortAndKeptOnce) {
  const std::string a = std::string(1500, 'a') + "\xc3\xa9" + std::string(2000, 'z');   // an é inside
  std::string b = a;
  b.back() = 'y';
  const std::string shown = display_name(a);
  EXPECT_LE(shown.size(), kMaxNameBytes);
  EXPECT_EQ(shown.rfind(std::string(900, 'a'), 0), 0u);
  EXPECT_NE(shown.find("... [3502 bytes, #"), std::string::npos);
  EXPECT_EQ(display_name(a), shown);
  EXPECT_NE(display_name(b), shown);
  EXPECT_EQ(display_name("aten::mm"), "aten::mm");
  // The cut falls on the é's second byte (byte 944): it moves back before the whole character.
  const std::string cut = display_name(std::string(943, 'a') + "\xc3\xa9" + std::string(2000, 'b'));
  EXPECT_EQ(cut.substr(0, cut.find("... [")), std::string(943, 'a'));

  Trace t;
  add(t, EventKind::StepMarker, "ProfilerStep#1", 0, 1000);
  add(t, EventKind::HostOp, a.c_str(), 10, 20);
  add(t, EventKind::HostOp, a.c_str(), 30, 40);
  add(t, EventKind::HostOp, b.c_str(), 50, 60);
  // Input shapes of 3000 bytes: shown short in the by-shape rows, kept once.
  const std::string shapes = "[[" + std::string(2996, '7') + "]]";
  t.events[1].aux = t.events[2].aux = t.strings.intern(shapes);
  const AnalysisTables tables = analyse_tables(t, {});
  ASSERT_EQ(tables.operators.size(), 2u);
  for (const OperatorRow& r : tables.operators) EXPECT_LE(r.name.size(), kMaxNameBytes);
  ASSERT_EQ(tables.operators_by_shape.size(), 2u);
  for (const OperatorRow& r : tables.operators_by_shape) EXPECT_LE(r.name.size(), kMaxNameBytes);
  EXPECT_EQ(tables.operators_by_shape[0].input_shapes, display_name(shapes));
  EXPECT_EQ(tables.operators_by_shape[1].input_shapes, "");
  ASSERT_EQ(tables.long_names.size(), 3u);
  for (const AnalysisTables::LongName& n : tables.long_names) {
    ASSERT_NE(n.id, kNoIndex);
    EXPECT_EQ(display_name(t.strings.at(n.id)), n.shown);
    EXPECT_TRUE(n.full.empty());   // not copied: the trace has it
  }
}

// FLOPs survive the bounds: 2500 products aten::mm of distinct shapes [1, k] x [k, 1] (2k FLOPs,
// lasting k ns) and an operator of a 3502-byte name lasting 5000 ns (with shapes: the trace recorded
// them for every op), which no rule covers, counted by the trace's `flops` arg (1000). By shape, the 1999 heaviest
// rows are that operator and k = 503 to 2500; the rest's FLOPs are summed into the "other names (502)" row: 2 x (1
// + 2 + ... + 502) = 252506, a matrix-class row. The long-named operator keeps its FLOPs under its short name, in
// the operator tables and on the roofline.
TEST(BoundedTables, FlopsSurviveTheCapAndTheShortNames) {
  Trace t;
  add(t, EventKind::StepMarker, "ProfilerStep#1", 0, 100000000);
  for (int k = 1; k <= 2500; ++k) {
    Event& e = add(t, EventKind::HostOp, "aten::mm", 10000 * k, 10000 * k + k);
    e.aux = t.strings.intern("[[1, " + std::to_string(k) + "], [" + std::to_string(k) + ", 1]]");
  }
  const std::string long_name = std::string(1500, 'a') + "\xc3\xa9" + std::string(2000, 'z');
  add(t, EventKind::HostOp, long_name.c_str(), 90000000, 90000000 + 5000).aux = t.strings.intern("[[1]]");
  OpArgs args;
  args.event = static_cast<uint32_t>(t.events.size() - 1);
  args.trace_flops = 1000;
  t.op_args.push_back(args);
  const AnalysisTables a = analyse_tables(t, {});
  // By shape: capped, the tail's FLOPs in its last row.
  ASSERT_EQ(a.operators_by_shape.size(), kMaxNameRows);
  const OperatorRow& other = a.operators_by_shape.back();
  EXPECT_EQ(other.name, "other names (502)");
  EXPECT_EQ(other.flops, 502 * 503);
  EXPECT_EQ(other.flop_class, FlopClass::Matmul);
  int64_t flops = 0;
  for (const OperatorRow& r : a.operators_by_shape) flops += r.flops;
  EXPECT_EQ(flops, 2500 * 2501 + 1000);   // every call still counted: 2 x (1 + ... + 2500) + 1000
  // By name: aten::mm's row holds all 2500 products, the long name's its own 1000 under its short name.
  const std::string shown = display_name(long_name);
  ASSERT_EQ(a.operators.size(), 2u);
  for (const OperatorRow& r : a.operators)
    EXPECT_EQ(r.flops, r.name == "aten::mm" ? 2500 * 2501 : r.name == shown ? 1000 : -1) << r.name;
  const auto roof =
      std::find_if(a.roofline.begin(), a.roofline.end(), [&](const RooflineRow& r) { return r.flops == 1000; });
  ASSERT_NE(roof, a.roofline.end());
  EXPECT_EQ(roof->name, shown);
}

// Live sessions without record_shapes: the FLOP capture gives the matrix-class ops their shapes and
// no other op has any. The roofline still has a row per shape (two mm shapes: 2 x 2 x 3 x 4 = 48 and
// 2 x 4 x 5 x 6 = 240 FLOPs), but the report has no operators_by_shape (record_shapes was off).
TEST(OperatorTable, ShapesOnlyFromTheFlopCaptureMakeNoByShapeTable) {
  Trace t;
  add(t, EventKind::StepMarker, "ProfilerStep#1", 0, 1000);
  add(t, EventKind::HostOp, "aten::mm", 10, 20).aux = t.strings.intern("[[2, 3], [3, 4]]");
  add(t, EventKind::HostOp, "aten::mm", 30, 40).aux = t.strings.intern("[[4, 5], [5, 6]]");
  add(t, EventKind::HostOp, "aten::relu", 50, 60);
  const AnalysisTables a = analyse_tables(t, {});
  EXPECT_TRUE(a.operators_by_shape.empty());
  ASSERT_EQ(a.roofline.size(), 2u);
  EXPECT_EQ(a.roofline[0].flops + a.roofline[1].flops, 48 + 240);
  EXPECT_NE(a.roofline[0].input_shapes, a.roofline[1].input_shapes);
  // With shapes on another op too (record_shapes), the by-shape table is the report's.
  t.events.back().aux = t.strings.intern("[[4, 6]]");
  EXPECT_EQ(analyse_tables(t, {}).operators_by_shape.size(), 3u);
}
