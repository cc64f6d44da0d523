// Which kernels run on tensor cores (judged from the kernel's name), and which operators are the
// ones that could (REFERENCE.md, "Kernel time using Tensor Cores" and "Tensor-core-eligible").
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

}  // namespace gpuprof
