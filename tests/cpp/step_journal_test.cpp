// Specifications of the step journal's native half: the incremental drain (collect::drain_new)
// reads each event once, keeps the names it copied, and leaves exited threads' buffers to drain();
// the step summary (StepSummarizer) applies the live report's rules to the events of one step.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "gpuprof/analysis/step_journal.h"
#include "gpuprof/collect/collector.h"

using namespace gpuprof;

namespace {
std::vector<std::string> names_of(const Trace& t) {
  std::vector<std::string> out;
  for (const Event& e : t.events) out.push_back(t.name_of(e));
  return out;
}

void op(const char* name, int64_t start, int64_t end) {
  int key;
  collect::host_enter(&key, name, EventKind::HostOp, start);
  collect::host_exit(&key, end);
}
}  // namespace

// Each call gives what was recorded since the call before; the names copied once stay (a name new
// since the call before is added, with the id it has in the session's table); a new session starts
// the cursor and the names afresh.
TEST(DrainNew, ReadsEachEventOnceAndKeepsItsNames) {
  collect::start({});
  collect::DrainCursor cursor;
  Trace t;
  op("aten::add", 10, 20);
  op("aten::add", 30, 40);
  collect::drain_new(cursor, t);
  EXPECT_EQ(names_of(t), (std::vector<std::string>{"aten::add", "aten::add"}));
  const size_t names_before = t.strings.size();   // "", aten::add
  EXPECT_EQ(names_before, 2u);
  op("aten::mul", 50, 60);
  op("aten::add", 70, 80);
  collect::drain_new(cursor, t);
  EXPECT_EQ(names_of(t), (std::vector<std::string>{"aten::mul", "aten::add"}));
  EXPECT_EQ(t.strings.size(), names_before + 1);
  collect::drain_new(cursor, t);
  EXPECT_TRUE(t.events.empty());

  // A thread that records and exits: its events come in the next call, and its buffer is still
  // there for the span's drain(), which gets every event of the session.
  std::thread([] {
    for (int k = 0; k < 3; ++k) op("worker::op", 100 + k, 101 + k);
  }).join();
  collect::drain_new(cursor, t);
  EXPECT_EQ(names_of(t), (std::vector<std::string>{"worker::op", "worker::op", "worker::op"}));
  collect::stop();
  Trace all = collect::drain();
  EXPECT_EQ(all.events.size(), 7u);

  collect::start({});
  op("aten::relu", 10, 20);
  collect::drain_new(cursor, t);
  EXPECT_EQ(names_of(t), (std::vector<std::string>{"aten::relu"}));
  EXPECT_EQ(t.strings.size(), 2u);   // "", aten::relu: the earlier session's names are gone
  collect::stop();
}

// One step: ProfilerStep#4 around a DataLoader fetch and aten::linear holding aten::addmm (twice).
// The summary has the step's row (its breakdown: the fetch is DataLoader time, the ops CPU Exec)
// and one operator row per name, largest host total first: aten::linear 2 calls, its self time
// its total less aten::addmm's. The events recorded before the step (a call earlier) are not in it.
TEST(StepSummarizer, OneStepsRowAndOperators) {
  collect::start({});
  StepSummarizer summarizer;
  op("before::op", collect::ticks(), collect::ticks());
  summarizer.next();
  const int64_t step_start = collect::ticks();
  int fetch, outer, inner;
  collect::host_enter(&fetch, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", EventKind::UserRange,
                      collect::ticks());
  collect::host_exit(&fetch, collect::ticks());
  for (int k = 0; k < 2; ++k) {
    collect::host_enter(&outer, "aten::linear", EventKind::HostOp, collect::ticks());
    collect::host_enter(&inner, "aten::addmm", EventKind::HostOp, collect::ticks());
    for (volatile int spin = 0; spin < 20000; ++spin) {
    }
    collect::host_exit(&inner, collect::ticks());
    collect::host_exit(&outer, collect::ticks());
  }
  collect::record(EventKind::StepMarker, "ProfilerStep#4", step_start, collect::ticks());
  const std::string json = summarizer.next();
  collect::stop();
  EXPECT_EQ(summarizer.last_events(), 6u);   // the fetch, 2 x 2 ops, the step marker
  EXPECT_NE(json.find("{\"steps\":[{\"step\":4,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"operators\":[[\"aten::linear\",2,"), std::string::npos) << json;
  EXPECT_NE(json.find("],[\"aten::addmm\",2,"), std::string::npos) << json;
  EXPECT_EQ(json.find("before::op"), std::string::npos) << json;
  EXPECT_EQ(json.find("enumerate(DataLoader)"), std::string::npos) << json;   // a range, not an op
  // The step's categories: the fetch is DataLoader time, the ops are CPU Exec time.
  const auto number_after = [&](const std::string& key) {
    const size_t at = json.find("\"" + key + "\":");
    EXPECT_NE(at, std::string::npos) << key;
    return std::stoll(json.substr(at + key.size() + 3));
  };
  EXPECT_GT(number_after("dataloader_ns"), 0);
  EXPECT_GT(number_after("cpu_exec_ns"), 0);
  // aten::linear's self time is its total less aten::addmm's (each conversion rounds by <= 1 ns).
  const size_t linear = json.find("[\"aten::linear\",2,");
  const size_t addmm = json.find("[\"aten::addmm\",2,");
  int64_t l_self = 0, l_total = 0, a_self = 0, a_total = 0;
  ASSERT_EQ(std::sscanf(json.c_str() + linear, "[\"aten::linear\",2,%ld,%ld", &l_self, &l_total), 2);
  ASSERT_EQ(std::sscanf(json.c_str() + addmm, "[\"aten::addmm\",2,%ld,%ld", &a_self, &a_total), 2);
  EXPECT_EQ(a_self, a_total);
  EXPECT_NEAR(double(l_self), double(l_total - a_total), 4.0);
  EXPECT_GE(l_total, a_total);
}

// Names are escaped: a range named with a quote and a newline stays one valid JSON string.
TEST(StepSummarizer, NamesAreEscaped) {
  collect::start({});
  StepSummarizer summarizer;
  const int64_t start = collect::ticks();
  op("my \"op\"\nx", collect::ticks(), collect::ticks());
  collect::record(EventKind::StepMarker, "ProfilerStep#1", start, collect::ticks());
  const std::string json = summarizer.next();
  collect::stop();
  EXPECT_NE(json.find("\"my \\\"op\\\"\\nx\""), std::string::npos) << json;
  EXPECT_EQ(json.find('\n'), std::string::npos);
}
