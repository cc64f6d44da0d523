// The FLOP rules' own vocabulary, shared by flops.cpp (the rule table and the per-call formulas) and
// flop_counts.cpp (the counts over a trace): the kind of rule an operator has and how to find it.
// Private to cpp/src/analysis; the public API is gpuprof/analysis/flops.h.
#pragma once
#include <cstdint>
#include <string_view>

#include "gpuprof/analysis/flops.h"

namespace gpuprof::flop_rule {

enum class Kind : uint8_t {
  Mm,            // self, mat2
  Addmm,         // self (bias), mat1, mat2
  Bmm,           // self, mat2
  Baddbmm,       // self, batch1, batch2 (also addbmm)
  Mv,            // self, vec
  Addmv,         // self, mat, vec
  Dot,           // self, other
  Conv,          // input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
  CudnnConv,     // self, weight, padding, stride, dilation, groups, ...
  SlowConv2d,    // self, weight, kernel_size, bias, stride, padding
  ConvBackward,   // grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding,
                  // groups, output_mask
  OldConvBackward,   // self, grad_output, weight, padding, stride, dilation, groups, ..., output_mask (torch
                     // < 1.11)
  Sdpa,   // query, key, value, ...
  SdpaBackward,   // grad_out, query, key, value, ...
  Elementwise,   // output = the broadcast of the tensor inputs
  Reduction,   // counted over the first input's elements
  Rowwise,   // softmax, normalizations: over the first input's elements, an output of its size
  Foreach,   // tensor lists: over the first list's elements
};

struct Rule {
  Kind kind;
  int per_element;   // FLOPs per element (Elementwise, Reduction, Rowwise, Foreach)
  const char* what;
};

// The rule of an operator ("aten::mm", "mm"; an in-place "add_" has add's), nullptr when none.
const Rule* rule_of(std::string_view op_name);

// Autograd's backward: the engine's "autograd::engine::evaluate_function: MmBackward0" ranges
// (torch 1.10 on), and the nodes themselves ("MmBackward0", "CudnnConvolutionBackward" in older
// traces, which have no engine ranges): every backward op runs inside one.
bool is_backward_scope(std::string_view name);

// Input i's shape, empty when the call recorded fewer inputs.
inline const Shape& shape_at(const OpInputs& in, size_t i) {
  static const Shape kNone;
  return i < in.shapes.size() ? in.shapes[i] : kNone;
}

}   // namespace gpuprof::flop_rule
