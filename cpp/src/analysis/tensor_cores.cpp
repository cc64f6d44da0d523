#include "gpuprof/analysis/tensor_cores.h"

#include <cctype>
#include <string>

namespace gpuprof {

namespace {

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.substr(0, prefix.size()) == prefix;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The TensorBoard plugin's markers, matched as it matched them (case-sensitive substrings).
constexpr std::string_view kPluginMarkers[] = {"h884",
                                               "s884",
                                               "h1688",
                                               "s1688",
                                               "hmma",
                                               "i8816",
                                               "16816",
                                               "dgrad_1x1_stride_2x2",
                                               "first_layer_wgrad_kernel",
                                               "conv1x1",
                                               "conv2d_c1_k1",
                                               "direct_group",
                                               "xmma_implicit_gemm",
                                               "xmma_sparse_conv",
                                               "xmma_warp_specialized_implicit_gemm",
                                               "xmma_gemm",
                                               "xmma_sparse_gemm",
                                               "c1688"};

// Markers of kernels newer than the plugin's list, matched on the lower-cased name.
constexpr std::string_view kModernMarkers[] = {
    "wgmma",        // Hopper warp-group MMA (CUTLASS 3, hand-written kernels)
    "sm90_xmma",    // cuDNN/cuBLAS Hopper kernels
    "sm100_xmma",   // ... and Blackwell
    "_xmma_",       // sm80_xmma_fprop/dgrad/wgrad implicit GEMMs (cuDNN 8+)
    "tensorop",     // CUTLASS tensor-op GEMMs and convs (also mangled: MmaTensorOp)
    "gemmsm90",     // cuBLASLt kernel names
    "gemmsm100",
    "nvjet_",       // cuBLAS 12.x Hopper/Blackwell GEMMs (nvjet_hsh_..., nvjet_tst_...)
    "i16832",       // Ampere int8 IMMA GEMMs
    "s16832",     "h16832",          "flash_fwd", "flash_bwd",   // FlashAttention (always MMA-based)
    "flash::",    "pytorch_flash::",
};

}  // namespace

bool is_tensor_core_kernel(std::string_view name) {
  // xmma kernels name their data types (A B _ C compute _ accumulate). FP32 throughout, with no
  // tf32, f16, bf16 or fp8 among them, is a cuBLAS SGEMM on the FMA units (an H200's without TF32:
  // sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma_...), though the plugin's "xmma_gemm" marker matches it.
  if (contains(name, "xmma") && (contains(name, "f32f32_f32f32_f32") || contains(name, "_ffma_"))) return false;
  for (std::string_view m : kPluginMarkers)
    if (contains(name, m)) return true;
  const std::string n = lower(name);
  for (std::string_view m : kModernMarkers)
    if (contains(n, m)) return true;
  // Memory-efficient attention (CUTLASS fmha): tensor cores from sm_70 on; the _sm50 variant is SIMT.
  if (contains(n, "fmha") && !contains(n, "_sm50")) return true;
  // bf16/fp8 GEMMs. The data type alone is not enough (elementwise kernels are templated on
  // BFloat16 and Float8_e4m3fn too), so it must come with "gemm" and not be a GEMV.
  const bool low_precision = contains(n, "bf16") || contains(n, "e4m3") || contains(n, "e5m2");
  if (low_precision && contains(n, "gemm") && !contains(n, "gemv") && !contains(n, "elementwise")) return true;
  // AMD rocBLAS/hipBLASLt Tensile kernels: "_MI<m>x<n>x<k>" is the MFMA (matrix-core) instruction.
  if (starts_with(name, "Cijk_") && contains(name, "_MI")) return true;
  return false;
}

bool is_tensor_core_eligible_kernel(std::string_view name) {
  if (is_tensor_core_kernel(name)) return true;
  const std::string n = lower(name);
  if (contains(n, "gemm") && !contains(n, "gemv")) return true;   // sgemm, cutlass gemm, implicit_gemm
  if (contains(n, "triton_tem_") && (contains(n, "mm") || contains(n, "conv"))) return true;
  constexpr std::string_view kConv[] = {"convolution", "conv2d", "conv3d", "conv1d", "fprop", "dgrad", "wgrad"};
  for (std::string_view m : kConv)
    if (contains(n, m)) return true;
  return false;
}

bool is_tensor_core_eligible_op(std::string_view name) {
  // Autograd wraps backward nodes: "autograd::engine::evaluate_function: MmBackward0".
  constexpr std::string_view kEvaluate = "autograd::engine::evaluate_function: ";
  if (starts_with(name, kEvaluate)) name.remove_prefix(kEvaluate.size());

  if (starts_with(name, "aten::")) {
    std::string_view op = name.substr(6);
    constexpr std::string_view kOps[] = {"mm",
                                         "addmm",
                                         "bmm",
                                         "baddbmm",
                                         "addbmm",
                                         "matmul",
                                         "linear",
                                         "mv",
                                         "addmv",
                                         "addr",
                                         "chain_matmul",
                                         "linalg_multi_dot",
                                         "_addmm_activation",
                                         "_scaled_mm",
                                         "_int_mm",
                                         "lstm_cell",
                                         "gru_cell",
                                         "rnn_tanh_cell",
                                         "rnn_relu_cell",
                                         "_thnn_fused_lstm_cell",
                                         "_thnn_fused_gru_cell",
                                         "lstm",
                                         "gru",
                                         "rnn_tanh",
                                         "rnn_relu",
                                         "_cudnn_rnn",
                                         "scaled_dot_product_attention",
                                         "_convolution",
                                         "convolution",
                                         "_convolution_mode",
                                         "_convolution_double_backward",
                                         "convolution_backward",
                                         "linear_backward",
                                         "matmul_backward",
                                         "_cudnn_rnn_backward",
                                         "_thnn_fused_lstm_cell_backward",
                                         "_thnn_fused_lstm_cell_backward_impl",
                                         "_thnn_fused_gru_cell_backward"};
    for (std::string_view o : kOps)
      if (op == o) return true;
    constexpr std::string_view kPrefixes[] = {
        "conv",                               // conv1d/2d/3d, conv_transpose*, conv_tbc
        "cudnn_convolution",                  // incl. _transpose, _backward_*, _relu, _add_relu
        "miopen_convolution",
        "mkldnn_convolution",
        "_slow_conv2d",
        "slow_conv",
        "_scaled_dot_product_",               // flash / efficient / cudnn attention and backward
        "_flash_attention_",
        "_efficient_attention_",
        "_fused_sdp"};
    for (std::string_view p : kPrefixes)
      if (starts_with(op, p)) return true;
    return false;
  }

  // Backward nodes: "<Forward>Backward<N>" (CamelCase of the forward function).
  const size_t at = name.rfind("Backward");
  if (at == std::string_view::npos || at == 0) return false;
  std::string_view tail = name.substr(at + 8);
  for (char c : tail)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  const std::string_view fwd = name.substr(0, at);
  constexpr std::string_view kBackwardOf[] = {"Mm",
                                              "Addmm",
                                              "Bmm",
                                              "Baddbmm",
                                              "Addbmm",
                                              "Matmul",
                                              "Linear",
                                              "Mv",
                                              "Addmv",
                                              "Addr",
                                              "AddmmActivation",
                                              "ScaledMm",
                                              "Convolution",
                                              "CudnnConvolution",
                                              "CudnnConvolutionTranspose",
                                              "ConvolutionOverrideable",
                                              "SlowConv2D",
                                              "SlowConvTranspose2D",
                                              "SlowConvDilated2D",
                                              "ThnnConv2D",
                                              "MkldnnConvolution",
                                              "MiopenConvolution",
                                              "ThnnFusedLstmCell",
                                              "ThnnFusedGruCell",
                                              "CudnnRnn",
                                              "ScaledDotProductFlashAttention",
                                              "ScaledDotProductEfficientAttention",
                                              "ScaledDotProductCudnnAttention",
                                              "ScaledDotProductFusedAttentionOverrideable",
                                              "FlashAttention",
                                              "EfficientAttention"};
  for (std::string_view b : kBackwardOf)
    if (fwd == b) return true;
  return false;
}

}  // namespace gpuprof
