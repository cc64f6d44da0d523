// Recurring kernel sequences per operator on a hand-built timeline (docs/metrics.md, "Kernel
// sequences"): which calls count, what goes into a sequence, and the sums.

#include <gtest/gtest.h>

#include "gpuprof/analysis/kernel_sequences.h"
#include "gpuprof/analysis/launch_links.h"

using namespace gpuprof;

namespace {

constexpr int64_t us = 1000;

void op(Trace& t, const char* name, int64_t start, int64_t end) {
  Event& e = t.add(EventKind::HostOp, name, start * us, (end - start) * us);
  e.tid = 1;
}

// A launch call at `call_start` and its activity from `start`, `dur` us long, on stream 7.
void launch(Trace& t, int64_t call_start, EventKind kind, const char* name, int64_t start, int64_t dur) {
  const uint64_t correlation = t.events.size() + 1;
  Event& c = t.add(EventKind::Runtime, kind == EventKind::Memset ? "cudaMemsetAsync" : "cudaLaunchKernel",
                   call_start * us, 1 * us);
  c.tid = 1;
  c.correlation = correlation;
  Event& e = t.add(kind, name, start * us, dur * us);
  e.tid = 7;
  e.device = 0;
  e.correlation = correlation;
}

// One call of aten::linear from `at` (40 us long) around aten::addmm: a set, then gemm and bias
// (addmm's), and `extra` after them when given. The set is launched last but starts first.
void linear(Trace& t, int64_t at, const char* extra = nullptr) {
  op(t, "aten::linear", at, at + 40);
  op(t, "aten::addmm", at + 5, at + 30);
  launch(t, at + 10, EventKind::Kernel, "gemm", at + 50, 10);
  launch(t, at + 20, EventKind::Kernel, "bias", at + 60, 2);
  launch(t, at + 32, EventKind::Memset, "Memset (Device)", at + 45, 1);
  if (extra) launch(t, at + 35, EventKind::Kernel, extra, at + 70, 3);
}

}  // namespace

TEST(KernelSequences, RecurringSequencesOfEachNamesOutermostCalls) {
  Trace t;
  linear(t, 0);
  linear(t, 200);
  linear(t, 400, "relu");   // another sequence, once: not recurring
  // aten::linear inside a module: deeper than the name's outermost calls, so not counted (else
  // the first sequence would count 3).
  op(t, "MyModule", 600, 700);
  linear(t, 610);
  const std::vector<KernelSequenceRow> rows = kernel_sequence_table(t, link_launches(t));
  // addmm launched 2 kernels a call (under 3); MyModule ran once.
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].op, "aten::linear");
  EXPECT_EQ(rows[0].kernels, "Memset (Device) -> gemm -> bias");
  EXPECT_EQ(rows[0].count, 2);
  EXPECT_EQ(rows[0].gpu_ns, 2 * 13 * us);   // 1 + 10 + 2 us a call
  EXPECT_EQ(rows[0].cpu_ns, 2 * 40 * us);

  // With sequences of 2 counting, addmm's recurs in the three outermost linears (the nested
  // one's addmm is deeper than addmm's least depth).
  const std::vector<KernelSequenceRow> twos = kernel_sequence_table(t, link_launches(t), kNoEndNs, 2);
  ASSERT_EQ(twos.size(), 2u);
  EXPECT_EQ(twos[0].op, "aten::addmm");
  EXPECT_EQ(twos[0].kernels, "gemm -> bias");
  EXPECT_EQ(twos[0].count, 3);

  // HTA's scope: with the last step starting at 300 us, only the first two calls are in.
  const std::vector<KernelSequenceRow> scoped = kernel_sequence_table(t, link_launches(t), 300 * us);
  ASSERT_EQ(scoped.size(), 1u);
  EXPECT_EQ(scoped[0].count, 2);
}
