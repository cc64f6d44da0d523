// Specifications of the FLOP rules (flops.h) with the count worked out by hand beside each, and of
// where a trace's FLOPs count: once per operator call, at the outermost op with a rule, in the
// forward, the backward or a recomputation.
#include <gtest/gtest.h>

#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/flops.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/tables.h"
#include "gpuprof/core/list_text.h"
#include "gpuprof/io/kineto_import.h"

using namespace gpuprof;

namespace {

OpFlops of(const char* name, const char* shapes, const char* types = "", const char* concrete = "") {
  return op_flops(name, parse_op_inputs(shapes, types, concrete));
}

Event& op(Trace& t, const char* name, int64_t start, int64_t end, const char* shapes = nullptr, uint32_t tid = 1) {
  Event& e = t.add(EventKind::HostOp, name, start, end - start);
  e.tid = tid;
  if (shapes != nullptr) e.aux = t.strings.intern(shapes);
  return e;
}

void args(Trace& t, const char* types, const char* concrete, int64_t trace_flops = -1) {
  OpArgs a;
  a.event = static_cast<uint32_t>(t.events.size() - 1);
  a.types = t.strings.intern(types);
  a.concrete = concrete[0] ? t.strings.intern(concrete) : 0;
  a.trace_flops = trace_flops;
  t.op_args.push_back(a);
}

}  // namespace

TEST(ListText, ReadsWhatPythonPrints) {
  const ListTree t = parse_list_text("[[32, 3, 224, 224], [], 'float', None, True, '[2, 2]', 'it''s']");
  ASSERT_TRUE(t.ok());
  const std::vector<uint32_t> items = t.children(0);
  ASSERT_EQ(items.size(), 7u);
  EXPECT_EQ(t.children(items[0]).size(), 4u);
  EXPECT_EQ(t.nodes[t.children(items[0])[3]].text, "224");
  EXPECT_TRUE(t.children(items[1]).empty());
  EXPECT_EQ(t.nodes[items[2]].text, "float");
  EXPECT_EQ(t.nodes[items[3]].kind, ListNode::Kind::None);
  EXPECT_EQ(t.nodes[items[4]].kind, ListNode::Kind::True);
  EXPECT_EQ(t.nodes[items[5]].text, "[2, 2]");   // a concrete input's list stays text
  EXPECT_EQ(t.nodes[items[6]].text, "it''s");    // a quote inside: up to the quote before a separator
  EXPECT_FALSE(parse_list_text("[1, 2").ok());
  EXPECT_FALSE(parse_list_text("").ok());
}

TEST(FlopRules, MatrixProducts) {
  // mm [64, 128] x [128, 32]: 64 x 32 outputs, each a 128-term dot product of 128 multiply-adds
  // (256 FLOPs): 64 * 32 * 256 = 524,288.
  EXPECT_EQ(mm_flops({64, 128}, {128, 32}), 524288);
  EXPECT_EQ(of("aten::mm", "[[64, 128], [128, 32]]").flops, 524288);
  // addmm(bias, mat1, mat2): the product only (FlopCounterMode does not count the bias add).
  EXPECT_EQ(of("aten::addmm", "[[32], [64, 128], [128, 32], [], []]").flops, 524288);
  // bmm [8, 16, 32] x [8, 32, 4]: 8 batches of 16 x 4 outputs of 32 multiply-adds: 8*16*4*32*2 = 32,768.
  EXPECT_EQ(of("aten::bmm", "[[8, 16, 32], [8, 32, 4]]").flops, 32768);
  EXPECT_EQ(of("aten::baddbmm", "[[8, 16, 4], [8, 16, 32], [8, 32, 4], [], []]").flops, 32768);
  // mv [100, 50] x [50]: 100 dot products of 50: 10,000. dot of two [1000]: 2,000.
  EXPECT_EQ(of("aten::mv", "[[100, 50], [50]]").flops, 10000);
  EXPECT_EQ(of("aten::dot", "[[1000], [1000]]").flops, 2000);
  // Inner sizes that do not match are no product: not counted (-1), never a guess.
  EXPECT_EQ(of("aten::mm", "[[64, 128], [127, 32]]").flops, -1);
  EXPECT_EQ(of("aten::mm", "[[], []]").flops, -1);
  // Shapes not recorded: the rule applies (matmul class) but counts nothing.
  const OpFlops none = op_flops("aten::mm", OpInputs());
  EXPECT_EQ(none.cls, FlopClass::Matmul);
  EXPECT_EQ(none.flops, -1);
  // bytes: the inputs and the output, at the inputs' dtype (bf16: 2 bytes):
  // (64*128 + 128*32 + 64*32) * 2 = (8192 + 4096 + 2048) * 2 = 28,672.
  const OpFlops bf16 = of("aten::mm", "[[64, 128], [128, 32]]", "['c10::BFloat16', 'c10::BFloat16']");
  EXPECT_EQ(bf16.bytes, 28672);
  EXPECT_EQ(bf16.dtype, FlopDtype::Bf16);
}

TEST(FlopRules, ConvolutionsAllDimsGroupsAndTransposed) {
  // Conv2d(4 -> 8, 3x3, stride 2, padding 1, groups 2) on [2, 4, 16, 16]: output [2, 8, 8, 8]
  // ((16 + 2 - 2 - 1) / 2 + 1 = 8). Each output element sums C_in/groups * 3 * 3 = 18 products:
  // 2*8*8*8 = 1024 outputs * 18 = 18,432 multiply-adds = 36,864 FLOPs.
  const char* conv = "['', '', '', '[2, 2]', '[1, 1]', '[1, 1]', 'False', '[0, 0]', '2']";
  EXPECT_EQ(conv_output_shape({2, 4, 16, 16}, {8, 2, 3, 3}, {2, 2}, {1, 1}, {1, 1}, false, {0, 0}, 2),
            (Shape{2, 8, 8, 8}));
  EXPECT_EQ(
      of("aten::convolution", "[[2, 4, 16, 16], [8, 2, 3, 3], [8], [], [], [], [], [], []]",
         "['float', 'float', 'float', 'ScalarList', 'ScalarList', 'ScalarList', 'Scalar', 'ScalarList', 'Scalar']",
         conv)
          .flops,
      36864);
  // ConvTranspose2d(8 -> 4, 3x3, stride 2) on [2, 8, 8, 8]: each of the 2*8*8*8 = 1024 input
  // elements is multiplied into 4 output channels x 3 x 3 positions: 36,864 multiply-adds =
  // 73,728 FLOPs (FlopCounterMode counts a transposed convolution over the input's positions).
  EXPECT_EQ(of("aten::convolution", "[[2, 8, 8, 8], [8, 4, 3, 3], [4], [], [], [], [], [], []]", "",
               "['', '', '', '[2, 2]', '[0, 0]', '[1, 1]', 'True', '[0, 0]', '1']")
                .flops,
            73728);
  // 1-d and 3-d: Conv1d(3 -> 5, k=4) on [7, 3, 20]: 17 outputs per channel, 3*4 products each:
  // 7*5*17*12*2 = 14,280. Conv3d(2 -> 6, 3x3x3, padding 1) on [1, 2, 4, 4, 4]: 6*64 outputs of
  // 2*27 products: 6*64*54*2 = 41,472.
  EXPECT_EQ(of("aten::convolution", "[[7, 3, 20], [5, 3, 4], [], [], [], [], [], [], []]", "",
               "['', '', '', '[1]', '[0]', '[1]', 'False', '[0]', '1']")
                .flops,
            14280);
  EXPECT_EQ(of("aten::convolution", "[[1, 2, 4, 4, 4], [6, 2, 3, 3, 3], [], [], [], [], [], [], []]", "",
               "['', '', '', '[1, 1, 1]', '[1, 1, 1]', '[1, 1, 1]', 'False', '[0, 0, 0]', '1']")
                .flops,
            41472);
  // Dilation 2 widens a 3-tap kernel to 5: (20 - 5) / 1 + 1 = 16 outputs.
  EXPECT_EQ(conv_output_shape({1, 1, 20}, {1, 1, 3}, {1}, {0}, {2}, false, {0}, 1), (Shape{1, 1, 16}));
  // A transposed output's size: (8 - 1) * 2 - 0 + (3 - 1) + 1 (output_padding) + 1 = 18.
  EXPECT_EQ(conv_output_shape({2, 8, 8, 8}, {8, 4, 3, 3}, {2, 2}, {0, 0}, {1, 1}, true, {1, 1}, 1),
            (Shape{2, 4, 18, 18}));
  // A non-transposed convolution's output size needs stride and padding: a trace without
  // Concrete Inputs leaves it uncounted, never guessed.
  EXPECT_EQ(of("aten::convolution", "[[2, 4, 16, 16], [8, 2, 3, 3], [8], [], [], [], [], [], []]").flops, -1);
  // The backward of the grouped convolution above, [False, True, True] (no input gradient: the
  // net's first layer). FlopCounterMode counts the weight gradient as a convolution of the input
  // (channels as batch: 4) with grad_out: 3*3 * 8*8 * 4 * 8 * 2 * 2 = 73,728, which is twice the
  // 36,864 the grouped weight gradient does (its C_in is the whole input's 4, not 4/groups): torch's
  // count is kept, so that the two agree.
  const char* backward_concrete =
      "['', '', '', '[8]', '[2, 2]', '[1, 1]', '[1, 1]', 'False', '[0, 0]', '2', '%s']";
  char buf[200];
  std::snprintf(buf, sizeof buf, backward_concrete, "[False, True, True]");
  const char* backward_shapes = "[[2, 8, 8, 8], [2, 4, 16, 16], [8, 2, 3, 3], [], [], [], [], [], [], [], []]";
  EXPECT_EQ(of("aten::convolution_backward", backward_shapes, "", buf).flops, 73728);
  // With the input gradient too: a transposed convolution of grad_out with the weight, as many
  // products as the forward (36,864).
  std::snprintf(buf, sizeof buf, backward_concrete, "[True, True, True]");
  EXPECT_EQ(of("aten::convolution_backward", backward_shapes, "", buf).flops, 73728 + 36864);
  EXPECT_EQ(conv_backward_flops({2, 8, 8, 8}, {2, 4, 16, 16}, {8, 2, 3, 3}, false, true, false), 36864);
}

TEST(FlopRules, Attention) {
  // q, k, v [2, 2, 8, 16]: QK^T is 4 (b*h) products of [8, 16] x [16, 8]: 4*8*8*16*2 = 8,192;
  // scores x V the same: 16,384. The backward does five such products: 40,960.
  EXPECT_EQ(sdpa_flops({2, 2, 8, 16}, {2, 2, 8, 16}, {2, 2, 8, 16}), 16384);
  EXPECT_EQ(sdpa_backward_flops({2, 2, 8, 16}, {2, 2, 8, 16}, {2, 2, 8, 16}, {2, 2, 8, 16}), 40960);
  EXPECT_EQ(of("aten::_scaled_dot_product_flash_attention_for_cpu",
               "[[2, 2, 8, 16], [2, 2, 8, 16], [2, 2, 8, 16], [], [], [], []]")
                .flops,
            16384);
  EXPECT_EQ(of("aten::_scaled_dot_product_efficient_attention_backward",
               "[[2, 2, 8, 16], [2, 2, 8, 16], [2, 2, 8, 16], [2, 2, 8, 16], [], [2, 2, 8, 16]]")
                .flops,
            40960);
  // Grouped-query attention: 8 query heads over 2 key/value heads, [1, 8, 16, 64] x [1, 2, 16, 64]:
  // every query head does its products: 2 * (8*16*16*64*2) = 2 * 262,144 = 524,288.
  EXPECT_EQ(sdpa_flops({1, 8, 16, 64}, {1, 2, 16, 64}, {1, 2, 16, 64}), 524288);
  EXPECT_EQ(sdpa_flops({1, 8, 16, 64}, {1, 3, 16, 64}, {1, 3, 16, 64}), -1);   // 8 heads do not group by 3
}

TEST(FlopRules, TheOtherClass) {
  // add of [4, 1, 3] and [5, 3] broadcasts to [4, 5, 3]: 60 additions.
  const OpFlops add = of("aten::add", "[[4, 1, 3], [5, 3], []]", "['float', 'float', 'Scalar']");
  EXPECT_EQ(add.cls, FlopClass::Other);
  EXPECT_EQ(add.flops, 60);
  // bytes: (12 + 15) inputs + 60 output, 4 bytes each = 348; in place (add_), no new output: 108.
  EXPECT_EQ(add.bytes, 348);
  EXPECT_EQ(of("aten::add_", "[[4, 5, 3], [4, 5, 3], []]", "['float', 'float', 'Scalar']").bytes, 480);
  // A 0-d tensor (Adam's step count: step.add_(1)) prints as [] and is one element.
  EXPECT_EQ(of("aten::add_", "[[], [], []]").flops, 1);
  // softmax over [32, 100]: 5 per element (max, subtract, exp, sum, divide): 16,000.
  EXPECT_EQ(of("aten::_softmax", "[[32, 100], [], []]").flops, 16000);
  // sum of [10, 10]: 100 additions (one per input element).
  EXPECT_EQ(of("aten::sum", "[[10, 10], []]").flops, 100);
  // A foreach over a list of [10, 20] and [10] (210 elements): 210; addcmul-like: 420.
  EXPECT_EQ(of("aten::_foreach_add_", "[[[10, 20], [10]], [[10, 20], [10]], []]").flops, 210);
  EXPECT_EQ(of("aten::_foreach_addcmul_", "[[[10, 20], [10]], [[10, 20], [10]], [[10, 20], [10]], []]").flops,
            420);
  // No rule: no class, nothing counted.
  EXPECT_EQ(of("aten::view", "[[10, 10], []]").cls, FlopClass::None);
  EXPECT_EQ(flop_class_of("aten::linear"), FlopClass::None);   // it counts at the addmm it runs
}

TEST(FlopCount, OnceAtTheOutermostOpWithARule) {
  Trace t;
  // Forward: aten::linear -> aten::t, aten::addmm (counts: 2*4*8*16 = 1,024).
  op(t, "aten::linear", 0, 100, "[[4, 16], [8, 16], [8]]");
  op(t, "aten::t", 5, 10, "[[8, 16]]");
  op(t, "aten::addmm", 10, 90, "[[8], [4, 16], [16, 8], [], []]");
  // aten::relu -> aten::clamp_min: counts once, at relu (4*8 = 32).
  op(t, "aten::relu", 100, 120, "[[4, 8]]");
  op(t, "aten::clamp_min", 101, 119, "[[4, 8], []]");
  // aten::convolution -> aten::_convolution -> aten::mkldnn_convolution: once, at convolution
  // (Conv1d 2 -> 2, k=3 on [1, 2, 5]: 3 outputs * 2 channels * 6 products * 2 = 72).
  op(t, "aten::convolution", 130, 200, "[[1, 2, 5], [2, 2, 3], [], [], [], [], [], [], []]");
  args(t, "['float', 'float', '']", "['', '', '', '[1]', '[0]', '[1]', 'False', '[0]', '1']");
  op(t, "aten::_convolution", 131, 199, "[[1, 2, 5], [2, 2, 3], [], [], [], [], [], [], [], [], [], [], []]");
  args(t, "['float', 'float', '']", "['', '', '', '[1]', '[0]', '[1]', 'False', '[0]', '1']");
  op(t, "aten::mkldnn_convolution", 132, 198, "[[1, 2, 5], [2, 2, 3], [], [], [], [], []]");
  // A matrix product inside another-class op still counts (the other op's rule does not cover it).
  op(t, "aten::mse_loss", 200, 260, "[[4, 8], [4, 8], []]");
  op(t, "aten::mm", 210, 220, "[[2, 2], [2, 2]]");
  // Backward: the mm inside autograd's entry is backward work (2*4*16*8 = 1,024); a recomputed
  // forward (it recorded autograd history: activation checkpointing) is recompute.
  op(t, "autograd::engine::evaluate_function: AddmmBackward0", 300, 400);
  op(t, "AddmmBackward0", 301, 399);
  op(t, "aten::mm", 302, 350, "[[4, 8], [8, 16]]");
  op(t, "autograd::engine::evaluate_function: CheckpointFunctionBackward", 400, 500);
  Event& again = op(t, "aten::addmm", 410, 490, "[[8], [4, 16], [16, 8], [], []]");
  again.flags |= kGradRecordedFlag;
  // An mm without its shapes: a rule applies, its inputs were not recorded.
  op(t, "aten::mm", 500, 510);
  // with_flops: aten::conv2d carries torch's count, but the rule counts its aten::convolution
  // (so the arg is not added again); an op no rule covers counts by its arg.
  op(t, "aten::conv2d", 600, 700);
  args(t, "", "", 999);
  op(t, "aten::convolution", 601, 699, "[[1, 2, 5], [2, 2, 3], [], [], [], [], [], [], []]");
  args(t, "", "['', '', '', '[1]', '[0]', '[1]', 'False', '[0]', '1']", 72);   // agrees with the rule
  op(t, "my::custom_op", 700, 750);
  args(t, "", "", 5000);

  const LaunchLinks links = link_launches(t);
  const FlopCounts c = count_flops(t, links);
  std::map<std::string, int64_t> by_name;
  std::map<FlopPhase, int64_t> by_phase;
  for (const CountedOp& o : c.ops) {
    by_name[t.name_of(t.events[o.event])] += o.flops;
    by_phase[o.phase] += o.flops;
  }
  EXPECT_EQ(by_name["aten::addmm"], 1024 * 2);   // the forward's and the recomputed one
  EXPECT_EQ(by_name["aten::relu"], 32);
  EXPECT_EQ(by_name.count("aten::clamp_min"), 0u);
  EXPECT_EQ(by_name["aten::convolution"], 72 * 2);
  EXPECT_EQ(by_name.count("aten::_convolution"), 0u);
  EXPECT_EQ(by_name["aten::mse_loss"], 3 * 32);
  EXPECT_EQ(by_name["aten::mm"], 16 + 1024);
  EXPECT_EQ(by_name.count("aten::conv2d"), 0u);
  EXPECT_EQ(by_name["my::custom_op"], 5000);
  EXPECT_EQ(by_phase[FlopPhase::Backward], 1024);
  EXPECT_EQ(by_phase[FlopPhase::Recompute], 1024);
  ASSERT_EQ(c.uncounted.size(), 1u);
  EXPECT_EQ(t.name_of(t.events[c.uncounted[0]]), "aten::mm");
  EXPECT_EQ(c.trace_args_checked, 1);
  EXPECT_EQ(c.trace_args_differ, 0);

  // Per step: one step over everything. Matrix-class forward: addmm 1,024 + conv 72 * 2 + mm 16.
  BreakdownResult steps;
  StepBreakdown s;
  s.step = 1;
  s.start_ns = 0;
  s.end_ns = 1000;
  steps.steps.push_back(s);
  const std::vector<StepFlops> per_step = step_flops(t, c, steps);
  ASSERT_EQ(per_step.size(), 1u);
  EXPECT_EQ(per_step[0].matmul_forward, 1024 + 144 + 16);
  EXPECT_EQ(per_step[0].other, 32 + 96 + 5000);
  EXPECT_EQ(per_step[0].uncounted_calls, 1);
  EXPECT_TRUE(per_step[0].backward_ran);
  EXPECT_EQ(per_step[0].total, per_step[0].forward + per_step[0].backward + per_step[0].recompute);

  // The operator table carries each row's counted FLOPs.
  const std::vector<OperatorRow> rows = operator_table(t, links, &c);
  int64_t total = 0;
  for (const OperatorRow& r : rows) total += r.flops;
  EXPECT_EQ(total, per_step[0].total);
}

TEST(Roofline, IntensityAndAchievedRate) {
  // An mm of [64, 64] x [64, 64] in fp32: 2 * 64^3 = 524,288 FLOPs over 4 * 3 * 64^2 = 49,152
  // bytes (two inputs and the output): 10.67 FLOP/byte; 1 us on the host: 0.524 TFLOP/s.
  OperatorRow mm;
  mm.name = "aten::mm";
  mm.flops = 2 * 64 * 64 * 64;
  mm.flop_bytes = 4 * 3 * 64 * 64;
  mm.flop_class = FlopClass::Matmul;
  mm.calls = 1;
  mm.host_total_ns = 1000;
  // An add on the device: its kernels' time (300 ns), not its host time.
  OperatorRow addition;
  addition.name = "aten::add";
  addition.flops = 100;
  addition.flop_bytes = 1200;
  addition.flop_class = FlopClass::Other;
  addition.calls = 1;
  addition.device_total_ns = 300;
  addition.host_total_ns = 50;
  OperatorRow view;   // no FLOPs: not on the roofline
  view.name = "aten::view";
  const std::vector<RooflineRow> rows = roofline_rows({addition, mm, view});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].name, "aten::mm");   // the longest first
  EXPECT_NEAR(rows[0].intensity, 10.6667, 1e-3);
  EXPECT_NEAR(rows[0].achieved_flops_per_s, 524288.0 / 1e-6, 1.0);
  EXPECT_FALSE(rows[0].on_device);
  EXPECT_EQ(rows[1].time_ns, 300);
  EXPECT_TRUE(rows[1].on_device);
  EXPECT_NEAR(rows[1].intensity, 1.0 / 12.0, 1e-9);
}

TEST(FlopCount, AnOuterCallWithoutItsInputsLeavesTheCountToTheInnerOne) {
  // Under autocast, aten::mm casts its inputs and calls aten::mm again; live, only the inner call's
  // inputs are captured. The inner call counts (bf16: 2*4*8*16 = 1,024), and the outer one is
  // neither counted twice nor reported as missing its inputs.
  Trace t;
  op(t, "aten::mm", 0, 100);
  op(t, "aten::_to_copy", 5, 10, "[[4, 16], [], [], [], [], [], []]");
  op(t, "aten::mm", 20, 90, "[[4, 16], [16, 8]]");
  args(t, "['c10::BFloat16', 'c10::BFloat16']", "");
  const FlopCounts c = count_flops(t, link_launches(t));
  ASSERT_EQ(c.ops.size(), 1u);
  EXPECT_EQ(c.ops[0].event, 2u);
  EXPECT_EQ(c.ops[0].flops, 1024);
  EXPECT_EQ(c.ops[0].dtype, FlopDtype::Bf16);
  EXPECT_TRUE(c.uncounted.empty());
}

TEST(FlopCount, AConvolutionWithoutItsStrideTakesItsOutputFromItsBackward) {
  // Traces before torch 2.1 record no Concrete Inputs: the stride-2 convolution's output
  // [32, 64, 112, 112] is the grad_output of the backward with the same input and weight shapes.
  // ResNet-50's first layer: 112*112 outputs * 64 channels * 3*7*7 products * 32 images * 2 =
  // 7,552,892,928 FLOPs (118 MFLOPs per image, the figure the ResNet paper's 3.8 GFLOP total has).
  Trace t;
  op(t, "aten::convolution", 0, 10, "[[32, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], [], [], []]");
  op(t, "CudnnConvolutionBackward", 20, 40);   // old traces: the node's range, no engine range
  op(t, "aten::cudnn_convolution_backward", 21, 39,
     "[[32, 3, 224, 224], [32, 64, 112, 112], [64, 3, 7, 7], [], [], [], [], [], [], [], []]");
  const FlopCounts c = count_flops(t, link_launches(t));
  ASSERT_EQ(c.ops.size(), 2u);
  EXPECT_EQ(c.ops[0].flops, 7552892928LL);
  // Its backward, both gradients assumed (no output_mask recorded): the input gradient as many
  // products as the forward; the weight gradient 7*7 * 112*112 * 3 * 64 * 32 * 2, the same again.
  EXPECT_EQ(c.ops[1].flops, 2 * 7552892928LL);
  EXPECT_EQ(c.ops[1].phase, FlopPhase::Backward);
}

TEST(FlopImport, KinetoArgsReachTheTrace) {
  const std::string json = R"({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::convolution", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
     "args": {"External id": 2, "Sequence number": 5, "Input Dims": [[2, 4, 16, 16], [8, 2, 3, 3], [8], [], [], [], [], [], []],
              "Input type": ["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"],
              "Concrete Inputs": ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "2"], "flops": 36864}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, "dur": 5,
     "args": {"External id": 3, "Input Dims": [[2, 2], [2, 2]]}}
  ]})";
  const Trace t = import_kineto_json(json, "flops.json");
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_TRUE(t.events[0].flags & kGradRecordedFlag);
  EXPECT_FALSE(t.events[1].flags & kGradRecordedFlag);
  ASSERT_EQ(t.op_args.size(), 1u);
  const OpArgs* a = t.op_args_of(0);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(t.strings.at(a->concrete), "['', '', '', '[2, 2]', '[1, 1]', '[1, 1]', 'False', '[0, 0]', '2']");
  EXPECT_EQ(a->trace_flops, 36864);
  EXPECT_EQ(t.op_args_of(1), nullptr);
  const FlopCounts c = count_flops(t, link_launches(t));
  ASSERT_EQ(c.ops.size(), 2u);
  EXPECT_EQ(c.ops[0].flops, 36864);
  EXPECT_EQ(c.ops[0].dtype, FlopDtype::Fp32);
  EXPECT_EQ(c.trace_args_checked, 1);
  EXPECT_EQ(c.trace_args_differ, 0);
  EXPECT_EQ(c.ops[1].flops, 16);
}
