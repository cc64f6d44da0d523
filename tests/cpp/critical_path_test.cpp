// Specifications of the critical path (docs/metrics.md, "Critical path"): hand-built steps whose
// chain is known. Times in microseconds; each test writes the chain out from the step's end back to
// its start, each piece with its cause and the reason the walk took it.
#include <gtest/gtest.h>

#include <iterator>
#include <string>

#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/chrome_export.h"
#include "gpuprof/analysis/critical_path.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/io/kineto_import.h"

using namespace gpuprof;

namespace {

constexpr int64_t us = 1000;
constexpr int CPU = int(PathCause::CpuBound), DL = int(PathCause::DataLoading),
              GPU = int(PathCause::GpuComputeBound), COMM = int(PathCause::GpuCommunicationBound),
              KK = int(PathCause::GpuKernelKernelOverhead), LAUNCH = int(PathCause::GpuKernelLaunchOverhead);

const char* kDataLoader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__";

// Host events on thread 1; device activities on device 0, stream 7.
Event& host(Trace& t, EventKind kind, const char* name, int64_t start, int64_t end) {
  Event& e = t.add(kind, name, start * us, (end - start) * us);
  e.tid = 1;
  return e;
}
void op(Trace& t, const char* name, int64_t start, int64_t end) { host(t, EventKind::HostOp, name, start, end); }
void launch(Trace& t, const char* call, uint64_t corr, int64_t start, int64_t end, EventKind kind,
            const char* name, int64_t dstart, int64_t dend) {
  host(t, EventKind::Runtime, call, start, end).correlation = corr;
  Event& d = t.add(kind, name, dstart * us, (dend - dstart) * us);
  d.correlation = corr;
  d.device = 0;
  d.tid = 7;
}

StepCriticalPath only_path(const Trace& t) {
  const BreakdownResult steps = compute_breakdown(t);
  EXPECT_EQ(steps.steps.size(), 1u);
  const std::vector<StepCriticalPath> paths = critical_paths(t, link_launches(t), steps);
  EXPECT_EQ(paths.size(), 1u);
  if (paths.empty()) return {};
  const StepCriticalPath& p = paths[0];
  // The chain covers the step: its pieces meet end to start, and the causes add up to its length.
  int64_t total = 0;
  for (int64_t v : p.ns) total += v;
  EXPECT_EQ(total, p.length_ns());
  EXPECT_EQ(p.length_ns(), steps.steps[0].total_ns());
  for (size_t k = 1; k < p.segments.size(); ++k) EXPECT_EQ(p.segments[k - 1].end_ns, p.segments[k].start_ns);
  if (!p.segments.empty()) {
    EXPECT_EQ(p.segments.front().start_ns, p.start_ns);
    EXPECT_EQ(p.segments.back().end_ns, p.end_ns);
  }
  return p;
}

void expect_top(const Trace& t, const StepCriticalPath& p,
                const std::vector<std::pair<std::string, int64_t>>& want) {
  ASSERT_EQ(p.top.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(t.strings.at(p.top[k].name), want[k].first) << k;
    EXPECT_EQ(p.top[k].ns, want[k].second * us) << k;
  }
}

}  // namespace

TEST(CriticalPath, KernelBoundStepRunsThroughTheKernels) {
  Trace t;
  host(t, EventKind::StepMarker, "ProfilerStep#1", 0, 500);
  op(t, "aten::mm", 10, 40);
  launch(t, "cudaLaunchKernel", 1, 20, 25, EventKind::Kernel, "volta_sgemm", 30, 230);
  op(t, "aten::mm", 40, 60);
  launch(t, "cudaLaunchKernel", 2, 45, 50, EventKind::Kernel, "volta_sgemm", 232, 432);
  op(t, "aten::item", 70, 440);   // loss.item(): a copy to the host, then a wait for it
  launch(t, "cudaMemcpyAsync", 3, 75, 80, EventKind::Memcpy, "Memcpy DtoH", 433, 435);
  host(t, EventKind::Runtime, "cudaStreamSynchronize", 80, 438);
  const StepCriticalPath p = only_path(t);
  // From the end (500) back:
  //   [440, 500) the host after aten::item, between operators            cpu_bound 60
  //   [438, 440) aten::item after its synchronisation returned            cpu_bound  2
  //   [435, 438) cudaStreamSynchronize after the copy it waited on ended  cpu_bound  3
  //   [433, 435) the copy                                                  gpu_compute 2
  //   [432, 433) queued behind the second GEMM (launched at 75, long before) kernel-kernel 1
  //   [232, 432) the second GEMM                                           gpu_compute 200
  //   [230, 232) queued behind the first (launched at 45)                  kernel-kernel 2
  //   [30, 230)  the first GEMM                                            gpu_compute 200
  //   [20, 30)   its launch onto an idle stream: call start -> kernel start launch 10
  //   [10, 20)   the first aten::mm before the call                       cpu_bound 10
  //   [0, 10)    the host before it                                        cpu_bound 10
  EXPECT_EQ(p.ns[CPU], 85 * us);
  EXPECT_EQ(p.ns[GPU], 402 * us);
  EXPECT_EQ(p.ns[KK], 3 * us);
  EXPECT_EQ(p.ns[LAUNCH], 10 * us);
  EXPECT_EQ(p.ns[DL] + p.ns[COMM], 0);
  EXPECT_EQ(p.segments.size(), 11u);
  EXPECT_EQ(p.launch_calls_ns, 0);   // no launch call's own time is on the chain
  // Both GEMMs share a name; "Memcpy DtoH" before "aten::item" at 2 us each (by name).
  expect_top(t, p,
             {{"volta_sgemm", 400},
              {"aten::mm", 10},
              {"cudaStreamSynchronize", 3},
              {"Memcpy DtoH", 2},
              {"aten::item", 2}});
}

TEST(CriticalPath, LaunchBoundStepRunsThroughTheLaunchCalls) {
  Trace t;
  host(t, EventKind::StepMarker, "ProfilerStep#1", 0, 100);
  // Three tiny kernels, each launched after the one before has ended: the device waits on the host.
  op(t, "aten::add", 0, 30);
  launch(t, "cudaLaunchKernel", 1, 2, 27, EventKind::Kernel, "add_kernel", 28, 30);
  op(t, "aten::add", 30, 60);
  launch(t, "cudaLaunchKernel", 2, 32, 57, EventKind::Kernel, "add_kernel", 58, 60);
  op(t, "aten::add", 60, 89);
  launch(t, "cudaLaunchKernel", 3, 62, 87, EventKind::Kernel, "add_kernel", 88, 91);
  host(t, EventKind::Runtime, "cudaDeviceSynchronize", 89, 95);
  const StepCriticalPath p = only_path(t);
  //   [95, 100) the host after the synchronisation                           cpu_bound 5
  //   [91, 95)  cudaDeviceSynchronize after the third kernel ended            cpu_bound 4
  //   [88, 91)  the third kernel                                              gpu_compute 3
  //   [62, 88)  its launch (the stream idle since 60, the call from 62)       launch 26
  //   [60, 62)  the third aten::add before its call                           cpu_bound 2
  //   [57, 60)  the second aten::add after its call (the walk stays on the host:
  //             the second kernel ended before the third was launched)        cpu_bound 3
  //   [32, 57)  the second cudaLaunchKernel                                   cpu_bound 25
  //   [30, 32), [27, 30), [2, 27), [0, 2): the same for the first             cpu_bound 2+3+25+2
  EXPECT_EQ(p.ns[CPU], 71 * us);
  EXPECT_EQ(p.ns[GPU], 3 * us);
  EXPECT_EQ(p.ns[LAUNCH], 26 * us);
  EXPECT_EQ(p.ns[KK] + p.ns[DL] + p.ns[COMM], 0);
  EXPECT_EQ(p.launch_calls_ns, 50 * us);   // launching: 50 + 26 of the 100 us
  expect_top(t, p, {{"cudaLaunchKernel", 50}, {"aten::add", 12}, {"cudaDeviceSynchronize", 4}, {"add_kernel", 3}});
}

// The launch-bound step above, whose chain is known piece by piece.
Trace launch_bound_step() {
  Trace t;
  host(t, EventKind::StepMarker, "ProfilerStep#1", 0, 100);
  op(t, "aten::add", 0, 30);
  launch(t, "cudaLaunchKernel", 1, 2, 27, EventKind::Kernel, "add_kernel", 28, 30);
  op(t, "aten::add", 30, 60);
  launch(t, "cudaLaunchKernel", 2, 32, 57, EventKind::Kernel, "add_kernel", 58, 60);
  op(t, "aten::add", 60, 89);
  launch(t, "cudaLaunchKernel", 3, 62, 87, EventKind::Kernel, "add_kernel", 88, 91);
  host(t, EventKind::Runtime, "cudaDeviceSynchronize", 89, 95);
  return t;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

TEST(CriticalPath, PiecesMergeRunsOfTheSameCauseAndName) {
  const Trace t = launch_bound_step();
  const PathPieces got = path_pieces(t, only_path(t));
  // The 11 segments as 9 pieces: the end of one aten::add and the start of the next (another call
  // of the same operator on the same thread, both cpu_bound) are one piece, twice.
  struct Want {
    int64_t start, end;
    int cause;
    const char* name;
    const char* place;
  };
  const Want want[] = {
      {0, 2, CPU, "aten::add", "host thread 1"},     {2, 27, CPU, "cudaLaunchKernel", "host thread 1"},
      {27, 32, CPU, "aten::add", "host thread 1"},   {32, 57, CPU, "cudaLaunchKernel", "host thread 1"},
      {57, 62, CPU, "aten::add", "host thread 1"},   {62, 88, LAUNCH, "launch overhead", ""},
      {88, 91, GPU, "add_kernel", "GPU 0 stream 7"}, {91, 95, CPU, "cudaDeviceSynchronize", "host thread 1"},
      {95, 100, CPU, "host between operators", ""},
  };
  ASSERT_EQ(got.pieces.size(), std::size(want));
  for (size_t k = 0; k < std::size(want); ++k) {
    const PathPiece& g = got.pieces[k];
    EXPECT_EQ(g.start_ns, want[k].start * us) << k;
    EXPECT_EQ(g.end_ns, want[k].end * us) << k;
    EXPECT_EQ(int(g.cause), want[k].cause) << k;
    EXPECT_EQ(path_piece_name(t, g), want[k].name) << k;
    EXPECT_EQ(path_piece_place(t, g), want[k].place) << k;
  }
  EXPECT_EQ(got.merged, 2u);
  EXPECT_EQ(got.cut, 0u);
  EXPECT_EQ(got.cut_ns, 0);
}

TEST(CriticalPath, PiecesPastTheBoundLeaveOutTheShortest) {
  const Trace t = launch_bound_step();
  const PathPieces got = path_pieces(t, only_path(t), 4);
  // Kept: the 26, 25 and 25 us pieces and the first of the 5 us ones (ties: the earlier), in time
  // order; left out: 2 + 5 + 3 + 4 + 5 us in five pieces.
  ASSERT_EQ(got.pieces.size(), 4u);
  const int64_t starts[] = {2, 27, 32, 62};
  for (size_t k = 0; k < 4; ++k) EXPECT_EQ(got.pieces[k].start_ns, starts[k] * us) << k;
  EXPECT_EQ(got.cut, 5u);
  EXPECT_EQ(got.cut_ns, 19 * us);
  int64_t kept = 0;
  for (const PathPiece& g : got.pieces) kept += g.end_ns - g.start_ns;
  EXPECT_EQ(kept + got.cut_ns, 100 * us);
}

TEST(CriticalPath, ChromeExportHasATrackOfThePieces) {
  const Trace t = launch_bound_step();
  const std::string json = export_chrome_json(t);
  // A process of its own, sorted first, named; one complete event per piece.
  EXPECT_EQ(count_of(json, R"("name":"process_name","ph":"M","pid":"Critical path","tid":"steps",)"
                           R"("args":{"name":"Critical path"})"),
            1u);
  EXPECT_EQ(count_of(json, R"("name":"process_sort_index","ph":"M","pid":"Critical path")"), 1u);
  EXPECT_EQ(count_of(json, R"("name":"thread_name","ph":"M","pid":"Critical path","tid":"steps")"), 1u);
  EXPECT_EQ(count_of(json, R"("cat":"gpuprof_critical_path")"), 9u);
  EXPECT_EQ(count_of(json, R"("cat":"gpuprof_critical_path","name":"gpu_kernel_launch_overhead: launch overhead",)"
                           R"("pid":"Critical path","tid":"steps","ts":62.000,"dur":26.000,)"
                           R"("args":{"cause":"gpu_kernel_launch_overhead","step":1}})"),
            1u);
  EXPECT_EQ(count_of(json, R"("name":"gpu_compute_bound: add_kernel","pid":"Critical path","tid":"steps",)"
                           R"("ts":88.000,"dur":3.000,"args":{"cause":"gpu_compute_bound","step":1,)"
                           R"("where":"GPU 0 stream 7"}})"),
            1u);
  // The step's first piece says how it was bounded.
  EXPECT_EQ(count_of(json, R"("step pieces":9,"merged":2,"cut":0,"cut us":0.000})"), 1u);
  // The importer does not take the track for work: the trace reads back with its own events only.
  ImportStats stats;
  const Trace back = import_kineto_json(json, "critical_path.json", {}, &stats);
  EXPECT_EQ(back.events.size(), t.events.size());
}

TEST(CriticalPath, StepHeldByTheDataLoader) {
  Trace t;
  host(t, EventKind::StepMarker, "ProfilerStep#1", 0, 1000);
  host(t, EventKind::UserRange, kDataLoader, 5, 805);
  op(t, "aten::stack", 700, 800);   // collating the batch in the main process, inside the wait
  op(t, "aten::mm", 810, 830);
  launch(t, "cudaLaunchKernel", 1, 815, 820, EventKind::Kernel, "volta_sgemm", 822, 922);
  host(t, EventKind::Runtime, "cudaStreamSynchronize", 830, 925);
  const StepCriticalPath p = only_path(t);
  //   [925, 1000) the host after the synchronisation               cpu_bound 75
  //   [922, 925)  cudaStreamSynchronize after the GEMM ended        cpu_bound 3
  //   [822, 922)  the GEMM                                          gpu_compute 100
  //   [815, 822)  its launch onto an idle stream                    launch 7
  //   [810, 815)  aten::mm before the call                          cpu_bound 5
  //   [805, 810)  the host between the batch and aten::mm           cpu_bound 5
  //   [800, 805), [700, 800), [5, 700) the DataLoader's range and aten::stack inside it: data_loading 800
  //   [0, 5)      the host before it                                cpu_bound 5
  EXPECT_EQ(p.ns[DL], 800 * us);
  EXPECT_EQ(p.ns[CPU], 93 * us);
  EXPECT_EQ(p.ns[GPU], 100 * us);
  EXPECT_EQ(p.ns[LAUNCH], 7 * us);
  expect_top(t, p,
             {{kDataLoader, 700},
              {"aten::stack", 100},
              {"volta_sgemm", 100},
              {"aten::mm", 5},
              {"cudaStreamSynchronize", 3}});
}

TEST(CriticalPath, StepThatEndsOnTheDeviceStartsThereAndCountsCommunication) {
  Trace t;
  host(t, EventKind::StepMarker, "ProfilerStep#1", 0, 50);
  op(t, "aten::mm", 0, 20);
  launch(t, "cudaLaunchKernel", 1, 5, 10, EventKind::Kernel, "volta_sgemm", 12, 112);
  op(t, "c10d::allreduce_", 20, 40);
  launch(t, "cudaLaunchKernel", 2, 25, 30, EventKind::Kernel, "ncclDevKernel_AllReduce_Sum_f32", 113, 213);
  const StepCriticalPath p = only_path(t);
  // The device's work outlasts the host's step (50): the step ends at 213, with the all-reduce.
  //   [113, 213) the all-reduce kernel                      gpu_communication 100
  //   [112, 113) queued behind the GEMM                     kernel-kernel 1
  //   [12, 112)  the GEMM                                   gpu_compute 100
  //   [5, 12)    its launch                                 launch 7
  //   [0, 5)     aten::mm before the call                   cpu_bound 5
  EXPECT_EQ(p.length_ns(), 213 * us);
  EXPECT_EQ(p.ns[COMM], 100 * us);
  EXPECT_EQ(p.ns[GPU], 100 * us);
  EXPECT_EQ(p.ns[KK], 1 * us);
  EXPECT_EQ(p.ns[LAUNCH], 7 * us);
  EXPECT_EQ(p.ns[CPU], 5 * us);
}

TEST(CriticalPath, LongGapOnAStreamFollowsTheOtherStreamItWaitedOn) {
  Trace t;
  host(t, EventKind::StepMarker, "ProfilerStep#1", 0, 20);
  op(t, "aten::mm", 0, 20);
  launch(t, "cudaLaunchKernel", 1, 2, 4, EventKind::Kernel, "producer", 5, 3005);
  t.events.back().tid = 8;   // on stream 8
  launch(t, "cudaLaunchKernel", 2, 6, 8, EventKind::Kernel, "early", 10, 15);
  launch(t, "cudaLaunchKernel", 3, 9, 11, EventKind::Kernel, "consumer", 3006, 3106);
  const StepCriticalPath p = only_path(t);
  // "consumer" was launched at 9 while "early" ran, yet started 2991 us after it ended: past the
  // 1.5 ms threshold, so the wait is on the activity that ended last on another stream of the
  // device before it started ("producer", a cross-stream event wait).
  //   [3006, 3106) consumer                      gpu_compute 100
  //   [3005, 3006) behind producer               kernel-kernel 1
  //   [5, 3005)    producer                      gpu_compute 3000
  //   [2, 5)       its launch                    launch 3
  //   [0, 2)       aten::mm                      cpu_bound 2
  EXPECT_EQ(p.ns[GPU], 3100 * us);
  EXPECT_EQ(p.ns[KK], 1 * us);
  EXPECT_EQ(p.ns[LAUNCH], 3 * us);
  EXPECT_EQ(p.ns[CPU], 2 * us);
}

TEST(CriticalPath, NoStepsNoPaths) {
  Trace t;
  EXPECT_TRUE(critical_paths(t, link_launches(t), compute_breakdown(t)).empty());
}
