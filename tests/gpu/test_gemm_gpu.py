"""A bf16 GEMM loop on a real GPU: its FLOPs, the tensor-core share and MFU against the peak table.

Each step is REPS products ``torch.mm`` of two [N, N] bf16 matrices on CUDA and nothing else:
2 N^3 x REPS FLOPs, all of them matrix-class and forward only, so MFU = HFU. gpuprof must count
exactly that, find the products on tensor cores, take the device's dense bf16 peak from the table,
and report an MFU that the same loop timed with CUDA events and no profiler confirms: a large GEMM
on a datacenter GPU runs at a plausible fraction of the dense peak (cuBLAS is usually quoted at 60-80%
on H100-class parts; the bound here is 20% to 100%, wide enough for clocks and other tenants).

With $GPUPROF_GPU_FIGURES set (tests/gpu/run_on_gpu.sh sets it), the figures go to gemm.json there.
Passed on an NVIDIA H200 on 2026-11-29 (docs/gpu.md).
"""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")

import gpuprof  # noqa: E402
from gpuprof.analysis import peaks  # noqa: E402

N = 8192
REPS = 8
STEPS = 5


def _step(a, b, out):
    for _ in range(REPS):
        torch.mm(a, b, out=out)


def test_a_bf16_gemm_loop_runs_on_tensor_cores_at_a_plausible_share_of_the_dense_peak(cuda):
    match = peaks.match_device(torch.cuda.get_device_name())
    if not match.known:
        pytest.skip(f"{match.name} has no row in the peak table: {match.reason}")
    a = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(N, N, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):  # cuBLAS picks and loads its kernel; clocks ramp up
        _step(a, b, out)
    torch.cuda.synchronize()

    # the loop unprofiled, timed on the device
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(STEPS):
        _step(a, b, out)
    end.record()
    torch.cuda.synchronize()
    unprofiled_s = start.elapsed_time(end) / 1e3 / STEPS

    with gpuprof.profile() as prof:
        for _ in range(STEPS):
            _step(a, b, out)
            torch.cuda.synchronize()  # each step ends when its products have
            prof.step()
    report = prof.report().to_dict()
    f = report["flops"]

    flops_per_step = 2 * N**3 * REPS
    assert report["metadata"].get("gpu_collection", "").startswith("on"), report["metadata"]
    assert f["per_step_flops"] == flops_per_step and f["matmul_flops_per_step"] == flops_per_step
    assert f["dtype"] == "bf16"
    assert f["peak_tflops"] == pytest.approx(match.peak_tflops("bf16"), rel=1e-6)
    assert f["peak_estimate"] is False and "bf16 dense" in f["peak_source"]
    assert f["tensor_core_pct"] is not None and f["tensor_core_pct"] >= 90.0
    assert 20.0 < f["mfu_pct"] < 100.0 and f["hfu_pct"] == pytest.approx(f["mfu_pct"], rel=1e-3)
    # the unprofiled loop's rate against the same peak: gpuprof's MFU is that, less its own cost
    unprofiled_mfu = 100 * flops_per_step / unprofiled_s / (f["peak_tflops"] * 1e12)
    assert f["mfu_pct"] <= unprofiled_mfu * 1.05

    figures = {
        "device": match.name,
        "table_row": match.device,
        "n": N,
        "reps_per_step": REPS,
        "flops_per_step": flops_per_step,
        "peak_tflops_bf16_dense": f["peak_tflops"],
        "tflops_per_s": f["tflops_per_s"],
        "mfu_pct": f["mfu_pct"],
        "tensor_core_pct": f["tensor_core_pct"],
        "unprofiled_tflops_per_s": flops_per_step / unprofiled_s / 1e12,
        "unprofiled_mfu_pct": unprofiled_mfu,
        "kernels": sorted({r["name"] for r in report.get("kernels", [])})[:5],
    }
    out_dir = os.environ.get("GPUPROF_GPU_FIGURES")
    if out_dir:
        with open(os.path.join(out_dir, "gemm.json"), "w") as fh:
            json.dump(figures, fh, indent=2)
    print(json.dumps(figures, indent=2))
