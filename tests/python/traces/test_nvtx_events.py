"""Nvtx events (the user's NVTX ranges, as GPU collection brings them in) in a report: every output
renders, the breakdown is that of the same trace without them, and the Chrome trace export reads
back with them as Nvtx events, exactly."""

import json

import gpuprof
from gpuprof._native import _core
from gpuprof.report.build import build_report

STEP_KEYS = ("step", "total_us", "kernel_us", "runtime_us", "cpu_exec_us", "other_us")


def _trace(with_nvtx: bool):
    # Two 1 ms steps on thread 7: aten::mm launches a 300 us kernel in each. The NVTX ranges: one
    # over both steps and past them, one over idle host time, a mark.
    t = _core.Trace()
    t.metadata = {"pid": "99"}
    for n, base in enumerate((0, 1_000_000)):
        t.add_event("step", f"ProfilerStep#{n}", base, 1_000_000, tid=7)
        t.add_event("host_op", "aten::mm", base + 100_000, 200_000, tid=7)
        t.add_event("runtime", "cudaLaunchKernel", base + 150_000, 10_000, correlation=n + 1, tid=7)
        t.add_event(
            "kernel", "volta_sgemm_128x64_nn", base + 200_000, 300_000, correlation=n + 1, device=0, tid=7
        )
    if with_nvtx:
        t.add_event("nvtx", "epoch", -500_000, 3_000_000, tid=7)
        t.add_event("nvtx", "idle wait", 600_000, 300_000, tid=7)
        t.add_event("nvtx", "checkpoint", 950_000, 0, tid=7)
    return t


def _steps(report):
    return [{k: s[k] for k in STEP_KEYS} for s in report.to_dict()["steps"]]


def test_nvtx_ranges_change_no_step_and_every_output_renders(tmp_path):
    plain = build_report(_trace(False))
    annotated = build_report(_trace(True))
    assert _steps(annotated) == _steps(plain)
    # CPU Exec per step: mm's 200 us minus the launch (10 us) and the kernel's overlap with it
    # ([200, 300) us: 100 us), which come first in priority: 90 us. The NVTX ranges add nothing.
    assert [s["cpu_exec_us"] for s in _steps(plain)] == [90.0, 90.0]
    assert annotated.to_text()
    assert annotated.to_markdown()
    assert "<html" in annotated.to_html().lower()
    json.dumps(annotated.to_dict())


def test_chrome_export_of_nvtx_events_reads_back_exactly(tmp_path):
    trace = _trace(True)
    path = tmp_path / "t.json"
    gpuprof.export_chrome_trace(trace, path)
    doc = json.loads(path.read_text())
    nvtx = [e for e in doc["traceEvents"] if e.get("cat") == "nvtx"]
    assert sorted(e["name"] for e in nvtx) == ["checkpoint", "epoch", "idle wait"]
    assert all(e["pid"] == 99 and e["tid"] == 7 for e in nvtx)  # the host thread's row
    again = gpuprof.analyze(path)
    fields = ("name", "start_ns", "dur_ns", "tid", "device")
    assert [tuple(e[f] for f in fields) for e in _core.trace_events(again.trace, "nvtx")] == [
        tuple(e[f] for f in fields) for e in _core.trace_events(trace, "nvtx")
    ]
    assert _steps(again) == _steps(build_report(trace))
