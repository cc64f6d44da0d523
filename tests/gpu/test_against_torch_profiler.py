"""gpuprof against torch.profiler on the same small CNN training loop, in the same process: the
breakdown shares must agree within 2 points; and the two never fight over CUPTI."""

import json

import pytest

import gpuprof
from gpuprof._native import _core
from gpuprof.report.build import build_report

pytestmark = pytest.mark.gpu

SHARES = ("kernel", "memcpy", "runtime", "dataloader", "cpu_exec")
KINETO_KINDS = {
    "cpu_op": "host_op",
    "operator": "host_op",
    "user_annotation": "user_range",
    "cuda_runtime": "runtime",
    "runtime": "runtime",
    "cuda_driver": "driver",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
}


def _trace_from_kineto(path):
    """The events of a torch.profiler chrome trace in a native Trace (only what the breakdown uses)."""
    with open(path) as f:
        data = json.load(f)
    t = _core.Trace()
    for e in data["traceEvents"]:
        kind = KINETO_KINDS.get(str(e.get("cat", "")).lower())
        if e.get("ph") != "X" or kind is None:
            continue
        if kind == "user_range" and e["name"].startswith("ProfilerStep#"):
            kind = "step"
        args = e.get("args") or {}
        on_device = kind in ("kernel", "memcpy", "memset")
        t.add_event(
            kind,
            e["name"],
            int(round(float(e["ts"]) * 1000)),
            int(round(float(e.get("dur", 0)) * 1000)),
            correlation=int(args.get("correlation", 0) or 0),
            external_id=int(args.get("External id", args.get("external id", 0)) or 0),
            device=int(args.get("device", 0)) if on_device else -1,
            tid=int(args.get("stream", 0)) if on_device else 0,
        )
    return t


def _training_loop(torch):
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(64, 10),
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(2048, 3, 32, 32), torch.randint(0, 10, (2048,)))
    loader = torch.utils.data.DataLoader(data, batch_size=64, num_workers=0)

    def run(steps, on_step):
        it = iter(loader)
        for _ in range(steps):
            x, y = next(it)
            x, y = x.cuda(), y.cuda()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()
            on_step()

    return run


def test_breakdown_shares_match_torch_profiler_within_2_points(cuda, tmp_path):
    torch = cuda
    run = _training_loop(torch)
    run(10, lambda: None)  # warm up cuDNN, the allocator, lazy module loading

    with gpuprof.profile(schedule=gpuprof.schedule(wait=1, warmup=1, active=8)) as prof:
        run(10, prof.step)
    ours = prof.report()
    assert ours.to_dict()["metadata"]["gpu_collection"].startswith("on")

    path = tmp_path / "torch_trace.json"
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=8),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as tprof:
        run(10, tprof.step)
    theirs = build_report(_trace_from_kineto(path))

    assert len(ours.steps) >= 7 and len(theirs.steps) >= 7
    # Where a share differs, the mean step's parts in microseconds say whether the profilers saw
    # different work or the same work in steps of different lengths (as on an H200, 2026-11-29).
    parts = ("total", "kernel", "runtime", "dataloader", "cpu_exec", "other")
    us = {k: (round(ours.average[f"{k}_us"]), round(theirs.average[f"{k}_us"])) for k in parts}
    for key in SHARES:
        a, b = ours.average[f"{key}_pct"], theirs.average[f"{key}_pct"]
        assert a == pytest.approx(b, abs=2.0), (
            f"{key}: gpuprof {a:.2f}% vs torch.profiler {b:.2f}%; mean step us (gpuprof, torch): {us}"
        )


def _kernel_names_in(tprof, path):
    tprof.export_chrome_trace(str(path))
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    return [e["name"] for e in events if str(e.get("cat", "")).lower() == "kernel"]


def test_torch_profiler_active_means_host_only_with_the_message(cuda, tmp_path):
    torch = cuda
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ) as tprof:
        with gpuprof.profile() as prof:
            a = torch.randn(256, 256, device="cuda")
            (a @ a).sum().item()
    report = prof.report()
    note = report.to_dict()["metadata"]["gpu_collection"]
    assert note.startswith("off: torch.profiler is active"), note
    assert "GPU collection off: torch.profiler" in str(report)
    assert _core.trace_events(report.trace, "kernel") == []
    # torch.profiler kept its CUPTI and saw the GEMM.
    assert _kernel_names_in(tprof, tmp_path / "t.json")


def test_torch_profiler_gets_cupti_back_after_a_gpuprof_session(cuda, tmp_path):
    torch = cuda
    with gpuprof.profile() as prof:
        a = torch.randn(256, 256, device="cuda")
        (a @ a).sum().item()
    assert _core.trace_events(prof.report().trace, "kernel")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as tprof:
        (a @ a).sum().item()
        torch.cuda.synchronize()
    assert _kernel_names_in(tprof, tmp_path / "t.json")


def test_roofline_sweep_runs(cuda, kernels, capsys):
    from gpuprof import roofline

    assert roofline.main(["--n", str(1 << 22), "--k", "1", "64", "--repeats", "3", "--warmup", "1"]) == 0
    out = capsys.readouterr().out
    assert "GFLOP/s" in out and "% of roof" in out
    lines = [line for line in out.splitlines() if line.strip().startswith(("1 ", "64 "))]
    assert len(lines) == 2
