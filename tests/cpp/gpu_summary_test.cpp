// Specifications of the GPU summary (docs/metrics.md, "GPU summary") on hand-built timelines.
// Times are nanoseconds; every expected number is worked out beside it.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "gpuprof/analysis/gpu_summary.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/plausibility.h"
#include "gpuprof/analysis/tables.h"
#include "trace_builders.h"

using namespace gpuprof;

namespace {

using spec::add_kernel;
using spec::small_gpu;

Event& host(Trace& t, const char* name, int64_t start, int64_t end, uint64_t external_id = 0) {
  Event& e = t.add(EventKind::HostOp, name, start, end - start);
  e.external_id = external_id;
  return e;
}

void runtime(Trace& t, int64_t start, int64_t end, uint64_t correlation, uint64_t external_id) {
  Event& e = t.add(EventKind::Runtime, "cudaLaunchKernel", start, end - start);
  e.correlation = correlation;
  e.external_id = external_id;
}

// One step [0, 1000) with three kernels on GPU 0 (10 SMs):
//   K1 [100, 300)  5 blocks  -> SM share 0.5, occupancy 40 %, launched inside aten::addmm
//   K2 [200, 400) 20 blocks  -> SM share 1.0, occupancy 80 %, launched inside aten::relu
//   K3 [600, 700) no launch shape (share 0, occupancy unknown), an h884 tensor-core kernel,
//      launched by a call without an external id, inside aten::matmul by time
Trace three_kernel_step() {
  Trace t;
  t.devices = {small_gpu(0), small_gpu(1)};
  t.add(EventKind::StepMarker, "ProfilerStep#1", 0, 1000);
  host(t, "aten::linear", 50, 450, 1);
  host(t, "aten::t", 55, 58, 2);
  host(t, "aten::addmm", 60, 440, 3);
  runtime(t, 70, 80, 11, 3);
  host(t, "aten::relu", 460, 480, 4);
  runtime(t, 462, 470, 12, 4);
  host(t, "aten::matmul", 485, 499, 5);
  runtime(t, 490, 495, 13, 0);
  add_kernel(t, "volta_sgemm_128x64_nn", 100, 300, 11, 5, 40.0f);
  add_kernel(t, "void at::native::vectorized_elementwise_kernel<4, relu>", 200, 400, 12, 20, 80.0f);
  add_kernel(t, "volta_h884gemm_64x64_ldg8_nn", 600, 700, 13, 0, -1.0f);
  MemorySample m;
  m.device = 0;
  for (auto [ts, allocated] : {std::pair<int64_t, int64_t>{10, 100}, {500, 300}, {900, 200}}) {
    m.ts_ns = ts;
    m.total_allocated = allocated;
    t.memory.push_back(m);
  }
  return t;
}

}  // namespace

TEST(GpuSummary, ThreeKernelsInOneStep) {
  const Trace t = three_kernel_step();
  const std::vector<DeviceSummary> s = summarize_devices(t);
  // GPU 1 has properties but ran nothing and allocated nothing: not listed.
  ASSERT_EQ(s.size(), 1u);
  const DeviceSummary& d = s[0];
  EXPECT_EQ(d.id, 0);
  EXPECT_EQ(d.name, "Test GPU");
  // Window: the step, [0, 1000) (its device work ends at 700, before the host range does).
  EXPECT_EQ(d.window_ns, 1000);
  // Utilization: union [100, 400) + [600, 700) = 400 of 1000.
  EXPECT_DOUBLE_EQ(d.utilization_pct, 40.0);
  // SM efficiency: [100,200) 0.5; [200,300) 0.5 + 1.0 capped at 1; [300,400) 1.0; [600,700) 0
  // -> 50 + 100 + 100 = 250 of 1000.
  EXPECT_DOUBLE_EQ(d.sm_efficiency_pct, 25.0);
  // Occupancy: (40 x 200 + 80 x 200) / 400; K3 has none and does not weigh.
  EXPECT_DOUBLE_EQ(d.achieved_occupancy_pct, 60.0);
  // Tensor cores: K3's 100 of 500 ns of kernel time.
  EXPECT_EQ(d.kernel_ns, 500);
  EXPECT_DOUBLE_EQ(d.tensor_core_pct, 20.0);
  // Eligible: K1 (addmm, inside linear) 200 + K3 (matmul, found by time) 100 of 500.
  EXPECT_DOUBLE_EQ(d.tc_eligible_pct, 60.0);
  EXPECT_EQ(d.memory_total_bytes, 16LL << 30);
  EXPECT_EQ(d.peak_allocated_bytes, 300);
}

TEST(GpuSummary, CompiledGraphKernelsAreEligibleByTheirOwnName) {
  // A torch.compile graph: "## Call CompiledFxGraph ##" (not an eligible op) launches an inductor
  // Triton mm template [100, 300), a fused pointwise kernel [300, 400), and, from a CUDA graph
  // replay with no op at all, a cuBLAS sgemm [500, 600): eligible 200 + 100 of 400 = 75 %.
  Trace t;
  t.devices = {small_gpu(0)};
  t.add(EventKind::StepMarker, "ProfilerStep#1", 0, 1000);
  host(t, "## Call CompiledFxGraph f123 ##", 50, 450, 1);
  runtime(t, 60, 70, 21, 1);
  runtime(t, 80, 90, 22, 1);
  runtime(t, 460, 470, 23, 0);
  add_kernel(t, "triton_tem_fused_addmm_relu_0", 100, 300, 21, 10, 50.0f);
  add_kernel(t, "triton_poi_fused_add_1", 300, 400, 22, 10, 50.0f);
  add_kernel(t, "ampere_sgemm_128x64_nn", 500, 600, 23, 10, 50.0f);
  const std::vector<DeviceSummary> s = summarize_devices(t);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].kernel_ns, 400);
  EXPECT_DOUBLE_EQ(s[0].tensor_core_pct, 0.0);
  EXPECT_DOUBLE_EQ(s[0].tc_eligible_pct, 75.0);
}

TEST(GpuSummary, OutermostEligibleOpOwnsTheKernel) {
  const Trace t = three_kernel_step();
  const LaunchLinks links = link_launches(t);
  // Events in add order: 0 step, 1 linear, 2 t, 3 addmm, 4 rt, 5 relu, 6 rt, 7 matmul, 8 rt, 9-11 kernels.
  EXPECT_EQ(links.runtime_of[9], 4u);
  EXPECT_EQ(links.op_of[9], 3u);            // by external id: addmm
  EXPECT_EQ(links.parent_op[3], 1u);        // addmm sits inside linear
  EXPECT_EQ(links.eligible_root[3], 1u);    // and linear is the outermost eligible op
  EXPECT_EQ(links.eligible_root[2], 1u);    // aten::t is not eligible itself, but inside linear
  EXPECT_EQ(links.eligible_root[5], kNoIndex);   // relu
  EXPECT_EQ(links.op_of[11], 7u);           // no external id: the call lies inside matmul
  EXPECT_EQ(links.top_op[3], 1u);
}

// Ids are looked up through a vector indexed by id when they are dense (profilers count them up)
// and through a hash map when not: the links must be the same either way. The same launches as
// three_kernel_step, with ids 1..13 and then with ids around 10^12 (a sparse range); a driver call
// sharing the first runtime call's correlation id, added before it, never shadows it.
TEST(LaunchLinks, DenseAndSparseIdsLinkTheSame) {
  auto build = [](uint64_t base) {
    Trace t;
    auto id = [&](uint64_t x) { return x == 0 ? 0 : base == 0 ? x : base + x * 7919; };
    t.add(EventKind::StepMarker, "ProfilerStep#1", 0, 1000);
    host(t, "aten::linear", 50, 450, id(1));
    host(t, "aten::t", 55, 58, id(2));
    host(t, "aten::addmm", 60, 440, id(3));
    Event& drv = t.add(EventKind::Driver, "cuLaunchKernel", 65, 5);
    drv.correlation = id(11);
    runtime(t, 70, 80, id(11), id(3));
    host(t, "aten::relu", 460, 480, id(4));
    runtime(t, 462, 470, id(12), id(4));
    host(t, "aten::matmul", 485, 499, id(5));
    runtime(t, 490, 495, id(13), 0);
    add_kernel(t, "volta_sgemm_128x64_nn", 100, 300, id(11), 5, 40.0f);
    add_kernel(t, "relu_kernel", 200, 400, id(12), 20, 80.0f);
    add_kernel(t, "volta_h884gemm_64x64_ldg8_nn", 600, 700, id(13), 0, -1.0f);
    return t;
  };
  const Trace dense = build(0), sparse = build(1000000000000ull);
  const LaunchLinks a = link_launches(dense), b = link_launches(sparse);
  // Events: 0 step, 1 linear, 2 t, 3 addmm, 4 driver, 5 rt, 6 relu, 7 rt, 8 matmul, 9 rt, 10-12 kernels.
  EXPECT_EQ(a.runtime_of[10], 5u);   // the runtime call, not the driver call with the same id
  EXPECT_EQ(a.op_of[10], 3u);        // addmm, by external id
  EXPECT_EQ(a.op_of[11], 6u);        // relu
  EXPECT_EQ(a.op_of[12], 8u);        // no external id: the call lies inside matmul
  EXPECT_EQ(a.runtime_of, b.runtime_of);
  EXPECT_EQ(a.op_of, b.op_of);
  EXPECT_EQ(a.parent_op, b.parent_op);
  EXPECT_EQ(a.top_op, b.top_op);
  EXPECT_EQ(a.eligible_root, b.eligible_root);
}

// analyse_tables runs the linked tables on a second thread: what it returns is what the passes
// give one after the other.
TEST(AnalyseTables, TheSameAsEachPassInTurn) {
  const Trace t = three_kernel_step();
  const AnalysisTables a = analyse_tables(t, BreakdownOptions{});
  const BreakdownResult steps = compute_breakdown(t, BreakdownOptions{});
  const LaunchLinks links = link_launches(t);
  ASSERT_EQ(a.steps.steps.size(), steps.steps.size());
  EXPECT_EQ(a.steps.steps[0].total_ns(), steps.steps[0].total_ns());
  EXPECT_EQ(a.links.op_of, links.op_of);
  EXPECT_EQ(a.links.eligible_root, links.eligible_root);
  const std::vector<DeviceSummary> devices = summarize_devices(t, steps_window(steps), links);
  ASSERT_EQ(a.devices.size(), devices.size());
  EXPECT_DOUBLE_EQ(a.devices[0].utilization_pct, devices[0].utilization_pct);
  EXPECT_DOUBLE_EQ(a.devices[0].tc_eligible_pct, devices[0].tc_eligible_pct);
  const std::vector<OperatorRow> ops = operator_table(t, links);
  ASSERT_EQ(a.operators.size(), ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(a.operators[i].name, ops[i].name);
    EXPECT_EQ(a.operators[i].device_total_ns, ops[i].device_total_ns);
  }
  EXPECT_EQ(a.kernels.size(), kernel_table(t).size());
  EXPECT_EQ(a.syncs.size(), sync_table(t, links).size());
  EXPECT_EQ(a.memory.size(), step_memory_table(t, steps).size());
}

TEST(GpuSummary, SmEfficiencyDoesNotDependOnTheKernelsOrder) {
  // Step [0, 1000) on a 10-SM GPU. Kernels (blocks -> share): A [100, 300) 5 -> 0.5, B [300, 500)
  // 10 -> 1, C [300, 400) 5 -> 0.5 (starts as B starts and A ends), D [400, 600) 2 -> 0.2 (starts
  // as C ends). Busy share: [100,300) 0.5; [300,400) 1 + 0.5 capped at 1; [400,500) 1 + 0.2 capped
  // at 1; [500,600) 0.2 -> 100 + 100 + 100 + 20 = 320 of 1000: 32%, whatever order the trace
  // lists them in (starts and ends that are not in order are sorted; ties are ends first).
  const std::vector<std::array<int64_t, 3>> ks = {{100, 300, 5}, {300, 500, 10}, {300, 400, 5}, {400, 600, 2}};
  std::vector<size_t> order = {0, 1, 2, 3};
  do {
    Trace t;
    t.devices = {small_gpu(0)};
    t.add(EventKind::StepMarker, "ProfilerStep#1", 0, 1000);
    for (size_t i : order) add_kernel(t, "k", ks[i][0], ks[i][1], 0, int(ks[i][2]), 50.0f);
    const DeviceSummary d = summarize_devices(t)[0];
    ASSERT_EQ(d.window_ns, 1000);
    EXPECT_NEAR(d.sm_efficiency_pct, 32.0, 1e-9);
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST(GpuSummary, KernelsOutsideTheWindowAreClipped) {
  // Step [0, 1000) launches k_late [900, 1100), so it ends at 1100. k_before [-100, 100), launched
  // before profiling started (no runtime call), ends before the step's own device work begins, so
  // the step starts where it ends (docs/breakdown.md): window [100, 1100), and k_before lies wholly
  // outside it. k_other [1050, 1200) has no launch in the trace either: it does not extend the
  // step, and only its [1050, 1100) is inside the window.
  Trace t;
  t.devices = {small_gpu(0)};
  t.add(EventKind::StepMarker, "ProfilerStep#3", 0, 1000);
  runtime(t, 10, 20, 7, 0);
  add_kernel(t, "k_before", -100, 100, 0, 10, 100.0f);
  add_kernel(t, "k_late", 900, 1100, 7, 10, 50.0f);
  add_kernel(t, "k_other", 1050, 1200, 0, 10, 100.0f);
  const DeviceSummary d = summarize_devices(t)[0];
  EXPECT_EQ(d.window_ns, 1000);
  // The union inside the window: [900, 1100) = 200 of 1000.
  EXPECT_NEAR(d.utilization_pct, 20.0, 1e-9);
  // All have 10 blocks on 10 SMs (share 1, capped at 1 where two run): the same 200 of 1000.
  EXPECT_NEAR(d.sm_efficiency_pct, 20.0, 1e-9);
  // Weighted by the time inside the window: (50 x 200 + 100 x 50) / 250.
  EXPECT_NEAR(d.achieved_occupancy_pct, 15000.0 / 250, 1e-9);
}

TEST(GpuSummary, OccupancyFromTheCalculatorWhenTheTraceHasNone) {
  // 128 threads, 32 registers, no shared memory on cc 7.0: 16 blocks by warps (64 / 4), 16 by
  // registers (1024 per warp: 16 warps per sub-partition, 64 / 4), so 16; the launch has 1000 / 10 =
  // 100 blocks per SM -> 16 x 128 / 2048 = 100 %. With 40 blocks (4 per SM): 4 x 128 / 2048 = 25 %.
  Trace t;
  t.devices = {small_gpu(0)};
  t.add(EventKind::StepMarker, "ProfilerStep#1", 0, 100);
  runtime(t, 1, 2, 1, 0);
  runtime(t, 3, 4, 2, 0);
  add_kernel(t, "a", 10, 40, 1, 1000, -1.0f);
  add_kernel(t, "b", 50, 60, 2, 40, -1.0f);
  // (100 x 30 + 25 x 10) / 40 = 81.25
  EXPECT_DOUBLE_EQ(summarize_devices(t)[0].achieved_occupancy_pct, 81.25);
}

TEST(GpuSummary, NoStepsNoDevices) {
  Trace t;
  EXPECT_TRUE(summarize_devices(t).empty());
  // Kernels but no host activity at all: no step, so a zero window; numbers stay 0, not NaN.
  add_kernel(t, "k", 0, 10, 0, 10, 50.0f);
  const std::vector<DeviceSummary> s = summarize_devices(t);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].window_ns, 0);
  EXPECT_EQ(s[0].utilization_pct, 0.0);
  EXPECT_EQ(s[0].sm_efficiency_pct, 0.0);
  EXPECT_EQ(s[0].achieved_occupancy_pct, -1.0);
  EXPECT_EQ(s[0].tensor_core_pct, 0.0);
  EXPECT_EQ(s[0].peak_allocated_bytes, -1);
}

// Old Kineto traces record only each allocation's size (`Bytes`), not the allocator's level: the
// peak is then unknown (-1, None in the report), never a made-up 0 or a sum from an unknown start.
TEST(GpuSummary, DeltaOnlyMemorySamplesGiveNoPeak) {
  Trace t = three_kernel_step();
  for (MemorySample& m : t.memory) {
    m.bytes_delta = m.total_allocated;
    m.total_allocated = -1;
  }
  const std::vector<DeviceSummary> s = summarize_devices(t);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].peak_allocated_bytes, -1);
}

// Occupancy is a share of an SM's warp slots: Kineto's recorded 500% is taken as 100% by the GPU
// summary and the kernel table, and counted (it was reported as 500%). Allocator levels above the
// device's 16 GiB are counted with the largest one.
//   K1 [100,300) at 500% and K2 [200,400) at 80%: occupancy (100 x 200 + 80 x 200) / 400 = 90.
TEST(Plausibility, OccupancyAboveOneHundredIsClampedAndCounted) {
  Trace t = three_kernel_step();
  for (const Event& e : t.events)
    if (e.kind == EventKind::Kernel && t.name_of(e) == "volta_sgemm_128x64_nn")
      t.kernels[e.aux].est_occupancy_pct = 500.0f;
  const std::vector<DeviceSummary> s = summarize_devices(t);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_DOUBLE_EQ(s[0].achieved_occupancy_pct, 90.0);
  const std::vector<KernelRow> rows = kernel_table(t);
  for (const KernelRow& k : rows)
    if (k.name == "volta_sgemm_128x64_nn") EXPECT_DOUBLE_EQ(k.mean_occupancy_pct, 100.0);
  const Plausibility p = check_plausibility(t);
  EXPECT_EQ(p.occupancy_clamped_kernels, 1);
  EXPECT_FLOAT_EQ(p.occupancy_max_pct, 500.0f);
  EXPECT_EQ(p.memory_over_capacity_samples, 0);
}

TEST(Plausibility, MemoryAboveTheDeviceIsCounted) {
  Trace t = three_kernel_step();
  MemorySample m;
  m.device = 0;
  m.ts_ns = 600;
  m.total_allocated = 1LL << 49;   // 512 TiB on a 16 GiB GPU
  t.memory.push_back(m);
  m.total_allocated = 1LL << 20;
  m.total_reserved = 17LL << 30;   // reserved above it too
  t.memory.push_back(m);
  m.device = 1;                    // another GPU: within its memory
  m.total_reserved = 1LL << 30;
  t.memory.push_back(m);
  const Plausibility p = check_plausibility(t);
  EXPECT_EQ(p.memory_over_capacity_samples, 2);
  EXPECT_EQ(p.memory_over_capacity_max_bytes, 1LL << 49);
  EXPECT_EQ(p.memory_over_capacity_device_bytes, 16LL << 30);
  EXPECT_EQ(p.memory_over_capacity_device, 0);
}

// Communication/compute overlap (docs/distributed.md, "Overlap"): the union of NCCL kernels inside
// the steps' window, and the parts of it that a compute kernel and, separately, a copy ran beside.
// One step [0, 1000) on GPU 0; the step's own launch keeps the window at [0, 1000).
Trace overlap_step() {
  Trace t;
  t.devices = {small_gpu(0)};
  t.add(EventKind::StepMarker, "ProfilerStep#1", 0, 1000);
  return t;
}

TEST(GpuSummary, CommunicationEntirelyUnderComputeIsAllOverlapped) {
  // ncclKernel [200, 400) under gemm [100, 500): all 200 ns overlapped.
  Trace t = overlap_step();
  add_kernel(t, "gemm", 100, 500, 0, 10, 50.0f);
  add_kernel(t, "ncclKernel_AllReduce_RING_LL_Sum_float", 200, 400, 0, 10, 50.0f);
  const DeviceSummary d = summarize_devices(t)[0];
  EXPECT_EQ(d.comm_kernel_ns, 200);
  EXPECT_EQ(d.comm_overlap_compute_ns, 200);
  EXPECT_EQ(d.comm_overlap_copy_ns, 0);
}

TEST(GpuSummary, CommunicationBesideComputeIsNotOverlapped) {
  // ncclKernel [600, 800) after gemm [100, 500): nothing overlapped.
  Trace t = overlap_step();
  add_kernel(t, "gemm", 100, 500, 0, 10, 50.0f);
  add_kernel(t, "ncclDevKernel_AllGather", 600, 800, 0, 10, 50.0f);
  const DeviceSummary d = summarize_devices(t)[0];
  EXPECT_EQ(d.comm_kernel_ns, 200);
  EXPECT_EQ(d.comm_overlap_compute_ns, 0);
}

TEST(GpuSummary, HalfOverlappedAndCopiesCountedApart) {
  // ncclKernel [300, 700): gemm [100, 500) covers [300, 500) = half; a copy [600, 900) covers
  // [600, 700) = a quarter, counted apart from compute. A second NCCL kernel [1100, 1300) lies
  // outside the steps' window: it is not communication of the steps (beside compute or not).
  Trace t = overlap_step();
  add_kernel(t, "gemm", 100, 500, 0, 10, 50.0f);
  add_kernel(t, "ncclKernel_AllReduce", 300, 700, 0, 10, 50.0f);
  add_kernel(t, "ncclKernel_AllReduce", 1100, 1300, 0, 10, 50.0f);
  Event& copy = t.add(EventKind::Memcpy, "Memcpy DtoH", 600, 300);
  copy.device = 0;
  const DeviceSummary d = summarize_devices(t)[0];
  EXPECT_EQ(d.comm_kernel_ns, 400);
  EXPECT_EQ(d.comm_overlap_compute_ns, 200);
  EXPECT_EQ(d.comm_overlap_copy_ns, 100);
}

// The GPU timeline (the plugin's buckets): the trace runs [0, 50 us), so the buckets are 1 us, 50 of
// them. A kernel of 5 blocks on 10 SMs (share 0.5) runs [10 us, 15.5 us): buckets 10-14 are 100%
// utilized at 50% SM efficiency, bucket 15 half of that, the rest idle.
TEST(GpuSummary, TimelineInThePluginsBuckets) {
  Trace t;
  t.devices = {small_gpu(0)};
  t.add(EventKind::StepMarker, "ProfilerStep#1", 0, 50'000);
  add_kernel(t, "k", 10'000, 15'500, 0, 5, 50.0f);
  const std::vector<GpuTimeline> tl = gpu_timelines(t);
  ASSERT_EQ(tl.size(), 1u);
  const std::vector<GpuBucket>& b = tl[0].buckets;
  ASSERT_EQ(b.size(), 50u);
  EXPECT_EQ(b[10].start_ns, 10'000);
  EXPECT_EQ(b[10].dur_ns, 1'000);
  for (int i = 10; i < 15; ++i) {
    EXPECT_NEAR(b[i].utilization_pct, 100.0, 1e-9) << i;
    EXPECT_NEAR(b[i].sm_efficiency_pct, 50.0, 1e-9) << i;
  }
  EXPECT_NEAR(b[15].utilization_pct, 50.0, 1e-9);
  EXPECT_NEAR(b[15].sm_efficiency_pct, 25.0, 1e-9);
  EXPECT_EQ(b[9].utilization_pct, 0.0);
  EXPECT_EQ(b[16].utilization_pct, 0.0);
}

TEST(GpuSummary, TimelineLastBucketRunsToTheEnd) {
  // 255 us: 10 us buckets (25 of them: 255 / 10, the last one [240, 255) is 15 us long).
  Trace t;
  t.devices = {small_gpu(0)};
  t.add(EventKind::StepMarker, "ProfilerStep#1", 0, 255'000);
  add_kernel(t, "k", 245'000, 255'000, 0, 10, 50.0f);
  const std::vector<GpuTimeline> tl = gpu_timelines(t);
  const std::vector<GpuBucket>& b = tl[0].buckets;
  ASSERT_EQ(b.size(), 25u);
  EXPECT_EQ(b.back().start_ns, 240'000);
  EXPECT_EQ(b.back().dur_ns, 15'000);
  EXPECT_NEAR(b.back().utilization_pct, 100.0 * 10 / 15, 1e-9);
}

// A windowed read's parts of the timeline: the 255 us trace's 10 us buckets over the owned times
// [.., 120 us) and [120 us, ..). Kernels: a [100, 135 us) of 5 blocks on 10 SMs (share 0.5)
// crossing the edge, b [125, 130 us) of 10 blocks (share 1) beside it. The first part holds a's
// [100, 120 us): 10 us busy and 5 us of SM share in each of buckets 10 and 11. The second holds
// [120, 135 us) of a and b: bucket 12 busy 10 us (a covers it), SM share 2.5 (a alone) + 5 (a and
// b together, capped at 1) = 7.5 us; bucket 13 busy 5 us, share 2.5 us. Each bucket's sum is
// gpu_timelines' numerator; the width past the span gives one bucket over the owned time.
TEST(GpuSummary, TimelinePartsOfOwnedTimesSumToTheWholeTimeline) {
  Trace t;
  t.devices = {small_gpu(0)};
  t.add(EventKind::StepMarker, "ProfilerStep#1", 0, 255'000);
  add_kernel(t, "a", 100'000, 135'000, 0, 5, 50.0f);
  add_kernel(t, "b", 125'000, 130'000, 0, 10, 50.0f);
  int64_t lo = -1, hi = -1;
  ASSERT_TRUE(event_extent(t, &lo, &hi));
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, 255'000);
  const std::vector<int64_t> widths = {10'000, INT64_MAX};
  const auto first = gpu_timeline_parts(t, lo, widths, INT64_MIN, 120'000);
  const auto second = gpu_timeline_parts(t, lo, widths, 120'000, INT64_MAX);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  const std::vector<GpuBucketPart>& a = first[0].by_width[0];
  const std::vector<GpuBucketPart>& b = second[0].by_width[0];
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(a[0].bucket, 10);
  EXPECT_EQ(a[1].bucket, 11);
  EXPECT_EQ(a[1].busy_ns, 10'000);
  EXPECT_NEAR(a[1].sm_weighted_ns, 5'000.0, 1e-9);
  EXPECT_EQ(b[0].bucket, 12);
  EXPECT_EQ(b[0].busy_ns, 10'000);
  EXPECT_NEAR(b[0].sm_weighted_ns, 7'500.0, 1e-9);
  EXPECT_EQ(b[1].bucket, 13);
  EXPECT_EQ(b[1].busy_ns, 5'000);
  EXPECT_NEAR(b[1].sm_weighted_ns, 2'500.0, 1e-9);
  const std::vector<GpuBucket> whole = gpu_timelines(t)[0].buckets;
  for (const GpuBucketPart& p : a) EXPECT_NEAR(whole[size_t(p.bucket)].utilization_pct, 100.0, 1e-9);
  EXPECT_NEAR(whole[12].sm_efficiency_pct, 75.0, 1e-9);
  EXPECT_NEAR(whole[13].utilization_pct, 50.0, 1e-9);
  // One bucket over everything: the owned times' busy 20 + 15 us.
  EXPECT_EQ(first[0].by_width[1][0].busy_ns + second[0].by_width[1][0].busy_ns, 35'000);
}

// The memory curve: samples with the allocator's level are taken as they are; a trace with only
// allocation sizes gets the running sum lifted to a lowest point of 0 (+100, +50, -120, +30: the
// sums 100, 150, 30, 60, lowest 0 already). Down-sampled to 4 points (2 slices of the 8 samples),
// each slice keeps its lowest and highest sample in time order, so the peak stays.
TEST(GpuSummary, MemoryCurveLevelsAndDownSampling) {
  Trace t;
  t.memory.push_back({20, 0, 500, 1000, 0});
  t.memory.push_back({10, 0, 300, 1000, 0});
  for (int64_t d : {100, 50, -120, 30}) t.memory.push_back({int64_t(t.memory.size()) * 10, d, -1, -1, -1});
  std::vector<MemoryCurve> c = memory_curves(t, 100);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].device, -1);
  std::vector<int64_t> host;
  for (const MemoryPoint& p : c[0].points) host.push_back(p.allocated_bytes);
  EXPECT_EQ(host, (std::vector<int64_t>{100, 150, 30, 60}));
  EXPECT_EQ(c[0].points[0].reserved_bytes, -1);
  EXPECT_EQ(c[1].device, 0);
  EXPECT_EQ(c[1].points[0].ts_ns, 10);   // in time order
  EXPECT_EQ(c[1].points[1].allocated_bytes, 500);

  Trace many;
  const int64_t levels[] = {1, 5, 2, 3, 9, 4, 0, 2};
  for (int i = 0; i < 8; ++i) many.memory.push_back({i * 10, 0, levels[i], 10, 0});
  const std::vector<MemoryCurve> d = memory_curves(many, 4);
  std::vector<int64_t> kept;
  for (const MemoryPoint& p : d[0].points) kept.push_back(p.allocated_bytes);
  EXPECT_EQ(kept, (std::vector<int64_t>{1, 5, 9, 0}));   // slices {1,5,2,3} and {9,4,0,2}
  EXPECT_EQ(d[0].samples, 8u);
}

// A windowed import's trace (traces/windows.py): three steps of 1000 ns, the window owning step 2,
// steps 1 and 3 its context (their markers flagged). Each step launches a 100 ns kernel of 10
// blocks (SM share 1) in its middle; two kernels no launch claims run across the steps' edges:
// KX [900, 1100) (5 blocks, share 0.5) and KY [1950, 2050) (5 blocks).
Trace window_of_three_steps(bool flagged) {
  Trace t;
  t.devices = {small_gpu(0)};
  for (int s = 0; s < 3; ++s) {
    const int64_t at = 1000 * s;
    Event& marker = t.add(EventKind::StepMarker, "ProfilerStep#" + std::to_string(s + 1), at, 1000);
    if (flagged && s != 1) marker.flags |= kContextFlag;
    host(t, "aten::mm", at + 100, at + 300, uint64_t(s + 1));
    runtime(t, at + 150, at + 160, uint64_t(11 + s), uint64_t(s + 1));
    add_kernel(t, "volta_sgemm_128x64_nn", at + 400, at + 500, uint64_t(11 + s), 10, 50.0f);
  }
  add_kernel(t, "vectorized_elementwise_kernel", 900, 1100, 0, 5, 25.0f);
  add_kernel(t, "vectorized_elementwise_kernel", 1950, 2050, 0, 5, 25.0f);
  return t;
}

TEST(GpuSummary, AWindowSummarisesItsOwnStepsAndCountsTheKernelsThatStartInThem) {
  const Trace t = window_of_three_steps(true);
  const BreakdownResult steps = compute_breakdown(t, BreakdownOptions{false});
  ASSERT_EQ(steps.steps.size(), 3u);
  // Its own step 2: [1000, 2000); a context step before it, so kernels that started earlier (KX)
  // are the window before's to count.
  const OwnSteps own = own_steps_window(t, steps);
  EXPECT_EQ(own.window.start_ns, 1000);
  EXPECT_EQ(own.window.end_ns, 2000);
  EXPECT_EQ(own.counted_from_ns, 1000);
  const DeviceSummary d = summarize_devices(t, own, link_launches(t))[0];
  // Inside [1000, 2000): KX's last 100 ns, step 2's kernel (100), KY's first 50: 250 ns, and the
  // two that started in it.
  EXPECT_EQ(d.window_ns, 1000);
  EXPECT_EQ(d.kernel_ns, 250);
  EXPECT_EQ(d.kernel_busy_ns, 250);
  EXPECT_EQ(d.kernels, 2);
  EXPECT_DOUBLE_EQ(d.utilization_pct, 25.0);
  // SM share x ns: KX 0.5 x 100 + 1 x 100 + KY 0.5 x 50 = 175: 17.5 %.
  EXPECT_DOUBLE_EQ(d.sm_weighted_ns, 175.0);
  EXPECT_DOUBLE_EQ(d.sm_efficiency_pct, 17.5);
  EXPECT_DOUBLE_EQ(d.occupancy_weight_ns, 250.0);

  // The whole trace (nothing flagged): the steps' window [0, 3000), every kernel counted; the
  // three windows' sums (step 1's [0, 1000): its kernel and KX's first 100; step 3's: KY's last
  // 50 and its kernel) add up to it: 200 + 250 + 150 = 600 ns, 2 + 2 + 1 = 5 kernels.
  const Trace whole = window_of_three_steps(false);
  const BreakdownResult all = compute_breakdown(whole, BreakdownOptions{false});
  const OwnSteps everything = own_steps_window(whole, all);
  EXPECT_EQ(everything.window.start_ns, 0);
  EXPECT_EQ(everything.window.end_ns, 3000);
  EXPECT_EQ(everything.counted_from_ns, INT64_MIN);
  const DeviceSummary w = summarize_devices(whole, everything, link_launches(whole))[0];
  EXPECT_EQ(w.kernel_ns, 600);
  EXPECT_EQ(w.kernels, 5);
}
