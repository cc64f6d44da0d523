// The module view (modules.h, docs/metrics.md "Modules"), on hand-built timelines: each expected
// number is worked out beside its timeline. Times are in microseconds of the timeline (x1000 ns).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/modules.h"
#include "gpuprof/analysis/tables.h"
#include "trace_builders.h"

namespace gpuprof {
namespace {

constexpr int64_t kUs = 1000;

Event& call(Trace& t, const std::string& name, int64_t start, int64_t end, uint32_t tid = 1) {
  Event& e = t.add(EventKind::PythonFunction, "nn.Module: " + name, start * kUs, (end - start) * kUs);
  e.tid = tid;
  return e;
}

Event& op(Trace& t, const char* name, int64_t start, int64_t end, uint32_t tid = 1, uint64_t external_id = 0,
          uint64_t link = 0) {
  Event& e = t.add(EventKind::HostOp, name, start * kUs, (end - start) * kUs);
  e.tid = tid;
  e.external_id = external_id;
  e.correlation = link;
  return e;
}

// A cudaLaunchKernel inside the op with `external_id`, and the kernel it launched.
void launch(Trace& t, int64_t at, uint64_t external_id, uint64_t correlation, int64_t k_start, int64_t k_end,
            uint32_t tid = 1) {
  Event& r = t.add(EventKind::Runtime, "cudaLaunchKernel", at * kUs, 1 * kUs);
  r.tid = tid;
  r.correlation = correlation;
  r.external_id = external_id;
  spec::add_kernel(t, "kernel", k_start * kUs, k_end * kUs, correlation, 4, -1.0f);
}

const ModuleRow* row(const ModuleView& v, const std::string& path) {
  for (const ModuleRow& r : v.rows)
    if (r.path == path) return &r;
  return nullptr;
}

std::vector<std::string> paths(const ModuleView& v) {
  std::vector<std::string> out;
  for (const ModuleRow& r : v.rows) out.push_back(r.path);
  return out;
}

uint32_t index_of(const Trace& t, const char* name) {
  for (uint32_t i = 0; i < t.events.size(); ++i)
    if (t.name_of(t.events[i]) == name) return i;
  return kNoIndex;
}

TEST(ModuleNames, LiveAndTorchProfilerForms) {
  std::string_view segment, type;
  ASSERT_TRUE(parse_module_call_name("nn.Module: conv1 (Conv2d)", &segment, &type));
  EXPECT_EQ(segment, "conv1");
  EXPECT_EQ(type, "Conv2d");
  ASSERT_TRUE(parse_module_call_name("nn.Module: layers.0 (Block)", &segment, &type));
  EXPECT_EQ(segment, "layers.0");   // a module its caller did not register directly
  EXPECT_EQ(type, "Block");
  // torch.profiler's Python tracer: the type and its instance number.
  ASSERT_TRUE(parse_module_call_name("nn.Module: Conv2d_12", &segment, &type));
  EXPECT_EQ(segment, "Conv2d_12");
  EXPECT_EQ(type, "Conv2d");
  ASSERT_TRUE(parse_module_call_name("nn.Module: My_Block_0", &segment, &type));
  EXPECT_EQ(type, "My_Block");   // only the last "_<digits>" is the instance number
  ASSERT_TRUE(parse_module_call_name("nn.Module: Net", &segment, &type));
  EXPECT_EQ(segment, "Net");
  EXPECT_EQ(type, "Net");
  EXPECT_FALSE(parse_module_call_name("nn.Module: ", &segment, &type));
  EXPECT_FALSE(parse_module_call_name("torch/nn/modules/module.py(1779): _call_impl", &segment, &type));
}

// Net [0, 100) calls layer1 (a Sequential) [10, 60), whose children conv [12, 40) and relu
// [42, 58) launch a kernel each (20 and 5 us); Net's own aten::add [62, 66) and fc [70, 90); then a
// loss module [100, 110) called beside the model: a second root.
Trace forward_only() {
  Trace t;
  call(t, "Net (Net)", 0, 100);
  call(t, "layer1 (Sequential)", 10, 60);
  call(t, "0 (Conv2d)", 12, 40);
  op(t, "aten::conv2d", 15, 35, 1, 11);
  launch(t, 20, 11, 7, 30, 50);
  call(t, "1 (ReLU)", 42, 58);
  op(t, "aten::relu", 45, 55, 1, 12);
  launch(t, 46, 12, 8, 60, 65);
  op(t, "aten::add", 62, 66);
  call(t, "fc (Linear)", 70, 90);
  op(t, "aten::addmm", 72, 88);
  call(t, "CrossEntropyLoss (CrossEntropyLoss)", 100, 110);
  op(t, "aten::cross_entropy_loss", 101, 109);
  op(t, "aten::zero_", 120, 125);   // in no module
  return t;
}

// A windowed import (traces/windows.py) owning the time from 40 us on: what started before is its
// context (kContextFlag): the Net, layer1 and Conv2d calls, aten::conv2d, its launch and kernel.
// The context calls still nest the owned ones (the same rows and paths), but count nothing: the
// window before counts them, and the merge adds the windows' rows by path.
TEST(ModuleView, AWindowsContextNestsItsCallsAndCountsNothing) {
  Trace t = forward_only();
  for (Event& e : t.events)
    if (e.start_ns < 40 * kUs) e.flags |= kContextFlag;
  const ModuleView v = module_view(t, link_launches(t));
  EXPECT_EQ(paths(v), (std::vector<std::string>{"", "fc", "layer1", "layer1.1", "layer1.0", "CrossEntropyLoss"}));
  const ModuleRow& net = *row(v, "");
  EXPECT_EQ(net.calls, 0);
  EXPECT_EQ(net.host_total_ns, 0);
  EXPECT_EQ(net.device_total_ns, 5 * kUs);   // the ReLU's kernel [60, 65); the conv's is context
  const ModuleRow& relu = *row(v, "layer1.1");
  EXPECT_EQ(relu.calls, 1);
  EXPECT_EQ(relu.host_total_ns, 16 * kUs);
  EXPECT_EQ(relu.device_self_ns, 5 * kUs);
  const ModuleRow& conv = *row(v, "layer1.0");
  EXPECT_EQ(conv.calls, 0);
  EXPECT_EQ(conv.device_self_ns, 0);
  EXPECT_EQ(row(v, "fc")->host_total_ns, 20 * kUs);
  // Context events are attributed to no row (sums over events skip them); owned ones as before.
  EXPECT_EQ(v.row_of[index_of(t, "aten::conv2d")], kNoIndex);
  EXPECT_EQ(v.rows[v.row_of[index_of(t, "aten::relu")]].path, "layer1.1");
}

TEST(ModuleView, ForwardTimesNestAndTheModelIsTheRoot) {
  const Trace t = forward_only();
  const ModuleView v = module_view(t, link_launches(t));
  // The model (4 modules below it) is the root "", its children heaviest first; the loss module,
  // called beside it, is a root of its own named by its segment.
  EXPECT_EQ(paths(v), (std::vector<std::string>{"", "layer1", "layer1.0", "layer1.1", "fc", "CrossEntropyLoss"}));
  const ModuleRow& net = *row(v, "");
  EXPECT_EQ(net.type, "Net");
  EXPECT_EQ(net.parent, kNoIndex);
  EXPECT_EQ(net.depth, 0);
  EXPECT_EQ(net.calls, 1);
  EXPECT_EQ(net.host_total_ns, 100 * kUs);
  EXPECT_EQ(net.host_self_ns, (100 - 50 - 20) * kUs);   // less layer1 and fc: aten::add and Python glue
  EXPECT_EQ(net.device_total_ns, 25 * kUs);             // both kernels are below it
  EXPECT_EQ(net.device_self_ns, 0);
  const ModuleRow& layer1 = *row(v, "layer1");
  EXPECT_EQ(layer1.type, "Sequential");
  EXPECT_EQ(layer1.parent, 0u);
  EXPECT_EQ(layer1.depth, 1);
  EXPECT_EQ(layer1.host_total_ns, 50 * kUs);
  EXPECT_EQ(layer1.host_self_ns, (50 - 28 - 16) * kUs);
  EXPECT_EQ(layer1.device_total_ns, 25 * kUs);
  const ModuleRow& conv = *row(v, "layer1.0");
  EXPECT_EQ(conv.type, "Conv2d");
  EXPECT_EQ(conv.depth, 2);
  EXPECT_EQ(v.rows[conv.parent].path, "layer1");
  EXPECT_EQ(conv.host_total_ns, 28 * kUs);
  EXPECT_EQ(conv.host_self_ns, 28 * kUs);
  EXPECT_EQ(conv.device_self_ns, 20 * kUs);   // the kernel ran past the call's end: still its own
  EXPECT_EQ(row(v, "layer1.1")->device_self_ns, 5 * kUs);
  EXPECT_EQ(row(v, "fc")->host_total_ns, 20 * kUs);
  const ModuleRow& loss = *row(v, "CrossEntropyLoss");
  EXPECT_EQ(loss.parent, kNoIndex);
  EXPECT_EQ(loss.depth, 0);
  EXPECT_EQ(loss.host_total_ns, 10 * kUs);
  // Each event's row: ops, their runtime calls and kernels; an op outside every module has none.
  auto path_of = [&](const char* name) {
    const uint32_t r = v.row_of[index_of(t, name)];
    return r == kNoIndex ? std::string("<none>") : v.rows[r].path;
  };
  EXPECT_EQ(path_of("aten::conv2d"), "layer1.0");
  EXPECT_EQ(path_of("aten::add"), "");
  EXPECT_EQ(path_of("aten::cross_entropy_loss"), "CrossEntropyLoss");
  EXPECT_EQ(path_of("aten::zero_"), "<none>");
  for (uint32_t i = 0; i < t.events.size(); ++i)
    if (t.events[i].kind == EventKind::Kernel || t.events[i].kind == EventKind::Runtime)
      EXPECT_EQ(v.rows[v.row_of[i]].type, t.events[i].start_ns < 40 * kUs ? "Conv2d" : "ReLU");
}

// Forward on thread 1: Net [0, 100) with fc (a Linear) [10, 50) holding aten::linear (sequence
// number 5, forward thread 1) and act (a ReLU) [50, 60) holding aten::relu (6). Backward on thread 2
// (autograd's device thread): ReluBackward0 [200, 210) runs node 6 and a kernel of 4 us;
// AddmmBackward0 [220, 250) runs node 5 (linked as live hooks see it: on the node's op [221, 249)
// only, not on the engine's evaluate_function around it); AccumulateGrad [255, 260) has no forward op. Another
// thread (RecordFunction thread 2, OS thread 3) made an op with sequence number 6 too, later than the forward: its
// own counter. The backward ops say forward thread 1, so it is not theirs.
Trace forward_and_backward() {
  Trace t;
  call(t, "Net (Net)", 0, 100);
  call(t, "fc (Linear)", 10, 50);
  op(t, "aten::linear", 12, 48, 1, 0, pack_autograd_link(5, 1, false));
  op(t, "aten::addmm", 14, 46, 1, 0, pack_autograd_link(5, 1, false));
  call(t, "act (ReLU)", 50, 60);
  op(t, "aten::relu", 52, 58, 1, 0, pack_autograd_link(6, 1, false));
  op(t, "aten::pin_memory", 150, 160, 3, 0, pack_autograd_link(6, 2, false));
  op(t, "autograd::engine::evaluate_function: ReluBackward0", 200, 210, 2, 0, pack_autograd_link(6, 1, true));
  op(t, "ReluBackward0", 201, 209, 2, 0, pack_autograd_link(6, 1, true));
  op(t, "aten::threshold_backward", 202, 208, 2, 21);
  launch(t, 203, 21, 9, 215, 219, 2);
  // Live hooks see no link on the engine's evaluate_function, only on the node inside it.
  op(t, "autograd::engine::evaluate_function: AddmmBackward0", 220, 250, 2);
  op(t, "AddmmBackward0", 221, 249, 2, 0, pack_autograd_link(5, 1, true));
  op(t, "aten::mm", 225, 245, 2);
  op(t, "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 255, 260, 2);
  return t;
}

TEST(ModuleView, BackwardCountsInTheModuleWhoseForwardMadeIt) {
  const Trace t = forward_and_backward();
  const ModuleView v = module_view(t, link_launches(t));
  EXPECT_EQ(paths(v), (std::vector<std::string>{"", "fc", "act"}));
  // fc: forward 40, backward 30 (the evaluate_function around AddmmBackward0, not the node's 28).
  EXPECT_EQ(row(v, "fc")->host_total_ns, (40 + 30) * kUs);
  EXPECT_EQ(row(v, "fc")->host_self_ns, 70 * kUs);
  // act: forward 10, backward 10 (the evaluate_function around ReluBackward0), and the kernel its
  // backward launched (4 us, through the runtime call inside aten::threshold_backward).
  EXPECT_EQ(row(v, "act")->host_total_ns, (10 + 10) * kUs);
  EXPECT_EQ(row(v, "act")->device_self_ns, 4 * kUs);
  // Net: its forward call (100) and its children's backward (40); self = 140 - 70 - 20.
  EXPECT_EQ(row(v, "")->host_total_ns, 140 * kUs);
  EXPECT_EQ(row(v, "")->host_self_ns, 50 * kUs);
  EXPECT_EQ(row(v, "")->device_total_ns, 4 * kUs);
  // AccumulateGrad has no forward op, the other thread's op ran in no module: no row.
  EXPECT_EQ(v.row_of[index_of(t, "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad")],
            kNoIndex);
  EXPECT_EQ(v.row_of[index_of(t, "aten::pin_memory")], kNoIndex);
  EXPECT_EQ(v.rows[v.row_of[index_of(t, "aten::mm")]].path, "fc");
}

// modules[].flops (docs/metrics.md, "Modules"): the FLOPs counted at each call (flops.h) summed by
// module, forward and backward, children included. The same timeline with input shapes on three ops.
TEST(ModuleView, FlopsOfTheCallsAttributedToEachModule) {
  Trace t = forward_and_backward();
  const auto shapes = [&](const char* name, const char* dims) {
    t.events[index_of(t, name)].aux = t.strings.intern(dims);
  };
  shapes("aten::addmm", "[[16], [8, 64], [64, 16]]");   // fc's forward: 2 x 8 x 64 x 16 = 16384
  shapes("aten::mm", "[[8, 16], [16, 32]]");             // in fc's backward: 2 x 8 x 16 x 32 = 8192
  shapes("aten::relu", "[[8, 16]]");                     // act's forward: 1 per element = 128
  // aten::threshold_backward has no shapes here: not counted, in no row's FLOPs.
  const AnalysisTables a = analyse_tables(t, BreakdownOptions{});
  const auto flops = [&](const std::string& path) {
    for (const ModuleRow& r : a.modules.rows)
      if (r.path == path) return r.flops;
    ADD_FAILURE() << "no row " << path;
    return int64_t{-1};
  };
  EXPECT_EQ(flops("fc"), 16384 + 8192);
  EXPECT_EQ(flops("act"), 128);
  EXPECT_EQ(flops(""), 16384 + 8192 + 128);   // the model: its children's, nothing of its own
}

TEST(ModuleView, TheModuleRunningAtAGivenTime) {
  // For samples that are not events (the allocator's): at 5 the model's own code runs, at 55 act's
  // aten::relu, at 150 the other thread's op (in no module) and no module call, at 225 aten::mm in
  // fc's backward, at 257 AccumulateGrad (in no module), at 300 nothing.
  const Trace t = forward_and_backward();
  const ModuleView v = module_view(t, link_launches(t));
  const std::vector<uint32_t> rows =
      module_rows_at(t, v, {5 * kUs, 55 * kUs, 150 * kUs, 225 * kUs, 257 * kUs, 300 * kUs});
  std::vector<std::string> at;
  for (uint32_t r : rows) at.push_back(r == kNoIndex ? "<none>" : v.rows[r].path);
  EXPECT_EQ(at, (std::vector<std::string>{"", "act", "<none>", "fc", "<none>", "<none>"}));
}

TEST(ModuleView, BackwardOfAForwardOutsideTheTraceCountsNowhere) {
  // Traces write no forward thread on forward ops (0: unknown): the latest forward op with the
  // number that started before the backward op is taken. Here the only op with number 5 started
  // after it (the next step's forward, with a reused number from another thread): no match.
  Trace t;
  call(t, "Net (Net)", 100, 200);
  op(t, "aten::addmm", 110, 190, 1, 0, pack_autograd_link(5, 0, false));
  op(t, "autograd::engine::evaluate_function: AddmmBackward0", 20, 50, 2, 0, pack_autograd_link(5, 1, true));
  const ModuleView v = module_view(t, link_launches(t));
  EXPECT_EQ(row(v, "")->host_total_ns, 100 * kUs);
  EXPECT_EQ(v.row_of[index_of(t, "autograd::engine::evaluate_function: AddmmBackward0")], kNoIndex);
}

// torch.profiler(with_stack=True) names each call "nn.Module: <Type>_<n>", n counting the
// instances of that type: the path is the chain of those names below the model.
TEST(ModuleView, TorchProfilerNamesMakeThePath) {
  Trace t;
  call(t, "Net_0", 0, 100);
  call(t, "Sequential_0", 5, 95);
  call(t, "Block_0", 10, 50);
  call(t, "ReLU_0", 20, 25);   // one ReLU instance called twice in Block_0: one row, 2 calls
  call(t, "ReLU_0", 30, 35);
  call(t, "Block_1", 50, 90);
  call(t, "ReLU_1", 60, 70);
  const ModuleView v = module_view(t, link_launches(t));
  EXPECT_EQ(paths(v),
            (std::vector<std::string>{"", "Sequential_0", "Sequential_0.Block_0", "Sequential_0.Block_0.ReLU_0",
                                      "Sequential_0.Block_1", "Sequential_0.Block_1.ReLU_1"}));
  EXPECT_EQ(row(v, "")->type, "Net");
  EXPECT_EQ(row(v, "Sequential_0.Block_0")->type, "Block");
  EXPECT_EQ(row(v, "Sequential_0.Block_0.ReLU_0")->calls, 2);
  EXPECT_EQ(row(v, "Sequential_0.Block_0.ReLU_0")->host_total_ns, 10 * kUs);
  EXPECT_EQ(row(v, "Sequential_0.Block_0")->host_self_ns, 30 * kUs);
  EXPECT_EQ(row(v, "Sequential_0.Block_1")->depth, 2);
}

TEST(ModuleView, OneModuleCalledFromTwoPlacesKeepsTheTreeWhole) {
  // The model runs its ModuleList's block directly (layers.0 under the root) and once more through
  // a wrapper module: two rows, so each total still covers its children; the lighter one's path
  // gets "#2".
  Trace t;
  call(t, "Net (Net)", 0, 100);
  call(t, "layers.0 (Block)", 10, 40);
  call(t, "wrap (Wrapper)", 50, 90);
  call(t, "layers.0 (Block)", 55, 65);
  const ModuleView v = module_view(t, link_launches(t));
  EXPECT_EQ(paths(v), (std::vector<std::string>{"", "wrap", "wrap.layers.0", "layers.0"}));
  // A segment the live hooks write relative to their caller: "wrap" + "layers.0". Under the root
  // it is "layers.0"; no path repeats here. Now the same block twice under the root, once through
  // a path that spells the same name:
  Trace u;
  call(u, "Net (Net)", 0, 100);
  call(u, "layers.0 (Block)", 10, 40);
  call(u, "layers (ModuleList)", 50, 90);
  call(u, "0 (Block)", 55, 65);
  const ModuleView w = module_view(u, link_launches(u));
  EXPECT_EQ(paths(w), (std::vector<std::string>{"", "layers", "layers.0", "layers.0#2"}));
  EXPECT_EQ(row(w, "layers.0")->host_total_ns, 10 * kUs);   // layers' child, visited first
  EXPECT_EQ(row(w, "layers.0#2")->host_total_ns, 30 * kUs);
}

TEST(ModuleView, SumsOfAPerEventQuantity) {
  // What the FLOPs and memory analyses use: any per-event number summed by module, in one call.
  const Trace t = forward_only();
  const ModuleView v = module_view(t, link_launches(t));
  std::vector<int64_t> ones(t.events.size(), 0);
  for (uint32_t i = 0; i < t.events.size(); ++i) ones[i] = t.events[i].kind == EventKind::HostOp ? 1 : 0;
  const std::vector<int64_t> self = v.self_sums(ones), total = v.total_sums(ones);
  // Ops: conv2d in layer1.0, relu in layer1.1, add in Net, addmm in fc, the loss op; zero_ nowhere.
  EXPECT_EQ(self, (std::vector<int64_t>{1, 0, 1, 1, 1, 1}));
  EXPECT_EQ(total, (std::vector<int64_t>{4, 2, 1, 1, 1, 1}));
  std::vector<double> kernel_us(t.events.size(), 0.0);
  for (uint32_t i = 0; i < t.events.size(); ++i)
    if (t.events[i].kind == EventKind::Kernel) kernel_us[i] = double(t.events[i].dur_ns) / kUs;
  EXPECT_EQ(v.total_sums(kernel_us)[0], 25.0);
}

TEST(ModuleView, NoModuleCallsNoRows) {
  Trace t;
  op(t, "aten::mm", 0, 10);
  const ModuleView v = module_view(t, link_launches(t));
  EXPECT_TRUE(v.rows.empty());
  EXPECT_TRUE(v.row_of.empty());
  EXPECT_TRUE(v.total_sums(std::vector<int64_t>(t.events.size(), 1)).empty());
}

TEST(AutogradLink, PackedInAHostOpsCorrelationSlot) {
  Trace t;
  Event& fwd = op(t, "aten::addmm", 0, 1, 1, 0, pack_autograd_link(12, 3, false));
  AutogradLink l = autograd_link(fwd);
  EXPECT_TRUE(l.present);
  EXPECT_FALSE(l.backward);
  EXPECT_EQ(l.sequence_nr, 12u);
  EXPECT_EQ(l.thread, 3u);
  Event& bwd = op(t, "AddmmBackward0", 2, 3, 2, 0, pack_autograd_link(0, 1, true));
  l = autograd_link(bwd);
  EXPECT_TRUE(l.present && l.backward);
  EXPECT_EQ(l.sequence_nr, 0u);   // sequence number 0 is a number (stored + 1)
  EXPECT_FALSE(autograd_link(op(t, "aten::empty", 4, 5)).present);
  EXPECT_EQ(pack_autograd_link(-1, 1, false), 0u);   // RecordFunction's "no sequence number"
  Event& kernel = t.add(EventKind::Kernel, "k", 0, 1);
  kernel.correlation = 12;
  EXPECT_FALSE(autograd_link(kernel).present);   // device events keep their correlation id
}

}  // namespace
}  // namespace gpuprof
