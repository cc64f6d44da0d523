"""A generated kernel's FLOPs in the span: each call counts its FLOPs per call in the step it starts
in, once (a Triton kernel is both a device kernel and, in torch's traces, a host launch operator of
the same name), from a hand-built GPU trace of a compiled graph and the provenance a live span would
have read of it."""

import json

from gpuprof.analysis import report_dict
from gpuprof.traces.read import import_trace


def _x(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _launch(name, ts, correlation, kernel_ts):
    return [
        _x("cpu_op", name, ts, 8, **{"External id": correlation}),
        _x("cuda_runtime", "cudaLaunchKernel", ts + 2, 4, correlation=correlation),
        _x("kernel", name, kernel_ts, 50, pid=0, tid=7, device=0, stream=7, correlation=correlation),
    ]


KERNEL = "triton_tem_fused_mm_0"
# What the provenance reader gives for a GEMM template Inductor generated: 2 x 64 x 32 x 16 FLOPs.
PROVENANCE = [
    {
        "kernel": KERNEL,
        "event": KERNEL,
        "ops": ["aten.mm"],
        "sources": ["/m.py:3"],
        "module": "proj",
        "source": "/m.py:3",
        "flops": 65536,
        "matmul_flops": 65536,
        "other_flops": 0,
        "matmul_dtype": "bf16",
        "backward": False,
        "bytes": 8192,  # A [64, 16] and B [16, 32] read, C [64, 32] written, in bf16
    }
]


def _trace(tmp_path):
    # Step 1 (0-1000 us) runs the graph once, step 2 (1000-2000 us) twice.
    events = [
        _x("user_annotation", "ProfilerStep#1", 0, 1000),
        _x("user_annotation", "ProfilerStep#2", 1000, 1000),
        _x("cpu_op", "Torch-Compiled Region: 0/0", 10, 300),
        _x("cpu_op", "## Call CompiledFxGraph fabc ##", 20, 200),
        *_launch(KERNEL, 30, 1, 100),
        _x("cpu_op", "Torch-Compiled Region: 0/0", 1010, 600),
        _x("cpu_op", "## Call CompiledFxGraph fabc ##", 1020, 500),
        *_launch(KERNEL, 1030, 2, 1100),
        *_launch(KERNEL, 1230, 3, 1300),
    ]
    trace = {
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}],
        "traceEvents": events,
    }
    path = tmp_path / "compiled.json"
    path.write_text(json.dumps(trace))
    return import_trace(path)[0]


def test_each_call_counts_its_flops_once_in_its_step(tmp_path):
    data = report_dict(_trace(tmp_path), compiled_kernels=PROVENANCE, drop_incomplete_last_step=False)
    assert [s["flops"] for s in data["steps"]] == [65536, 2 * 65536]  # not twice: launch + kernel
    flops = data["flops"]
    assert flops["per_step_flops"] == flops["matmul_forward_flops_per_step"] == 1.5 * 65536
    assert flops["dtype"] == "bf16" and flops["matmul_flops_by_dtype"] == {"bf16": 1.5 * 65536}
    assert flops["model_flops_per_step"] == 1.5 * 65536  # no backward ran: inference, 1 x forward
    row = data["compiled"]["compiled_kernels"][0]
    assert (row["kernel"], row["calls"], row["flops"], row["module"], row["source"]) == (
        KERNEL,
        3,
        65536,
        "proj",
        "/m.py:3",
    )
    assert data["compiled"]["modules"] == [
        {"path": "proj", "kernels": 1, "calls": 3, "total_us": 150.0, "flops": 3 * 65536}
    ]
    # The launch operator's row carries the FLOPs, so the operator column adds up to the span's.
    assert sum(r["flops"] for r in data["operators"]) == 3 * 65536
    # On the roofline: 8 FLOP per byte, far below an H100's ridge point, so memory-bound.
    (row,) = [r for r in data["roofline"] if r["name"] == KERNEL]
    assert (row["calls"], row["flops"], row["bytes"], row["time_us"], row["on_device"]) == (
        3,
        3 * 65536,
        3 * 8192,
        150.0,
        True,
    )
    assert row["intensity_flop_per_byte"] == 8.0 and row["flop_class"] == "matmul"
    assert row["bound"] == "memory" and flops["memory_bound_pct"] == 100.0


def test_without_provenance_a_trace_counts_no_generated_flops(tmp_path):
    data = report_dict(_trace(tmp_path), drop_incomplete_last_step=False)
    row = data["compiled"]["compiled_kernels"][0]
    assert row["flops"] is None and row["module"] is None and "modules" not in data["compiled"]
    assert [s["flops"] for s in data["steps"]] == [0, 0]
