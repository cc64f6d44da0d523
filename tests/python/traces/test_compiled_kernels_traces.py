"""Inductor's generated kernels in traces: a hand-built Kineto trace of a compiled model on a GPU
(Triton kernels, launched from the compiled graph), and a real torch.profiler trace of a model
compiled with Inductor's C++ backend, whose ``compiled_kernels`` rows match the live session's."""

import json

import pytest

import gpuprof


def _x(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _launch(name, ts, correlation, kernel_us, kernel_ts):
    """A Triton launch as torch records it (a cpu_op with its kernel's file and hash), its runtime
    call and the kernel it ran."""
    return [
        _x(
            "cpu_op",
            name,
            ts,
            8,
            **{
                "External id": correlation,
                "kernel_backend": "triton",
                "kernel_file": "/tmp/torchinductor/ab/cab.py",
                "kernel_hash": "cab",
                "grid": "grid(1024)",
            },
        ),
        _x(
            "cuda_runtime",
            "cudaLaunchKernel",
            ts + 2,
            4,
            correlation=correlation,
            **{"External id": correlation},
        ),
        _x("kernel", name, kernel_ts, kernel_us, pid=0, tid=7, device=0, stream=7, correlation=correlation),
    ]


def test_a_gpu_traces_triton_kernels_are_grouped_with_their_device_time(tmp_path):
    # One 1000 us step: the compiled region calls its graph, which launches
    # triton_poi_fused_add_cos_0 (40 us on the device) and triton_red_fused_sum_1 twice (10 + 12 us).
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 1000,
        },
        _x("cpu_op", "Torch-Compiled Region: 0/0", 10, 500),
        _x("cpu_op", "## Call CompiledFxGraph fabc ##", 20, 400),
        *_launch("triton_poi_fused_add_cos_0", 30, 1, 40, 100),
        *_launch("triton_red_fused_sum_1", 60, 2, 10, 200),
        *_launch("triton_red_fused_sum_1", 90, 3, 12, 300),
    ]
    trace = {
        "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "numSms": 108}],
        "traceEvents": events,
    }
    path = tmp_path / "compiled.json"
    path.write_text(json.dumps(trace))
    report = gpuprof.analyze(path)
    rows = report.data["compiled"]["compiled_kernels"]
    assert [
        (r["kernel"], r["backend"], r["time_on"], r["calls"], r["total_us"], r["fused"]) for r in rows
    ] == [
        ("triton_poi_fused_add_cos_0", "triton", "device", 1, 40.0, "add_cos"),
        ("triton_red_fused_sum_1", "triton", "device", 2, 22.0, "sum"),
    ]
    # A trace carries no provenance: the operators are what the name says, not claimed as known
    assert all(r["ops"] is None and r["sources"] is None for r in rows)
    assert "2 kernels inductor generated ran 0.062 ms" in report.data["compiled"]["note"]
    assert "triton_red_fused_sum_1" in report.to_markdown().replace("\\_", "_")


torch = pytest.importorskip("torch")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(32, 32)

    def forward(self, x):
        return torch.relu(self.lin(x)).sin() * 2


def test_a_torch_profiler_trace_has_the_live_sessions_kernels(tmp_path):
    """The same compiled model, once under torch.profiler (Inductor's kernel profiling set by the
    user, as it must be for a CPU trace to hold the kernels) and once live with
    compiled_kernels=True: the same kernels, with the same calls per step."""
    import torch._inductor.config as inductor
    from torch.profiler import profile, schedule

    torch._dynamo.reset()
    model = torch.compile(Block())
    x = torch.randn(16, 32)
    path = tmp_path / "compiled.pt.trace.json"
    with inductor.patch({"cpp.enable_kernel_profile": True, "fx_graph_cache": False}):
        with profile(
            schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
        ) as prof:
            for _ in range(3):
                model(x).sum().backward()
                prof.step()
    traced = {r["kernel"]: r for r in gpuprof.analyze(path).data["compiled"]["compiled_kernels"]}

    torch._dynamo.reset()
    model = torch.compile(Block())
    with gpuprof.profile(compiled_kernels=True, gpu=False) as live:
        for _ in range(3):
            model(x).sum().backward()
            live.step()
    lived = {r["kernel"]: r for r in live.report().data["compiled"]["compiled_kernels"]}
    assert set(traced) == set(lived) and traced
    for name, row in traced.items():
        assert row["backend"] == "cpp" and row["time_on"] == "host"
        assert row["calls"] / 2 == lived[name]["calls"] / 3  # once per step in both
        assert row["fused"] == lived[name]["fused"]
        assert row["ops"] is None and lived[name]["ops"]
