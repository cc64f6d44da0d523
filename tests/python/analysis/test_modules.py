"""The module view from traces (docs/metrics.md, "Modules"): hand-built Kineto traces read through the
importer, each expected number worked out beside its timeline (microseconds), and what torch 2.13's
profiler writes for a real model."""

from __future__ import annotations

import json

import pytest

import gpuprof


def _ev(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _module(name, ts, dur, tid=1):
    # What torch.profiler's Python tracer writes (with_stack=True) for one module call.
    return _ev("python_function", f"nn.Module: {name}", ts, dur, tid, **{"Python module id": 0})


def _op(name, ts, dur, tid=1, seq=None, fwd_thread=None, ext=0):
    args = {"External id": ext}
    if seq is not None:
        args["Sequence number"] = seq
        args["Fwd thread id"] = fwd_thread or 0
    return _ev("cpu_op", name, ts, dur, tid, **args)


def _modules(tmp_path, events) -> list[dict]:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return gpuprof.analyze(str(path)).to_dict()["modules"]


def test_forward_and_backward_of_a_traced_model(tmp_path):
    """One step: Net_0 [0, 100) calls Sequential_0 [10, 70), which calls Linear_0 [12, 40) (its
    aten::addmm is autograd node 3) and ReLU_0 [45, 65) (aten::relu, node 4); then Linear_1 [75, 95)
    (node 5) directly. Backward on the autograd thread: the evaluate_function ops of nodes 5, 4 and 3
    take 10, 6 and 20 us; AccumulateGrad (no node of a forward op) 4 us, in no module; its kernel,
    launched by aten::mm inside node 3's backward, takes 7 us on the GPU and counts in Linear_0.

    Linear_0: forward 28 + backward 20 = 48. ReLU_0: 20 + 6 = 26. Sequential_0: its call 60 and its
    children's backward 26 = 86, self 86 - 48 - 26 = 12 (its forward call less theirs). Linear_1:
    20 + 10 = 30. Net_0: 100 + 36 = 136, self 136 - 86 - 30 = 20."""
    bw = "autograd::engine::evaluate_function: "
    modules = _modules(
        tmp_path,
        [
            _ev("user_annotation", "ProfilerStep#1", 0, 300),
            _module("Net_0", 0, 100),
            _module("Sequential_0", 10, 60),
            _module("Linear_0", 12, 28),
            _op("aten::addmm", 14, 24, seq=3),
            _module("ReLU_0", 45, 20),
            _op("aten::relu", 47, 16, seq=4),
            _module("Linear_1", 75, 20),
            _op("aten::addmm", 77, 16, seq=5),
            _op(bw + "AddmmBackward0", 150, 10, tid=2, seq=5, fwd_thread=1),
            _op(bw + "ReluBackward0", 170, 6, tid=2, seq=4, fwd_thread=1),
            _op(bw + "AddmmBackward0", 180, 20, tid=2, seq=3, fwd_thread=1),
            _op("aten::mm", 182, 15, tid=2, ext=77),
            _ev("cuda_runtime", "cudaLaunchKernel", 183, 2, tid=2, correlation=9, **{"External id": 77}),
            _ev("kernel", "gemm", 190, 7, tid=7, correlation=9, device=0, stream=7),
            _op(bw + "torch::autograd::AccumulateGrad", 205, 4, tid=2),
        ],
    )
    rows = {
        r["path"]: (r["type"], r["parent"], r["depth"], r["calls"], r["host_total_us"], r["host_self_us"])
        for r in modules
    }
    assert rows == {
        "": ("Net", None, 0, 1, 136.0, 20.0),
        "Sequential_0": ("Sequential", "", 1, 1, 86.0, 12.0),
        "Sequential_0.Linear_0": ("Linear", "Sequential_0", 2, 1, 48.0, 48.0),
        "Sequential_0.ReLU_0": ("ReLU", "Sequential_0", 2, 1, 26.0, 26.0),
        "Linear_1": ("Linear", "", 1, 1, 30.0, 30.0),
    }
    # Depth first, heaviest first; the kernel of node 3's backward counts in Linear_0 and above.
    assert [r["path"] for r in modules] == [
        "",
        "Sequential_0",
        "Sequential_0.Linear_0",
        "Sequential_0.ReLU_0",
        "Linear_1",
    ]
    device = {r["path"]: (r["device_self_us"], r["device_total_us"]) for r in modules}
    assert device["Sequential_0.Linear_0"] == (7.0, 7.0)
    assert device["Sequential_0"] == (0.0, 7.0)
    assert device[""] == (0.0, 7.0)


def test_a_trace_without_module_calls_has_no_module_rows(tmp_path):
    """Traces written without with_stack (every real trace under ../shared/traces) have none."""
    assert _modules(tmp_path, [_op("aten::mm", 0, 10)]) == []


def test_real_traces_have_no_module_rows_and_keep_their_backward_links(shared_traces):
    """The real traces carry Sequence number / Fwd thread id on their ops but no nn.Module events
    (recorded without with_stack): no module rows, and nothing else moves."""
    report = gpuprof.analyze(str(shared_traces / "hta_mi250_rocm" / "rank0.json.gz"))
    assert report.data["modules"] == []
    from gpuprof._native import _core

    ops = _core.trace_events(report.trace, "host_op")
    backward = [e for e in ops if e["correlation"] >> 63]
    # The 8 ops that carry a forward thread id in this file: 4 nodes, each inside its engine op.
    assert len(backward) == 8
    assert all(e["name"].endswith("Backward0") for e in backward)
    assert sum(e["name"].startswith("autograd::engine::evaluate_function: ") for e in backward) == 4


def _train(model, steps, step=None):
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        if step is not None:
            step()


def test_what_torch_profiler_writes_for_a_real_model(tmp_path):
    """torch 2.13's profiler with with_stack=True (with_modules=True adds nothing in eager mode)
    names each call "nn.Module: <Type>_<n>"; the analysis rebuilds the hierarchy from their nesting:
    every module of the model, each with the calls the loop made, and the backward in them."""
    torch = pytest.importorskip("torch")
    from _loops import make_tiny_resnet

    torch.manual_seed(0)
    model = make_tiny_resnet()
    _train(model, 1)  # first-call costs outside the trace
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], with_modules=True, with_stack=True
    ) as prof:
        _train(model, 2)
    path = tmp_path / "resnet.json"
    prof.export_chrome_trace(str(path))
    modules = gpuprof.analyze(str(path)).to_dict()["modules"]
    by_path = {r["path"]: r for r in modules}
    # The same modules as the model's own tree: torch numbers each type's instances as it meets
    # them, so the stem's conv is Conv2d_0 and layer1's first block's are Conv2d_1 and Conv2d_2.
    assert sorted((r["type"], r["depth"]) for r in modules) == sorted(
        [(type(m).__name__, name.count(".") + bool(name)) for name, m in model.named_modules()]
        + [("CrossEntropyLoss", 0)]
    )
    assert by_path[""]["type"] == "TinyResNet"
    assert by_path["Sequential_0.BasicBlock_0.Conv2d_1"]["parent"] == "Sequential_0.BasicBlock_0"
    assert by_path["CrossEntropyLoss_0"]["parent"] is None
    # Each block applies its ReLU twice per step: 4 calls; every other module once per step.
    for r in modules:
        assert r["calls"] == (4 if r["type"] == "ReLU" and r["depth"] == 3 else 2), r
    # Backward in the modules: the classifier's total holds its AddmmBackward0, beyond its calls.
    forward_us = sum(
        e["dur"]
        for e in json.loads(path.read_text())["traceEvents"]
        if e.get("name") == "nn.Module: Linear_0"
    )
    assert by_path["Linear_0"]["host_total_us"] > forward_us + 1.0


def _wide_trace(tmp_path, hostile: str) -> dict:
    """A model of 30 modules (10, 9 and 8 us in turn; the first, among the heaviest, named by
    `hostile`) in a 400 us step."""
    events = [_ev("user_annotation", "ProfilerStep#1", 0, 400), _module("Net (Net)", 0, 320)]
    for i in range(30):
        name = hostile if i == 0 else f"module_{i}"
        events.append(_module(f"{name} (Linear)", 10 + 10 * i, 10 - (i % 3)))
    path = tmp_path / "wide.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return gpuprof.analyze(str(path))


def test_text_and_markdown_show_the_heaviest_modules_escaped(tmp_path):
    """The terminal shows the 10 heaviest modules (of 31) as a tree, and Markdown 15; a module name
    from the trace is shown inert (control characters as escapes in the terminal; Markdown's table
    and HTML characters escaped)."""
    hostile = "evil|<b>x</b>\x1b[31m*bold*"
    report = _wide_trace(tmp_path, hostile)
    assert len(report.data["modules"]) == 31
    text = report.to_text() if hasattr(report, "to_text") else str(report)
    head = next(line for line in text.splitlines() if line.startswith("Modules"))
    assert head == "Modules (the 10 heaviest of 31, forward and backward)"
    assert "\x1b[31m" not in text and "evil|<b>x</b>\\x1b[31m*bold*" in text
    md = report.to_markdown()
    assert "### Modules (the 15 heaviest of 31)" in md
    assert "evil\\|&lt;b&gt;x&lt;/b&gt;" in md and "<b>" not in md and "\x1b" not in md
    html = report.to_html()
    assert "<b>x</b>" not in html and "evil|&lt;b&gt;x&lt;/b&gt;" in html
