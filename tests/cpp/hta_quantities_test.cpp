// Idle time and launch statistics on hand-built timelines: each gap and each launch placed so that
// exactly one of HTA's rules applies to it (docs/metrics.md, "Idle time", "Launch statistics").

#include <gtest/gtest.h>

#include "gpuprof/analysis/idle_time.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/launch_stats.h"

using namespace gpuprof;

namespace {

constexpr int64_t us = 1000;

// A runtime call on host thread 1 and the device activity it launched on `stream`.
void launch(Trace& t, const char* call, int64_t call_start, int64_t call_end, EventKind kind, const char* name,
            int64_t start, int64_t end, uint64_t correlation, uint32_t stream = 7, int device = 0) {
  Event& c = t.add(EventKind::Runtime, call, call_start, call_end - call_start);
  c.tid = 1;
  c.correlation = correlation;
  Event& e = t.add(kind, name, start, end - start);
  e.tid = stream;
  e.device = static_cast<int16_t>(device);
  e.correlation = correlation;
}

Event& activity(Trace& t, EventKind kind, const char* name, int64_t start, int64_t end, uint32_t stream,
                int device) {
  Event& e = t.add(kind, name, start, end - start);
  e.tid = stream;
  e.device = static_cast<int16_t>(device);
  return e;
}

}  // namespace

TEST(IdleTime, EachGapGoesToTheCauseHtaGivesIt) {
  Trace t;
  const EventKind K = EventKind::Kernel;
  // Device 0, stream 7.
  launch(t, "cudaLaunchKernel", 0, 5 * us, K, "k1", 10 * us, 20 * us, 1);
  // Launched while k1 ran, 5 us after it: a kernel wait of 5 us.
  launch(t, "cudaLaunchKernel", 6 * us, 8 * us, K, "k2", 25 * us, 35 * us, 2);
  // Its call started at 80 us, after k2 ended at 35 us: a host wait of 60 us (95 - 35).
  launch(t, "cudaLaunchKernel", 80 * us, 90 * us, K, "k3", 95 * us, 100 * us, 3);
  // Launched at 91 us, before k3 ended, yet 100 us later: no host wait, over 30 us: other.
  launch(t, "cudaLaunchKernel", 91 * us, 93 * us, K, "k4", 200 * us, 210 * us, 4);
  // Launched early, 5 us after k4: a kernel wait; then one overlapping it leaves no gap.
  launch(t, "cudaLaunchKernel", 94 * us, 95 * us, K, "k5", 215 * us, 220 * us, 5);
  launch(t, "cudaLaunchKernel", 96 * us, 97 * us, K, "k6", 218 * us, 222 * us, 6);
  // No launch call recorded: left out, as HTA leaves it out (else its 78 us gap would be other).
  activity(t, K, "k7", 300 * us, 310 * us, 7, 0);
  // Device 0, stream 8: one kernel, no gap.
  launch(t, "cudaLaunchKernel", 40 * us, 41 * us, K, "k8", 50 * us, 60 * us, 8, 8);
  // Device 1, stream 7: a copy and a set 40 us apart, both launched at once: other.
  launch(t, "cudaMemsetAsync", 2 * us, 3 * us, EventKind::Memset, "Memset", 50 * us, 60 * us, 9, 7, 1);
  launch(t, "cudaMemcpyAsync", 0, 1 * us, EventKind::Memcpy, "Memcpy HtoD", 1 * us, 10 * us, 10, 7, 1);
  const LaunchLinks links = link_launches(t);
  const std::vector<IdleTimeRow> rows = idle_time_table(t, links);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].device, 0);
  EXPECT_EQ(rows[0].stream, 7u);
  EXPECT_EQ(rows[0].activities, 6);
  EXPECT_EQ(rows[0].host_wait_ns, 60 * us);
  EXPECT_EQ(rows[0].kernel_wait_ns, 10 * us);   // 5 (k1 -> k2) + 5 (k4 -> k5)
  EXPECT_EQ(rows[0].other_ns, 100 * us);
  EXPECT_EQ(rows[0].idle_ns(), 170 * us);
  EXPECT_EQ(rows[1].stream, 8u);
  EXPECT_EQ(rows[1].activities, 1);
  EXPECT_EQ(rows[1].idle_ns(), 0);
  EXPECT_EQ(rows[2].device, 1);
  EXPECT_EQ(rows[2].stream, 7u);
  EXPECT_EQ(rows[2].other_ns, 40 * us);
  EXPECT_EQ(rows[2].host_wait_ns + rows[2].kernel_wait_ns, 0);
}

TEST(IdleTime, TheThresholdIsStrict) {
  // A gap of exactly the threshold is not launch overhead (HTA: gap < threshold).
  Trace t;
  launch(t, "cudaLaunchKernel", 0, 1 * us, EventKind::Kernel, "a", 2 * us, 10 * us, 1);
  launch(t, "cudaLaunchKernel", 1 * us, 2 * us, EventKind::Kernel, "b", 40 * us, 50 * us, 2);   // 30 us after a
  launch(t, "cudaLaunchKernel", 2 * us, 3 * us, EventKind::Kernel, "c", 79 * us, 80 * us, 3);   // 29 us after b
  const std::vector<IdleTimeRow> rows = idle_time_table(t, link_launches(t));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].other_ns, 30 * us);
  EXPECT_EQ(rows[0].kernel_wait_ns, 29 * us);
  EXPECT_EQ(idle_time_table(t, link_launches(t), kNoEndNs, 31 * us)[0].kernel_wait_ns, 59 * us);
}

TEST(IdleTime, TheLastStepIsLeftOutAsHtaLeavesItOut) {
  // Two steps; the kernel launched in the second (the last) does not count in either table.
  Trace t;
  t.add(EventKind::StepMarker, "ProfilerStep#1", 0, 100 * us).tid = 1;
  t.add(EventKind::StepMarker, "ProfilerStep#2", 100 * us, 100 * us).tid = 1;
  launch(t, "cudaLaunchKernel", 10 * us, 12 * us, EventKind::Kernel, "a", 20 * us, 30 * us, 1);
  launch(t, "cudaLaunchKernel", 15 * us, 16 * us, EventKind::Kernel, "b", 40 * us, 50 * us, 2);
  launch(t, "cudaLaunchKernel", 110 * us, 112 * us, EventKind::Kernel, "c", 150 * us, 160 * us, 3);
  const int64_t end = last_step_start(t);
  EXPECT_EQ(end, 100 * us);
  const LaunchLinks links = link_launches(t);
  const std::vector<IdleTimeRow> rows = idle_time_table(t, links, end);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].activities, 2);
  EXPECT_EQ(rows[0].kernel_wait_ns, 10 * us);   // without the cut, c's 100 us gap would be a host wait
  EXPECT_EQ(rows[0].host_wait_ns + rows[0].other_ns, 0);
  EXPECT_EQ(launch_stats_table(t, links, end).size(), 2u);   // a and b
  EXPECT_EQ(launch_stats_table(t, links).size(), 3u);
  // With one step there is no earlier one to keep: nothing is left out.
  Trace one;
  one.add(EventKind::StepMarker, "ProfilerStep#1", 0, 100 * us).tid = 1;
  EXPECT_EQ(last_step_start(one), kNoEndNs);
}

// The quantiles read the two ranks around q x (n - 1) of the delays in order, whatever the order
// the launches came in: 24 delays of 0..23 us, launched in a scrambled order.
TEST(LaunchStats, DelayQuantilesOfManyLaunchesInAnyOrder) {
  Trace t;
  const int64_t delays[24] = {13, 2,  20, 7,  0, 18, 23, 5,  11, 16, 1, 9,
                              21, 19, 3,  14, 8, 17, 4,  22, 12, 10, 6, 15};
  for (int k = 0; k < 24; ++k) {
    const int64_t at = k * 100 * us;
    launch(t, "cudaLaunchKernel", at, at + 1 * us, EventKind::Kernel, "k", at + (1 + delays[k]) * us,
           at + (2 + delays[k]) * us, uint64_t(k + 1));
  }
  const std::vector<LaunchStatsRow> rows = launch_stats_table(t, link_launches(t));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].launches, 24);
  EXPECT_NEAR(rows[0].delay_p50_ns, 11.5 * us, 1e-6);   // rank 11.5: between 11 and 12 us
  EXPECT_NEAR(rows[0].delay_p95_ns, 21.85 * us, 1e-6);   // rank 21.85: 21 + 0.85 x (22 - 21) us
  EXPECT_EQ(rows[0].delay_max_ns, 23 * us);
}

TEST(LaunchStats, DelaysOutliersAndShortKernelsPerName) {
  Trace t;
  // gemm: delay 6 us (call 0-4, kernel 10-30).
  launch(t, "cudaLaunchKernel", 0, 4 * us, EventKind::Kernel, "gemm", 10 * us, 30 * us, 1);
  // gemm: a 60 us call (runtime outlier) and a 200 us delay (delay outlier).
  launch(t, "cudaLaunchKernel", 40 * us, 100 * us, EventKind::Kernel, "gemm", 300 * us, 302 * us, 2);
  // gemm: started before its 10 us call returned (delay 0) and ran 3 us: a short kernel.
  launch(t, "cudaLaunchKernel", 400 * us, 410 * us, EventKind::Kernel, "gemm", 405 * us, 408 * us, 3);
  // A copy through cudaMemcpyAsync: delay 1 us, longer than its call.
  launch(t, "cudaMemcpyAsync", 500 * us, 502 * us, EventKind::Memcpy, "Memcpy HtoD", 503 * us, 513 * us, 4);
  // Launched through the driver and through a call HTA does not count: no row.
  launch(t, "cuLaunchKernel", 600 * us, 601 * us, EventKind::Kernel, "driver_kernel", 700 * us, 701 * us, 5);
  launch(t, "cudaLaunchCooperativeKernel", 800 * us, 801 * us, EventKind::Kernel, "coop", 900 * us, 901 * us, 6);
  t.events[8].kind = EventKind::Driver;   // the cuLaunchKernel call
  const std::vector<LaunchStatsRow> rows = launch_stats_table(t, link_launches(t));
  ASSERT_EQ(rows.size(), 2u);
  const LaunchStatsRow& g = rows[0];   // the larger summed delay first
  EXPECT_EQ(g.name, "gemm");
  EXPECT_EQ(g.launches, 3);
  EXPECT_DOUBLE_EQ(g.cpu_mean_ns(), (4 + 60 + 10) * us / 3.0);
  EXPECT_DOUBLE_EQ(g.gpu_mean_ns(), (20 + 2 + 3) * us / 3.0);
  EXPECT_EQ(g.delay_total_ns, 206 * us);
  EXPECT_DOUBLE_EQ(g.delay_p50_ns, 6.0 * us);   // sorted {0, 6, 200}
  EXPECT_DOUBLE_EQ(g.delay_p95_ns, (6.0 + 0.9 * 194.0) * us);   // rank 1.9: 6 + 0.9 x (200 - 6)
  EXPECT_EQ(g.delay_max_ns, 200 * us);
  EXPECT_EQ(g.short_kernels, 1);
  EXPECT_EQ(g.runtime_outliers, 1);
  EXPECT_EQ(g.delay_outliers, 1);
  const LaunchStatsRow& c = rows[1];
  EXPECT_EQ(c.name, "Memcpy HtoD");
  EXPECT_EQ(c.launches, 1);
  EXPECT_EQ(c.delay_total_ns, 1 * us);
  EXPECT_EQ(c.short_kernels + c.runtime_outliers + c.delay_outliers, 0);
}

TEST(LaunchStats, CutOffsAreStrictAsHtas) {
  // A 50 us call is not an outlier (call > 50) and launches a short kernel if the kernel ran less;
  // a delay of exactly 100 us is not an outlier either.
  Trace t;
  launch(t, "cudaLaunchKernel", 0, 50 * us, EventKind::Kernel, "k", 150 * us, 160 * us, 1);
  const std::vector<LaunchStatsRow> rows = launch_stats_table(t, link_launches(t));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].delay_total_ns, 100 * us);
  EXPECT_EQ(rows[0].runtime_outliers, 0);
  EXPECT_EQ(rows[0].delay_outliers, 0);
  EXPECT_EQ(rows[0].short_kernels, 1);
}
