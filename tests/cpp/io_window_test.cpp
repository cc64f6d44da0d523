// The importer's windowed reads (ImportOptions::scan_steps, windowed): a scan keeps the step markers
// and counts the rest by start time; a window keeps what overlaps it and marks its context; the
// name-keyed tables count a window's own events only. Each expectation is worked out in a comment.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/tables.h"
#include "gpuprof/io/kineto_import.h"

using namespace gpuprof;

namespace {

// Three steps of 100 us at 1000, 1100 and 1200 us (ns: 1,000,000 ...). Each step: an operator
// (10 us after the step's start, 20 us long) with a launch inside it, and the kernel it launched,
// which starts 50 us after the step's start and runs 70 us: into the next step (a device tail). A
// memory sample at each step's start. Times in us.
std::string three_steps() {
  std::string ev;
  for (int i = 0; i < 3; ++i) {
    const int t = 1000 + 100 * i;
    const std::string n = std::to_string(i + 1), corr = std::to_string(100 + i);
    ev += R"({"ph":"X","cat":"user_annotation","name":"ProfilerStep#)" + n + R"(","pid":1,"tid":1,"ts":)" +
          std::to_string(t) + R"(,"dur":100},)";
    ev += R"({"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":)" + std::to_string(t + 10) +
          R"(,"dur":20,"args":{"External id":)" + corr + "}},";
    ev += R"({"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":)" +
          std::to_string(t + 12) + R"(,"dur":5,"args":{"correlation":)" + corr + R"(,"External id":)" + corr +
          "}},";
    ev += R"({"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":)" + std::to_string(t + 50) +
          R"(,"dur":70,"args":{"device":0,"stream":7,"correlation":)" + corr + R"(,"External id":)" + corr + "}},";
    ev += R"({"ph":"i","s":"t","cat":"cpu_instant_event","name":"[memory]","pid":1,"tid":1,"ts":)" +
          std::to_string(t) + R"(,"args":{"Bytes":64,"Total Allocated":64,"Device Type":1,"Device Id":0}},)";
  }
  ev.pop_back();
  return R"({"traceEvents":[)" + ev + "]}";
}

constexpr int64_t kUs = 1000;

}  // namespace

TEST(WindowedImport, ScanKeepsStepMarkersAndCountsTheRestByStart) {
  ImportOptions o;
  o.scan_steps = true;
  ImportStats stats;
  const Trace t = import_kineto_json(three_steps(), "scan.json", o, &stats);
  // 3 markers kept; 9 events (3 ops, 3 launches, 3 kernels) counted and left out, and 3 memory
  // samples left out uncounted.
  ASSERT_EQ(t.events.size(), 3u);
  for (const Event& e : t.events) EXPECT_EQ(e.kind, EventKind::StepMarker);
  EXPECT_EQ(t.events[1].start_ns, 1100 * kUs);
  EXPECT_TRUE(t.memory.empty());
  EXPECT_EQ(stats.outside_window, 12u);
  // Buckets of 2^20 ns (1.05 ms): starts 1010..1250 us fall in buckets 0 (below 1048.576 us) and 1.
  // Bucket 0: step 1's op (1010), launch (1012), kernel (1050 > 1048.6: bucket 1) -> 2;
  // bucket 1: the other 7.
  EXPECT_EQ(stats.histogram_shift, 20);
  ASSERT_EQ(stats.start_histogram.size(), 2u);
  EXPECT_EQ(stats.start_histogram.at(0), 2u);
  EXPECT_EQ(stats.start_histogram.at(1), 7u);
}

TEST(WindowedImport, ScanHistogramWidensItsBucketsPastTheirBound) {
  // 70,000 events 2^20 ns apart need 70,000 buckets of 2^20 ns: past the 65,536 bound the buckets
  // double (2^21 ns, 35,000 of them, two events each).
  std::string ev;
  for (int i = 0; i < 70000; ++i)
    ev += R"({"ph":"X","cat":"cpu_op","name":"op","pid":1,"tid":1,"ts":)" + std::to_string(int64_t(i) << 20) +
          R"(,"dur":1},)";
  ev.pop_back();
  ImportOptions o;
  o.scan_steps = true;
  ImportStats stats;
  // Timestamps in ns: 2^20 * 70,000 = 7.3e10, below the ns magnitude rule, so they are read as us:
  // ts i << 20 us = (i << 20) * 1000 ns. Buckets of 2^20 ns then hold one event each at most, and
  // 70,000 of them exceed the bound: the shift grows until the buckets fit.
  import_kineto_json(R"({"traceEvents":[)" + ev + "]}", "wide.json", o, &stats);
  EXPECT_LE(stats.start_histogram.size(), ImportStats::kMaxHistogramBuckets);
  EXPECT_GT(stats.histogram_shift, 20);
  uint64_t total = 0;
  for (const auto& [bucket, n] : stats.start_histogram) total += n;
  EXPECT_EQ(total, 70000u);
}

TEST(WindowedImport, WindowKeepsWhatOverlapsItAndMarksItsContext) {
  // The window owns step 2's start [1100, 1200) us and keeps [1050, 1250): step 1's kernel (1050,
  // running to 1120) is kept as context; step 2's marker, op, launch and kernel are owned; step
  // 3's marker (1200) and op (1210) and launch (1212) are context; step 3's kernel (1250) is not
  // kept (it starts at keep_to). Step 1's marker (1000) does not start in the kept range.
  ImportOptions o;
  o.windowed = true;
  o.keep_from_ns = 1050 * kUs;
  o.own_from_ns = 1100 * kUs;
  o.own_to_ns = 1200 * kUs;
  o.keep_to_ns = 1250 * kUs;
  ImportStats stats;
  const Trace t = import_kineto_json(three_steps(), "window.json", o, &stats);
  int markers = 0, owned = 0, context = 0;
  for (const Event& e : t.events) {
    markers += e.kind == EventKind::StepMarker;
    ((e.flags & kContextFlag) ? context : owned)++;
  }
  EXPECT_EQ(markers, 2);   // steps 2 and 3
  EXPECT_EQ(owned, 4);
  EXPECT_EQ(context, 4);   // step 1's kernel, step 3's marker, op and launch
  EXPECT_EQ(stats.context_events, 4u);
  // Left out: step 1's marker, op, launch; step 3's kernel; step 1's memory sample (1000, before the
  // kept time). Kept: the samples at 1100 (owned) and 1200 (step 3's, in the kept time: the level
  // its device work runs on into, for the window's per-step memory rows and peaks).
  EXPECT_EQ(stats.outside_window, 5u);
  ASSERT_EQ(t.memory.size(), 2u);
  EXPECT_EQ(t.memory[0].ts_ns, 1100 * kUs);
  EXPECT_EQ(t.memory[1].ts_ns, 1200 * kUs);

  // The kernel table counts the owned kernel only (step 2's: 70 us); the operator table step 2's
  // op, whose device time is its kernel's.
  const LaunchLinks links = link_launches(t);
  const auto kernels = kernel_table(t);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].calls, 1);
  EXPECT_EQ(kernels[0].total_ns, 70 * kUs);
  const auto ops = operator_table(t, links);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].calls, 1);
  EXPECT_EQ(ops[0].host_total_ns, 20 * kUs);
  EXPECT_EQ(ops[0].device_total_ns, 70 * kUs);
}

TEST(WindowedImport, WindowsThatPartitionTheTraceCountEveryEventOnce) {
  // Three windows, one step each, each keeping the step before and after as context: the kernel
  // tables' calls add up to the whole trace's 3, and their totals to 210 us.
  const int64_t lo = INT64_MIN, hi = INT64_MAX;
  const int64_t cuts[][4] = {{lo, lo, 1100 * kUs, 1200 * kUs},
                             {1000 * kUs, 1100 * kUs, 1200 * kUs, 1300 * kUs},
                             {1100 * kUs, 1200 * kUs, hi, hi}};
  int64_t calls = 0, total = 0, op_calls = 0, op_device = 0;
  for (const auto& c : cuts) {
    ImportOptions o;
    o.windowed = true;
    o.keep_from_ns = c[0];
    o.own_from_ns = c[1];
    o.own_to_ns = c[2];
    o.keep_to_ns = c[3];
    const Trace t = import_kineto_json(three_steps(), "w.json", o);
    for (const auto& r : kernel_table(t)) {
      calls += r.calls;
      total += r.total_ns;
    }
    const LaunchLinks links = link_launches(t);
    for (const auto& r : operator_table(t, links)) {
      op_calls += r.calls;
      op_device += r.device_total_ns;
    }
  }
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(total, 210 * kUs);
  EXPECT_EQ(op_calls, 3);
  EXPECT_EQ(op_device, 210 * kUs);   // each op finds its kernel in its own window
}

namespace {

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/gpuprof_window_test_" + std::to_string(::getpid()) + "_" +
         name;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Each event as (kind, start, flags), in order: what two imports must agree on.
std::vector<std::tuple<int, int64_t, int64_t, int>> events_of(const Trace& t) {
  std::vector<std::tuple<int, int64_t, int64_t, int>> out;
  for (const Event& e : t.events) out.emplace_back(int(e.kind), e.start_ns, e.dur_ns, e.flags);
  return out;
}

}  // namespace

TEST(WindowSpill, EachWindowFileHoldsWhatTheWindowKeeps) {
  // The three steps with a top-level key after traceEvents: routed to three windows of one step
  // each (with a context step on each side), each spill file imports to the same window as the
  // whole text does, and keeps the top-level key.
  std::string text = three_steps();
  text.insert(text.size() - 1, R"(,"distributedInfo":{"rank":3,"world_size":8})");
  const std::string src = temp_path("src.json");
  write_file(src, text);
  const int64_t lo = INT64_MIN, hi = INT64_MAX;
  const int64_t cuts[][4] = {{lo, lo, 1100 * kUs, 1200 * kUs},
                             {1000 * kUs, 1100 * kUs, 1200 * kUs, 1300 * kUs},
                             {1100 * kUs, 1200 * kUs, hi, hi}};
  std::vector<SpillWindow> windows;
  for (int k = 0; k < 3; ++k)
    windows.push_back({cuts[k][0], cuts[k][3], temp_path("w" + std::to_string(k) + ".json")});
  const SpillStats st = spill_windows(src, 1000, windows);
  EXPECT_EQ(st.records, 15u);
  EXPECT_EQ(st.unrouted, 0u);
  for (int k = 0; k < 3; ++k) {
    ImportOptions o;
    o.windowed = true;
    o.keep_from_ns = cuts[k][0];
    o.own_from_ns = cuts[k][1];
    o.own_to_ns = cuts[k][2];
    o.keep_to_ns = cuts[k][3];
    const Trace whole = import_kineto_json(text, "whole.json", o);
    const Trace spilled = import_kineto_trace(windows[k].path, o);
    EXPECT_EQ(events_of(spilled), events_of(whole)) << "window " << k;
    EXPECT_EQ(spilled.memory.size(), whole.memory.size());
    EXPECT_EQ(spilled.metadata.count("distributedInfo"), 1u);
    std::remove(windows[k].path.c_str());
  }
  std::remove(src.c_str());
}

TEST(WindowSpill, TextThatIsNotATraceIsOneError) {
  // Not JSON, a truncated list, text after the object: each a TraceImportError naming the file,
  // never a crash.
  const std::string src = temp_path("bad.json"), out = temp_path("bad_w.json");
  for (const std::string& bad :
       {std::string("not json"), std::string(R"({"traceEvents":[{"ts":1,"dur":)"),
        std::string(R"({"traceEvents":[]} x)"), std::string(R"({"traceEvents":[{"ts":"1)")}) {
    write_file(src, bad);
    EXPECT_THROW(spill_windows(src, 1000, {{INT64_MIN, INT64_MAX, out}}), TraceImportError) << bad;
  }
  // Held text is bounded: an event longer than max_token_bytes (a list of 2,000 numbers against
  // 1 KiB), top-level keys past it, and nesting past 256 levels each fail in one error.
  ImportOptions small;
  small.max_token_bytes = 1024;
  std::string long_event = R"({"traceEvents":[{"ts":1,"args":[)";
  for (int i = 0; i < 2000; ++i) long_event += "1,";
  long_event += "1]}]}";
  std::string keys = R"({"traceEvents":[])";
  for (int i = 0; i < 2000; ++i) keys += ",\"k" + std::to_string(i) + "\":1";
  keys += "}";
  const std::string deep = R"({"traceEvents":[)" + std::string(300, '[') + std::string(300, ']') + "]}";
  // Times at the ends of int64 route without overflow: one event each, to the window they overlap.
  const std::string ends =
      R"({"traceEvents":[{"ts":-9223372036854775,"dur":9223372036854775},{"ts":9223372036854775,"dur":1}]})";
  const SpillStats routed = spill_windows_json(ends, "ends.json", 1000, {{INT64_MIN, INT64_MAX, "/dev/null"}});
  EXPECT_EQ(routed.records, 2u);
  EXPECT_EQ(routed.unrouted, 0u);
  for (const std::string& bad : {long_event, keys, deep})
    EXPECT_THROW(spill_windows_json(bad, "bad.json", 1000, {{INT64_MIN, INT64_MAX, "/dev/null"}}, small),
                 TraceImportError);
  std::remove(src.c_str());
  std::remove(out.c_str());
}
