// FLOPs of operator calls, from their names and input shapes (and dtypes, and the scalar inputs
// convolutions need): one pure function per rule, with the counting rules of torch's own
// reference, torch.utils.flop_counter.FlopCounterMode (a multiply-add is 2 FLOPs; only the
// products of a matrix product or convolution count). docs/metrics.md ("FLOPs") lists every rule.
//
// Over a Trace, the FLOPs of an operator call count once: at the outermost op on its thread that
// has a rule (aten::linear -> aten::addmm counts at addmm; aten::convolution counts, the
// aten::_convolution and backend ops inside it do not), as FlopCounterMode, which sees only the
// ops that reach its dispatch mode, counts them. Matrix-class ops (products, convolutions,
// attention) and the rest (elementwise, reductions, normalizations, optimizer updates) are
// counted apart.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/core/trace.h"

namespace gpuprof {

enum class FlopClass : uint8_t { None = 0, Matmul, Other };
// Where a call ran in the training step (docs/metrics.md, "MFU and HFU").
enum class FlopPhase : uint8_t { Forward = 0, Backward, Recompute };
// The data types the peak table has rows for; Unknown where the inputs' types were not recorded.
enum class FlopDtype : uint8_t { Unknown = 0, Fp64, Fp32, Bf16, Fp16, Fp8, Int8, Other };
constexpr int kNumFlopDtypes = 8;

const char* flop_class_key(FlopClass c);   // "", "matmul", "other"
const char* flop_dtype_key(FlopDtype d);   // "unknown", "fp64", "fp32", "bf16", "fp16", "fp8", "int8", "other"
// A dtype as torch names it ("float", "c10::BFloat16", Kineto's "Input type" and
// caffe2::TypeMeta::name()), and its size in bytes (0: not a tensor type: "Scalar", "", ...).
FlopDtype dtype_of(std::string_view torch_name);
int element_bytes(std::string_view torch_name);

using Shape = std::vector<int64_t>;

// ---- The rules (each -1 when the shapes do not fit it) ------------------------------------------
// [m, k] x [k, n]: m*n*k multiply-adds, 2mnk FLOPs (mm, addmm's product, _scaled_mm, linear).
int64_t mm_flops(const Shape& a, const Shape& b);
// [b, m, k] x [b, k, n]: 2bmnk (bmm, baddbmm's product, addbmm).
int64_t bmm_flops(const Shape& a, const Shape& b);
// [m, n] x [n]: 2mn (mv, addmv). [n] . [n]: 2n (dot, vdot).
int64_t mv_flops(const Shape& a, const Shape& x);
int64_t dot_flops(const Shape& a, const Shape& b);
// torch's conv_flop_count: 2 x N x C_out x (C_in / groups, the weight's second size) x the
// kernel's size x the spatial size of the output (of the input when transposed).
int64_t conv_flops(const Shape& x, const Shape& w, const Shape& out, bool transposed);
// The output shape of a convolution (empty when the parameters do not fit the input).
Shape conv_output_shape(const Shape& x, const Shape& w, const Shape& stride, const Shape& padding,
                        const Shape& dilation, bool transposed, const Shape& output_padding, int64_t groups);
// convolution_backward as FlopCounterMode counts it: the input gradient as a transposed
// convolution of grad_out with the weight, the weight gradient as a convolution of the input with
// grad_out, each when its output_mask entry asks for it (the bias gradient is not counted).
int64_t conv_backward_flops(const Shape& grad_out, const Shape& x, const Shape& w, bool transposed,
                            bool grad_input, bool grad_weight);
// Attention over [b, h, s, d] query, key and value: QK^T and (scores)V, 2 x 2 b h s_q s_k d
// (causal masks and dropout not discounted, as FlopCounterMode). Backward: the scores recomputed,
// and the gradients of scores, V, Q and K: five such products.
int64_t sdpa_flops(const Shape& q, const Shape& k, const Shape& v);
int64_t sdpa_backward_flops(const Shape& grad_out, const Shape& q, const Shape& k, const Shape& v);
// The elements of a shape (1 for a 0-d tensor), -1 for a negative size.
int64_t numel(const Shape& s);
// Broadcast of two shapes (numpy rules); empty and false when they do not broadcast.
bool broadcast_shape(const Shape& a, const Shape& b, Shape* out);

// One op's inputs as the rules read them, parsed from a Trace's texts (trace.h, list_text.h).
struct OpInputs {
  bool has_shapes = false;
  std::vector<Shape> shapes;           // per input; empty for a non-tensor (and for a 0-d tensor)
  std::vector<uint8_t> is_list;        // per input: a tensor list (foreach ops), whose sizes are in list_numel
  std::vector<int64_t> list_numel;     // per input: a tensor list's summed elements
  std::vector<std::string> types;   // per input ("float", "c10::BFloat16", "Scalar", ""); empty: not recorded
  std::vector<std::string> concrete;   // per input (scalars and lists as text); empty: not recorded
  // A convolution's output shape when its stride and padding were not recorded (traces before
  // torch 2.1 have no Concrete Inputs): the grad_output of the backward of a convolution with
  // the same input and weight shapes in the same trace (count_flops finds it).
  Shape conv_output_hint;
};
OpInputs parse_op_inputs(std::string_view shapes, std::string_view types, std::string_view concrete);

// What one call of an op counts.
struct OpFlops {
  FlopClass cls = FlopClass::None;   // None: no rule for this name
  int64_t flops = -1;   // -1: a rule applies but the inputs it needs were not recorded
  int64_t bytes = -1;   // the tensors it reads and writes, from shapes and dtypes; -1 unknown
  FlopDtype dtype = FlopDtype::Unknown;
};
// The rule's class for an operator name ("aten::mm" or "mm"), None when there is none.
FlopClass flop_class_of(std::string_view op_name);
OpFlops op_flops(std::string_view op_name, const OpInputs& in);
// The rules' table for the docs and their test: (name, class, FLOPs per element for the
// elementwise ones or 0 for the matrix ones, a short description).
struct FlopRuleInfo {
  std::string name;
  FlopClass cls;
  int per_element;
  std::string what;
};
std::vector<FlopRuleInfo> flop_rules();

// ---- Over a Trace ------------------------------------------------------------------------------
// One host op whose FLOPs count (the outermost with a rule on its thread, or, where no rule
// counts its calls, one that carries a trace's `flops` arg).
struct CountedOp {
  uint32_t event = 0;
  int64_t flops = 0;
  int64_t bytes = -1;
  FlopClass cls = FlopClass::Other;
  FlopPhase phase = FlopPhase::Forward;
  FlopDtype dtype = FlopDtype::Unknown;
  bool from_trace_arg = false;   // the trace's `flops` arg, not a rule
};
struct FlopCounts {
  std::vector<CountedOp> ops;   // by event index
  std::vector<uint32_t> uncounted;   // outermost ops with a rule whose inputs were not recorded
  int64_t trace_args_checked = 0;   // counted ops that also carry a trace `flops` arg
  int64_t trace_args_differ = 0;   // ... whose value is not the rule's
  std::vector<int64_t> backward_starts;   // where the outermost backward ranges start (sorted)
};
// `outer_first`: host_ops_outer_first(trace) when the caller has it (it is not sorted again).
FlopCounts count_flops(const Trace& trace, const LaunchLinks& links,
                       const std::vector<uint32_t>* outer_first = nullptr);

// The FLOPs executed in each step (ops counted in the step they start in).
struct StepFlops {
  int64_t step = 0;
  int64_t total = 0;
  int64_t matmul = 0;
  int64_t other = 0;
  int64_t matmul_forward = 0;   // matrix-class FLOPs of the forward pass (MFU's model FLOPs / 3)
  int64_t forward = 0;
  int64_t backward = 0;
  int64_t recompute = 0;   // forward ops run again inside the backward (activation checkpointing)
  int64_t other_calls = 0;   // counted other-class calls
  int64_t uncounted_calls = 0;   // ops with a rule but without their inputs
  int64_t uncounted_matmul_calls = 0;
  bool backward_ran = false;   // the step ran a backward pass (autograd's engine)
  std::array<int64_t, kNumFlopDtypes> matmul_by_dtype{};
};
std::vector<StepFlops> step_flops(const Trace& trace, const FlopCounts& counts, const BreakdownResult& steps);

// ---- The roofline ------------------------------------------------------------------------------
// One row per operator row with FLOPs (tables.h: OperatorRow, by name and shapes): its arithmetic
// intensity (FLOPs / bytes moved) and achieved rate over its time (device time of its kernels and
// those of the ops inside it; host time where it launched none). Whether it is memory- or
// compute-bound depends on the device's ridge point (peak FLOP/s / bytes/s), which the peak table
// gives in Python (gpuprof/analysis/flops.py): an op whose intensity is below it is memory-bound.
struct RooflineRow {
  std::string name;
  std::string input_shapes;
  FlopClass cls = FlopClass::Other;
  int64_t calls = 0;
  int64_t flops = 0;
  int64_t bytes = -1;
  int64_t time_ns = 0;
  bool on_device = false;
  double intensity = -1.0;   // FLOP/byte; -1 where the bytes are unknown
  double achieved_flops_per_s = 0.0;
};
struct OperatorRow;
// Every operator row with FLOPs, the longest time first.
std::vector<RooflineRow> roofline_rows(const std::vector<OperatorRow>& operators);

}   // namespace gpuprof
