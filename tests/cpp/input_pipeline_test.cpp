// The input pipeline in the core: the DataLoader workers' stages (EventKind::InputStage) count in no
// category, get a lane and a Chrome-trace process of their own per worker, and come back from an
// export; the batch's copy to the device is found after each DataLoader range (input_transfer.h).
#include <gtest/gtest.h>

#include <string>

#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/chrome_export.h"
#include "gpuprof/analysis/input_transfer.h"
#include "gpuprof/analysis/tables.h"
#include "gpuprof/io/kineto_import.h"
#include "trace_builders.h"

namespace gpuprof {
namespace {

constexpr const char* kNext = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__";

Event& stage(Trace& t, const char* name, int64_t start, int64_t end, int worker, uint32_t pid, uint64_t batch) {
  Event& e = t.add(EventKind::InputStage, name, start, end - start);
  e.device = static_cast<int16_t>(worker);
  e.tid = pid;
  e.external_id = batch;
  return e;
}

Event& host(Trace& t, EventKind kind, const char* name, int64_t start, int64_t end, uint32_t tid = 1) {
  Event& e = t.add(kind, name, start, end - start);
  e.tid = tid;
  return e;
}

Event& htod(Trace& t, int64_t start, int64_t end, uint64_t correlation) {
  Event& e = t.add(EventKind::Memcpy, "Memcpy HtoD (Pinned -> Device)", start, end - start);
  e.correlation = correlation;
  e.device = 0;
  e.tid = 7;
  CopyInfo c;
  c.kind = CopyKind::HtoD;
  c.src = MemoryKind::Pinned;
  c.dst = MemoryKind::Device;
  c.bytes = 1 << 20;
  e.aux = static_cast<uint32_t>(t.copies.size());
  t.copies.push_back(c);
  return e;
}

TEST(InputStages, CountInNoCategoryAndDoNotStretchTheSteps) {
  // One step [0, 100) with 10 of CPU work; a worker loads a batch over the whole step and the next
  // one after it: the step keeps its 100, its CPU Exec its 10, the rest is Other (the workers'
  // time is not the step's, the loop's wait for it is the DataLoader range).
  Trace t;
  host(t, EventKind::StepMarker, "ProfilerStep#1", 0, 100);
  host(t, EventKind::HostOp, "aten::mm", 10, 20);
  stage(t, "DataLoader load", 0, 100, 0, 4242, 1);
  stage(t, "DataLoader load", 100, 500, 0, 4242, 2);
  const BreakdownResult r = compute_breakdown(t);
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_EQ(r.steps[0].total_ns(), 100);
  EXPECT_EQ(r.steps[0].ns[int(Category::CpuExec)], 10);
  EXPECT_EQ(r.steps[0].ns[int(Category::Other)], 90);
  EXPECT_EQ(r.steps[0].ns[int(Category::DataLoader)], 0);

  // Without step markers the host span is the whole step: the workers' batches do not widen it.
  Trace u;
  host(u, EventKind::HostOp, "aten::mm", 10, 20);
  stage(u, "DataLoader load", 0, 500, 1, 4243, 1);
  const BreakdownResult s = compute_breakdown(u);
  ASSERT_EQ(s.steps.size(), 1u);
  EXPECT_EQ(s.steps[0].start_ns, 10);
  EXPECT_EQ(s.steps[0].end_ns, 20);
}

TEST(InputStages, HaveALanePerWorkerInTheTimeline) {
  Trace t;
  host(t, EventKind::HostOp, "aten::mm", 10, 20, 1);
  stage(t, "DataLoader load", 5, 50, 1, 4242, 1);
  stage(t, "DataLoader transform", 50, 80, 1, 4242, 1);
  stage(t, "DataLoader pin_memory", 30, 40, -1, 9, 0);   // the main process's pin-memory thread
  const StepTimeline tl = step_timeline(t, 0, 100, 100);
  ASSERT_EQ(tl.events.size(), 4u);
  std::vector<std::string> lanes = tl.lanes;
  EXPECT_EQ(lanes, (std::vector<std::string>{"DataLoader worker 1 (pid 4242)", "host thread 1", "host thread 9"}));
  for (const TimelineEvent& e : tl.events)
    if (e.kind == EventKind::InputStage) EXPECT_EQ(e.category, Category::DataLoader);
}

TEST(InputStages, AreAProcessPerWorkerInTheChromeTraceAndComeBack) {
  Trace t;
  t.metadata["pid"] = "100";
  host(t, EventKind::StepMarker, "ProfilerStep#1", 0, 1000, 100);
  stage(t, "DataLoader load", 10, 400, 2, 777, 3);
  stage(t, "DataLoader collate", 400, 450, 2, 777, 3);
  stage(t, "DataLoader pin_memory", 500, 520, -1, 101, 0);
  const std::string json = export_chrome_json(t);
  EXPECT_NE(json.find(R"("name":"process_name","ph":"M","pid":777,"tid":0,"args":{"name":"DataLoader worker 2"})"),
            std::string::npos);
  EXPECT_NE(json.find(R"("cat":"gpuprof_input","name":"DataLoader load","pid":777,"tid":777)"), std::string::npos);
  EXPECT_NE(json.find(R"("args":{"worker":2,"batch":3})"), std::string::npos);
  // The pin-memory thread is the main process's.
  EXPECT_NE(json.find(R"("name":"DataLoader pin_memory","pid":100,"tid":101)"), std::string::npos);

  const Trace again = import_kineto_json(json, "again.json");
  int stages = 0;
  for (const Event& e : again.events) {
    if (e.kind != EventKind::InputStage) continue;
    ++stages;
    if (again.name_of(e) == "DataLoader load") {
      EXPECT_EQ(e.device, 2);
      EXPECT_EQ(e.tid, 777u);
      EXPECT_EQ(e.external_id, 3u);
      EXPECT_EQ(e.start_ns, 10);
      EXPECT_EQ(e.dur_ns, 390);
    }
    if (again.name_of(e) == "DataLoader pin_memory") EXPECT_EQ(e.device, -1);
  }
  EXPECT_EQ(stages, 3);
  EXPECT_EQ(again.metadata.at("pid"), "100");   // the host process is the loop's, not a worker's
}

TEST(BatchTransfers, AreTheCopyOpsRightAfterTheBatchArrives) {
  // Step [0, 1000): the loop waits in the DataLoader [10, 100), copies x [110, 150) and y [150, 170)
  // (each launching a host-to-device copy), then runs the model from 180; a later .to() [400, 410)
  // is the model's, not the batch's. The copies run [200, 300) and [300, 350) on the device,
  // beside a kernel [250, 320): 50 + 20 of their 150 overlap compute. A runtime call of no
  // operator [102, 105) and CUPTI's own overhead [105, 108) between the batch's arrival and its
  // copy (as seen on an H200) do not end the walk.
  Trace t;
  host(t, EventKind::StepMarker, "ProfilerStep#1", 0, 1000);
  host(t, EventKind::UserRange, kNext, 10, 100);
  host(t, EventKind::Runtime, "cudaEventRecordWithFlags", 102, 105);
  host(t, EventKind::Overhead, "CUPTI buffer request", 105, 108);
  host(t, EventKind::HostOp, "aten::to", 110, 150);
  host(t, EventKind::HostOp, "aten::_to_copy", 112, 148);
  host(t, EventKind::Runtime, "cudaMemcpyAsync", 120, 130).correlation = 5;
  host(t, EventKind::HostOp, "aten::to", 150, 170);
  host(t, EventKind::Runtime, "cudaMemcpyAsync", 155, 160).correlation = 6;
  host(t, EventKind::HostOp, "aten::conv2d", 180, 300);
  host(t, EventKind::HostOp, "aten::to", 400, 410);
  htod(t, 200, 300, 5);
  htod(t, 300, 350, 6);
  spec::add_kernel(t, "conv_kernel", 250, 320, 9, 16, -1);
  const std::vector<StepTransfer> r = batch_transfers(t, {{0, 1000}});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].batches, 1);
  EXPECT_EQ(r[0].copy_ops, 2);
  EXPECT_EQ(r[0].host_ns, 60);
  EXPECT_EQ(r[0].device_copies, 2);
  EXPECT_EQ(r[0].device_ns, 150);
  EXPECT_EQ(r[0].overlap_ns, 70);

  // Another thread's copies are not the loop's, and a step without a DataLoader range has none.
  Trace u;
  host(u, EventKind::UserRange, kNext, 10, 100, 1);
  host(u, EventKind::HostOp, "aten::to", 110, 150, 2);
  const std::vector<StepTransfer> v = batch_transfers(u, {{0, 1000}, {1000, 2000}});
  EXPECT_EQ(v[0].batches, 1);
  EXPECT_EQ(v[0].copy_ops, 0);
  EXPECT_EQ(v[1].batches, 0);
}

}  // namespace
}  // namespace gpuprof
