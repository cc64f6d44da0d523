// FLOPs per operator call (flops.h; the counts over a trace are in flop_counts.cpp). The rule for
// each operator name is in the table of rules() below; the matrix-class rules follow
// torch/utils/flop_counter.py (FlopCounterMode) formula for formula, including where it is generous
// (a grouped convolution's weight gradient, causal attention).
#include "gpuprof/analysis/flops.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <map>
#include <unordered_map>

#include "flop_rules.h"
#include "gpuprof/analysis/tables.h"
#include "gpuprof/analysis/tensor_cores.h"
#include "gpuprof/core/list_text.h"

namespace gpuprof {

namespace {

using flop_rule::Kind;
using flop_rule::Rule;
using flop_rule::rule_of;
using flop_rule::shape_at;

bool starts_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(0, p.size()) == p;
}

// Products that would not fit 64 bits are "unknown" (-1), never a wrapped number.
int64_t mul(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return -1;
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return -1;
  return r;
}
int64_t mul(std::initializer_list<int64_t> xs) {
  int64_t r = 1;
  for (int64_t x : xs) r = mul(r, x);
  return r;
}
int64_t add(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return -1;
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return -1;
  return r;
}
int64_t prod(const Shape& s, size_t from) {
  int64_t r = 1;
  for (size_t i = from; i < s.size(); ++i) r = mul(r, s[i]);
  return r;
}

// FlopCounterMode's t(): the first two sizes swapped.
Shape swap01(const Shape& s) {
  Shape r = s;
  if (r.size() >= 2) std::swap(r[0], r[1]);
  return r;
}

// Names without "aten::"; an in-place variant (trailing "_") has its out-of-place name's rule.
const std::unordered_map<std::string_view, Rule>& rules() {
  static const std::unordered_map<std::string_view, Rule> table = [] {
    std::unordered_map<std::string_view, Rule> t;
    // Matrix products (FlopCounterMode's mm, addmm, bmm, baddbmm, _scaled_mm).
    t["mm"] = {Kind::Mm, 0, "[m, k] x [k, n]: 2mnk"};
    t["_scaled_mm"] = {Kind::Mm, 0, "[m, k] x [k, n] (fp8): 2mnk"};
    t["_int_mm"] = {Kind::Mm, 0, "[m, k] x [k, n] (int8): 2mnk (not counted by FlopCounterMode)"};
    t["addmm"] = {Kind::Addmm, 0, "bias + [m, k] x [k, n]: 2mnk (the bias add not counted)"};
    t["_addmm_activation"] = {Kind::Addmm, 0, "as addmm (not counted by FlopCounterMode)"};
    t["bmm"] = {Kind::Bmm, 0, "[b, m, k] x [b, k, n]: 2bmnk"};
    t["baddbmm"] = {Kind::Baddbmm, 0, "self + [b, m, k] x [b, k, n]: 2bmnk"};
    t["addbmm"] = {Kind::Baddbmm, 0,
                   "self + sum over b of [b, m, k] x [b, k, n]: 2bmnk (not counted by FlopCounterMode)"};
    t["mv"] = {Kind::Mv, 0, "[m, n] x [n]: 2mn (not counted by FlopCounterMode)"};
    t["addmv"] = {Kind::Addmv, 0, "self + [m, n] x [n]: 2mn (not counted by FlopCounterMode)"};
    t["dot"] = {Kind::Dot, 0, "[n] . [n]: 2n (not counted by FlopCounterMode)"};
    t["vdot"] = {Kind::Dot, 0, "[n] . [n]: 2n (not counted by FlopCounterMode)"};
    // Convolutions (FlopCounterMode's convolution, _convolution, cudnn_convolution,
    // convolution_overrideable, _slow_conv2d_forward, convolution_backward).
    const char* conv = "2 x N x C_out x C_in/groups x kernel size x output size (input size when transposed)";
    t["convolution"] = {Kind::Conv, 0, conv};
    t["_convolution"] = {Kind::Conv, 0, conv};
    t["convolution_overrideable"] = {Kind::Conv, 0, conv};
    t["cudnn_convolution"] = {Kind::CudnnConv, 0, conv};
    t["_slow_conv2d_forward"] = {Kind::SlowConv2d, 0, conv};
    t["convolution_backward"] = {Kind::ConvBackward, 0,
                                 "input gradient as a transposed convolution of grad_out with the weight, weight "
                                 "gradient as a convolution of the input with grad_out, as output_mask asks"};
    const char* old =
        "as convolution_backward (torch before 1.11; both gradients when the trace has no Concrete Inputs)";
    t["cudnn_convolution_backward"] = {Kind::OldConvBackward, 0, old};
    t["miopen_convolution_backward"] = {Kind::OldConvBackward, 0, old};
    // Attention (FlopCounterMode's _scaled_dot_product_{flash,efficient,cudnn}_attention,
    // _flash_attention_forward, _efficient_attention_forward and their backwards).
    const char* sdpa = "QK^T and scores x V: 4 b h s_q s_k d (causal masks not discounted)";
    const char* sdpa_b = "the scores recomputed, then the gradients of scores, V, Q and K: 10 b h s_q s_k d";
    for (std::string_view n :
         {"_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
          "_scaled_dot_product_cudnn_attention", "_flash_attention_forward", "_efficient_attention_forward"})
      t[n] = {Kind::Sdpa, 0, sdpa};
    t["_scaled_dot_product_flash_attention_for_cpu"] = {
        Kind::Sdpa, 0, "as the other attention kernels (the CPU one; not counted by FlopCounterMode)"};
    for (std::string_view n :
         {"_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_efficient_attention_backward",
          "_scaled_dot_product_cudnn_attention_backward", "_flash_attention_backward",
          "_efficient_attention_backward"})
      t[n] = {Kind::SdpaBackward, 0, sdpa_b};
    t["_scaled_dot_product_flash_attention_for_cpu_backward"] = {
        Kind::SdpaBackward, 0, "as the other attention backwards (the CPU one; not counted by FlopCounterMode)"};

    // The other class: per element of the output (elementwise), of the first input (the rest).
    for (std::string_view n : {"add",
                               "sub",
                               "rsub",
                               "mul",
                               "div",
                               "neg",
                               "abs",
                               "reciprocal",
                               "sqrt",
                               "rsqrt",
                               "exp",
                               "exp2",
                               "expm1",
                               "log",
                               "log2",
                               "log10",
                               "log1p",
                               "sin",
                               "cos",
                               "tan",
                               "tanh",
                               "sigmoid",
                               "relu",
                               "relu6",
                               "leaky_relu",
                               "elu",
                               "selu",
                               "celu",
                               "gelu",
                               "silu",
                               "mish",
                               "hardtanh",
                               "hardsigmoid",
                               "hardswish",
                               "softplus",
                               "threshold",
                               "clamp",
                               "clamp_min",
                               "clamp_max",
                               "clip",
                               "maximum",
                               "minimum",
                               "pow",
                               "square",
                               "sign",
                               "erf",
                               "floor",
                               "ceil",
                               "round",
                               "trunc",
                               "fmod",
                               "remainder",
                               "eq",
                               "ne",
                               "lt",
                               "gt",
                               "le",
                               "ge",
                               "threshold_backward",
                               "hardtanh_backward",
                               "leaky_relu_backward",
                               "elu_backward",
                               "native_dropout_backward"})
      t[n] = {Kind::Elementwise, 1, "1 per output element"};
    for (std::string_view n : {"addcmul", "addcdiv", "lerp", "sigmoid_backward", "tanh_backward", "silu_backward",
                               "gelu_backward", "native_dropout", "dropout"})
      t[n] = {Kind::Elementwise, 2, "2 per output element"};
    for (std::string_view n : {"sum", "mean", "amax", "amin", "max", "min", "prod", "norm", "linalg_vector_norm",
                               "cumsum", "argmax", "argmin", "all", "any"})
      t[n] = {Kind::Reduction, 1, "1 per input element"};
    for (std::string_view n : {"var", "std", "var_mean", "std_mean"})
      t[n] = {Kind::Reduction, 3, "3 per input element (mean, deviation, square)"};
    for (std::string_view n : {"mse_loss", "mse_loss_backward"})
      t[n] = {Kind::Reduction, 3, "3 per input element"};
    for (std::string_view n : {"softmax", "_softmax", "log_softmax", "_log_softmax"})
      t[n] = {Kind::Rowwise, 5, "5 per element (max, subtract, exp, sum, divide)"};
    for (std::string_view n : {"_softmax_backward_data", "_log_softmax_backward_data"})
      t[n] = {Kind::Rowwise, 3, "3 per element"};
    for (std::string_view n : {"layer_norm", "native_layer_norm", "batch_norm", "_batch_norm_impl_index",
                               "native_batch_norm", "cudnn_batch_norm", "miopen_batch_norm",
                               "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "group_norm",
                               "native_group_norm", "rms_norm", "_fused_rms_norm"})
      t[n] = {Kind::Rowwise, 5, "5 per element (mean, variance, normalise)"};
    for (std::string_view n :
         {"native_layer_norm_backward", "native_batch_norm_backward", "cudnn_batch_norm_backward",
          "miopen_batch_norm_backward", "native_group_norm_backward", "_fused_rms_norm_backward"})
      t[n] = {Kind::Rowwise, 10, "10 per element"};
    for (std::string_view n :
         {"_foreach_add", "_foreach_sub", "_foreach_mul", "_foreach_div", "_foreach_neg", "_foreach_sqrt",
          "_foreach_exp", "_foreach_reciprocal", "_foreach_maximum", "_foreach_minimum", "_foreach_sign"})
      t[n] = {Kind::Foreach, 1, "1 per element of the first tensor list"};
    for (std::string_view n : {"_foreach_addcmul", "_foreach_addcdiv", "_foreach_lerp", "_foreach_norm"})
      t[n] = {Kind::Foreach, 2, "2 per element of the first tensor list"};
    for (std::string_view n : {"_fused_adam", "_fused_adamw"})
      t[n] = {Kind::Foreach, 12, "12 per parameter (the unfused update's arithmetic)"};
    t["_fused_sgd"] = {Kind::Foreach, 4, "4 per parameter (weight decay, momentum, update)"};
    return t;
  }();
  return table;
}

}  // namespace

namespace flop_rule {

bool is_backward_scope(std::string_view name) {
  if (starts_with(name, "autograd::engine::evaluate_function:")) return true;
  if (starts_with(name, "aten::")) return false;
  size_t end = name.size();
  while (end > 0 && name[end - 1] >= '0' && name[end - 1] <= '9') --end;
  constexpr std::string_view kNode = "Backward";
  return end >= kNode.size() && name.substr(end - kNode.size(), kNode.size()) == kNode;
}

static std::string_view op_key(std::string_view name) {
  if (starts_with(name, "aten::")) name.remove_prefix(6);
  return name;
}

const Rule* rule_of(std::string_view op_name) {
  const std::string_view key = op_key(op_name);
  const auto& t = rules();
  auto it = t.find(key);
  if (it != t.end()) return &it->second;
  if (!key.empty() && key.back() == '_') {   // in place: add_ is add
    it = t.find(key.substr(0, key.size() - 1));
    if (it != t.end() && it->second.kind >= Kind::Elementwise) return &it->second;
  }
  return nullptr;
}

}  // namespace flop_rule

namespace {

using flop_rule::op_key;

bool is_in_place(std::string_view op_name) {
  const std::string_view key = op_key(op_name);
  return !key.empty() && key.back() == '_' && key.front() != '_';
}

// A whole number's text; false when the text is not one.
bool parse_i64(std::string_view s, int64_t* out) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// A concrete input as a list of integers ("[2, 2]", "2"); false when it is not one.
bool concrete_ints(const OpInputs& in, size_t i, Shape* out) {
  out->clear();
  if (i >= in.concrete.size() || in.concrete[i].empty()) return false;
  const ListTree t = parse_list_text(in.concrete[i]);
  if (!t.ok()) return false;
  auto one = [&](uint32_t n) {
    int64_t v;
    if (t.nodes[n].kind != ListNode::Kind::Number || !parse_i64(t.nodes[n].text, &v)) return false;
    out->push_back(v);
    return true;
  };
  if (t.nodes[0].kind == ListNode::Kind::List) {
    for (uint32_t c : t.children(0))
      if (!one(c)) return false;
    return true;
  }
  return one(0);
}

// A concrete bool ("True", "False"); -1 when not recorded.
int concrete_bool(const OpInputs& in, size_t i) {
  if (i >= in.concrete.size()) return -1;
  if (in.concrete[i] == "True" || in.concrete[i] == "true") return 1;
  if (in.concrete[i] == "False" || in.concrete[i] == "false") return 0;
  return -1;
}

// A concrete list of bools ("[True, False, True]").
bool concrete_bools(const OpInputs& in, size_t i, std::vector<bool>* out) {
  out->clear();
  if (i >= in.concrete.size() || in.concrete[i].empty()) return false;
  const ListTree t = parse_list_text(in.concrete[i]);
  if (!t.ok() || t.nodes[0].kind != ListNode::Kind::List) return false;
  for (uint32_t c : t.children(0)) {
    if (t.nodes[c].kind == ListNode::Kind::True) out->push_back(true);
    else if (t.nodes[c].kind == ListNode::Kind::False) out->push_back(false);
    else return false;
  }
  return true;
}

// Bytes per element of input i: its recorded type, else that of the op's first tensor input,
// else 4 (an fp32 guess, the common case of a trace without "Input type").
int bytes_of_input(const OpInputs& in, size_t i, int fallback) {
  if (i < in.types.size()) {
    const int b = element_bytes(in.types[i]);
    if (b > 0) return b;
  }
  return fallback;
}

int op_element_bytes(const OpInputs& in) {
  for (size_t i = 0; i < in.types.size(); ++i) {
    const int b = element_bytes(in.types[i]);
    if (b > 0) return b;
  }
  return 4;
}

FlopDtype op_dtype(const OpInputs& in) {
  for (const std::string& t : in.types) {
    const FlopDtype d = dtype_of(t);
    if (d != FlopDtype::Unknown) return d;
  }
  return FlopDtype::Unknown;
}

// The bytes every tensor input occupies (a tensor list: its elements), -1 when a size overflows.
int64_t input_bytes(const OpInputs& in) {
  const int fallback = op_element_bytes(in);
  int64_t total = 0;
  for (size_t i = 0; i < in.shapes.size(); ++i) {
    const int64_t n = in.is_list[i] ? in.list_numel[i] : (in.shapes[i].empty() ? 0 : numel(in.shapes[i]));
    total = add(total, mul(n, bytes_of_input(in, i, fallback)));
  }
  return total;
}

int64_t with_output(const OpInputs& in, int64_t output_elements) {
  return add(input_bytes(in), mul(output_elements, op_element_bytes(in)));
}

}   // namespace

const char* flop_class_key(FlopClass c) {
  switch (c) {
    case FlopClass::Matmul: return "matmul";
    case FlopClass::Other: return "other";
    default: return "";
  }
}

const char* flop_dtype_key(FlopDtype d) {
  switch (d) {
    case FlopDtype::Fp64: return "fp64";
    case FlopDtype::Fp32: return "fp32";
    case FlopDtype::Bf16: return "bf16";
    case FlopDtype::Fp16: return "fp16";
    case FlopDtype::Fp8: return "fp8";
    case FlopDtype::Int8: return "int8";
    case FlopDtype::Other: return "other";
    default: return "unknown";
  }
}

FlopDtype dtype_of(std::string_view n) {
  if (starts_with(n, "c10::")) n.remove_prefix(5);
  if (n == "float" || n == "Float" || n == "float32") return FlopDtype::Fp32;
  if (n == "double" || n == "Double" || n == "float64") return FlopDtype::Fp64;
  if (n == "Half" || n == "half" || n == "float16") return FlopDtype::Fp16;
  if (n == "BFloat16" || n == "bfloat16") return FlopDtype::Bf16;
  if (starts_with(n, "Float8") || starts_with(n, "float8")) return FlopDtype::Fp8;
  if (n == "signed char" || n == "int8" || n == "Char") return FlopDtype::Int8;
  if (element_bytes(n) > 0) return FlopDtype::Other;
  return FlopDtype::Unknown;
}

int element_bytes(std::string_view n) {
  if (starts_with(n, "c10::")) n.remove_prefix(5);
  if (n == "float" || n == "Float" || n == "float32" || n == "int" || n == "Int" || n == "unsigned int" ||
      n == "complex<c10::Half>")
    return 4;
  if (n == "double" || n == "Double" || n == "float64" || n == "long int" || n == "long" || n == "Long" ||
      n == "int64_t" || n == "complex<float>")
    return 8;
  if (n == "Half" || n == "half" || n == "float16" || n == "BFloat16" || n == "bfloat16" || n == "short int" ||
      n == "short" || n == "Short")
    return 2;
  if (starts_with(n, "Float8") || starts_with(n, "float8") || n == "signed char" || n == "unsigned char" ||
      n == "int8" || n == "uint8" || n == "bool" || n == "Bool" || n == "Char" || n == "Byte")
    return 1;
  if (n == "complex<double>") return 16;
  return 0;
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) return -1;
    n = mul(n, d);
  }
  return n;
}

bool broadcast_shape(const Shape& a, const Shape& b, Shape* out) {
  const size_t n = std::max(a.size(), b.size());
  Shape r(n, 1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1) return false;
    r[i] = x == 1 ? y : x;
  }
  *out = std::move(r);
  return true;
}

int64_t mm_flops(const Shape& a, const Shape& b) {
  if (a.size() != 2 || b.size() != 2 || a[1] != b[0]) return -1;
  return mul({a[0], b[1], 2, a[1]});
}

int64_t bmm_flops(const Shape& a, const Shape& b) {
  if (a.size() != 3 || b.size() != 3 || a[0] != b[0] || a[2] != b[1]) return -1;
  return mul({a[0], a[1], b[2], 2, a[2]});
}

int64_t mv_flops(const Shape& a, const Shape& x) {
  if (a.size() != 2 || x.size() != 1 || a[1] != x[0]) return -1;
  return mul({a[0], a[1], 2});
}

int64_t dot_flops(const Shape& a, const Shape& b) {
  if (a.size() != 1 || b.size() != 1 || a[0] != b[0]) return -1;
  return mul(a[0], 2);
}

int64_t conv_flops(const Shape& x, const Shape& w, const Shape& out, bool transposed) {
  const Shape& spatial_of = transposed ? x : out;
  if (x.size() < 3 || w.size() != x.size() || spatial_of.size() != x.size()) return -1;
  // FlopCounterMode: prod(conv_shape) * prod(filter_size) * batch_size * c_out * c_in * 2.
  return mul({prod(spatial_of, 2), prod(w, 2), x[0], w[0], w[1], 2});
}

Shape conv_output_shape(const Shape& x, const Shape& w, const Shape& stride, const Shape& padding,
                        const Shape& dilation, bool transposed, const Shape& output_padding, int64_t groups) {
  const size_t dims = x.size() >= 2 ? x.size() - 2 : 0;
  if (dims == 0 || w.size() != x.size() || groups < 1) return {};
  auto at = [&](const Shape& v, size_t i, int64_t dflt) -> int64_t {
    if (v.empty()) return dflt;
    return v.size() == 1 ? v[0] : (i < v.size() ? v[i] : dflt);
  };
  Shape out = {x[0], transposed ? mul(w[1], groups) : w[0]};
  for (size_t i = 0; i < dims; ++i) {
    const int64_t in = x[2 + i], k = w[2 + i];
    const int64_t s = at(stride, i, 1), p = at(padding, i, 0), d = at(dilation, i, 1);
    if (s <= 0 || d <= 0) return {};
    const int64_t o = transposed ? (in - 1) * s - 2 * p + d * (k - 1) + at(output_padding, i, 0) + 1
                                 : (in + 2 * p - d * (k - 1) - 1) / s + 1;
    if (o <= 0) return {};
    out.push_back(o);
  }
  return out;
}

int64_t conv_backward_flops(const Shape& grad_out, const Shape& x, const Shape& w, bool transposed,
                            bool grad_input, bool grad_weight) {
  int64_t total = 0;
  // The gradients' shapes are the input's and the weight's (FlopCounterMode reads them from the
  // outputs; they are the same shapes).
  if (grad_input) total = add(total, conv_flops(grad_out, w, x, !transposed));
  if (grad_weight) {
    total = add(total, transposed ? conv_flops(swap01(grad_out), swap01(x), swap01(w), false)
                                  : conv_flops(swap01(x), swap01(grad_out), swap01(w), false));
  }
  return total;
}

int64_t sdpa_flops(const Shape& q, const Shape& k, const Shape& v) {
  if (q.size() != 4 || k.size() != 4 || v.size() != 4) return -1;
  const int64_t b = q[0], h_q = q[1], s_q = q[2], d_q = q[3];
  const int64_t h_kv = k[1], s_k = k[2], d_v = v[3];
  if (!(b == k[0] && b == v[0] && h_kv == v[1] && d_q == k[3] && s_k == v[2]) || h_kv <= 0 || h_q % h_kv != 0)
    return -1;
  const int64_t bh = mul(b, h_q);
  return add(bmm_flops({bh, s_q, d_q}, {bh, d_q, s_k}), bmm_flops({bh, s_q, s_k}, {bh, s_k, d_v}));
}

int64_t sdpa_backward_flops(const Shape& grad_out, const Shape& q, const Shape& k, const Shape& v) {
  if (q.size() != 4 || k.size() != 4 || v.size() != 4 || grad_out.size() != 4) return -1;
  const int64_t b = q[0], h_q = q[1], s_q = q[2], d_q = q[3];
  const int64_t h_kv = k[1], s_k = k[2], d_v = v[3];
  if (!(b == k[0] && b == v[0] && b == grad_out[0] && h_kv == v[1] && h_q == grad_out[1]) || h_kv <= 0 ||
      h_q % h_kv != 0)
    return -1;
  if (!(d_q == k[3] && d_v == grad_out[3] && s_k == v[2] && s_q == grad_out[2])) return -1;
  const int64_t bh = mul(b, h_q);
  int64_t total = bmm_flops({bh, s_q, d_q}, {bh, d_q, s_k});   // the scores, recomputed
  total = add(total, bmm_flops({bh, s_q, d_v}, {bh, d_v, s_k}));   // grad of the scores
  total = add(total, bmm_flops({bh, s_k, s_q}, {bh, s_q, d_v}));   // grad of V
  total = add(total, bmm_flops({bh, s_q, s_k}, {bh, s_k, d_q}));   // grad of Q
  total = add(total, bmm_flops({bh, d_q, s_q}, {bh, s_q, s_k}));   // grad of K
  return total;
}

OpInputs parse_op_inputs(std::string_view shapes, std::string_view types, std::string_view concrete) {
  OpInputs in;
  const ListTree s = shapes.empty() ? ListTree() : parse_list_text(shapes);
  if (s.ok() && s.nodes[0].kind == ListNode::Kind::List) {
    in.has_shapes = true;
    for (uint32_t c = s.nodes[0].first_child; c != kNoIndex; c = s.nodes[c].next_sibling) {
      Shape shape;
      bool list = false;
      int64_t list_elements = 0;
      for (uint32_t d = s.nodes[c].first_child; d != kNoIndex; d = s.nodes[d].next_sibling) {
        int64_t x;
        if (s.nodes[d].kind == ListNode::Kind::Number) {
          if (parse_i64(s.nodes[d].text, &x)) shape.push_back(x);
        } else if (s.nodes[d].kind == ListNode::Kind::List) {   // a tensor list: [[2, 3], [4]]
          list = true;
          Shape member;
          for (uint32_t e = s.nodes[d].first_child; e != kNoIndex; e = s.nodes[e].next_sibling)
            if (s.nodes[e].kind == ListNode::Kind::Number && parse_i64(s.nodes[e].text, &x)) member.push_back(x);
          list_elements = add(list_elements, member.empty() ? 0 : numel(member));
        }
      }
      in.shapes.push_back(list ? Shape() : std::move(shape));
      in.is_list.push_back(list ? 1 : 0);
      in.list_numel.push_back(list ? list_elements : 0);
    }
  }
  auto strings = [](std::string_view text, std::vector<std::string>* out) {
    if (text.empty()) return;
    const ListTree t = parse_list_text(text);
    if (!t.ok() || t.nodes[0].kind != ListNode::Kind::List) return;
    for (uint32_t c = t.nodes[0].first_child; c != kNoIndex; c = t.nodes[c].next_sibling)
      out->emplace_back(t.nodes[c].text);
  };
  strings(types, &in.types);
  strings(concrete, &in.concrete);
  return in;
}

FlopClass flop_class_of(std::string_view op_name) {
  const Rule* r = rule_of(op_name);
  if (r == nullptr) return FlopClass::None;
  return r->kind < Kind::Elementwise ? FlopClass::Matmul : FlopClass::Other;
}

OpFlops op_flops(std::string_view op_name, const OpInputs& in) {
  OpFlops out;
  const Rule* r = rule_of(op_name);
  if (r == nullptr) return out;
  out.cls = r->kind < Kind::Elementwise ? FlopClass::Matmul : FlopClass::Other;
  out.dtype = op_dtype(in);
  if (!in.has_shapes) return out;
  const Shape& a0 = shape_at(in, 0);
  const Shape& a1 = shape_at(in, 1);
  const Shape& a2 = shape_at(in, 2);
  const Shape& a3 = shape_at(in, 3);
  switch (r->kind) {
    case Kind::Mm:
      out.flops = mm_flops(a0, a1);
      if (out.flops >= 0) out.bytes = with_output(in, mul(a0[0], a1[1]));
      break;
    case Kind::Addmm:
      out.flops = mm_flops(a1, a2);
      if (out.flops >= 0) out.bytes = with_output(in, mul(a1[0], a2[1]));
      break;
    case Kind::Bmm:
      out.flops = bmm_flops(a0, a1);
      if (out.flops >= 0) out.bytes = with_output(in, mul({a0[0], a0[1], a1[2]}));
      break;
    case Kind::Baddbmm:
      out.flops = bmm_flops(a1, a2);
      if (out.flops >= 0) out.bytes = with_output(in, a0.empty() ? mul({a1[0], a1[1], a2[2]}) : numel(a0));
      break;
    case Kind::Mv:
      out.flops = mv_flops(a0, a1);
      if (out.flops >= 0) out.bytes = with_output(in, a0[0]);
      break;
    case Kind::Addmv:
      out.flops = mv_flops(a1, a2);
      if (out.flops >= 0) out.bytes = with_output(in, a1[0]);
      break;
    case Kind::Dot:
      out.flops = dot_flops(a0, a1);
      if (out.flops >= 0) out.bytes = with_output(in, 1);
      break;
    case Kind::Conv:
    case Kind::CudnnConv:
    case Kind::SlowConv2d: {
      // The positions of stride, padding, dilation, transposed, output_padding and groups.
      size_t stride_i = 3, padding_i = 4, dilation_i = 5, transposed_i = 6, output_padding_i = 7, groups_i = 8;
      if (r->kind == Kind::CudnnConv) {
        padding_i = 2, stride_i = 3, dilation_i = 4, groups_i = 5;
        transposed_i = output_padding_i = size_t(-1);
      } else if (r->kind == Kind::SlowConv2d) {
        stride_i = 4, padding_i = 5;
        dilation_i = transposed_i = output_padding_i = groups_i = size_t(-1);
      }
      const Shape& x = a0;
      const Shape& w = a1;
      if (x.size() < 3 || w.size() != x.size()) break;
      const int t = concrete_bool(in, transposed_i);
      // Without Concrete Inputs (traces before torch 2.1) a convolution is taken as not transposed
      // unless only the transposed reading fits the channels (C_in == weight's first size).
      const bool transposed =
          t == 1 || (t < 0 && transposed_i != size_t(-1) && w[1] > 0 && x[1] % w[1] != 0 && x[1] == w[0]);
      Shape stride, padding, dilation, output_padding, groups;
      const bool have = concrete_ints(in, stride_i, &stride) && concrete_ints(in, padding_i, &padding);
      concrete_ints(in, dilation_i, &dilation);
      concrete_ints(in, output_padding_i, &output_padding);
      concrete_ints(in, groups_i, &groups);
      const int64_t g =
          groups.size() == 1 ? groups[0] : (!transposed && w[1] > 0 && x[1] % w[1] == 0 ? x[1] / w[1] : 1);
      Shape y;
      if (have) {
        y = conv_output_shape(x, w, stride, padding, dilation, transposed, output_padding, transposed ? g : 1);
      } else if (!transposed && in.conv_output_hint.size() == x.size() && in.conv_output_hint[0] == x[0] &&
                 in.conv_output_hint[1] == w[0]) {
        y = in.conv_output_hint;
      }
      if (transposed) {
        out.flops = conv_flops(x, w, x, true);
      } else if (!y.empty()) {
        out.flops = conv_flops(x, w, y, false);
      }   // else: the output size needs stride and padding, which this trace did not record
      if (out.flops >= 0) out.bytes = y.empty() ? input_bytes(in) : with_output(in, numel(y));
      break;
    }
    case Kind::ConvBackward:
    case Kind::OldConvBackward: {
      const bool old = r->kind == Kind::OldConvBackward;
      const Shape& grad_out = old ? a1 : a0;
      const Shape& x = old ? a0 : a1;
      const Shape& w = a2;
      const int t = old ? 0 : concrete_bool(in, 7);
      std::vector<bool> mask;
      const size_t mask_i = old ? in.concrete.size() - 1 : 10;
      if (!concrete_bools(in, mask_i, &mask) || mask.size() < 2) mask = {true, true, false};
      if (x.size() < 3 || w.size() != x.size() || grad_out.size() != x.size()) break;
      const bool transposed = t == 1;
      out.flops = conv_backward_flops(grad_out, x, w, transposed, mask[0], mask[1]);
      if (out.flops >= 0) {
        const int64_t outs = add(mask[0] ? numel(x) : 0, mask[1] ? numel(w) : 0);
        out.bytes = with_output(in, outs);
      }
      break;
    }
    case Kind::Sdpa:
      out.flops = sdpa_flops(a0, a1, a2);
      if (out.flops >= 0) out.bytes = with_output(in, mul({a0[0], a0[1], a0[2], a2[3]}));   // [b, h, s_q, d_v]
      break;
    case Kind::SdpaBackward:
      out.flops = sdpa_backward_flops(a0, a1, a2, a3);
      if (out.flops >= 0) out.bytes = with_output(in, add(add(numel(a1), numel(a2)), numel(a3)));
      break;
    case Kind::Elementwise: {
      Shape shape;
      bool any = false, fits = true;
      for (size_t i = 0; i < in.shapes.size(); ++i) {
        if (in.is_list[i] || in.shapes[i].empty()) continue;
        if (!any) shape = in.shapes[i];
        else fits = fits && broadcast_shape(shape, in.shapes[i], &shape);
        any = true;
      }
      // No sized input: 0-d tensors (an optimizer's step count), one element (their shapes print
      // as [], like a scalar's).
      if (!any && in.shapes.empty()) break;
      if (!fits) break;
      const int64_t n = numel(shape);
      out.flops = mul(n, r->per_element);
      out.bytes = is_in_place(op_name) ? input_bytes(in) : with_output(in, n);
      break;
    }
    case Kind::Reduction:
      if (a0.empty()) break;
      out.flops = mul(numel(a0), r->per_element);
      out.bytes = input_bytes(in);
      break;
    case Kind::Rowwise:
      if (a0.empty()) break;
      out.flops = mul(numel(a0), r->per_element);
      out.bytes = with_output(in, numel(a0));
      break;
    case Kind::Foreach: {
      int64_t n = -1;
      for (size_t i = 0; i < in.shapes.size() && n < 0; ++i)
        if (in.is_list[i]) n = in.list_numel[i];
      if (n < 0) break;
      out.flops = mul(n, r->per_element);
      out.bytes = is_in_place(op_name) || op_key(op_name).back() == '_' ? input_bytes(in) : with_output(in, n);
      break;
    }
  }
  if (out.flops < 0) out.bytes = -1;
  return out;
}

std::vector<FlopRuleInfo> flop_rules() {
  std::vector<FlopRuleInfo> out;
  for (const auto& [name, r] : rules())
    out.push_back({std::string(name), r.kind < Kind::Elementwise ? FlopClass::Matmul : FlopClass::Other,
                   r.kind < Kind::Elementwise ? 0 : r.per_element, r.what});
  std::sort(out.begin(), out.end(), [](const FlopRuleInfo& a, const FlopRuleInfo& b) {
    return a.cls != b.cls ? a.cls < b.cls : a.name < b.name;
  });
  return out;
}

}   // namespace gpuprof
