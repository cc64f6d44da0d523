// Which kernels run on tensor cores (judged from the kernel's name), and which operators are the
// ones that could (docs/metrics.md, "Tensor-core kernels" and "Tensor-core-eligible operators").
#pragma once

#include <string_view>

namespace gpuprof {

// True when the kernel's name marks it as a tensor-core (matrix-core) kernel: the old plugin's
// markers (Volta/Turing/Ampere hmma, 884/1688/16816, xmma) plus what came after it (Hopper
// wgmma and sm90 kernels, cuBLASLt/nvjet, CUTLASS tensorop, bf16/fp8 GEMMs, flash attention,
// AMD MFMA GEMMs).
bool is_tensor_core_kernel(std::string_view kernel_name);

// True for host operators whose work can run on tensor cores: convolutions, matrix products, RNN
// cells, scaled-dot-product attention, and their autograd backward nodes.
bool is_tensor_core_eligible_op(std::string_view op_name);

// True for kernels whose own name says they do matrix-product or convolution work, whatever
// launched them: tensor-core kernels, GEMMs (not GEMVs), convolution kernels, and inductor's Triton
// templates for mm/addmm/bmm/convolution (triton_tem_fused_*). Work behind torch.compile and CUDA
// graph replays has no eligible operator above it; its kernels are judged by this instead.
bool is_tensor_core_eligible_kernel(std::string_view kernel_name);

}  // namespace gpuprof
