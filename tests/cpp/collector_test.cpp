// Specifications of the live collector: what producers on any thread record is what a drain returns,
// bounded by the session's budget, with every lost event counted.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "gpuprof/collector.h"

using namespace gpuprof;

namespace {
size_t count_named(const Trace& t, const std::string& name) {
  size_t n = 0;
  for (const Event& e : t.events)
    if (t.name_of(e) == name) ++n;
  return n;
}
}  // namespace

// Nested ranges close in LIFO order and keep their names, times and thread.
TEST(Collector, NestedRangesOnOneThread) {
  collect::start({});
  int outer, inner;
  collect::host_enter(&outer, "aten::linear", EventKind::HostOp, 100);
  collect::host_enter(&inner, "aten::addmm", EventKind::HostOp, 110);
  collect::host_exit(&inner, 150);
  collect::host_exit(&outer, 200);
  collect::stop();
  Trace t = collect::drain();
  ASSERT_EQ(t.events.size(), 2u);
  // Recorded at exit: the inner range first.
  EXPECT_EQ(t.name_of(t.events[0]), "aten::addmm");
  EXPECT_EQ(t.events[0].start_ns, 110);
  EXPECT_EQ(t.events[0].dur_ns, 40);
  EXPECT_EQ(t.name_of(t.events[1]), "aten::linear");
  EXPECT_EQ(t.events[1].dur_ns, 100);
  EXPECT_EQ(t.events[0].tid, t.events[1].tid);
  EXPECT_NE(t.events[0].external_id, t.events[1].external_id);
  EXPECT_EQ(t.dropped_events, 0u);
}

// An exit whose enter happened before the session began is ignored, not mismatched.
TEST(Collector, ExitWithoutEnterIgnored) {
  collect::start({});
  int a;
  collect::host_exit(&a, 10);
  collect::stop();
  EXPECT_TRUE(collect::drain().events.empty());
}

// Nothing is recorded outside a session, and a new session discards what the last one left undrained.
TEST(Collector, InactiveRecordsNothingAndNewEpochResets) {
  collect::stop();
  int a;
  collect::host_enter(&a, "aten::add", EventKind::HostOp, 1);
  collect::host_exit(&a, 2);
  collect::start({});
  collect::record(EventKind::StepMarker, "ProfilerStep#0", 0, 10);
  collect::start({});   // e.g. warmup -> active: the warmup's events are not kept
  collect::record(EventKind::StepMarker, "ProfilerStep#1", 10, 20);
  collect::stop();
  Trace t = collect::drain();
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.name_of(t.events[0]), "ProfilerStep#1");
}

// Four threads record concurrently; two of them exit before the drain: all events are kept.
TEST(Collector, ManyThreadsIncludingExitedOnes) {
  collect::start({});
  constexpr int kThreads = 4, kPerThread = 10000;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([i] {
      for (int k = 0; k < kPerThread; ++k) {
        int key;
        collect::host_enter(&key, i % 2 ? "aten::mul" : "aten::add", EventKind::HostOp, k);
        collect::host_exit(&key, k + 1);
      }
    });
  for (auto& th : threads) th.join();
  collect::stop();
  Trace t = collect::drain();
  EXPECT_EQ(t.events.size(), size_t(kThreads * kPerThread));
  EXPECT_EQ(count_named(t, "aten::add"), size_t(2 * kPerThread));
  EXPECT_EQ(count_named(t, "aten::mul"), size_t(2 * kPerThread));
  EXPECT_EQ(t.dropped_events, 0u);
}

// Past the budget, events are counted as dropped, never lost silently; memory stays bounded.
// The budget is enforced in chunks of 4096 events: max_events = 5000 rounds up to 2 chunks = 8192.
TEST(Collector, BudgetDropsAreCounted) {
  collect::SessionConfig c;
  c.max_events = 5000;
  collect::start(c);
  for (int k = 0; k < 20000; ++k) collect::record(EventKind::HostOp, "aten::add", k, k + 1);
  collect::stop();
  Trace t = collect::drain();
  EXPECT_EQ(t.events.size(), 8192u);
  EXPECT_EQ(t.dropped_events, 20000u - 8192u);
  EXPECT_EQ(t.events.size() + t.dropped_events, 20000u);
}

TEST(Collector, ClockIsMonotonic) {
  const int64_t a = collect::now_ns();
  const int64_t b = collect::now_ns();
  EXPECT_GT(a, 0);
  EXPECT_GE(b, a);
}
