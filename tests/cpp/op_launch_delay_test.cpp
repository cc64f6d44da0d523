// Operator -> kernel launch delays on a hand-built timeline, each delay worked out by hand from
// HTA's rule (docs/metrics.md, "Operator launch delay").

#include <gtest/gtest.h>

#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/op_launch_delay.h"

using namespace gpuprof;

namespace {

constexpr int64_t us = 1000;

void op(Trace& t, const char* name, int64_t start, int64_t end) {
  Event& e = t.add(EventKind::HostOp, name, start * us, (end - start) * us);
  e.tid = 1;
}

void launch(Trace& t, const char* call, int64_t call_start, EventKind kind, const char* name, int64_t start,
            uint64_t correlation) {
  Event& c = t.add(EventKind::Runtime, call, call_start * us, 2 * us);
  c.tid = 1;
  c.correlation = correlation;
  Event& e = t.add(kind, name, start * us, 5 * us);
  e.tid = 7;
  e.device = 0;
  e.correlation = correlation;
}

}  // namespace

TEST(OpLaunchDelay, FirstLaunchOfEachCallOfTheInnermostAtenOperator) {
  Trace t;
  // aten::linear around aten::addmm: the launches belong to addmm, the innermost aten op. Its
  // first call launches gemm at 20 us (10 us after it started) which starts at 40 us (20 later).
  op(t, "aten::linear", 0, 100);
  op(t, "aten::addmm", 10, 90);
  launch(t, "cudaLaunchKernel", 20, EventKind::Kernel, "gemm", 40, 1);
  launch(t, "cudaLaunchKernel", 30, EventKind::Kernel, "bias", 50, 2);
  // Its second call: 5 us to the first launch, 95 us from there to the kernel.
  op(t, "aten::addmm", 200, 290);
  launch(t, "cudaLaunchKernelExC", 205, EventKind::Kernel, "gemm", 300, 3);
  launch(t, "cudaLaunchKernel", 250, EventKind::Kernel, "bias", 320, 4);
  // A non-aten op inside aten::relu: the launch goes up to relu (20 us, then 10 us).
  op(t, "MyModule", 400, 500);
  op(t, "aten::relu", 410, 480);
  op(t, "custom::inner", 420, 470);
  launch(t, "cudaLaunchKernel", 430, EventKind::Kernel, "relu_k", 440, 5);
  // A copy is not a kernel launch, and a launch inside no aten op belongs to none.
  op(t, "aten::copy_", 600, 700);
  launch(t, "cudaMemcpyAsync", 610, EventKind::Memcpy, "Memcpy HtoD", 620, 6);
  op(t, "MyModule2", 800, 900);
  launch(t, "cudaLaunchKernel", 810, EventKind::Kernel, "lone", 820, 7);
  const std::vector<OpLaunchDelayRow> rows = op_launch_delay_table(t, link_launches(t));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].op, "aten::addmm");
  EXPECT_EQ(rows[0].kernels, "gemm -> bias");
  EXPECT_EQ(rows[0].calls, 2);
  EXPECT_DOUBLE_EQ(rows[0].op_delay_ns, 7.5 * us);        // (10 + 5) / 2
  EXPECT_DOUBLE_EQ(rows[0].runtime_delay_ns, 57.5 * us);  // (20 + 95) / 2
  EXPECT_EQ(rows[1].op, "aten::relu");
  EXPECT_EQ(rows[1].kernels, "relu_k");
  EXPECT_EQ(rows[1].calls, 1);
  EXPECT_DOUBLE_EQ(rows[1].op_delay_ns, 20.0 * us);
  EXPECT_DOUBLE_EQ(rows[1].runtime_delay_ns, 10.0 * us);
}

TEST(OpLaunchDelay, KernelLaunchNames) {
  EXPECT_TRUE(is_kernel_launch_name("cudaLaunchKernel"));
  EXPECT_TRUE(is_kernel_launch_name("cudaLaunchKernelExC"));
  EXPECT_TRUE(is_kernel_launch_name("cuLaunchKernelEx"));
  EXPECT_FALSE(is_kernel_launch_name("cudaMemcpyAsync"));
  EXPECT_FALSE(is_kernel_launch_name("hipLaunchKernel"));   // HTA's pattern knows no HIP call
  EXPECT_FALSE(is_kernel_launch_name("cudaGraphLaunch"));
}

TEST(OpLaunchDelay, RowsKeyedByTheirTextWhateverOrderTheTraceListsThem) {
  Trace t;
  // The second call of aten::mm comes first in the trace, its launches listed latest first: its
  // sequence still follows the launch calls' starts (a, then b); 10 us to the first launch, 30 us
  // from there to kernel a.
  op(t, "aten::mm", 200, 300);
  launch(t, "cudaLaunchKernel", 230, EventKind::Kernel, "b", 260, 3);
  launch(t, "cudaLaunchKernel", 210, EventKind::Kernel, "a", 240, 2);
  // The first call launches one kernel whose name reads as that same sequence: one row, two calls
  // (20 us to the launch, 30 us to the kernel).
  op(t, "aten::mm", 0, 100);
  launch(t, "cudaLaunchKernel", 20, EventKind::Kernel, "a -> b", 50, 1);
  const std::vector<OpLaunchDelayRow> rows = op_launch_delay_table(t, link_launches(t));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].op, "aten::mm");
  EXPECT_EQ(rows[0].kernels, "a -> b");
  EXPECT_EQ(rows[0].calls, 2);
  EXPECT_DOUBLE_EQ(rows[0].op_delay_ns, 15.0 * us);        // (10 + 20) / 2
  EXPECT_DOUBLE_EQ(rows[0].runtime_delay_ns, 30.0 * us);   // (30 + 30) / 2
}
