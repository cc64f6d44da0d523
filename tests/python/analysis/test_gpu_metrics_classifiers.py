"""Tensor-core classifiers on real kernel and operator names taken from ../shared/traces.

Each case names a prefix of a real kernel in a real trace (the test finds the full name there, so
it is the name the driver reported, not one typed by hand) and the expected answer with its reason.
"""

from __future__ import annotations

import gzip
import json
from functools import cache

import pytest
from _traces import TRACES  # noqa: E402

from gpuprof._native import _core

ALL_TRACES = [
    "tb_resnet50_v100_nw0/worker0.1623143089861.pt.trace.json.gz",
    "hta_a100_nccl/rank0.json.gz",
    "hta_v100_ns/rank-0.pt.trace.json.gz",
    "hta_mi250_rocm/rank0.json.gz",
]


def _need_traces() -> None:
    if not TRACES.exists():
        pytest.skip(f"shared traces folder {TRACES} is absent (tests read ../shared/traces beside the repo)")


@cache
def _names(cats: tuple[str, ...]) -> tuple[str, ...]:
    _need_traces()
    names = set()
    for rel in ALL_TRACES:
        with gzip.open(TRACES / rel, "rt", encoding="utf-8") as f:
            doc = json.load(f)
        for e in doc["traceEvents"]:
            if e.get("ph") == "X" and str(e.get("cat", "")).lower() in cats:
                names.add(e["name"])
    return tuple(sorted(names))


def _real(prefix: str, cats: tuple[str, ...]) -> str:
    found = [n for n in _names(cats) if n.startswith(prefix)]
    assert found, f"no name starting with {prefix!r} in the shared traces"
    return found[0]


KERNELS = [
    # (prefix of a real kernel name, tensor cores?, why)
    (
        "sm80_xmma_fprop_implicit_gemm_tf32f32",
        True,
        "cuDNN 8 implicit-GEMM conv in TF32: Ampere tensor cores",
    ),
    ("sm80_xmma_dgrad_implicit_gemm_tf32f32", True, "same family, data gradient"),
    ("sm80_xmma_wgrad_implicit_gemm_indexed", True, "same family, weight gradient"),
    (
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm",
        True,
        "CUTLASS tensor-op GEMM, s1688 = TF32 HMMA 16x8x8",
    ),
    (
        "void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688dgrad",
        True,
        "CUTLASS tensor-op conv inside cuDNN",
    ),
    (
        "void cutlass_cudnn_train::Kernel<cutlass_tensorop_s1688wgrad",
        True,
        "CUTLASS tensor-op wgrad inside cuDNN",
    ),
    (
        "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolution",
        True,
        "mangled CUTLASS conv whose warp-level MMA is MmaTensorOp (the plugin's list misses it)",
    ),
    ("Cijk_Ailk_Bjlk_SB_Bias", True, "rocBLAS Tensile GEMM with _MI16x16x1: AMD MFMA matrix cores"),
    ("void cutlass::Kernel<cutlass_80_simt_sgemm", False, "CUTLASS SIMT SGEMM: CUDA cores"),
    ("volta_sgemm_64x64_nn", False, "cuBLAS FP32 SGEMM on Volta: CUDA cores"),
    ("ampere_sgemm_32x128_nt", False, "cuBLAS FP32 SGEMM on Ampere without TF32: CUDA cores"),
    ("volta_scudnn_128x64_relu_interior_nn_v1", False, "cuDNN FP32 (s = single) conv: CUDA cores"),
    (
        "volta_scudnn_128x32_sliced1x4_ldg4_relu_exp_medium_nhwc_tn_v1",
        False,
        "NHWC layout alone does not mean tensor cores: an FP32 scudnn kernel",
    ),
    ("cudnn_infer_ampere_scudnn_128x64_relu_xregs_large_nn_v1", False, "FP32 cuDNN conv on Ampere"),
    ("void implicit_convolve_sgemm", False, "cuDNN implicit SGEMM: FP32"),
    ("void cudnn::ops::nhwcToNchwKernel", False, "a layout transform, no math"),
    ("void cudnn::winograd_nonfused::winogradForwardData4x4", False, "FP32 Winograd transform"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float", False, "communication kernel"),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>",
        False,
        "elementwise",
    ),
    ("void cublasLt::splitKreduce_kernel", False, "split-K reduction epilogue: plain adds"),
]


@pytest.mark.parametrize("prefix,expected,why", KERNELS, ids=[k[0][:40] for k in KERNELS])
def test_tensor_core_kernel_on_real_names(prefix, expected, why):
    name = _real(prefix, ("kernel",))
    assert _core.is_tensor_core_kernel(name) is expected, why


def test_no_fp32_v100_kernel_is_called_tensor_core():
    # The ResNet-50 V100 run is FP32 throughout; the plugin reported 0.0 % on tensor cores.
    _need_traces()
    with gzip.open(TRACES / ALL_TRACES[0], "rt", encoding="utf-8") as f:
        doc = json.load(f)
    names = {e["name"] for e in doc["traceEvents"] if str(e.get("cat", "")).lower() == "kernel"}
    assert names and not [n for n in names if _core.is_tensor_core_kernel(n)]


OPS = [
    ("aten::conv2d", True, "convolution"),
    ("aten::convolution", True, "convolution (dispatcher level)"),
    ("aten::_convolution", True, "convolution (implementation level)"),
    ("aten::cudnn_convolution", True, "cuDNN convolution"),
    ("aten::cudnn_convolution_backward_weight", True, "its backward"),
    ("aten::convolution_backward", True, "convolution backward (torch >= 1.11)"),
    ("CudnnConvolutionBackward", True, "autograd node of a cuDNN conv (old torch)"),
    ("ConvolutionBackward0", True, "autograd node of a conv"),
    ("autograd::engine::evaluate_function: ConvolutionBackward0", True, "the engine's wrapper of the node"),
    ("aten::addmm", True, "matrix product"),
    ("aten::mm", True, "matrix product"),
    ("aten::linear", True, "linear layer"),
    ("AddmmBackward0", True, "autograd node of addmm"),
    ("autograd::engine::evaluate_function: AddmmBackward0", True, "wrapped"),
    ("AddmmBackward", True, "old torch spelling without the number"),
    ("aten::cudnn_batch_norm_backward", False, "normalisation: no matrix math"),
    ("CudnnBatchNormBackward0", False, "normalisation backward"),
    ("AddBackward0", False, "Add is not Addmm"),
    ("TBackward0", False, "transpose"),
    ("MaxPool2DWithIndicesBackward0", False, "pooling"),
    ("aten::threshold_backward", False, "ReLU backward"),
    ("MseLossBackward0", False, "loss"),
    ("record_param_comms", False, "communication"),
]


@pytest.mark.parametrize("name,expected,why", OPS, ids=[o[0] for o in OPS])
def test_tensor_core_eligible_op_on_real_names(name, expected, why):
    assert name in _names(("cpu_op", "operator")), f"{name!r} is not in the shared traces"
    assert _core.is_tensor_core_eligible_op(name) is expected, why


def test_eligible_attention_ops():
    # Scaled-dot-product attention and its fused kernels' ops (not in the shared traces; torch 2.x
    # names): forward and the autograd nodes of the flash / efficient / cuDNN paths.
    for name in [
        "aten::bmm",
        "aten::baddbmm",
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention_backward",
        "ScaledDotProductFlashAttentionBackward0",
        "ScaledDotProductEfficientAttentionBackward0",
        "aten::_flash_attention_forward",
        "aten::lstm_cell",
        "aten::_thnn_fused_lstm_cell",
        "ThnnFusedLstmCellBackward0",
        "aten::linalg_multi_dot",
        "aten::matmul",
        "MmBackward0",
    ]:
        assert _core.is_tensor_core_eligible_op(name), name
    for name in [
        "aten::softmax",
        "aten::_softmax_backward_data",
        "SoftmaxBackward0",
        "aten::copy_",
        "aten::conj",
        "Backward0",
        "MmBackwardX",
    ]:
        assert not _core.is_tensor_core_eligible_op(name), name
