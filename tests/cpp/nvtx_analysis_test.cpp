// The user's NVTX ranges (EventKind::Nvtx, from CUPTI's marker activity) are timeline annotations:
// they take no share of the breakdown, and a Chrome trace export reads back as the same ranges.
#include <gtest/gtest.h>

#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/chrome_export.h"
#include "gpuprof/io/kineto_import.h"

using namespace gpuprof;

namespace {
constexpr int K = int(Category::Kernel), RT = int(Category::Runtime), CPU = int(Category::CpuExec),
              OT = int(Category::Other);

// Step 1 = [0, 100): aten::mm [10, 40) launches a kernel at [30, 60) via cudaLaunchKernel [20, 25).
//   Kernel [30, 60) = 30 and Runtime [20, 25) = 5 come before CPU Exec in priority, so CPU Exec is
//   what is left of mm: [10, 20) + [25, 30) = 15; Other = 100 - 30 - 5 - 15 = 50.
Trace step_with_kernel() {
  Trace t;
  t.add(EventKind::StepMarker, "ProfilerStep#1", 0, 100);
  t.add(EventKind::HostOp, "aten::mm", 10, 30);
  t.add(EventKind::Runtime, "cudaLaunchKernel", 20, 5).correlation = 9;
  Event& k = t.add(EventKind::Kernel, "volta_sgemm_128x64_nn", 30, 30);
  k.correlation = 9;
  k.device = 0;
  return t;
}
}  // namespace

TEST(NvtxAnalysis, UserNvtxRangesChangeNoBreakdownCategory) {
  const Trace plain = step_with_kernel();
  const BreakdownResult base = compute_breakdown(plain);
  ASSERT_EQ(base.steps.size(), 1u);
  ASSERT_EQ(base.steps[0].ns[K], 30);
  ASSERT_EQ(base.steps[0].ns[RT], 5);
  ASSERT_EQ(base.steps[0].ns[CPU], 15);
  ASSERT_EQ(base.steps[0].ns[OT], 50);

  // The same step with the user's NVTX ranges: one over the whole step and past both its ends
  // ([-50, 150)), one over idle host time [70, 90), a mark at 95. Were they counted like host
  // work, CPU Exec would grow by the idle 40 ns of the step; they must change nothing.
  Trace annotated = step_with_kernel();
  annotated.add(EventKind::Nvtx, "epoch", -50, 200).tid = 1;
  annotated.add(EventKind::Nvtx, "wait", 70, 20).tid = 1;
  annotated.add(EventKind::Nvtx, "checkpoint", 95, 0).tid = 1;
  const BreakdownResult r = compute_breakdown(annotated);
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_EQ(r.steps[0].start_ns, base.steps[0].start_ns);
  EXPECT_EQ(r.steps[0].end_ns, base.steps[0].end_ns);
  for (int c = 0; c < kNumCategories; ++c) EXPECT_EQ(r.steps[0].ns[c], base.steps[0].ns[c]) << "category " << c;
}

// Exported as cat "nvtx" on the host process row, read back as Nvtx events with the same name,
// thread and nanosecond times.
TEST(NvtxAnalysis, ChromeExportRoundTripKeepsNvtxRanges) {
  Trace t = step_with_kernel();
  t.metadata["pid"] = "4321";
  Event& range = t.add(EventKind::Nvtx, "data loading", 12'345, 67'891);
  range.tid = 777;
  t.add(EventKind::Nvtx, "checkpoint", 99'000, 0).tid = 777;
  const std::string json = export_chrome_json(t);
  EXPECT_NE(json.find("\"cat\":\"nvtx\""), std::string::npos);
  const Trace back = import_kineto_json(json, "roundtrip.json");
  int found = 0;
  for (const Event& e : back.events) {
    if (e.kind != EventKind::Nvtx) continue;
    ++found;
    EXPECT_EQ(e.tid, 777u);
    EXPECT_EQ(e.device, -1);
    if (back.name_of(e) == "data loading") {
      EXPECT_EQ(e.start_ns, 12'345);
      EXPECT_EQ(e.dur_ns, 67'891);
    } else {
      EXPECT_EQ(back.name_of(e), "checkpoint");
      EXPECT_EQ(e.start_ns, 99'000);
      EXPECT_EQ(e.dur_ns, 0);
    }
  }
  EXPECT_EQ(found, 2);
  // And the re-imported trace's breakdown is that of the original.
  const BreakdownResult a = compute_breakdown(t), b = compute_breakdown(back);
  ASSERT_EQ(a.steps.size(), 1u);
  ASSERT_EQ(b.steps.size(), 1u);
  for (int c = 0; c < kNumCategories; ++c) EXPECT_EQ(a.steps[0].ns[c], b.steps[0].ns[c]);
}
