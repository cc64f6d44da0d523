"""Inductor's generated kernels in traces: a hand-built Kineto trace of a compiled model on a GPU
(Triton kernels, launched from the compiled graph), and a real torch.profiler trace of a model
compiled with Inductor's C++ backend, whose ``compiled_kernels`` rows match the live session's."""

import json
import os

import pytest

import gpuprof
from gpuprof._native import _core


def _x(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _launch(name, ts, correlation, kernel_us, kernel_ts, kernel_file="/tmp/torchinductor/ab/cab.py"):
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
                "kernel_file": str(kernel_file),
                "kernel_hash": os.path.basename(str(kernel_file))[: -len(".py")],
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
    # The output code beside the kernel files the launches name is not on this machine: the
    # operators are what the name says, not claimed as known, and the note says why
    assert all(r["ops"] is None and r["sources"] is None for r in rows)
    note = report.data["compiled"]["note"]
    assert "2 kernels inductor generated ran 0.062 ms (0 named" in note
    assert "2 Triton kernels without their aten operators: the output code beside their kernel_file" in note
    assert "triton_red_fused_sum_1" in report.to_markdown().replace("\\_", "_")


# Inductor's output code for a GPU graph as torch 2.13 writes it (torch/_inductor/codegen/triton.py,
# define_kernel: the kernel's path and its origins above each definition), with an extern call
# whose comment names aten.mm (not a generated kernel's operator).
OUTPUT_CODE = """
from torch._inductor.async_compile import AsyncCompile
async_compile = AsyncCompile()

# kernel path: {add}
# Topologically Sorted Source Nodes: [x, y], Original ATen: [aten.add, aten.cos]
# Source node to ATen node mapping:
#   x => add
#   y => cos
triton_poi_fused_add_cos_0 = async_compile.triton('triton_poi_fused_add_cos_0', '''
import triton
''', device_str='cuda')


# kernel path: {sum}
# Topologically Sorted Source Nodes: [z], Original ATen: [aten.mul, aten.sum]
# Source node to ATen node mapping:
#   z => mul, sum_1
triton_red_fused_sum_1 = async_compile.triton('triton_red_fused_sum_1', '''
import triton
''', device_str='cuda')


def call(args):
    # Topologically Sorted Source Nodes: [w], Original ATen: [aten.mm]
    extern_kernels.mm(arg0_1, arg1_1, out=buf0)
"""


def test_a_traces_triton_kernels_are_named_from_the_output_code_beside_their_files(tmp_path):
    """The launches' kernel_file args lead to Inductor's cache; the output code there names each
    kernel's aten operators, the same ones the live session reads from the output code its process
    loaded (collect/inductor.py). A kernel whose output code is gone keeps ops null."""
    from gpuprof.collect.inductor import output_code_rows

    cache = tmp_path / "torchinductor_user"
    files = {}
    for name, digest in (("add", "cq3abc"), ("sum", "cr7def"), ("gone", "cx9ghi")):
        files[name] = cache / digest[1:3] / f"{digest}.py"
        files[name].parent.mkdir(parents=True, exist_ok=True)
        files[name].write_text("import triton\n")
    code = OUTPUT_CODE.format(add=files["add"], sum=files["sum"])
    (cache / "zz").mkdir()
    (cache / "zz" / "czzout.py").write_text(code)
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
        *_launch("triton_poi_fused_add_cos_0", 30, 1, 40, 100, files["add"]),
        *_launch("triton_red_fused_sum_1", 60, 2, 10, 200, files["sum"]),
        *_launch("triton_per_fused_mean_2", 90, 3, 12, 300, files["gone"]),
    ]
    files["gone"].unlink()  # its cache was cleared since
    path = tmp_path / "compiled.json"
    path.write_text(json.dumps({"traceEvents": events}))
    report = gpuprof.analyze(path)
    rows = {r["kernel"]: r for r in report.data["compiled"]["compiled_kernels"]}
    live = {r["kernel"]: r["ops"] for r in output_code_rows(code)}
    assert (
        rows["triton_poi_fused_add_cos_0"]["ops"]
        == ["aten.add", "aten.cos"]
        == live["triton_poi_fused_add_cos_0"]
    )
    assert rows["triton_red_fused_sum_1"]["ops"] == ["aten.mul", "aten.sum"] == live["triton_red_fused_sum_1"]
    assert rows["triton_per_fused_mean_2"]["ops"] is None
    assert all(r["backend"] == "triton" and r["calls"] == 1 for r in rows.values())
    note = report.data["compiled"]["note"]
    assert "(2 named with their aten operators" in note
    assert "; 1 Triton kernels without their aten operators" in note
    # The Chrome trace gpuprof writes beside a report keeps the launch args: read back, the same rows
    again = tmp_path / "again.json"
    _core.export_chrome_trace(report.trace, str(again))
    assert (
        gpuprof.analyze(again).data["compiled"]["compiled_kernels"]
        == report.data["compiled"]["compiled_kernels"]
    )


def test_a_kernel_file_outside_inductors_cache_layout_is_not_followed(tmp_path):
    """A trace's kernel_file names a path: only a file named after its kernel_hash, in the cache's
    <hash[1:3]> folder, leads to a cache; anything else (a trace from elsewhere, or a crafted one)
    reads no file."""
    from gpuprof.traces.inductor_code import output_code_provenance

    other = tmp_path / "ab" / "notes.py"
    other.parent.mkdir()
    other.write_text("x = 1\n")
    (tmp_path / "zz").mkdir()
    (tmp_path / "zz" / "czzout.py").write_text(OUTPUT_CODE.format(add=other, sum=other))
    launch = {"name": "triton_poi_fused_add_cos_0", "kernel_file": str(other), "kernel_hash": "cab"}
    assert output_code_provenance([launch]) == []
    assert output_code_provenance([{"name": "aten::mm"}]) is None  # no launch args: nothing to read


def test_output_code_is_looked_for_near_the_kernels_time(tmp_path):
    """The output code written a minute before its kernel's module (the kernels' modules are
    written when the output code is loaded) is found; a graph's written two hours away is another
    compile's and is not read."""
    from gpuprof.traces.inductor_code import output_code_provenance

    kernel = tmp_path / "q3" / "cq3abc.py"
    kernel.parent.mkdir()
    kernel.write_text("import triton\n")
    code = tmp_path / "zz" / "czzout.py"
    code.parent.mkdir()
    code.write_text(OUTPUT_CODE.format(add=kernel, sum=kernel))
    launch = {"name": "triton_poi_fused_add_cos_0", "kernel_file": str(kernel), "kernel_hash": "cq3abc"}
    now = kernel.stat().st_mtime
    os.utime(code, (now - 60, now - 60))
    assert [r["ops"] for r in output_code_provenance([launch])][0] == ["aten.add", "aten.cos"]
    os.utime(code, (now - 7200, now - 7200))
    assert output_code_provenance([launch]) == []


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
    traced_section = gpuprof.analyze(path).data["compiled"]
    traced = {r["kernel"]: r for r in traced_section["compiled_kernels"]}

    torch._dynamo.reset()
    model = torch.compile(Block())
    with gpuprof.profile(compiled_kernels=True, gpu=False) as live:
        for _ in range(3):
            model(x).sum().backward()
            live.step()
    lived_section = live.report().data["compiled"]
    lived = {r["kernel"]: r for r in lived_section["compiled_kernels"]}
    assert set(traced) == set(lived) and traced
    for name, row in traced.items():
        assert row["backend"] == "cpp" and row["time_on"] == "host"
        assert row["calls"] / 2 == lived[name]["calls"] / 3  # once per step in both
        assert row["fused"] == lived[name]["fused"]
        # Inductor's C++ kernels record no args and get no origin comment in the output code: a
        # trace cannot name their operators, the live session's provenance can; the note says so
        assert row["ops"] is None and lived[name]["ops"]
    assert (
        f"; {len(traced)} C++ kernels without their aten operators: a trace records none"
        in traced_section["note"]
    )
    # One guard evaluation (Dynamo's cache lookup) per call of the compiled model once it is
    # compiled: the trace's 2 recorded steps; the live span's 3 steps less the first, whose call
    # compiled the frame (torch records no lookup of the empty cache)
    assert traced_section["guard_calls"] == 2 and lived_section["guard_calls"] == 2
    assert traced_section["guard_us"] > 0 and lived_section["guard_us"] > 0
