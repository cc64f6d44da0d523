"""Export: a live CPU session written as a Kineto-style Chrome trace, read back by gpuprof (the same
report), by Holistic Trace Analysis and by Perfetto's trace processor."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from _traces import TRACES  # noqa: E402

import gpuprof
from gpuprof._native import _core

ROCM = TRACES / "hta_mi250_rocm" / "rank0.json.gz"

STEP_KEYS = ["step", "total_us"] + [f"{k}_us" for k, _ in gpuprof.report.model.CATEGORIES]


def train(steps: int, prof) -> None:
    import torch

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 32), torch.randn(64, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    it = iter(loader)
    for _ in range(steps):
        x, y = next(it)
        with gpuprof.range("forward"):
            loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        prof.step()


def same_steps(a, b) -> None:
    assert [{k: s[k] for k in STEP_KEYS} for s in a.steps] == [{k: s[k] for k in STEP_KEYS} for s in b.steps]


@pytest.fixture(scope="module")
def live_session(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("runs")
    sched = gpuprof.schedule(wait=1, warmup=1, active=2, repeat=2)
    with gpuprof.profile(schedule=sched, on_trace_ready=gpuprof.save(out)) as prof:
        train(8, prof)
    return prof, out


def test_save_writes_report_and_trace_per_span_and_analyze_reads_them_back(live_session):
    prof, out = live_session
    spans = sorted(p.name for p in out.iterdir())
    assert spans == ["span_000", "span_001"]
    for span in spans:
        assert (out / span / "report.json").is_file() and (out / span / "trace.json.gz").is_file()
    # Each span's trace read back gives the report saved beside it.
    reports = [gpuprof.analyze(out / s / "trace.json.gz") for s in spans]
    assert [Path(r.to_dict()["source"]["path"]).parent.name for r in reports] == spans
    saved = [gpuprof.Report.load(out / s / "report.json") for s in spans]
    # The folder, as `gpuprof analyze out` prints it: each span once, from its saved report (the
    # trace each report wrote beside itself is the same span).
    folder = gpuprof.analyze(out)
    assert [r.to_dict()["steps"] for r in folder] == [r.to_dict()["steps"] for r in saved]
    for imported, original in zip(reports, saved):
        same_steps(imported, original)
        assert imported.counts["events"] == original.counts["events"]
    # The last span is the one prof.report() keeps.
    same_steps(reports[-1], prof.report())


def test_export_chrome_trace_round_trip_is_exact(live_session, tmp_path):
    prof, _ = live_session
    for name in ["trace.json", "trace.json.gz"]:
        path = tmp_path / name
        prof.export_chrome_trace(path)
        again = gpuprof.analyze(path)
        same_steps(again, prof.report())
        ours = _core.trace_events(prof.report().trace)
        back = _core.trace_events(again.trace)
        assert [(e["kind"], e["name"], e["start_ns"], e["dur_ns"], e["tid"]) for e in ours] == [
            (e["kind"], e["name"], e["start_ns"], e["dur_ns"], e["tid"]) for e in back
        ]


def test_export_is_kineto_shaped(live_session, tmp_path):
    prof, _ = live_session
    path = tmp_path / "t.json"
    prof.export_chrome_trace(path)
    doc = json.loads(path.read_text())
    assert doc["schemaVersion"] == 1 and isinstance(doc["deviceProperties"], list)
    cats = {e.get("cat") for e in doc["traceEvents"] if e["ph"] == "X"}
    assert {"cpu_op", "user_annotation"} <= cats
    steps = [e["name"] for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#")]
    assert steps == ["ProfilerStep#6", "ProfilerStep#7"]  # the second span: steps 6 and 7


def test_gpu_trace_export_keeps_kernels_devices_and_flows(tmp_path):
    if not ROCM.exists():
        pytest.skip(f"shared traces not found at {ROCM}")
    original = gpuprof.analyze(ROCM)
    path = tmp_path / "rocm.json.gz"
    gpuprof.export_chrome_trace(original.trace, path)
    doc = json.loads(gzip.decompress(path.read_bytes()))
    assert len(doc["deviceProperties"]) == 4 and doc["deviceProperties"][0]["warpSize"] == 64
    starts = {e["id"] for e in doc["traceEvents"] if e["ph"] == "s" and e["cat"] == "ac2g"}
    ends = {e["id"] for e in doc["traceEvents"] if e["ph"] == "f" and e["cat"] == "ac2g"}
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert kernels and {k["args"]["correlation"] for k in kernels} <= ends == starts
    again = gpuprof.analyze(path)
    same_steps(again, original)


def _hta_breakdown(folder: Path):
    hta = pytest.importorskip("hta.trace_analysis", reason="holistictraceanalysis is not installed")
    return hta.TraceAnalysis(trace_dir=str(folder)).get_temporal_breakdown(visualize=False)


def test_holistic_trace_analysis_reads_our_export_with_the_same_temporal_breakdown(tmp_path):
    if not ROCM.exists():
        pytest.skip(f"shared traces not found at {ROCM}")
    orig_dir, ours_dir = tmp_path / "orig", tmp_path / "ours"
    orig_dir.mkdir()
    ours_dir.mkdir()
    shutil.copy(ROCM, orig_dir / "rank0.json.gz")
    gpuprof.export_chrome_trace(gpuprof.analyze(ROCM).trace, ours_dir / "rank0.json.gz")
    theirs = _hta_breakdown(orig_dir)
    ours = _hta_breakdown(ours_dir)
    cols = ["idle_time(us)", "compute_time(us)", "non_compute_time(us)", "kernel_time(us)"]
    assert ours[cols].to_dict("records") == theirs[cols].to_dict("records")
    assert theirs["compute_time(us)"].iloc[0] > 0


def test_holistic_trace_analysis_loads_a_live_cpu_export(live_session, tmp_path):
    pytest.importorskip("hta.trace_analysis", reason="holistictraceanalysis is not installed")
    from hta.trace_analysis import TraceAnalysis

    prof, _ = live_session
    prof.export_chrome_trace(tmp_path / "rank0.json.gz")
    # HTA drops the last ProfilerStep by default (often cut short); this span's last one is whole.
    ta = TraceAnalysis(trace_dir=str(tmp_path), include_last_profiler_step=True)
    df = ta.t.get_trace(0)
    names = set(ta.t.symbol_table.sym_table)
    assert "ProfilerStep#6" in names and "forward" in names
    host_ops = _core.trace_contents(prof.report().trace)["kinds"].get("host_op", 0)
    cpu_op = ta.t.symbol_table.sym_index["cpu_op"]
    assert int((df["cat"] == cpu_op).sum()) == host_ops


def _trace_processor():
    tp_mod = pytest.importorskip("perfetto.trace_processor", reason="perfetto is not installed")
    # The perfetto package runs a `trace_processor_shell` binary that it downloads on first use;
    # where nothing outside PyPI can be reached, point GPUPROF_TRACE_PROCESSOR at one.
    bin_path = os.environ.get("GPUPROF_TRACE_PROCESSOR")
    return tp_mod, tp_mod.TraceProcessorConfig(bin_path=bin_path) if bin_path else None


def test_perfetto_trace_processor_reads_our_export(live_session, tmp_path):
    tp_mod, config = _trace_processor()
    prof, _ = live_session
    path = tmp_path / "t.json"
    prof.export_chrome_trace(path)
    try:
        tp = (
            tp_mod.TraceProcessor(trace=str(path), config=config)
            if config
            else tp_mod.TraceProcessor(trace=str(path))
        )
    except Exception as e:  # the download of the binary failed: no network here
        pytest.skip(
            f"Perfetto's trace_processor_shell is not available ({type(e).__name__}: {e}); "
            "set GPUPROF_TRACE_PROCESSOR to a local trace_processor_shell"
        )
    try:
        rows = tp.query(
            "select name, ts, dur from slice where name like 'ProfilerStep#%' order by ts"
        ).as_pandas_dataframe()
    finally:
        tp.close()
    steps = [s for s in prof.report().steps]
    assert list(rows["name"]) == [f"ProfilerStep#{s['step']}" for s in steps]
    assert list(rows["dur"]) == [s["end_ns"] - s["start_ns"] for s in steps]
