// Queue length and copy bandwidth on hand-built timelines, each number worked out by hand from
// HTA's rules (docs/metrics.md, "Queue length", "Copy bandwidth").

#include <gtest/gtest.h>

#include "gpuprof/analysis/hta_counters.h"
#include "gpuprof/analysis/launch_links.h"

using namespace gpuprof;

namespace {

constexpr int64_t us = 1000;

// A runtime call on host thread 1 starting at `call_start` and the kernel it launched on `stream`.
void launch(Trace& t, const char* call, int64_t call_start, int64_t start, uint64_t correlation,
            uint32_t stream = 7, int device = 0) {
  Event& c = t.add(EventKind::Runtime, call, call_start, 1 * us);
  c.tid = 1;
  c.correlation = correlation;
  Event& e = t.add(EventKind::Kernel, "k", start, 5 * us);
  e.tid = stream;
  e.device = static_cast<int16_t>(device);
  e.correlation = correlation;
}

// A copy (set) and, unless `launched` is false, the runtime call that launched it at 0 ns.
void copy(Trace& t, const char* name, int64_t start_ns, int64_t dur_ns, int64_t bytes, bool launched = true) {
  const bool set = std::string_view(name).substr(0, 6) == "Memset";
  const uint64_t correlation = launched ? t.events.size() + 1 : 0;
  if (launched) {
    Event& c = t.add(EventKind::Runtime, set ? "cudaMemsetAsync" : "cudaMemcpyAsync", 0, 0);
    c.tid = 1;
    c.correlation = correlation;
  }
  Event& e = t.add(set ? EventKind::Memset : EventKind::Memcpy, name, start_ns, dur_ns);
  e.correlation = correlation;
  e.device = 0;
  e.tid = 7;
  CopyInfo c;
  c.bytes = bytes;
  e.aux = static_cast<uint32_t>(t.copies.size());
  t.copies.push_back(c);
}

}  // namespace

TEST(QueueLength, CountsLaunchedActivitiesNotYetStarted) {
  Trace t;
  // Three launches queue up (1, 2, 3), then their kernels start one by one (2, 1, 0).
  launch(t, "cudaLaunchKernel", 0, 10 * us, 1);
  launch(t, "cudaLaunchKernel", 2 * us, 20 * us, 2);
  launch(t, "cudaMemsetAsync", 4 * us, 30 * us, 3);
  // Its call starts as the third kernel starts: the start is taken first (0, then 1), then 0.
  launch(t, "cuLaunchKernel", 30 * us, 50 * us, 4);
  // A graph launch and a kernel without a call are not launches HTA counts.
  launch(t, "cudaGraphLaunch", 31 * us, 60 * us, 5);
  Event& orphan = t.add(EventKind::Kernel, "k", 70 * us, 1 * us);
  orphan.tid = 7;
  orphan.device = 0;
  // Device 1, stream 8: one launch, the points 1 and 0.
  launch(t, "cudaLaunchKernel", 0, 3 * us, 6, 8, 1);
  const LaunchLinks links = link_launches(t);
  std::vector<QueueLengthRow> rows = queue_length_table(t, links);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].device, 0);
  EXPECT_EQ(rows[0].stream, 7u);
  EXPECT_EQ(rows[0].samples, 8);                 // four calls, four starts
  EXPECT_DOUBLE_EQ(rows[0].mean, 10.0 / 8.0);   // 1, 2, 3, 2, 1, 0, 1, 0
  EXPECT_EQ(rows[0].max, 3);
  EXPECT_EQ(rows[0].blocked_ns, 0);              // never near 1024
  EXPECT_EQ(rows[1].device, 1);
  EXPECT_EQ(rows[1].stream, 8u);
  EXPECT_DOUBLE_EQ(rows[1].mean, 0.5);
  EXPECT_EQ(rows[1].max, 1);

  // With a queue of 2 at most: blocked from 2 to 4 us (2 waiting), 4 to 10 (3), 10 to 20 (2).
  rows = queue_length_table(t, links, kNoEndNs, 2);
  EXPECT_EQ(rows[0].blocked_ns, 18 * us);
  EXPECT_EQ(rows[1].blocked_ns, 0);

  // HTA's scope: launch calls that started before the last step. With it at 30 us, the call at
  // 30 us and its kernel drop out: 1, 2, 3, 2, 1, 0.
  rows = queue_length_table(t, links, 30 * us);
  EXPECT_EQ(rows[0].samples, 6);
  EXPECT_DOUBLE_EQ(rows[0].mean, 9.0 / 6.0);
}

TEST(CopyBandwidth, SumsTheBandwidthOfCopiesRunningAtOnce) {
  Trace t;
  // Bytes per ns are GB/s. HtoD: 10 GB/s from 0 to 100 ns, 20 GB/s from 50 to 150 ns, and 10 GB/s
  // from 150 to 200 ns, starting as the second ends: the end first (0, not a point), then 10.
  copy(t, "Memcpy HtoD (Pinned -> Device)", 0, 100, 1000);
  copy(t, "Memcpy HtoD (Pageable -> Device)", 50, 100, 2000);
  copy(t, "Memcpy HtoD (Pinned -> Device)", 150, 50, 500);
  // A set of 0 ns lasts 1 ns: 64 bytes in 1 ns, 64 GB/s.
  copy(t, "Memset (Device)", 300, 0, 64);
  copy(t, "Memcpy DtoH (Device -> Pinned)", 400, 1000, 4000);
  copy(t, "hipMemcpyAsync", 500, 10, 10);
  // No launch call recorded: out of HTA's scope, as HTA drops device events without one.
  copy(t, "Memcpy DtoH (Device -> Pinned)", 3000, 1000, 1000000, false);
  const std::vector<CopyBandwidthRow> rows = copy_bandwidth_table(t, link_launches(t));
  ASSERT_EQ(rows.size(), 4u);   // by kind
  EXPECT_EQ(rows[0].kind, "Memcpy DtoH");
  EXPECT_EQ(rows[0].copies, 1);
  EXPECT_EQ(rows[0].samples, 1);
  EXPECT_DOUBLE_EQ(rows[0].mean_gbps, 4.0);
  const CopyBandwidthRow& h = rows[1];
  EXPECT_EQ(h.kind, "Memcpy HtoD");
  EXPECT_EQ(h.copies, 3);
  EXPECT_EQ(h.bytes, 3500);
  EXPECT_EQ(h.time_ns, 250);
  EXPECT_DOUBLE_EQ(h.gbps, 14.0);
  EXPECT_EQ(h.samples, 4);   // 10, 30, 20, 10
  EXPECT_DOUBLE_EQ(h.mean_gbps, 17.5);
  EXPECT_DOUBLE_EQ(h.min_gbps, 10.0);
  EXPECT_DOUBLE_EQ(h.p50_gbps, 15.0);   // between 10 and 20
  EXPECT_DOUBLE_EQ(h.max_gbps, 30.0);
  EXPECT_EQ(rows[2].kind, "Memcpy Unknown");   // HTA's kind for names not starting "Memcpy"
  EXPECT_EQ(rows[2].copies, 1);
  const CopyBandwidthRow& s = rows[3];
  EXPECT_EQ(s.kind, "Memset");
  EXPECT_EQ(s.time_ns, 0);
  EXPECT_DOUBLE_EQ(s.gbps, 0.0);   // no time recorded
  EXPECT_EQ(s.samples, 1);
  EXPECT_DOUBLE_EQ(s.max_gbps, 64.0);
}
