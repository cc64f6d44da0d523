// A window's parts of HTA's tables (gpuprof/analysis/window_parts.h) on one hand-built timeline cut
// in two at 18 us, each window seeing every event (those it does not own flagged as context): the
// two windows' parts, joined at the edge as the Python merge joins them, give the whole trace's
// rows, each number worked out by hand.

#include <gtest/gtest.h>

#include "gpuprof/analysis/hta_counters.h"
#include "gpuprof/analysis/idle_time.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/window_parts.h"

using namespace gpuprof;

namespace {

constexpr int64_t us = 1000;
constexpr int64_t kEdge = 18 * us;
const OwnedSpan kFirst{std::numeric_limits<int64_t>::min(), kEdge};
const OwnedSpan kSecond{kEdge, std::numeric_limits<int64_t>::max()};

// A launch call on host thread 1 and what it launched on `stream`.
Event& launch(Trace& t, const char* call, int64_t call_start, EventKind kind, const char* name, int64_t start,
              int64_t dur, uint32_t stream) {
  const uint64_t correlation = t.events.size() + 1;
  Event& c = t.add(EventKind::Runtime, call, call_start, 1 * us);
  c.tid = 1;
  c.correlation = correlation;
  Event& e = t.add(kind, name, start, dur);
  e.tid = stream;
  e.device = 0;
  e.correlation = correlation;
  return e;
}

void copy(Trace& t, int64_t start, int64_t dur, int64_t bytes) {
  Event& e = launch(t, "cudaMemcpyAsync", 0, EventKind::Memcpy, "Memcpy HtoD (Pageable -> Device)", start, dur, 9);
  CopyInfo c;
  c.bytes = bytes;
  e.aux = static_cast<uint32_t>(t.copies.size());
  t.copies.push_back(c);
}

// Stream 7: three kernels (10-15, 20-25, 40-45 us) launched at 0, 2 and 30 us. Stream 9: two
// copies from 16 and 17 us running across the edge (1 and 3 GB/s, to 20 and 19 us), one at 30 us.
Trace timeline() {
  Trace t;
  launch(t, "cudaLaunchKernel", 0, EventKind::Kernel, "k1", 10 * us, 5 * us, 7);
  launch(t, "cudaLaunchKernel", 2 * us, EventKind::Kernel, "k2", 20 * us, 5 * us, 7);
  launch(t, "cudaLaunchKernel", 30 * us, EventKind::Kernel, "k3", 40 * us, 5 * us, 7);
  copy(t, 16 * us, 4 * us, 4000);
  copy(t, 17 * us, 2 * us, 6000);
  copy(t, 30 * us, 2 * us, 2000);
  return t;
}

// The window that owns `own`: every event, those starting outside it flagged as context.
Trace window(const OwnedSpan& own) {
  Trace t = timeline();
  for (Event& e : t.events)
    if (!own.owns(e.start_ns)) e.flags |= kContextFlag;
  return t;
}

template <class Part>
const Part& on_stream(const std::vector<Part>& parts, uint32_t stream) {
  for (const Part& p : parts)
    if (p.stream == stream) return p;
  ADD_FAILURE() << "no part for stream " << stream;
  return parts.front();
}

}  // namespace

TEST(WindowParts, QueueLengthCountsTheLaunchesWaitingAtTheEdge) {
  // Whole: 1 (0 us), 2 (2), 1 (10), 0 (20), 1 (30), 0 (40): 6 points summing to 5, at most 2.
  const Trace whole = timeline();
  const QueueLengthRow row = on_stream(queue_length_table(whole, link_launches(whole)), 7);
  ASSERT_EQ(row.samples, 6);
  ASSERT_DOUBLE_EQ(row.mean, 5.0 / 6.0);
  const WindowParts a = window_parts(window(kFirst), kFirst, kNoEndNs, {});
  const QueueLengthPart& qa = on_stream(a.queue_length, 7);
  EXPECT_EQ(qa.samples, 3);   // 0, 2 and 10 us: 1, 2, 1
  EXPECT_EQ(qa.sum, 4);
  EXPECT_EQ(qa.max, 2);
  EXPECT_EQ(qa.last_length, 1);   // k2, launched at 2 us, starts after the edge
  EXPECT_EQ(qa.last_ns, 10 * us);
  // The second window's points count k2 as waiting (its call is before the span): 0, 1, 0, not
  // -1, 0, -1.
  const WindowParts b = window_parts(window(kSecond), kSecond, kNoEndNs, {});
  const QueueLengthPart& qb = on_stream(b.queue_length, 7);
  EXPECT_EQ(qb.samples, 3);
  EXPECT_EQ(qb.sum, 1);
  EXPECT_EQ(qb.max, 1);
  EXPECT_EQ(qb.first_ns, 20 * us);
  EXPECT_EQ(qa.samples + qb.samples, row.samples);
  EXPECT_EQ(qa.sum + qb.sum, 5);
}

TEST(WindowParts, IdleTimeLeavesTheGapAcrossTheEdgeToTheMerge) {
  // Whole: k1 -> k2 a 5 us kernel wait (k2's call at 2 us, before k1 ended), k2 -> k3 a 15 us host
  // wait (k3's call at 30 us, after k2 ended).
  const Trace whole = timeline();
  const IdleTimeRow row = on_stream(idle_time_table(whole, link_launches(whole)), 7);
  ASSERT_EQ(row.kernel_wait_ns, 5 * us);
  ASSERT_EQ(row.host_wait_ns, 15 * us);
  const WindowParts first = window_parts(window(kFirst), kFirst, kNoEndNs, {});
  const WindowParts second = window_parts(window(kSecond), kSecond, kNoEndNs, {});
  const IdleTimePart& a = on_stream(first.idle_time, 7);
  const IdleTimePart& b = on_stream(second.idle_time, 7);
  EXPECT_EQ(a.activities, 1);
  EXPECT_EQ(a.last_end_ns, 15 * us);
  EXPECT_EQ(a.host_wait_ns + a.kernel_wait_ns + a.other_ns, 0);
  EXPECT_EQ(b.activities, 2);
  EXPECT_EQ(b.host_wait_ns, 15 * us);
  EXPECT_EQ(b.kernel_wait_ns, 0);
  // The edge's gap, for the merge: 20 - 15 us, and k2's call (2 us) before k1's end: a kernel wait.
  EXPECT_EQ(b.first_start_ns, 20 * us);
  EXPECT_EQ(b.first_call_start_ns, 2 * us);
}

TEST(WindowParts, LaunchStatsCountEachOwnedLaunchWithItsDelay) {
  const WindowParts a = window_parts(window(kFirst), kFirst, kNoEndNs, {});
  const WindowParts b = window_parts(window(kSecond), kSecond, kNoEndNs, {});
  auto named = [](const WindowParts& w, const std::string& name) {
    for (const LaunchStatsPart& p : w.launch_stats)
      if (p.name == name) return p;
    return LaunchStatsPart{};
  };
  EXPECT_EQ(named(a, "k1").launches, 1);   // 10 us - the call's end at 1 us
  EXPECT_EQ(named(a, "k1").delays, (std::map<int64_t, int64_t>{{9 * us, 1}}));
  EXPECT_EQ(named(a, "k2").launches, 0);   // the second window's, though its call is the first's
  EXPECT_EQ(named(b, "k2").delays, (std::map<int64_t, int64_t>{{17 * us, 1}}));
  EXPECT_EQ(named(b, "k3").delay_max_ns, 9 * us);
  // The three copies, launched at 0: two in the first window, one in the second.
  EXPECT_EQ(named(a, "Memcpy HtoD (Pageable -> Device)").launches, 2);
  EXPECT_EQ(named(b, "Memcpy HtoD (Pageable -> Device)").launches, 1);
}

TEST(WindowParts, CopyBandwidthCarriesTheRunningCopiesIntoTheNextWindow) {
  // Whole: 1 GB/s at 16 us, 4 at 17, 1 at 19 (the 3 GB/s copy ends), 0 at 20, 1 at 30, 0 at 32:
  // four points above 0, summing to 7.
  const Trace whole = timeline();
  const std::vector<CopyBandwidthRow> rows = copy_bandwidth_table(whole, link_launches(whole));
  ASSERT_EQ(rows.size(), 1u);
  ASSERT_EQ(rows[0].samples, 4);
  ASSERT_DOUBLE_EQ(rows[0].mean_gbps, 7.0 / 4.0);
  const WindowParts a = window_parts(window(kFirst), kFirst, kNoEndNs, {});
  ASSERT_EQ(a.copy_bandwidth.size(), 1u);
  const CopyBandwidthPart& pa = a.copy_bandwidth[0];
  EXPECT_EQ(pa.copies, 2);
  EXPECT_EQ(pa.samples, 2);
  EXPECT_EQ(pa.levels, (std::map<double, int64_t>{{1.0, 1}, {4.0, 1}}));
  EXPECT_DOUBLE_EQ(pa.carry.level, 4.0);
  ASSERT_EQ(pa.carry.open.size(), 2u);   // both end after the edge: at 19 us (3 GB/s), 20 us (1)
  EXPECT_EQ(pa.carry.open[0].end_ns, 19 * us);
  EXPECT_DOUBLE_EQ(pa.carry.open[0].gbps, 3.0);
  const WindowParts b = window_parts(window(kSecond), kSecond, kNoEndNs, {pa.carry});
  const CopyBandwidthPart& pb = b.copy_bandwidth[0];
  EXPECT_EQ(pb.copies, 1);
  EXPECT_EQ(pb.samples, 2);   // 1 at 19 us, 1 at 30
  EXPECT_EQ(pb.levels, (std::map<double, int64_t>{{1.0, 2}}));
  EXPECT_DOUBLE_EQ(pb.carry.levels_sum, 7.0);   // the first window's 5 carried in
  EXPECT_TRUE(pb.carry.open.empty());
  // Without the carry the second window would count only the copy at 30 us.
  EXPECT_EQ(window_parts(window(kSecond), kSecond, kNoEndNs, {}).copy_bandwidth[0].samples, 1);
}
