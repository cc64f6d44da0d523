// Specifications of the memory view (docs/metrics.md, "Memory") on hand-built timelines: the
// plugin's per-operator statistics, blocks and levels, the composition at the peak, growth across
// steps. Times are nanoseconds; every expected number is worked out beside it.
#include <gtest/gtest.h>

#include <string>

#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/memory.h"
#include "gpuprof/analysis/modules.h"
#include "gpuprof/analysis/tables.h"

using namespace gpuprof;

namespace {

Event& node(Trace& t, EventKind kind, const char* name, int64_t start, int64_t end, uint32_t tid = 1) {
  Event& e = t.add(kind, name, start, end - start);
  e.tid = tid;
  return e;
}

void op(Trace& t, const char* name, int64_t start, int64_t end, uint32_t tid = 1) {
  node(t, EventKind::HostOp, name, start, end, tid);
}

// An allocation (bytes > 0) or a free (bytes < 0) at `addr` on `device`, made on thread `tid`;
// total -1: the allocator's level not recorded (the live host allocator).
void rec(Trace& t, int64_t ts, int64_t bytes, uint64_t addr, int device = -1, uint32_t tid = 1, int64_t total = -1,
         int64_t reserved = -1) {
  MemorySample m;
  m.ts_ns = ts;
  m.bytes_delta = bytes;
  m.addr = addr;
  m.device = static_cast<int16_t>(device);
  m.tid = tid;
  m.total_allocated = total;
  m.total_reserved = reserved;
  t.memory.push_back(m);
}

void storage(Trace& t, int64_t ts, uint64_t addr, int64_t bytes, StorageRole role, int device = -1) {
  KnownStorage k;
  k.ts_ns = ts;
  k.addr = addr;
  k.bytes = bytes;
  k.role = role;
  k.device = static_cast<int16_t>(device);
  t.storages.push_back(k);
}

const MemoryOpRow* row(const std::vector<MemoryOpRow>& rows, const std::string& name) {
  for (const MemoryOpRow& r : rows)
    if (r.name == name) return &r;
  return nullptr;
}

BreakdownResult steps_of(const Trace& t) { return compute_breakdown(t); }

}  // namespace

// The plugin's counting: a record goes to the innermost node of its thread that contains it
// (start <= ts < end), and counts only when that node is an operator; an operator's inclusive
// figures add those of every operator below it, through non-operator nodes.
//   thread 1: ProfilerStep#1 [0, 1000)
//     aten::linear [10, 100) > aten::addmm [20, 90) > aten::empty [30, 40)
//       +100 @35 (aten::empty), +50 @60 (aten::addmm), -100 @95 (aten::linear)
//     my_range (a user range) [200, 300) > aten::relu [210, 250): +30 @220 (aten::relu), +20 @260
//       (innermost node my_range: left out)
//     aten::linear [600, 700): no record (a second call)
//     Optimizer.step#SGD.step as a host op (old traces) [800, 900) > aten::add_ [810, 850): +4 @820
//       (aten::add_; the Optimizer range is no operator: no row)
//     aten::sum [400, 500) whose only child is aten::sum [410, 490): one call recorded twice (the
//       plugin merges them, as torch.profiler does): +16 @450 counts once, in one call
//     -50 @950: innermost node the step marker: left out
//   thread 2: +8 @35, no node there: left out
TEST(Memory, OperatorStatisticsFollowThePluginsRule) {
  Trace t;
  node(t, EventKind::StepMarker, "ProfilerStep#1", 0, 1000);
  op(t, "aten::linear", 10, 100);
  op(t, "aten::addmm", 20, 90);
  op(t, "aten::empty", 30, 40);
  node(t, EventKind::UserRange, "my_range", 200, 300);
  op(t, "aten::relu", 210, 250);
  op(t, "aten::linear", 600, 700);
  op(t, "Optimizer.step#SGD.step", 800, 900);
  op(t, "aten::add_", 810, 850);
  rec(t, 35, 100, 0xA0);
  rec(t, 60, 50, 0xB0);
  rec(t, 95, -100, 0xA0);
  rec(t, 220, 30, 0xC0);
  rec(t, 260, 20, 0xD0);
  rec(t, 820, 4, 0xE0);
  rec(t, 950, -50, 0xB0);
  rec(t, 35, 8, 0xF0, -1, 2);
  op(t, "aten::sum", 400, 500);
  op(t, "aten::sum", 410, 490);
  rec(t, 450, 16, 0x100);
  const std::vector<MemoryOpRow> rows = memory_op_table(t);
  ASSERT_EQ(rows.size(), 6u);
  // Largest self increase first: empty 100, addmm 50, relu 30, sum 16, add_ 4, linear -100.
  EXPECT_EQ(rows[0].name, "aten::empty");
  EXPECT_EQ(rows[3].name, "aten::sum");
  EXPECT_EQ(rows[5].name, "aten::linear");
  const MemoryOpRow* sum = row(rows, "aten::sum");
  EXPECT_EQ(sum->calls, 1);
  EXPECT_EQ(sum->self_alloc_bytes, 16);
  EXPECT_EQ(sum->alloc_bytes, 16);
  const MemoryOpRow* empty = row(rows, "aten::empty");
  EXPECT_EQ(empty->calls, 1);
  EXPECT_EQ(empty->self_size_increase_bytes, 100);
  EXPECT_EQ(empty->size_increase_bytes, 100);
  const MemoryOpRow* addmm = row(rows, "aten::addmm");
  EXPECT_EQ(addmm->self_size_increase_bytes, 50);
  EXPECT_EQ(addmm->size_increase_bytes, 150);
  EXPECT_EQ(addmm->self_alloc_count, 1);
  EXPECT_EQ(addmm->alloc_count, 2);
  EXPECT_EQ(addmm->self_alloc_bytes, 50);
  EXPECT_EQ(addmm->alloc_bytes, 150);
  const MemoryOpRow* linear = row(rows, "aten::linear");
  EXPECT_EQ(linear->calls, 2);   // both calls, the one without records too
  EXPECT_EQ(linear->self_size_increase_bytes, -100);   // the free inside it, after addmm returned
  EXPECT_EQ(linear->size_increase_bytes, 50);          // 100 + 50 - 100
  EXPECT_EQ(linear->self_alloc_count, 0);
  EXPECT_EQ(linear->alloc_count, 2);
  EXPECT_EQ(linear->alloc_bytes, 150);
  EXPECT_EQ(row(rows, "aten::relu")->size_increase_bytes, 30);
  EXPECT_EQ(row(rows, "aten::add_")->self_alloc_bytes, 4);
  EXPECT_EQ(row(rows, "my_range"), nullptr);
  EXPECT_EQ(row(rows, "Optimizer.step#SGD.step"), nullptr);
  for (const MemoryOpRow& r : rows) EXPECT_EQ(r.device, -1);
}

// A windowed import's window: ProfilerStep#1 [0, 1000) is its context (the step before the one it
// owns), its events and records marked kContextFlag; it owns ProfilerStep#2 [1000, 2000).
//   step 1: aten::empty [10, 40) +100 @20; aten::linear [100, 200) +8 @150
//   step 2: aten::empty [1010, 1040) +30 @1020; aten::linear [1100, 1200), no record;
//           aten::mul [1300, 1400) +5 @1310 and -5 @1390
// The table counts the owned records only: empty +30 (one allocation), mul 0 (+5 -5, one
// allocation); linear's context record is not counted, so it has no row. The owned calls, rows or
// not: empty 1, linear 1, mul 1 (unmarked: empty 2, linear 2, mul 1).
TEST(Memory, AWindowCountsTheRecordsAndCallsItOwns) {
  Trace t;
  node(t, EventKind::StepMarker, "ProfilerStep#1", 0, 1000);
  op(t, "aten::empty", 10, 40);
  op(t, "aten::linear", 100, 200);
  rec(t, 20, 100, 0xA0);
  rec(t, 150, 8, 0xB0);
  node(t, EventKind::StepMarker, "ProfilerStep#2", 1000, 2000);
  op(t, "aten::empty", 1010, 1040);
  op(t, "aten::linear", 1100, 1200);
  op(t, "aten::mul", 1300, 1400);
  rec(t, 1020, 30, 0xC0);
  rec(t, 1310, 5, 0xD0);
  rec(t, 1390, -5, 0xD0);
  const std::vector<std::pair<std::string, int64_t>> whole = {
      {"aten::empty", 2}, {"aten::linear", 2}, {"aten::mul", 1}};
  EXPECT_EQ(owned_memory_op_calls(t), whole);   // nothing marked: every call
  for (Event& e : t.events)
    if (e.start_ns < 1000) e.flags |= kContextFlag;
  for (MemorySample& m : t.memory)
    if (m.ts_ns < 1000) m.flags |= kContextFlag;
  const MemoryView v = memory_view(t, steps_of(t));
  ASSERT_EQ(v.ops.size(), 2u);
  const MemoryOpRow* empty = row(v.ops, "aten::empty");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->calls, 1);
  EXPECT_EQ(empty->self_alloc_bytes, 30);
  EXPECT_EQ(empty->alloc_count, 1);
  const MemoryOpRow* mul = row(v.ops, "aten::mul");
  ASSERT_NE(mul, nullptr);
  EXPECT_EQ(mul->size_increase_bytes, 0);
  EXPECT_EQ(mul->alloc_count, 1);
  EXPECT_EQ(row(v.ops, "aten::linear"), nullptr);
  const std::vector<std::pair<std::string, int64_t>> calls = {
      {"aten::empty", 1}, {"aten::linear", 1}, {"aten::mul", 1}};
  EXPECT_EQ(owned_memory_op_calls(t), calls);
}

// Blocks, levels and the composition at the peak, on the host allocator (levels not recorded:
// rebuilt from the blocks on top of those known to predate the trace).
//   a parameter's storage 0xA (1000 bytes) seen at 5, never allocated in the trace: before the trace
//   ProfilerStep#1 [0, 1000):
//     aten::linear [10, 100): 0xB +400 @20 (freed @600: outlives the op), 0xC +100 @30 freed @40
//       (temporary), 0x11 +200 @60 never freed (an activation)
//     -64 @50 at 0x10: a free whose allocation predates the trace
//     autograd::engine::evaluate_function: AddmmBackward0 [500, 700): 0xD +1000 @510 (the gradient
//       seen at 800); 0xB freed @600
//     Optimizer.step#SGD.step (a user range) [800, 900) > aten::mul [810, 820): 0xE +1000 @815, freed
//       @850 inside the optimizer step (temporary); 0xF +24 @830 outside any operator, never freed
//   Levels: base 1000 + 64 = 1064; then 1464, 1564, 1464, 1400, 1600, 2600, 2200, 3200, 3224, 2224.
//   The peak, 3224 @830: parameters 1000, gradients 1000, temporary 1000 (0xE), activations 200
//   (0x11), unknown 24 (0xF).
TEST(Memory, CompositionAtThePeak) {
  Trace t;
  node(t, EventKind::StepMarker, "ProfilerStep#1", 0, 1000);
  op(t, "aten::linear", 10, 100);
  op(t, "autograd::engine::evaluate_function: AddmmBackward0", 500, 700);
  node(t, EventKind::UserRange, "Optimizer.step#SGD.step", 800, 900);
  op(t, "aten::mul", 810, 820);
  rec(t, 20, 400, 0xB);
  rec(t, 30, 100, 0xC);
  rec(t, 40, -100, 0xC);
  rec(t, 50, -64, 0x10);
  rec(t, 60, 200, 0x11);
  rec(t, 510, 1000, 0xD);
  rec(t, 600, -400, 0xB);
  rec(t, 815, 1000, 0xE);
  rec(t, 830, 24, 0xF);
  rec(t, 850, -1000, 0xE);
  storage(t, 5, 0xA, 1000, StorageRole::Parameter);
  storage(t, 800, 0xD, 1000, StorageRole::Gradient);

  const std::vector<DeviceMemory> devices = device_memory(t);
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].level_source, "blocks");
  EXPECT_EQ(devices[0].allocated,
            (std::vector<int64_t>{1464, 1564, 1464, 1400, 1600, 2600, 2200, 3200, 3224, 2224}));

  const MemoryView v = memory_view(t, steps_of(t));
  ASSERT_EQ(v.peaks.size(), 1u);
  const MemoryMoment& p = v.peaks[0];
  EXPECT_EQ(p.ts_ns, 830);
  EXPECT_EQ(p.step, 1);
  EXPECT_EQ(p.bytes, 3224);
  EXPECT_EQ(p.composition.parameters, 1000);
  EXPECT_EQ(p.composition.gradients, 1000);
  EXPECT_EQ(p.composition.optimizer_state, 0);
  EXPECT_EQ(p.composition.temporary, 1000);
  EXPECT_EQ(p.composition.activations, 200);
  EXPECT_EQ(p.composition.unknown, 24);
  // Who made what was live then (made in the trace): aten::mul 1000 and the backward node 1000 (the
  // tie by name), aten::linear 200, outside any operator 24.
  ASSERT_EQ(p.top_ops.size(), 4u);
  EXPECT_EQ(p.top_ops[0].name, "aten::mul");
  EXPECT_EQ(p.top_ops[1].name, "autograd::engine::evaluate_function: AddmmBackward0");
  EXPECT_EQ(p.top_ops[2].name, "aten::linear");
  EXPECT_EQ(p.top_ops[2].bytes, 200);
  EXPECT_EQ(p.top_ops[3].name, "");
  // At the last record (@850): parameters, the gradient, the activation and 0xF.
  const MemoryMoment& end = v.ends[0];
  EXPECT_EQ(end.bytes, 2224);
  EXPECT_EQ(end.composition.temporary, 0);
  EXPECT_EQ(end.composition.activations, 200);
  EXPECT_EQ(end.composition.unknown, 24);
  // The per-step table reads the same levels.
  const std::vector<StepMemoryRow> rows = step_memory_table(t, steps_of(t), devices);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].peak_allocated_bytes, 3224);
}

// A range that overhangs its parent's end does not carry the parent into what follows: a python
// function that starts inside the optimizer step and ends after it (traces hold such ranges) must
// not make the next forward's outputs "made in the optimizer step" (they would fall to unknown while
// the by-operator list names them).
//   ProfilerStep#1 [0, 1000)
//     Optimizer.step#AdamW.step (a user range) [100, 200)
//       train.py(40): step (a python function) [150, 400): overhangs the step by 200
//         aten::linear [300, 350): 0xA +4000 @310, freed @900 (outlives it: an activation)
//         aten::gelu [360, 380): 0xB +2000 @370, freed @900 (an activation)
//   Levels: 4000, 6000, 2000, 0. The peak, 6000 @370: activations 6000, unknown 0, and the owners
//   the same two operators.
TEST(Memory, AnOverhangingRangeDoesNotCarryTheOptimizerStep) {
  Trace t;
  node(t, EventKind::StepMarker, "ProfilerStep#1", 0, 1000);
  node(t, EventKind::UserRange, "Optimizer.step#AdamW.step", 100, 200);
  node(t, EventKind::PythonFunction, "train.py(40): step", 150, 400);
  op(t, "aten::linear", 300, 350);
  op(t, "aten::gelu", 360, 380);
  rec(t, 310, 4000, 0xA);
  rec(t, 370, 2000, 0xB);
  rec(t, 900, -4000, 0xA);
  rec(t, 910, -2000, 0xB);
  const MemoryView v = memory_view(t, steps_of(t));
  ASSERT_EQ(v.peaks.size(), 1u);
  const MemoryMoment& p = v.peaks[0];
  EXPECT_EQ(p.ts_ns, 370);
  EXPECT_EQ(p.bytes, 6000);
  EXPECT_EQ(p.composition.activations, 6000);
  EXPECT_EQ(p.composition.temporary, 0);
  EXPECT_EQ(p.composition.unknown, 0);
  ASSERT_EQ(p.top_ops.size(), 2u);
  EXPECT_EQ(p.top_ops[0].name, "aten::linear");
  EXPECT_EQ(p.top_ops[0].bytes, 4000);
  EXPECT_EQ(p.top_ops[1].name, "aten::gelu");
  for (const MemoryBlock& b : v.devices[0].blocks) EXPECT_FALSE(b.in_optimizer_step) << b.addr;
}

// A device whose allocator records its own totals (CUDA): the level is the allocator's; a known
// storage no record allocated counts in its role, the rest of the level is unknown.
TEST(Memory, RecordedLevelsKeepTheAllocatorsTotals) {
  Trace t;
  node(t, EventKind::StepMarker, "ProfilerStep#3", 0, 100);
  op(t, "aten::empty", 10, 20);
  rec(t, 15, 512, 0x100, 0, 1, 8704, 20971520);   // 8 KiB before the trace, + 512
  rec(t, 50, -512, 0x100, 0, 1, 8192, 20971520);
  storage(t, 60, 0x200, 4096, StorageRole::Parameter, 0);
  const MemoryView v = memory_view(t, steps_of(t));
  ASSERT_EQ(v.peaks.size(), 1u);
  const MemoryMoment& p = v.peaks[0];
  EXPECT_EQ(v.devices[0].level_source, "recorded");
  EXPECT_EQ(p.device, 0);
  EXPECT_EQ(p.bytes, 8704);
  EXPECT_EQ(p.reserved_bytes, 20971520);
  EXPECT_EQ(p.step, 3);
  EXPECT_EQ(p.composition.parameters, 4096);
  EXPECT_EQ(p.composition.activations, 512);   // freed @50, after aten::empty returned @20
  EXPECT_EQ(p.composition.temporary, 0);
  EXPECT_EQ(p.composition.unknown, 8704 - 4096 - 512);
}

// An allocation at an address still open proves the block there was freed unheard: it ends there
// (and a level rebuilt from blocks drops by its size).
TEST(Memory, AnAddressAllocatedAgainEndsItsBlock) {
  Trace t;
  rec(t, 10, 100, 0xA);
  rec(t, 20, 200, 0xA);
  rec(t, 30, -200, 0xA);
  const std::vector<DeviceMemory> d = device_memory(t);
  ASSERT_EQ(d[0].blocks.size(), 2u);
  EXPECT_EQ(d[0].blocks[0].free_ns, 20);
  EXPECT_EQ(d[0].blocks[1].free_ns, 30);
  EXPECT_EQ(d[0].allocated, (std::vector<int64_t>{100, 200, 0}));
}

namespace {

// Six steps [1000k, 1000k + 1000) on the host: each allocates 300 KiB in aten::relu and frees it
// before the step ends; with `leak`, each also allocates 100,000 bytes in aten::mse_loss that is
// never freed.
Trace loop(bool leak, int64_t leak_bytes = 100000) {
  Trace t;
  for (int64_t k = 0; k < 6; ++k) {
    const int64_t s = 1000 * k;
    node(t, EventKind::StepMarker, ("ProfilerStep#" + std::to_string(k)).c_str(), s, s + 1000);
    op(t, "aten::relu", s + 10, s + 20);
    rec(t, s + 15, 300 * 1024, 0x1000);
    rec(t, s + 500, -300 * 1024, 0x1000);
    if (leak) {
      op(t, "aten::mse_loss", s + 600, s + 700);
      rec(t, s + 650, leak_bytes, 0x2000 + uint64_t(k));
    }
  }
  return t;
}

}  // namespace

// Growth: the level at each step's end after the first (steps 1-5: 200,000 ... 600,000 bytes), a
// least-squares slope of 100,000 bytes a step, rising at all 4 transitions: flagged. What steps 1-4
// left live at the end of step 5: aten::mse_loss's 4 blocks, 400,000 bytes over 4 steps.
TEST(Memory, GrowthAcrossStepsIsFlaggedWithItsRateAndOps) {
  const Trace t = loop(true);
  const MemoryView v = memory_view(t, steps_of(t));
  ASSERT_EQ(v.growth.size(), 1u);
  const MemoryGrowth& g = v.growth[0];
  EXPECT_EQ(g.steps, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(g.end_bytes, (std::vector<int64_t>{200000, 300000, 400000, 500000, 600000}));
  EXPECT_DOUBLE_EQ(g.bytes_per_step, 100000.0);
  EXPECT_EQ(g.rising, 4);
  EXPECT_TRUE(g.flagged);
  EXPECT_EQ(g.steps_counted, 4);
  ASSERT_EQ(g.ops.size(), 1u);
  EXPECT_EQ(g.ops[0].name, "aten::mse_loss");
  EXPECT_EQ(g.ops[0].bytes, 400000);
  EXPECT_EQ(g.ops[0].count, 4);
}

// A flat loop (everything freed each step) is never flagged; nor is growth under the floor (64 KiB a
// step), nor levels that go up and down (ends 500,000, 100,000, 800,000, 200,000, 900,000 bytes: a
// slope of 90,000 bytes a step, but only 2 of 4 transitions rise).
TEST(Memory, FlatOrSmallOrNoisyLevelsAreNotFlagged) {
  const Trace flat = loop(false);
  const MemoryView v = memory_view(flat, steps_of(flat));
  ASSERT_EQ(v.growth.size(), 1u);
  EXPECT_FALSE(v.growth[0].flagged);
  EXPECT_DOUBLE_EQ(v.growth[0].bytes_per_step, 0.0);
  EXPECT_TRUE(v.growth[0].ops.empty());

  const Trace small = loop(true, 1024);
  EXPECT_FALSE(memory_view(small, steps_of(small)).growth[0].flagged);

  Trace noisy;
  const int64_t ends[] = {0, 500000, 100000, 800000, 200000, 900000};
  for (int64_t k = 0; k < 6; ++k) {
    const int64_t s = 1000 * k;
    node(noisy, EventKind::StepMarker, ("ProfilerStep#" + std::to_string(k)).c_str(), s, s + 1000);
    rec(noisy, s + 900, 1, 0, -1, 1, ends[k], -1);
  }
  const MemoryView n = memory_view(noisy, steps_of(noisy));
  EXPECT_GT(n.growth[0].bytes_per_step, 64.0 * 1024);   // the fit rises ...
  EXPECT_EQ(n.growth[0].rising, 2);                      // ... but only 2 of 4 transitions do
  EXPECT_FALSE(n.growth[0].flagged);
}

namespace {

Event& linked_op(Trace& t, const char* name, int64_t start, int64_t end, uint32_t tid, uint64_t link) {
  Event& e = node(t, EventKind::HostOp, name, start, end, tid);
  e.correlation = link;   // a host op's autograd link (event.h)
  return e;
}

void module_call(Trace& t, const char* name, int64_t start, int64_t end, uint32_t tid = 1) {
  node(t, EventKind::PythonFunction, name, start, end, tid);
}

// One step of a model Net { encoder: Sequential { 0: Linear, 1: ReLU } } as gpuprof's live module
// hooks record it, with its backward on thread 2 (autograd links: the forward aten::linear and
// aten::relu have sequence numbers 5 and 6, their backward nodes the same):
//   thread 1: ProfilerStep#1 [0, 1000)
//     nn.Module: Net (Net) [10, 400)
//       nn.Module: encoder (Sequential) [20, 200)
//         nn.Module: 0 (Linear) [30, 100) > aten::linear [35, 95) > aten::addmm [40, 90): +1000 @50
//         nn.Module: 1 (ReLU) [110, 150) > aten::relu [115, 145): +2000 @120
//       aten::flatten [250, 260), the model's own code: +300 @255
//     +50 @900: in the step alone (no module)
//   thread 2: evaluate_function: ReluBackward0 [500, 520) > aten::threshold_backward [505, 515):
//       +4000 @510 (the ReLU's backward: encoder.1), freed @600
//     evaluate_function: AddmmBackward0 [530, 560) > aten::mm [535, 555): +500 @540 (encoder.0)
Trace modules_step() {
  Trace t;
  node(t, EventKind::StepMarker, "ProfilerStep#1", 0, 1000);
  module_call(t, "nn.Module: Net (Net)", 10, 400);
  module_call(t, "nn.Module: encoder (Sequential)", 20, 200);
  module_call(t, "nn.Module: 0 (Linear)", 30, 100);
  linked_op(t, "aten::linear", 35, 95, 1, pack_autograd_link(5, 1, false));
  op(t, "aten::addmm", 40, 90);
  module_call(t, "nn.Module: 1 (ReLU)", 110, 150);
  linked_op(t, "aten::relu", 115, 145, 1, pack_autograd_link(6, 1, false));
  op(t, "aten::flatten", 250, 260);
  linked_op(t, "autograd::engine::evaluate_function: ReluBackward0", 500, 520, 2, pack_autograd_link(6, 1, true));
  op(t, "aten::threshold_backward", 505, 515, 2);
  linked_op(t, "autograd::engine::evaluate_function: AddmmBackward0", 530, 560, 2, pack_autograd_link(5, 1, true));
  op(t, "aten::mm", 535, 555, 2);
  rec(t, 50, 1000, 0xA);
  rec(t, 120, 2000, 0xB);
  rec(t, 255, 300, 0xC);
  rec(t, 510, 4000, 0xD, -1, 2);
  rec(t, 540, 500, 0xE, -1, 2);
  rec(t, 600, -4000, 0xD, -1, 2);
  rec(t, 900, 50, 0xF);
  return t;
}

std::vector<std::string> owners(const std::vector<MemoryOwner>& rows) {
  std::vector<std::string> out;
  for (const MemoryOwner& o : rows)
    out.push_back(o.name + " " + std::to_string(o.bytes) + "/" + std::to_string(o.count));
  return out;
}

}  // namespace

// The owners by module are the module view's rows, by path: a forward op's allocation belongs to the
// module call it ran in, a backward op's to the module whose forward made its node (the ReLU's
// gradient to encoder.1, the addmm's to encoder.0), the model's own code to the model (""); an
// allocation in no module counts in none. The peak (@540: 1000 + 2000 + 300 + 4000 + 500 = 7800)
// and the end (@900, the ReLU's gradient freed) name them; memory_view alone names none (it runs
// beside the module view in analyse_tables, which names them once both are done).
TEST(Memory, OwnersByModuleAreTheModuleViewsPaths) {
  const Trace t = modules_step();
  MemoryView v = memory_view(t, steps_of(t));
  ASSERT_EQ(v.peaks.size(), 1u);
  EXPECT_EQ(v.peaks[0].bytes, 7800);
  EXPECT_TRUE(v.peaks[0].top_modules.empty());
  name_memory_modules(t, module_view(t, link_launches(t)), v);
  EXPECT_EQ(owners(v.peaks[0].top_modules),
            (std::vector<std::string>{"encoder.1 6000/2", "encoder.0 1500/2", " 300/1"}));
  EXPECT_EQ(owners(v.ends[0].top_modules),
            (std::vector<std::string>{"encoder.1 2000/1", "encoder.0 1500/2", " 300/1"}));

  const AnalysisTables a = analyse_tables(t, BreakdownOptions{});
  ASSERT_EQ(a.memory_view.peaks.size(), 1u);
  EXPECT_EQ(owners(a.memory_view.peaks[0].top_modules), owners(v.peaks[0].top_modules));

  // Without module calls (a live span without the module view) no module is named.
  Trace bare;
  for (const Event& e : t.events) {
    if (e.kind == EventKind::PythonFunction) continue;
    Event& c = bare.add(e.kind, t.name_of(e), e.start_ns, e.dur_ns);
    c.tid = e.tid;
    c.correlation = e.correlation;
  }
  bare.memory = t.memory;
  const AnalysisTables b = analyse_tables(bare, BreakdownOptions{});
  ASSERT_EQ(b.memory_view.peaks.size(), 1u);
  EXPECT_EQ(b.memory_view.peaks[0].bytes, 7800);
  EXPECT_TRUE(b.memory_view.peaks[0].top_modules.empty());
}

// Growth names the modules whose allocations outlived their step: the leaking loop (aten::mse_loss
// keeps 100,000 bytes a step) with its loss computed in a module call `criterion (MSELoss)` inside
// the model's call.
TEST(Memory, GrowthNamesTheModulesThatLeftMemoryLive) {
  Trace t = loop(true);
  for (int64_t k = 0; k < 6; ++k) {
    module_call(t, "nn.Module: Net (Net)", 1000 * k + 5, 1000 * k + 720);
    module_call(t, "nn.Module: criterion (MSELoss)", 1000 * k + 590, 1000 * k + 710);
  }
  MemoryView v = memory_view(t, steps_of(t));
  ASSERT_EQ(v.growth.size(), 1u);
  EXPECT_TRUE(v.growth[0].modules.empty());
  name_memory_modules(t, module_view(t, link_launches(t)), v);
  EXPECT_EQ(owners(v.growth[0].modules), (std::vector<std::string>{"criterion 400000/4"}));
  EXPECT_EQ(owners(v.growth[0].ops), (std::vector<std::string>{"aten::mse_loss 400000/4"}));
}
