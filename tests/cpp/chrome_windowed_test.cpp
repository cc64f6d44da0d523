// Specifications of WindowedChromeTrace (docs/design.md, "Memory"): a trace read in windows of steps
// written window by window has the entries export_chrome_trace writes for the whole trace, each
// once, in another order (each window's own entries in turn, the lanes' names last), less the Est.
// SM efficiency counter tracks. The windows are cut here by hand as the windowed import cuts them:
// a window keeps the events overlapping its steps and a step on each side, and the events that
// start outside the time it owns carry kContextFlag.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "gpuprof/analysis/chrome_export.h"
#include "gpuprof/analysis/gpu_summary.h"
#include "trace_builders.h"

using namespace gpuprof;

namespace {

constexpr int64_t us = 1000;
constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();   // the last window owns to the end

Event& host(Trace& t, EventKind kind, const char* name, int64_t start, int64_t end) {
  Event& e = t.add(kind, name, start * us, (end - start) * us);
  e.tid = 1;
  return e;
}

// A launch on the host thread and its kernel on `device`, stream `stream`.
void launch(Trace& t, uint64_t corr, int64_t start, const char* kernel, int64_t kstart, int64_t kend, int device,
            uint32_t stream) {
  host(t, EventKind::Runtime, "cudaLaunchKernel", start, start + 5).correlation = corr;
  Event& k = spec::add_kernel(t, kernel, kstart * us, kend * us, corr, 4, 25.0f, device);
  k.tid = stream;
}

MemorySample sample(int64_t ts, int64_t delta, int64_t total, int device) {
  MemorySample m;
  m.ts_ns = ts * us;
  m.bytes_delta = delta;
  m.total_allocated = total;
  m.total_reserved = total < 0 ? -1 : 8192;
  m.device = static_cast<int16_t>(device);
  m.tid = 1;
  return m;
}

// Three steps of 1 ms (times in us). Step 1 launches a kernel that runs in step 2 (its flow arrow
// crosses the windows' edge); step 2 launches the only kernel of GPU 1; step 3 holds a DataLoader
// worker's stage (its own process). Allocator samples in each step, an NVML power sample.
Trace whole_trace() {
  Trace t;
  t.metadata["pid"] = "4242";
  t.metadata["source"] = "windowed \"spec\"";
  t.devices.push_back(spec::small_gpu(0));
  t.devices.push_back(spec::small_gpu(1));
  GpuSample g;
  g.ts_ns = 1500 * us;
  g.device = 0;
  g.power_mw = 120500;
  t.gpu_samples.push_back(g);

  host(t, EventKind::StepMarker, "ProfilerStep#1", 0, 1000);
  host(t, EventKind::HostOp, "aten::mm", 10, 100);
  launch(t, 1, 20, "gemm", 30, 200, 0, 7);
  host(t, EventKind::HostOp, "aten::relu", 890, 920);
  launch(t, 2, 900, "late_kernel", 1100, 1300, 0, 7);

  host(t, EventKind::StepMarker, "ProfilerStep#2", 1000, 2000);
  host(t, EventKind::HostOp, "aten::add", 1010, 1050);
  launch(t, 3, 1020, "add_kernel", 1400, 1500, 1, 13);

  host(t, EventKind::StepMarker, "ProfilerStep#3", 2000, 3000);
  host(t, EventKind::HostOp, "aten::sum", 2010, 2040);
  launch(t, 4, 2020, "sum_kernel", 2050, 2080, 0, 7);
  Event& stage = t.add(EventKind::InputStage, "DataLoader worker: fetch", 2100 * us, 100 * us);
  stage.device = 0;   // the worker's id
  stage.tid = 5555;   // the worker's process id
  stage.external_id = 3;

  t.memory.push_back(sample(500, 4096, 4096, 0));
  t.memory.push_back(sample(1000, 64, -1, -1));   // on the edge: owned by the window it starts
  t.memory.push_back(sample(1500, -4096, 0, 0));
  t.memory.push_back(sample(2500, 512, 512, 0));
  return t;
}

// The window of `whole` that keeps [keep_from, keep_to) and owns [own_from, own_to), in us.
Trace window_of(const Trace& whole, int64_t keep_from, int64_t keep_to, int64_t own_from, int64_t own_to) {
  const auto owns = [&](int64_t ts) { return ts >= own_from * us && (own_to == kEnd || ts < own_to * us); };
  const int64_t keep_to_ns = keep_to == kEnd ? kEnd : keep_to * us;
  Trace w = whole;
  w.events.clear();
  for (const Event& e : whole.events) {
    if (e.start_ns + e.dur_ns < keep_from * us || e.start_ns >= keep_to_ns) continue;
    w.events.push_back(e);
    if (!owns(e.start_ns)) w.events.back().flags |= kContextFlag;
  }
  w.memory.clear();
  for (const MemorySample& m : whole.memory) {
    if (m.ts_ns < keep_from * us || m.ts_ns >= keep_to_ns) continue;
    w.memory.push_back(m);
    if (!owns(m.ts_ns)) w.memory.back().flags |= kContextFlag;
  }
  return w;
}

// The scan's trace: the devices, metadata and GPU samples, no events.
Trace header_of(const Trace& whole) {
  Trace h;
  h.devices = whole.devices;
  h.metadata = whole.metadata;
  h.gpu_samples = whole.gpu_samples;
  return h;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The entries of the top-level traceEvents array, as written; `head` and `tail` get the text
// before and after them.
std::vector<std::string> entries(const std::string& json, std::string* head, std::string* tail) {
  const std::string open = "\"traceEvents\":[";
  const size_t from = json.find(open);
  EXPECT_NE(from, std::string::npos);
  if (from == std::string::npos) return {};
  *head = json.substr(0, from + open.size());
  std::vector<std::string> out;
  size_t start = 0;
  int depth = 0;
  bool in_string = false;
  for (size_t i = from + open.size(); i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' && depth++ == 0) start = i;
    else if (c == '}' && --depth == 0) out.push_back(json.substr(start, i + 1 - start));
    else if (c == ']' && depth == 0) {
      *tail = json.substr(i);
      break;
    }
  }
  return out;
}

size_t count(const std::vector<std::string>& es, const std::string& part) {
  return size_t(std::count_if(es.begin(), es.end(), [&](const std::string& e) { return e.find(part) != e.npos; }));
}

struct Written {
  std::string head, tail;
  std::vector<std::string> entries;
};

// The trace written in two windows: step 1 (with step 2 as context), then steps 2 and 3 (with step
// 1 as context), the utilization tracks from the whole trace's timeline, as the caller merges it.
Written windowed(const Trace& whole, const std::string& path) {
  WindowedChromeTrace out(path, header_of(whole));
  out.add(window_of(whole, 0, 2000, 0, 1000), 0, 1000 * us);
  out.add(window_of(whole, 0, kEnd, 1000, kEnd), 1000 * us, kEnd);
  for (const GpuTimeline& tl : gpu_timelines(whole, false)) {
    std::vector<std::pair<int64_t, double>> buckets;
    for (const GpuBucket& b : tl.buckets) buckets.emplace_back(b.start_ns, b.utilization_pct);
    out.utilization(tl.device, buckets, tl.buckets.back().start_ns + tl.buckets.back().dur_ns);
  }
  out.close();
  Written w;
  w.entries = entries(read_file(path), &w.head, &w.tail);
  return w;
}

std::string temp_path(const char* name) { return ::testing::TempDir() + name; }

}  // namespace

TEST(WindowedChromeTrace, TwoWindowsWriteTheWholeExportsEntriesEachOnce) {
  const Trace whole = whole_trace();
  const std::string path = temp_path("gpuprof_windowed_two.json");
  const Written got = windowed(whole, path);
  Written want;
  want.entries = entries(export_chrome_json(whole), &want.head, &want.tail);
  // The whole export's SM efficiency tracks are the one thing a window cannot write.
  const size_t sm = count(want.entries, "\"sm efficiency %\"");
  EXPECT_GT(sm, 0u);
  want.entries.erase(std::remove_if(want.entries.begin(), want.entries.end(),
                                    [](const std::string& e) { return e.find("\"sm efficiency %\"") != e.npos; }),
                     want.entries.end());
  // The same text around the entries (devices, metadata, GPU samples; the footer).
  EXPECT_EQ(got.head, want.head);
  EXPECT_EQ(got.tail, want.tail);
  EXPECT_EQ(got.tail, "],\"displayTimeUnit\":\"ms\",\"traceName\":\"gpuprof\"}");
  // The same entries, each as often: no context event written twice, none left out.
  std::vector<std::string> a = got.entries, b = want.entries;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);
  // Among them: the four kernels, the four allocator samples, four arrows of two ends each.
  EXPECT_EQ(count(got.entries, "\"ph\":\"X\",\"cat\":\"kernel\""), 4u);
  EXPECT_EQ(count(got.entries, "\"name\":\"[memory]\""), 4u);
  EXPECT_EQ(count(got.entries, "\"cat\":\"ac2g\""), 8u);
  std::remove(path.c_str());
}

TEST(WindowedChromeTrace, EachWindowWritesWhatItOwnsAndTheNamesComeLast) {
  const Trace whole = whole_trace();
  const std::string path = temp_path("gpuprof_windowed_order.json");
  const Written got = windowed(whole, path);
  const std::vector<std::string>& es = got.entries;
  const auto at = [&](const std::string& entry) {
    const auto it = std::find(es.begin(), es.end(), entry);
    EXPECT_NE(it, es.end()) << entry;
    EXPECT_EQ(std::count(es.begin(), es.end(), entry), 1) << entry;
    return size_t(it - es.begin());
  };
  // The header's NVML sample: its power track first, before any window's entries.
  const size_t power = at(R"({"ph":"C","name":"GPU 0 Power","pid":0,"ts":1500.000,"args":{"power W":120.5}})");
  EXPECT_EQ(power, 0u);
  // The arrow across the edge: its tail with the launch, written by the first window (the kernel is
  // its context), its head with the kernel, by the second; the host lane under the trace's pid.
  const size_t launch = at(R"({"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":4242,"tid":1,)"
                           R"("ts":900.000,"dur":5.000,"args":{"correlation":2}})");
  const size_t tail = at(R"({"ph":"s","id":2,"pid":4242,"tid":1,"ts":900.000,"cat":"ac2g","name":"ac2g"})");
  const size_t kernel = at(R"({"ph":"X","cat":"kernel","name":"late_kernel","pid":0,"tid":7,"ts":1100.000,)"
                           R"("dur":200.000,"args":{"correlation":2,"device":0,"stream":7,)"
                           R"("registers per thread":32,"shared memory":0,"grid":[4,1,1],"block":[128,1,1],)"
                           R"("est. achieved occupancy %":25.0}})");
  const size_t head = at(R"({"ph":"f","id":2,"pid":0,"tid":7,"ts":1100.000,"cat":"ac2g","name":"ac2g","bp":"e"})");
  EXPECT_EQ(tail, launch + 1);
  EXPECT_EQ(head, kernel + 1);
  const size_t step2 = at(R"({"ph":"X","cat":"user_annotation","name":"ProfilerStep#2","pid":4242,"tid":1,)"
                          R"("ts":1000.000,"dur":1000.000,"args":{}})");
  // The first window's entries (its events, its samples, its steps' critical path) before the
  // second's (events in the trace's order: the late kernel was recorded before step 2's marker).
  EXPECT_LT(launch, step2);
  EXPECT_LT(launch, kernel);
  // The memory samples, each with the window that owns its time: the one at the edge with the second.
  const size_t m500 = at(R"({"ph":"i","s":"t","cat":"cpu_instant_event","name":"[memory]","pid":4242,"tid":1,)"
                         R"("ts":500.000,"args":{"Device Type":1,"Device Id":0,"Bytes":4096,)"
                         R"("Total Allocated":4096,"Total Reserved":8192}})");
  const size_t m1000 = at(R"({"ph":"i","s":"t","cat":"cpu_instant_event","name":"[memory]","pid":4242,"tid":1,)"
                          R"("ts":1000.000,"args":{"Device Type":0,"Device Id":-1,"Bytes":64,)"
                          R"("Total Allocated":-1,"Total Reserved":-1}})");
  EXPECT_LT(m500, step2);
  EXPECT_GT(m1000, step2);
  // The critical path: step 1's pieces in the first window's turn, step 3's in the second's.
  size_t first_piece_1 = es.size(), first_piece_3 = es.size();
  for (size_t i = 0; i < es.size(); ++i) {
    if (es[i].find("\"gpuprof_critical_path\"") == std::string::npos) continue;
    if (es[i].find("\"step\":1") != std::string::npos) first_piece_1 = std::min(first_piece_1, i);
    if (es[i].find("\"step\":3") != std::string::npos) first_piece_3 = std::min(first_piece_3, i);
  }
  EXPECT_LT(first_piece_1, step2);
  EXPECT_LT(first_piece_1, kernel);
  EXPECT_LT(m500, kernel);
  EXPECT_LT(step2, first_piece_3);
  EXPECT_LT(first_piece_3, es.size());
  // After the last window: the utilization tracks, then every lane's name once (GPU 1 ran only in
  // the second window, the DataLoader worker only in the last step), the critical path's names.
  size_t last_event = 0;
  for (size_t i = 0; i < es.size(); ++i)
    if (es[i].find("\"ph\":\"X\"") != std::string::npos) last_event = i;
  const size_t util = at(R"({"ph":"C","name":"GPU 1 Utilization","pid":1,"ts":3000.000,)"
                         R"("args":{"utilization %":0.0}})");
  const size_t python = at(R"({"name":"process_name","ph":"M","pid":4242,"tid":0,"args":{"name":"python"}})");
  const size_t gpu0 = at(R"({"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"GPU 0"}})");
  const size_t gpu1 = at(R"({"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"GPU 1"}})");
  const size_t worker =
      at(R"({"name":"process_name","ph":"M","pid":5555,"tid":0,"args":{"name":"DataLoader worker 0"}})");
  const size_t path_name = at(
      R"({"name":"process_name","ph":"M","pid":"Critical path","tid":"steps","args":{"name":"Critical path"}})");
  EXPECT_LT(last_event, util);
  EXPECT_LT(util, python);
  EXPECT_EQ(gpu0, python + 1);
  EXPECT_EQ(gpu1, python + 2);
  EXPECT_EQ(worker, python + 3);
  EXPECT_EQ(path_name, python + 4);
  EXPECT_EQ(path_name + 3, es.size());   // its sort index and thread name close the list
  std::remove(path.c_str());
}

TEST(WindowedChromeTrace, ClosedOnceAndThenRefusesWindows) {
  const Trace whole = whole_trace();
  const std::string path = temp_path("gpuprof_windowed_closed.json");
  WindowedChromeTrace out(path, header_of(whole));
  out.close();
  out.close();   // a second close writes nothing more
  EXPECT_THROW(out.add(window_of(whole, 0, kEnd, 0, kEnd), 0, kEnd), TraceExportError);
  EXPECT_THROW(out.utilization(0, {{0, 50.0}}, 10), TraceExportError);
  // No window: the header, the power track, the host process's name and the footer.
  std::string head, tail;
  const std::vector<std::string> es = entries(read_file(path), &head, &tail);
  ASSERT_EQ(es.size(), 2u);
  EXPECT_EQ(es[0], R"({"ph":"C","name":"GPU 0 Power","pid":0,"ts":1500.000,"args":{"power W":120.5}})");
  EXPECT_EQ(es[1], R"({"name":"process_name","ph":"M","pid":4242,"tid":0,"args":{"name":"python"}})");
  EXPECT_EQ(tail, "],\"displayTimeUnit\":\"ms\",\"traceName\":\"gpuprof\"}");
  std::remove(path.c_str());
}

TEST(WindowedChromeTrace, AnUnwritablePathIsAnExportError) {
  EXPECT_THROW(WindowedChromeTrace("/nonexistent-gpuprof-dir/t.json", Trace{}), TraceExportError);
}
