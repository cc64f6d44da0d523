// Specifications of the live collector: what producers on any thread record is what a drain returns,
// bounded by the session's budget, with every lost event counted.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gpuprof/collect/collector.h"

using namespace gpuprof;

namespace {
size_t count_named(const Trace& t, const std::string& name) {
  size_t n = 0;
  for (const Event& e : t.events)
    if (t.name_of(e) == name) ++n;
  return n;
}
}  // namespace

// Nested ranges close in LIFO order and keep their names, thread, and times; drained times are on
// the one clock (CLOCK_MONOTONIC ns) whatever the producers stamped them with.
//   outer: [enter, +3 ms)   inner: [+1 ms, +2 ms)   (sleeps; the scheduler may add a little)
TEST(Collector, NestedRangesOnOneThread) {
  using namespace std::chrono_literals;
  collect::start({});
  int outer, inner;
  const int64_t before = collect::now_ns();
  collect::host_enter(&outer, "aten::linear", EventKind::HostOp, collect::ticks());
  std::this_thread::sleep_for(1ms);
  collect::host_enter(&inner, "aten::addmm", EventKind::HostOp, collect::ticks());
  std::this_thread::sleep_for(1ms);
  collect::host_exit(&inner, collect::ticks());
  std::this_thread::sleep_for(1ms);
  collect::host_exit(&outer, collect::ticks());
  const int64_t after = collect::now_ns();
  collect::stop();
  Trace t = collect::drain();
  ASSERT_EQ(t.events.size(), 2u);
  // Recorded at exit: the inner range first.
  const Event& in = t.events[0];
  const Event& out = t.events[1];
  EXPECT_EQ(t.name_of(in), "aten::addmm");
  EXPECT_EQ(t.name_of(out), "aten::linear");
  EXPECT_GE(out.start_ns, before - 2000);   // conversion error well under 2 us
  EXPECT_LE(out.end_ns(), after + 2000);
  EXPECT_GT(in.start_ns, out.start_ns);
  EXPECT_LT(in.end_ns(), out.end_ns());
  EXPECT_GE(in.dur_ns, 1'000'000 - 2000);
  EXPECT_GE(out.dur_ns, 3'000'000 - 2000);
  EXPECT_LE(out.dur_ns, after - before + 2000);
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

// Each session has its own name table: a long run of spans that each record a name never seen
// before (ProfilerStep#N, one span per step with schedule(active=1, repeat=0)) drains the same
// small table at span 5,000 as at span 1, so a drain's cost and the memory held stay flat. (The
// table used to be global: it grew by every span's names and each drain copied all of it.)
TEST(Collector, NameTableIsPerSessionSoLongRunsStayFlat) {
  size_t first_size = 0;
  for (int s = 0; s < 5000; ++s) {
    collect::start({});
    int key;
    collect::host_enter(&key, "aten::add", EventKind::HostOp, 10, "[[4]]");
    collect::host_exit(&key, 20);
    const std::string step = "ProfilerStep#" + std::to_string(s);
    collect::record(EventKind::StepMarker, step, 0, 30);
    collect::stop();
    Trace t = collect::drain();
    ASSERT_EQ(t.events.size(), 2u);
    EXPECT_EQ(t.name_of(t.events[0]), "aten::add");
    EXPECT_EQ(t.strings.at(t.events[0].aux), "[[4]]");
    EXPECT_EQ(t.name_of(t.events[1]), step);
    if (s == 0) first_size = t.strings.size();
    ASSERT_EQ(t.strings.size(), first_size) << "span " << s;   // "", aten::add, [[4]], this step
  }
  EXPECT_EQ(first_size, 4u);
}

// Past the budget, events are counted as dropped, never lost silently; memory stays bounded.
// The budget is enforced in chunks of 4096 events: max_events = 5000 rounds up to 2 chunks = 8192.
TEST(Collector, BudgetDropsAreCounted) {
  collect::SessionConfig c;
  c.max_events = 5000;
  collect::start(c);
  for (int k = 0; k < 20000; ++k)
    collect::record(EventKind::HostOp, "aten::add", collect::ticks(), collect::ticks());
  collect::stop();
  Trace t = collect::drain();
  EXPECT_EQ(t.events.size(), 8192u);
  EXPECT_EQ(t.dropped_events, 20000u - 8192u);
  EXPECT_EQ(t.events.size() + t.dropped_events, 20000u);
}

// ticks() and now_ns() agree after conversion: a range stamped with ticks lasts what now_ns saw.
TEST(Collector, TicksConvertToTheOneClock) {
  collect::start({});
  const int64_t m0 = collect::now_ns();
  const int64_t t0 = collect::ticks();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const int64_t t1 = collect::ticks();
  const int64_t m1 = collect::now_ns();
  collect::record(EventKind::UserRange, "span", t0, t1);
  collect::stop();
  Trace t = collect::drain();
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_NEAR(double(t.events[0].start_ns), double(m0), 20'000.0);
  EXPECT_NEAR(double(t.events[0].dur_ns), double(m1 - m0), 20'000.0);
}

// Allocator levels and RSS samples travel in the same per-thread buffers as events but come out of
// the drain as Trace::memory and Trace::host_memory, on the one clock, fields intact, and never as
// events. Two levels on GPU 1 (+4096 -> 4096 allocated / 2 MiB reserved, then -4096 -> 0 / 2 MiB),
// recorded 10 ms apart around a 10 ms range, and one RSS sample at the end.
TEST(Collector, MemoryLevelsAndRssLeaveAsSamples) {
  using namespace std::chrono_literals;
  collect::start({});
  const int64_t t0 = collect::ticks();
  collect::record_memory(t0, 4096, 4096, 2 << 20, 1);
  std::this_thread::sleep_for(10ms);
  const int64_t t1 = collect::ticks();
  collect::record(EventKind::UserRange, "between", t0, t1);
  collect::record_memory(t1, -4096, 0, 2 << 20, 1);
  collect::record_host_rss(t1);
  collect::stop();
  const Trace t = collect::drain();
  ASSERT_EQ(t.events.size(), 1u);
  ASSERT_EQ(t.memory.size(), 2u);
  // Same tick, same time, at both ends of the event.
  EXPECT_EQ(t.memory[0].ts_ns, t.events[0].start_ns);
  EXPECT_EQ(t.memory[1].ts_ns, t.events[0].end_ns());
  EXPECT_EQ(t.memory[0].bytes_delta, 4096);
  EXPECT_EQ(t.memory[0].total_allocated, 4096);
  EXPECT_EQ(t.memory[1].bytes_delta, -4096);
  EXPECT_EQ(t.memory[1].total_allocated, 0);
  EXPECT_EQ(t.memory[1].total_reserved, 2 << 20);
  EXPECT_EQ(t.memory[1].device, 1);
  ASSERT_EQ(t.host_memory.size(), 1u);
  EXPECT_EQ(t.host_memory[0].ts_ns, t.memory[1].ts_ns);
  // This test process's RSS: more than its code, less than the machine.
  EXPECT_GT(t.host_memory[0].rss_bytes, 1 << 20);
  EXPECT_LT(t.host_memory[0].rss_bytes, int64_t(1) << 40);
}

// A step's RSS is sampled at its end tick, and the step's row takes the samples inside [start, end]:
// the sample must land exactly on the event's end, never 1 ns after it. Converting an event's
// duration on its own (rather than its end tick) rounded separately and did that for about half of
// all durations, so a step without a start sample (the first) showed no RSS at all now and then.
TEST(Collector, AnEventEndsExactlyWhereASampleAtItsEndTickIs) {
  collect::start({});
  const int64_t t0 = collect::ticks();
  for (int k = 1; k <= 500; ++k) {
    const int64_t end = t0 + 7919 * k + k * k;   // durations of every remainder
    collect::record(EventKind::StepMarker, "ProfilerStep#0", t0, end);
    collect::record_memory(end, 0, k, 0, 0);
  }
  collect::stop();
  const Trace t = collect::drain();
  ASSERT_EQ(t.events.size(), 500u);
  ASSERT_EQ(t.memory.size(), 500u);
  for (const auto& m : t.memory) {
    const auto& e = t.events.at(size_t(m.total_allocated - 1));
    ASSERT_EQ(e.end_ns(), m.ts_ns) << "event " << m.total_allocated;
  }
}

TEST(Collector, MemoryRecordsOutsideASessionAreDropped) {
  collect::start({});
  collect::stop();
  collect::record_memory(collect::ticks(), 1, 1, 1, 0);
  collect::record_host_rss(collect::ticks());
  const Trace t = collect::drain();
  EXPECT_TRUE(t.memory.empty());
  EXPECT_TRUE(t.host_memory.empty());
}

TEST(Collector, ClockIsMonotonic) {
  const int64_t a = collect::now_ns();
  const int64_t b = collect::now_ns();
  EXPECT_GT(a, 0);
  EXPECT_GE(b, a);
}

// The hooks' path (host_enter_now) looks a name up by its address first. A RecordFunction's name
// can be a std::string inside it, so the same address holds one name now and another later (a
// stack slot reused by the next op): every event must carry the text that was there at its enter,
// never the one cached from an earlier op at the same address. Same length and a different last
// character (ProfilerStep#10 / #11), shorter, longer, and back to an earlier text: each is caught.
TEST(Collector, NameAtAReusedAddressIsNeverStale) {
  const std::vector<std::string> texts = {"ProfilerStep#10",  "ProfilerStep#11", "ProfilerStep#1",
                                          "ProfilerStep#100", "aten::add",       "ProfilerStep#10"};
  char storage[64];
  collect::start({});
  for (int round = 0; round < 3; ++round) {
    for (const std::string& text : texts) {
      std::memcpy(storage, text.c_str(), text.size() + 1);
      int key;
      collect::host_enter_now(&key, storage, EventKind::HostOp);
      collect::host_exit_now(&key);
    }
  }
  // Two addresses with the same text share one name (and the literal's address stays cached).
  static const char kLiteral[] = "aten::add";
  for (int i = 0; i < 3; ++i) {
    int key;
    const int64_t dims[] = {1, 4, 1, 4};
    collect::host_enter_now(&key, kLiteral, EventKind::HostOp, dims, 4);
    collect::host_exit_now(&key);
  }
  collect::stop();
  Trace t = collect::drain();
  ASSERT_EQ(t.events.size(), 3 * texts.size() + 3);
  for (size_t i = 0; i < 3 * texts.size(); ++i)
    EXPECT_EQ(t.name_of(t.events[i]), texts[i % texts.size()]) << "event " << i;
  for (size_t i = 3 * texts.size(); i < t.events.size(); ++i) {
    EXPECT_EQ(t.name_of(t.events[i]), "aten::add");
    EXPECT_EQ(t.strings.at(t.events[i].aux), "[[4], [4]]");
    EXPECT_EQ(t.events[i].name, t.events[4].name);   // one entry for "aten::add" in the table
  }
  for (const Event& e : t.events) EXPECT_GE(e.dur_ns, 0);
}

// A new session has a new name table: an address cached in the previous session must not hand
// out that session's id. Session 1 interns "aten::mm" first; session 2 interns other names before
// looking up the same address again.
TEST(Collector, AddressCacheStartsAfreshWithEachSession) {
  static const char kMm[] = "aten::mm";
  for (int s = 0; s < 2; ++s) {
    collect::start({});
    int key;
    if (s == 1) {
      collect::record(EventKind::UserRange, "first-in-session-2", 0, 1);
      collect::record(EventKind::UserRange, "second-in-session-2", 0, 1);
    }
    collect::host_enter_now(&key, kMm, EventKind::HostOp);
    collect::host_exit_now(&key);
    collect::stop();
    Trace t = collect::drain();
    ASSERT_EQ(t.events.size(), s == 0 ? 1u : 3u);
    EXPECT_EQ(t.name_of(t.events.back()), "aten::mm") << "session " << s;
  }
}

// Four threads, each reusing one buffer of its own for changing names and sharing two literals,
// keep every event's name: the per-thread caches never mix.
TEST(Collector, AddressCacheOnFourThreadsKeepsEveryName) {
  constexpr int kThreads = 4, kOps = 3000;
  static const char kShared[] = "aten::shared_op";
  static const char kOther[] = "aten::other_op";
  collect::SessionConfig config;
  config.max_events = 1'000'000;
  collect::start(config);
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([w] {
      char own[32];
      for (int i = 0; i < kOps; ++i) {
        std::snprintf(own, sizeof(own), "t%d_op%d", w, i % 7);
        int outer, inner;
        collect::host_enter_now(&outer, own, EventKind::UserRange);
        collect::host_enter_now(&inner, i % 2 ? kShared : kOther, EventKind::HostOp);
        collect::host_exit_now(&inner);
        collect::host_exit_now(&outer);
      }
    });
  }
  for (auto& th : threads) th.join();
  collect::stop();
  Trace t = collect::drain();
  ASSERT_EQ(t.events.size(), size_t(2 * kThreads * kOps));
  EXPECT_EQ(count_named(t, kShared), size_t(kThreads * kOps / 2));
  EXPECT_EQ(count_named(t, kOther), size_t(kThreads * kOps / 2));
  for (int w = 0; w < kThreads; ++w)
    for (int k = 0; k < 7; ++k) {
      const std::string name = "t" + std::to_string(w) + "_op" + std::to_string(k);
      size_t expected = 0;
      for (int i = 0; i < kOps; ++i) expected += (i % 7 == k);
      EXPECT_EQ(count_named(t, name), expected) << name;
    }
  // Each op's thread-local names stayed on its own thread.
  std::map<uint32_t, std::set<std::string>> prefixes;
  for (const Event& e : t.events)
    if (e.kind == EventKind::UserRange) prefixes[e.tid].insert(t.name_of(e).substr(0, 2));
  ASSERT_EQ(prefixes.size(), size_t(kThreads));
  for (const auto& [tid, p] : prefixes) EXPECT_EQ(p.size(), 1u) << "thread " << tid;
}

// record_shapes through the hooks' path: the input sizes arrive as a flat list (per input its
// number of dimensions, then the dimensions) and each distinct list is written out once per thread.
// The text is torch.profiler's "Input Dims" form; a list cut short ends where it ends.
TEST(Collector, ShapesFromDimsLists) {
  const int64_t conv[] = {4, 64, 3, 32, 32, 1, 64, 0};
  const int64_t scalar_only[] = {0};
  const int64_t cut[] = {3, 2, 5};
  EXPECT_EQ(collect::shapes_text(conv, 8), "[[64, 3, 32, 32], [64], []]");
  EXPECT_EQ(collect::shapes_text(scalar_only, 1), "[[]]");
  EXPECT_EQ(collect::shapes_text(conv, 0), "[]");
  EXPECT_EQ(collect::shapes_text(cut, 3), "[[2, 5]]");

  collect::start({});
  const int64_t a[] = {2, 4, 5, 2, 5, 6};   // mm(4x5, 5x6)
  const int64_t b[] = {2, 4, 5, 2, 5, 7};   // the same length, one size differs
  int key;
  for (int i = 0; i < 4; ++i) {
    collect::host_enter_now(&key, "aten::mm", EventKind::HostOp, i % 2 ? b : a, 6);
    collect::host_exit_now(&key);
  }
  collect::host_enter_now(&key, "aten::mm", EventKind::HostOp, nullptr, 0);   // no shapes read
  collect::host_exit_now(&key);
  collect::host_enter_now(&key, "aten::empty", EventKind::HostOp, a, 0);      // no inputs
  collect::host_exit_now(&key);
  collect::stop();
  Trace t = collect::drain();
  ASSERT_EQ(t.events.size(), 6u);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(t.strings.at(t.events[i].aux), i % 2 ? "[[4, 5], [5, 7]]" : "[[4, 5], [5, 6]]");
  EXPECT_EQ(t.events[4].aux, kNoIndex);
  EXPECT_EQ(t.strings.at(t.events[5].aux), "[]");
}

// FLOPs: the inputs the hooks capture from inside an op (its key formatted once per distinct key)
// follow the op into Trace::op_args, with its shapes and the grad mark; an inner op whose exit never
// came does not pass its capture to the op around it; a capture for an op that is not the innermost
// open one (by name) is ignored.
namespace {
int g_formatted = 0;
void format_two(const int64_t* key, size_t n, collect::OpInputTexts* out) {
  ++g_formatted;
  out->dims = {2, key[0], key[1], 2, key[1], 8};   // [[a, b], [b, 8]]
  out->types = "['float', 'float']";
  out->concrete = n > 2 ? "['', '', 'True']" : "";
}
}  // namespace

TEST(Collector, CapturedInputsFollowTheirOp) {
  collect::start({});
  g_formatted = 0;
  const int64_t key[] = {4, 16};
  for (int call = 0; call < 3; ++call) {
    const char* mm = "aten::mm";
    collect::host_enter_now(&call, mm, EventKind::HostOp);
    collect::host_op_inputs("aten::mm", key, 2, &format_two, call == 2);
    collect::host_op_inputs("aten::addmm", key, 2, &format_two, false);   // not the open op: ignored
    collect::host_exit_now(&call);
  }
  // An op whose inner op's exit is lost: the inner capture is not the outer op's.
  int outer = 0, inner = 0;
  collect::host_enter_now(&outer, "aten::linear", EventKind::HostOp);
  collect::host_enter_now(&inner, "aten::mm", EventKind::HostOp);
  collect::host_op_inputs("aten::mm", key, 2, &format_two, false);
  collect::host_exit_now(&outer);
  collect::stop();
  Trace t = collect::drain();
  EXPECT_EQ(g_formatted, 1);   // one distinct key: formatted once
  ASSERT_EQ(t.events.size(), 4u);
  ASSERT_EQ(t.op_args.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    const Event& e = t.events[i];
    EXPECT_EQ(t.name_of(e), "aten::mm");
    EXPECT_EQ(t.strings.at(e.aux), "[[4, 16], [16, 8]]");
    EXPECT_EQ(t.op_args[i].event, i);
    EXPECT_EQ(t.strings.at(t.op_args[i].types), "['float', 'float']");
    EXPECT_EQ(bool(e.flags & kGradRecordedFlag), i == 2);
  }
  EXPECT_EQ(t.name_of(t.events[3]), "aten::linear");
  EXPECT_EQ(t.op_args_of(3), nullptr);
}
