// Specifications of the tensor-core classifiers. Real names from the shared traces are checked in
// tests/python/analysis/test_gpu_metrics_classifiers.py; here are the naming patterns of kernels newer than
// those traces (Hopper, Blackwell, bf16/fp8, attention) and the traps around them.
#include <gtest/gtest.h>

#include "gpuprof/analysis/tensor_cores.h"

using namespace gpuprof;

TEST(TensorCoreKernel, ThePluginsMarkers) {
  // Volta/Turing/Ampere cuBLAS and cuDNN kernels name their MMA shape: 884, 1688, 16816.
  EXPECT_TRUE(is_tensor_core_kernel("volta_h884gemm_64x64_ldg8_nn"));
  EXPECT_TRUE(is_tensor_core_kernel("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_nn"));
  EXPECT_TRUE(is_tensor_core_kernel("ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_64x3_nn"));
  EXPECT_TRUE(is_tensor_core_kernel("volta_fp16_s884cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1"));
  EXPECT_TRUE(is_tensor_core_kernel("void xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32"));
}

TEST(TensorCoreKernel, HopperAndBlackwell) {
  // Hopper warp-group MMA (CUTLASS 3 names the instruction), cuDNN/cuBLAS sm90 kernels,
  // cuBLASLt kernel names and cuBLAS 12 nvjet GEMMs.
  EXPECT_TRUE(is_tensor_core_kernel(
      "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int>, "
      "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<4>, "
      "cute::SM90_64x128x16_F32BF16BF16_SS<(cute::GMMA::Major)0> wgmma>>>"));
  EXPECT_TRUE(
      is_tensor_core_kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1"));
  EXPECT_TRUE(is_tensor_core_kernel("sm100_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize256x128x64"));
  EXPECT_TRUE(is_tensor_core_kernel("void gemmSm90<__nv_bfloat16, float>(cublasLtGemmParams)"));
  EXPECT_TRUE(is_tensor_core_kernel("nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NTN"));
  EXPECT_TRUE(is_tensor_core_kernel("cutlass3x_sm90_tensorop_s64x128x16gemm_bf16_bf16_f32_bf16_bf16_128x128x64"));
  EXPECT_TRUE(is_tensor_core_kernel("sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc"));
  EXPECT_TRUE(is_tensor_core_kernel("ampere_int8_i16832gemm_int8_256x128_ldg16_stages_64x3_nt"));
}

TEST(TensorCoreKernel, LowPrecisionGemmsButNotLowPrecisionElementwise) {
  // bf16 / fp8 data types mark a GEMM as tensor-core work...
  EXPECT_TRUE(is_tensor_core_kernel("void cutlass_fp8_gemm_e4m3_e4m3_bf16_kernel<128, 128>"));
  EXPECT_TRUE(is_tensor_core_kernel("bf16_gemm_splitk_kernel"));
  // ...but the same types appear in elementwise and GEMV kernels, which run on CUDA cores.
  EXPECT_FALSE(is_tensor_core_kernel(
      "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
      "at::detail::Array<char*, 3> >"));
  EXPECT_FALSE(is_tensor_core_kernel(
      "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda<c10::Float8_e4m3fn>, "
      "gemm_epilogue_cast>"));
  EXPECT_FALSE(is_tensor_core_kernel("void gemv2T_kernel_val<int, int, __nv_bfloat16, float, bf16, 128>"));
}

TEST(TensorCoreKernel, Attention) {
  EXPECT_TRUE(
      is_tensor_core_kernel("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64>>"));
  EXPECT_TRUE(is_tensor_core_kernel("void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits>"));
  EXPECT_TRUE(
      is_tensor_core_kernel("fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel)"));
  // The memory-efficient kernel's sm50 build is SIMT.
  EXPECT_FALSE(
      is_tensor_core_kernel("fmha_cutlassF_f32_aligned_64x64_rf_sm50(PyTorchMemEffAttention::AttentionKernel)"));
}

TEST(TensorCoreKernel, CudaCoreKernels) {
  EXPECT_FALSE(is_tensor_core_kernel("volta_sgemm_128x64_nn"));
  EXPECT_FALSE(is_tensor_core_kernel("ampere_sgemm_128x64_nn"));
  EXPECT_FALSE(is_tensor_core_kernel("void cudnn::ops::nhwcToNchwKernel<float, float, float, true, false>"));
  EXPECT_FALSE(is_tensor_core_kernel("void cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>"));
  // FP32 through and through (no tf32), on the FMA units: the plugin's "xmma_gemm" matches it (the
  // first is what cuBLAS ran for an FP32 torch.mm on an H200 with TF32 off).
  EXPECT_FALSE(
      is_tensor_core_kernel("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_"
                            "aligna4_alignc4_execute_kernel__5x_cublas"));
  EXPECT_FALSE(is_tensor_core_kernel(
      "sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_warpgroupsize1x1x1_execute_segment_k_off_kernel"));
  // ...while TF32 inputs do run on tensor cores.
  EXPECT_TRUE(is_tensor_core_kernel("sm80_xmma_gemm_tf32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4"));
  EXPECT_FALSE(is_tensor_core_kernel(""));
}

TEST(TensorCoreEligibleOp, ForwardOps) {
  for (const char* op : {"aten::conv1d",
                         "aten::conv2d",
                         "aten::conv3d",
                         "aten::conv_transpose2d",
                         "aten::cudnn_convolution",
                         "aten::_convolution",
                         "aten::convolution",
                         "aten::mm",
                         "aten::addmm",
                         "aten::bmm",
                         "aten::baddbmm",
                         "aten::addbmm",
                         "aten::matmul",
                         "aten::linear",
                         "aten::mv",
                         "aten::addmv",
                         "aten::addr",
                         "aten::chain_matmul",
                         "aten::linalg_multi_dot",
                         "aten::lstm_cell",
                         "aten::gru_cell",
                         "aten::rnn_tanh_cell",
                         "aten::rnn_relu_cell",
                         "aten::_thnn_fused_lstm_cell",
                         "aten::_thnn_fused_gru_cell",
                         "aten::scaled_dot_product_attention",
                         "aten::_scaled_dot_product_flash_attention",
                         "aten::_scaled_dot_product_efficient_attention"})
    EXPECT_TRUE(is_tensor_core_eligible_op(op)) << op;
}

TEST(TensorCoreEligibleOp, BackwardNodes) {
  for (const char* op :
       {"ConvolutionBackward0", "CudnnConvolutionBackward", "MmBackward0", "AddmmBackward0", "BmmBackward0",
        "BaddbmmBackward0", "ThnnFusedLstmCellBackward0", "ScaledDotProductFlashAttentionBackward0",
        "autograd::engine::evaluate_function: MmBackward0", "aten::convolution_backward",
        "aten::cudnn_convolution_backward_input", "aten::_scaled_dot_product_flash_attention_backward"})
    EXPECT_TRUE(is_tensor_core_eligible_op(op)) << op;
}

TEST(TensorCoreEligibleOp, OtherOps) {
  for (const char* op : {"aten::add", "aten::relu", "aten::batch_norm", "aten::softmax", "aten::conj",
                         "AddBackward0", "ReluBackward0", "SoftmaxBackward0", "Backward0", "MmBackwardX", "mm",
                         "aten::mm_out_x", "autograd::engine::evaluate_function: AddBackward0", ""})
    EXPECT_FALSE(is_tensor_core_eligible_op(op)) << op;
}

TEST(TensorCoreEligibleKernel, MatrixAndConvolutionWorkByName) {
  for (const char* k :
       {"volta_h884gemm_64x64_ldg8_nn", "ampere_sgemm_128x64_nn", "cutlass_80_simt_sgemm_128x128",
        "triton_tem_fused_mm_0", "triton_tem_fused_addmm_relu_3", "triton_tem_fused_convolution_1",
        "sm80_xmma_fprop_implicit_gemm_f32f32", "implicit_convolve_sgemm", "cudnn::winograd_nonfused::conv2d"})
    EXPECT_TRUE(is_tensor_core_eligible_kernel(k)) << k;
  for (const char* k : {"triton_poi_fused_add_0", "triton_red_fused_sum_1", "gemv2T_kernel_val",
                        "void at::native::vectorized_elementwise_kernel<4, relu>", "nchwToNhwcKernel", ""})
    EXPECT_FALSE(is_tensor_core_eligible_kernel(k)) << k;
}
