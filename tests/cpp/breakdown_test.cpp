// Specifications of the step rules and the priority sweep (docs/breakdown.md).
// Times are plain nanoseconds on a hand-built timeline; every expected number is worked out beside it.
#include <gtest/gtest.h>

#include <random>

#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/intervals.h"

using namespace gpuprof;

namespace {

constexpr int K = int(Category::Kernel), MC = int(Category::Memcpy), MS = int(Category::Memset),
              CO = int(Category::Communication), RT = int(Category::Runtime), DL = int(Category::DataLoader),
              CPU = int(Category::CpuExec), OT = int(Category::Other);

const char* kDataLoader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__";

void step(Trace& t, int n, int64_t start, int64_t end) {
  t.add(EventKind::StepMarker, "ProfilerStep#" + std::to_string(n), start, end - start);
}
void host(Trace& t, const char* name, int64_t start, int64_t end) {
  t.add(EventKind::HostOp, name, start, end - start);
}
// A runtime call at [start, end) that launches `kind` on the device at [dstart, dend).
void launch(Trace& t, uint64_t corr, int64_t start, int64_t end, EventKind kind, int64_t dstart, int64_t dend,
            const char* kernel = "volta_sgemm_128x64_nn") {
  t.add(EventKind::Runtime, kind == EventKind::Kernel ? "cudaLaunchKernel" : "cudaMemcpyAsync", start, end - start)
      .correlation = corr;
  const char* name = kind == EventKind::Kernel   ? kernel
                     : kind == EventKind::Memcpy ? "Memcpy HtoD (Pageable -> Device)"
                                                 : "Memset (Device)";
  Event& d = t.add(kind, name, dstart, dend - dstart);
  d.correlation = corr;
  d.device = 0;
}

int64_t sum(const StepBreakdown& s) {
  int64_t total = 0;
  for (int64_t v : s.ns) total += v;
  return total;
}

}  // namespace

TEST(Intervals, MergeSubtractUnite) {
  IntervalList v = {{5, 8}, {0, 3}, {2, 4}, {8, 9}, {7, 7}};
  merge_intervals(v);   // [0,4) and [5,9): touching [5,8)+[8,9) merge; the empty [7,7) goes
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].start, 0);
  EXPECT_EQ(v[0].end, 4);
  EXPECT_EQ(v[1].start, 5);
  EXPECT_EQ(v[1].end, 9);
  EXPECT_EQ(total_length(v), 8);
  EXPECT_EQ(length_within(v, 3, 6), 2);   // [3,4) + [5,6)
  IntervalList d = subtract(v, {{1, 2}, {3, 6}});   // [0,1) [2,3) [6,9)
  EXPECT_EQ(total_length(d), 5);
  EXPECT_EQ(d.size(), 3u);
  IntervalList u = unite(v, {{4, 5}, {20, 30}});   // [0,9) [20,30)
  EXPECT_EQ(u.size(), 2u);
  EXPECT_EQ(total_length(u), 19);
  // Already in order (the pass that skips the sort), with equal starts and an empty one: the same
  // merge as any order gives: [0,4) [5,9).
  IntervalList sorted = {{0, 3}, {0, 4}, {2, 3}, {5, 5}, {5, 8}, {8, 9}};
  merge_intervals(sorted);
  ASSERT_EQ(sorted.size(), 2u);
  EXPECT_EQ(sorted[0].end, 4);
  EXPECT_EQ(sorted[1].start, 5);
  EXPECT_EQ(sorted[1].end, 9);
}

// One step [0, 100) where every category overlaps another.
//   Runtime  [5,8) [8,9) [9,10)  launching  Kernel [10,30), Memcpy [25,40), Memset [38,45)
//   nccl:all_reduce [50,60); DataLoader [0,20); aten::mm [60,80), aten::add [70,90)
// Priority sweep:
//   Kernel        [10,30)                                  = 20
//   Memcpy        [25,40) - [10,30)        = [30,40)       = 10
//   Memset        [38,45) - [10,40)        = [40,45)       =  5
//   Communication [50,60)                                  = 10
//   Runtime       [5,10)  - taken          = [5,10)        =  5
//   DataLoader    [0,20)  - [5,45)         = [0,5)         =  5
//   CPU Exec      [60,90) - [50,60)        = [60,90)       = 30
//   Other         [45,50) + [90,100)                       = 15   (100 - 85)
TEST(Breakdown, AllCategoriesOverlapping) {
  Trace t;
  step(t, 1, 0, 100);
  launch(t, 1, 5, 8, EventKind::Kernel, 10, 30);
  launch(t, 2, 8, 9, EventKind::Memcpy, 25, 40);
  launch(t, 3, 9, 10, EventKind::Memset, 38, 45);
  host(t, "nccl:all_reduce", 50, 60);
  host(t, kDataLoader, 0, 20);
  host(t, "aten::mm", 60, 80);
  host(t, "aten::add", 70, 90);

  BreakdownResult r = compute_breakdown(t);
  ASSERT_EQ(r.steps.size(), 1u);
  const StepBreakdown& s = r.steps[0];
  EXPECT_TRUE(r.had_step_markers);
  EXPECT_EQ(s.step, 1);
  EXPECT_EQ(s.start_ns, 0);
  EXPECT_EQ(s.end_ns, 100);
  EXPECT_EQ(s.ns[K], 20);
  EXPECT_EQ(s.ns[MC], 10);
  EXPECT_EQ(s.ns[MS], 5);
  EXPECT_EQ(s.ns[CO], 10);
  EXPECT_EQ(s.ns[RT], 5);
  EXPECT_EQ(s.ns[DL], 5);
  EXPECT_EQ(s.ns[CPU], 30);
  EXPECT_EQ(s.ns[OT], 15);
  EXPECT_EQ(sum(s), s.total_ns());
}

// No ProfilerStep#: the whole host span [100, 300) is one step (number 0).
//   aten::conv2d [100,150), aten::relu [200,300): CPU Exec 50 + 100 = 150, Other the gap 50.
TEST(Breakdown, NoStepMarkersIsOneStep) {
  Trace t;
  host(t, "aten::conv2d", 100, 150);
  host(t, "aten::relu", 200, 300);
  BreakdownResult r = compute_breakdown(t);
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_FALSE(r.had_step_markers);
  EXPECT_EQ(r.steps[0].step, 0);
  EXPECT_EQ(r.steps[0].start_ns, 100);
  EXPECT_EQ(r.steps[0].end_ns, 300);
  EXPECT_EQ(r.steps[0].ns[CPU], 150);
  EXPECT_EQ(r.steps[0].ns[OT], 50);
}

TEST(Breakdown, EmptyTraceHasNoSteps) {
  Trace t;
  EXPECT_TRUE(compute_breakdown(t).steps.empty());
}

// Device work runs past the host range of its step.
//   host steps #1 [0,100)  #2 [100,200)  #3 [200,300)
//   #1 launches at [10,12) a kernel [50,130)   -> device end 130
//   #2 launches at [110,112) a kernel [130,180) -> device end 180
//   #3 launches at [210,212) a kernel [250,320) -> device end 320
// Boundaries (start = max(prev end, host start), end = max(host end, device end)):
//   #1 [0,130)   #2 [max(130,100), max(200,180)) = [130,200)   #3 [max(200,200), max(300,320)) = [200,320)
// Breakdown:
//   #1 Kernel [50,130) = 80, Runtime [10,12) = 2, Other 130 - 82 = 48
//   #2 Kernel [130,180) = 50; its runtime call [110,112) lies before the step's start: 0; Other 20
//   #3 Kernel [250,320) = 70, Runtime 2, Other 120 - 72 = 48
TEST(Breakdown, DeviceWorkPastHostStep) {
  Trace t;
  step(t, 1, 0, 100);
  step(t, 2, 100, 200);
  step(t, 3, 200, 300);
  launch(t, 1, 10, 12, EventKind::Kernel, 50, 130);
  launch(t, 2, 110, 112, EventKind::Kernel, 130, 180);
  launch(t, 3, 210, 212, EventKind::Kernel, 250, 320);
  BreakdownResult r = compute_breakdown(t);
  ASSERT_EQ(r.steps.size(), 3u);
  const auto& a = r.steps[0];
  const auto& b = r.steps[1];
  const auto& c = r.steps[2];
  EXPECT_EQ(a.start_ns, 0);
  EXPECT_EQ(a.end_ns, 130);
  EXPECT_EQ(b.start_ns, 130);
  EXPECT_EQ(b.end_ns, 200);
  EXPECT_EQ(c.start_ns, 200);
  EXPECT_EQ(c.end_ns, 320);
  EXPECT_EQ(a.ns[K], 80);
  EXPECT_EQ(a.ns[RT], 2);
  EXPECT_EQ(a.ns[OT], 48);
  EXPECT_EQ(b.ns[K], 50);
  EXPECT_EQ(b.ns[RT], 0);
  EXPECT_EQ(b.ns[OT], 20);
  EXPECT_EQ(c.ns[K], 70);
  EXPECT_EQ(c.ns[RT], 2);
  EXPECT_EQ(c.ns[OT], 48);
  for (const auto& s : r.steps) EXPECT_EQ(sum(s), s.total_ns());
}

// The first step starts where device work left over from before it ends, as the plugin's own test
// of two overlapping steps has it (test_multiple_profilersteps_with_overlap, same numbers):
//   #1 host [100,300): aten::to [200,260) whose cudaMemcpyAsync [250,255) copies at [280,380)
//   #2 host [350,500): aten::mm [360,410) whose cudaLaunchKernel [400,405) runs a kernel [410,610)
//   a kernel [150,240) launched before the trace (no runtime call): in no step.
// That kernel runs into step #1's host range and ends (240) before #1's own device work starts
// (280), so #1 starts at 240, not 100: a step's time is its own work, not the tail of earlier work.
//   #1 [240,380) = 140: Memcpy 100, Runtime 5, CPU Exec [240,260) - [250,255) = 15, Kernel 0,
//                       Other 140 - 120 = 20
//   #2 [380,610) = 230: Kernel 200, Runtime 5, CPU Exec [380,410) - [400,405) = 25, Other 0
// Starting #1 at its host start gave it 280 with the earlier kernel's 90 as Kernel.
// Leftover work that ends after the step's own device work has begun is not moved past: there the
// step starts at its host start (the second timeline).
TEST(Breakdown, FirstStepStartsAfterDeviceWorkLeftFromBefore) {
  Trace t;
  step(t, 1, 100, 300);
  step(t, 2, 350, 500);
  host(t, "aten::to", 200, 260);
  host(t, "aten::mm", 360, 410);
  Event& early = t.add(EventKind::Kernel, "volta_sgemm_128x64_nn", 150, 90);
  early.correlation = 123;
  early.device = 0;
  launch(t, 334, 250, 255, EventKind::Memcpy, 280, 380);
  launch(t, 40348, 400, 405, EventKind::Kernel, 410, 610);
  BreakdownResult r = compute_breakdown(t);
  ASSERT_EQ(r.steps.size(), 2u);
  const auto& a = r.steps[0];
  const auto& b = r.steps[1];
  EXPECT_EQ(a.start_ns, 240);
  EXPECT_EQ(a.end_ns, 380);
  EXPECT_EQ(a.total_ns(), 140);
  EXPECT_EQ(a.ns[K], 0);
  EXPECT_EQ(a.ns[MC], 100);
  EXPECT_EQ(a.ns[RT], 5);
  EXPECT_EQ(a.ns[CPU], 15);
  EXPECT_EQ(a.ns[OT], 20);
  EXPECT_EQ(b.start_ns, 380);
  EXPECT_EQ(b.total_ns(), 230);
  EXPECT_EQ(b.ns[K], 200);
  EXPECT_EQ(b.ns[RT], 5);
  EXPECT_EQ(b.ns[CPU], 25);
  EXPECT_EQ(b.ns[OT], 0);
  for (const auto& s : r.steps) EXPECT_EQ(sum(s), s.total_ns());

  // The earlier kernel now runs to 290, past the copy's start at 280: step #1 keeps its host start.
  Trace u;
  step(u, 1, 100, 300);
  Event& late = u.add(EventKind::Kernel, "volta_sgemm_128x64_nn", 150, 140);
  late.correlation = 123;
  late.device = 0;
  launch(u, 334, 250, 255, EventKind::Memcpy, 280, 380);
  BreakdownResult ru = compute_breakdown(u);
  ASSERT_EQ(ru.steps.size(), 1u);
  EXPECT_EQ(ru.steps[0].start_ns, 100);
  EXPECT_EQ(ru.steps[0].end_ns, 380);
}

// Steps after the last one with device work are dropped (the profiler stopped before their kernels).
//   #1, #2 launch a kernel each; #3, #4 only run host ops.
TEST(Breakdown, TrailingStepsWithoutDeviceWorkDropped) {
  Trace t;
  for (int i = 0; i < 4; ++i) step(t, i + 1, i * 100, i * 100 + 100);
  launch(t, 1, 10, 12, EventKind::Kernel, 20, 40);
  launch(t, 2, 110, 112, EventKind::Kernel, 120, 140);
  host(t, "aten::add", 210, 250);
  host(t, "aten::add", 310, 350);
  BreakdownResult r = compute_breakdown(t);
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_EQ(r.steps[1].step, 2);
  EXPECT_EQ(r.dropped_trailing_steps, 2);
  EXPECT_FALSE(r.dropped_incomplete_last);
}

// The last step is dropped when it has fewer than 0.8 x the device activities of the one before:
//   10 kernels, 10 kernels, 7 kernels: 7 < 0.8 * 10 = 8 -> step #3 dropped.
//   With 8 kernels in #3: 8 < 8 is false -> kept.
TEST(Breakdown, IncompleteLastStepRule) {
  for (int last : {7, 8}) {
    Trace t;
    uint64_t corr = 1;
    const int counts[3] = {10, 10, last};
    for (int i = 0; i < 3; ++i) {
      const int64_t base = i * 1000;
      step(t, i + 1, base, base + 1000);
      for (int k = 0; k < counts[i]; ++k)
        launch(t, corr++, base + k * 10, base + k * 10 + 5, EventKind::Kernel, base + 200 + k * 20,
               base + 210 + k * 20);
    }
    BreakdownResult r = compute_breakdown(t);
    if (last == 7) {
      EXPECT_EQ(r.steps.size(), 2u);
      EXPECT_TRUE(r.dropped_incomplete_last);
    } else {
      EXPECT_EQ(r.steps.size(), 3u);
      EXPECT_FALSE(r.dropped_incomplete_last);
    }
    // The option keeps it, for users who want every step.
    BreakdownOptions keep_all;
    keep_all.drop_incomplete_last_step = false;
    EXPECT_EQ(compute_breakdown(t, keep_all).steps.size(), 3u);
  }
}

// A CPU-only run keeps every step, even a trailing one with no work (no device work to wait for).
//   #1 [0,100): DataLoader [0,60), aten::mm [50,90) -> DataLoader 60, CPU Exec [60,90) = 30, Other 10
//   #2 [100,200): nothing -> Other 100
TEST(Breakdown, PureCpuKeepsAllSteps) {
  Trace t;
  step(t, 1, 0, 100);
  step(t, 2, 100, 200);
  host(t, kDataLoader, 0, 60);
  host(t, "aten::mm", 50, 90);
  BreakdownResult r = compute_breakdown(t);
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_EQ(r.steps[0].ns[DL], 60);
  EXPECT_EQ(r.steps[0].ns[CPU], 30);
  EXPECT_EQ(r.steps[0].ns[OT], 10);
  EXPECT_EQ(r.steps[1].ns[OT], 100);
  EXPECT_EQ(r.dropped_trailing_steps, 0);
}

// Five copies of one step's marker (a trace written twice over, prof.step() called twice) are one
// step over them all, not one step and four of 0 ns:
//   ProfilerStep#3 x5 over [0,100), [0,100), [10,100), [0,90), [0,100); #4 [100,200).
//   Step 3 = [0,100): aten::mm [20,80) = 60 CPU, 40 Other.
TEST(Breakdown, RepeatedStepMarkersAreOneStep) {
  Trace t;
  step(t, 3, 0, 100);
  step(t, 3, 0, 100);
  step(t, 3, 10, 100);
  step(t, 3, 0, 90);
  step(t, 3, 0, 100);
  step(t, 4, 100, 200);
  host(t, "aten::mm", 20, 80);
  BreakdownResult r = compute_breakdown(t);
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_EQ(r.steps[0].step, 3);
  EXPECT_EQ(r.steps[0].start_ns, 0);
  EXPECT_EQ(r.steps[0].end_ns, 100);
  EXPECT_EQ(r.steps[0].ns[CPU], 60);
  EXPECT_EQ(r.steps[0].ns[OT], 40);
  EXPECT_EQ(r.steps[1].step, 4);
  EXPECT_EQ(sum(r.steps[1]), 100);
  EXPECT_EQ(r.duplicate_step_markers, 5);
  EXPECT_EQ(r.nested_step_markers, 0);
}

// A step marker inside another step's range (a nested profiler's ProfilerStep#7 inside #1) is
// dropped and counted; a step that starts where the one before ends is not inside it.
//   #1 [0,100) holds #7 [20,40); #2 [100,200) follows.
TEST(Breakdown, NestedStepMarkerIsDropped) {
  Trace t;
  step(t, 1, 0, 100);
  step(t, 7, 20, 40);
  step(t, 2, 100, 200);
  BreakdownResult r = compute_breakdown(t);
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_EQ(r.steps[0].step, 1);
  EXPECT_EQ(r.steps[0].end_ns, 100);
  EXPECT_EQ(r.steps[1].step, 2);
  EXPECT_EQ(r.steps[1].start_ns, 100);
  EXPECT_EQ(r.nested_step_markers, 1);
  EXPECT_EQ(r.duplicate_step_markers, 0);
}

// A marker whose name holds no step number (ProfilerStep#abc) is a step all the same, numbered
// after the step before it, and counted with its name for the report; it used to be numbered by
// its position among the markers (here 1: a second "step 1" beside the real one).
//   #1 [0,100), #abc [100,200), #3 [200,300)  -> steps 1, 2, 3; one malformed marker.
//   #xyz [0,100) first, then #5 [100,200)      -> steps 4, 5.
TEST(Breakdown, MalformedStepNumbersAreCountedNotStepZero) {
  Trace t;
  step(t, 1, 0, 100);
  t.add(EventKind::StepMarker, "ProfilerStep#abc", 100, 100);
  step(t, 3, 200, 300);
  BreakdownResult r = compute_breakdown(t);
  ASSERT_EQ(r.steps.size(), 3u);
  EXPECT_EQ(r.steps[0].step, 1);
  EXPECT_EQ(r.steps[1].step, 2);
  EXPECT_EQ(r.steps[1].start_ns, 100);
  EXPECT_EQ(r.steps[2].step, 3);
  EXPECT_EQ(r.malformed_step_markers, 1);
  EXPECT_EQ(r.malformed_step_example, "ProfilerStep#abc");

  Trace u;
  u.add(EventKind::StepMarker, "ProfilerStep#xyz", 0, 100);
  step(u, 5, 100, 200);
  BreakdownResult q = compute_breakdown(u);
  ASSERT_EQ(q.steps.size(), 2u);
  EXPECT_EQ(q.steps[0].step, 4);
  EXPECT_EQ(q.steps[1].step, 5);
  EXPECT_EQ(q.malformed_step_markers, 1);
}

// A kernel that starts 1000 s after the runtime call that launched it (clock skew between the host
// and device records) would make its step 1000 s long; it is left out of the step boundaries and
// counted, as is one that starts 2 s before its launch. Kernels a few ms late are normal.
//   #1 [0, 10 ms), #2 [10 ms, 20 ms), #3 [20 ms, 30 ms); each step's cudaLaunchKernel at +1 ms;
//   #1's kernel runs [2 ms, 5 ms), #2's [11 ms + 1000 s, ...), #3's 2 s before its launch.
TEST(Breakdown, ClockSkewedKernelsDoNotStretchSteps) {
  constexpr int64_t ms = 1000 * 1000, s = 1000 * ms;
  Trace t;
  step(t, 1, 0, 10 * ms);
  step(t, 2, 10 * ms, 20 * ms);
  step(t, 3, 20 * ms, 30 * ms);
  launch(t, 1, 1 * ms, 1 * ms + 10, EventKind::Kernel, 2 * ms, 5 * ms);
  launch(t, 2, 11 * ms, 11 * ms + 10, EventKind::Kernel, 11 * ms + 1000 * s, 14 * ms + 1000 * s);
  launch(t, 3, 21 * ms, 21 * ms + 10, EventKind::Kernel, 21 * ms - 2 * s, 24 * ms - 2 * s);
  BreakdownResult r = compute_breakdown(t);
  ASSERT_EQ(r.steps.size(), 3u);   // skewed kernels still count as their steps' device work
  EXPECT_EQ(r.steps[1].end_ns, 20 * ms);   // was 1000.014 s
  EXPECT_EQ(r.steps[1].total_ns(), 10 * ms);
  EXPECT_EQ(r.skewed_device_events, 2);
  EXPECT_EQ(r.max_launch_skew_ns, 1000 * s);   // 11 ms + 1000 s - 11 ms
  EXPECT_EQ(r.steps[0].ns[K], 3 * ms);
}

// NCCL kernels count as Communication, not Kernel; driver calls are not Runtime (the plugin's rule)
// but still tie their kernels to a step.
//   #1 [0,100): cuLaunchKernel (driver) [5,10) -> ncclKernel_AllReduce [20,50)
//               cudaLaunchKernel [10,12) -> gemm [40,70)
//   Kernel [40,70) = 30; Communication [20,50) - [40,70) = [20,40) = 20; Runtime [10,12) = 2;
//   Other 100 - 52 = 48 (the driver call's [5,10) is Other).
TEST(Breakdown, CommunicationKernelsAndDriverCalls) {
  Trace t;
  step(t, 1, 0, 100);
  t.add(EventKind::Driver, "cuLaunchKernel", 5, 5).correlation = 7;
  Event& nccl = t.add(EventKind::Kernel, "ncclKernel_AllReduce_RING_LL_Sum_float", 20, 30);
  nccl.correlation = 7;
  launch(t, 8, 10, 12, EventKind::Kernel, 40, 70);
  BreakdownResult r = compute_breakdown(t);
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_EQ(r.steps[0].device_activities, 2);
  EXPECT_EQ(r.steps[0].ns[K], 30);
  EXPECT_EQ(r.steps[0].ns[CO], 20);
  EXPECT_EQ(r.steps[0].ns[RT], 2);
  EXPECT_EQ(r.steps[0].ns[OT], 48);
}

// Name rules the categories rest on.
TEST(Breakdown, NameRules) {
  EXPECT_TRUE(is_dataloader_name(kDataLoader));
  EXPECT_TRUE(is_dataloader_name("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"));
  EXPECT_TRUE(is_dataloader_name("enumerate(DataPipe)#ShufflerIterDataPipe"));
  EXPECT_FALSE(is_dataloader_name("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__init__"));
  EXPECT_TRUE(is_communication_op_name("nccl:all_reduce"));
  EXPECT_TRUE(is_communication_op_name("gloo:broadcast"));
  EXPECT_TRUE(is_communication_op_name("record_param_comms"));
  EXPECT_TRUE(is_communication_op_name("c10d::allreduce_"));
  EXPECT_FALSE(is_communication_op_name("aten::all"));
  EXPECT_EQ(step_number_from_name("ProfilerStep#42"), 42);
  EXPECT_EQ(step_number_from_name("ProfilerStep#"), -1);
  EXPECT_EQ(step_number_from_name("ProfilerStep#4x"), -1);
  // The largest int64 is a step number; one more (or 23 digits, from a hostile trace) is not, and
  // must not overflow on the way (UBSan).
  EXPECT_EQ(step_number_from_name("ProfilerStep#9223372036854775807"), INT64_MAX);
  EXPECT_EQ(step_number_from_name("ProfilerStep#9223372036854775808"), -1);
  EXPECT_EQ(step_number_from_name("ProfilerStep#99999999999999999999999"), -1);
}

// Whatever the timeline, each step's categories are non-negative and add up to its wall time.
TEST(Breakdown, RandomTimelinesAddUp) {
  std::mt19937_64 rng(1234);
  auto rnd = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const EventKind host_kinds[] = {EventKind::HostOp, EventKind::UserRange};
  for (int round = 0; round < 200; ++round) {
    Trace t;
    const int steps = int(rnd(1, 6));
    for (int i = 0; i < steps; ++i) step(t, i, i * 1000, i * 1000 + rnd(500, 1000));
    uint64_t corr = 1;
    for (int e = 0; e < 60; ++e) {
      const int64_t s = rnd(-200, steps * 1000 + 200), d = rnd(0, 400);
      switch (rnd(0, 3)) {
        case 0: launch(t, corr++, s, s + rnd(1, 20), EventKind(rnd(6, 8)), s + rnd(0, 300), s + 300 + d); break;
        case 1: host(t, kDataLoader, s, s + d); break;
        case 2: host(t, "nccl:all_reduce", s, s + d); break;
        default: t.add(host_kinds[rnd(0, 1)], "aten::add", s, d); break;
      }
    }
    for (const StepBreakdown& st : compute_breakdown(t).steps) {
      for (int64_t v : st.ns) ASSERT_GE(v, 0);
      ASSERT_EQ(sum(st), st.total_ns());
      ASSERT_GE(st.total_ns(), 0);
    }
  }
}
