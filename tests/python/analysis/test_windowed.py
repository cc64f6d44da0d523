"""Windowed analysis (docs/design.md, "Memory"): a trace with more events than its memory budget
holds is read in windows of steps and the windows' results merged. The specification: the same
synthetic trace analysed whole and in windows (forced with a 1 MiB budget: a cap of 4,096 events,
windows of 2,048)
gives the same steps, breakdown and name-keyed tables, and the report says it was windowed and what
it left out."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from synthetic_ranks import GAP_US, _step_len_us, rank_trace  # noqa: E402
from trace_memory import write_trace  # noqa: E402  (the benchmark's own synthetic trace)

import gpuprof  # noqa: E402
from gpuprof.analysis.windowed import CUT_SECTIONS  # noqa: E402
from gpuprof.report.json_schema import schema  # noqa: E402
from gpuprof.traces.windows import plan_windows, scan_steps  # noqa: E402

MIB = 1 << 20


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    # One rank of bench/synthetic_ranks.py's DDP job, its step repeated: 89 events a step (host
    # operators, launches, kernels, an input copy, all-reduces), 2 MB: 116 steps, 10,324 events.
    path = tmp_path_factory.mktemp("windowed") / "synthetic.json"
    write_trace(path, 2_000_000)
    return path


@pytest.fixture(scope="module")
def lagged(tmp_path_factory):
    # The same job's rank for 120 steps, its device work 60% of a step late: each step's last
    # kernels run into the next step's host time, and a step starts where the one before it ends
    # (26.8 ms for the first step, 17.3 ms after). A window must keep the step before its first
    # (whose end is its first step's start) and the step after its last (which holds its last
    # kernels): without them the steps and the operators' device times come out different.
    doc = rank_trace(0, 1, steps=120, layers=8, buckets=4, factors=[1.0] * 120, slowest=[1.0] * 120)
    period = _step_len_us(1.0, 8, 4) + GAP_US
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            e["ts"] += 0.6 * period
    path = tmp_path_factory.mktemp("windowed") / "lagged.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module", params=["synthetic", "lagged"])
def both(request):
    path = request.getfixturevalue(request.param)
    whole = gpuprof.analyze(path).to_dict()
    windowed = gpuprof.analyze(path, max_memory=MIB).to_dict()
    return whole, windowed


def test_the_scan_keeps_the_steps_and_counts_every_event(synthetic):
    scan = scan_steps(synthetic)
    assert len(scan.steps) == 116
    # Every event is counted once: the 116 markers in their steps, the other 88 of each step by
    # their start time, in buckets of 2^20 ns (1.05 ms of a 17.1 ms step): a step's count is off by
    # the few events of a bucket that straddles its start (87 to 94), their sum is exact.
    assert sum(scan.counts) == 116 * 89
    assert all(84 <= n <= 94 for n in scan.counts)
    windows = plan_windows(scan, 4096)
    # A window of n steps keeps n + 2 (a context step on each side, one at the ends), at most 4,096
    # events: about 44 steps of 89 and their two context steps.
    assert [w.last - w.first + 1 for w in windows] == [44, 44, 28]
    assert all(w.events <= 4096 for w in windows)
    # The windows own consecutive times from the trace's start to its end.
    assert windows[0].own_from == -(2**63) and windows[-1].own_to == 2**63 - 1
    assert all(a.own_to == b.own_from for a, b in zip(windows, windows[1:]))


def test_windowed_steps_and_breakdown_equal_the_whole_trace(both):
    whole, windowed = both
    assert windowed["source"]["windowed"]["windows"] == 6
    # Every step row (its wall time, each category's time, its start and end) to the nanosecond:
    # a window draws its first step's start from the step before it, kept as context, and its last
    # step's end from its own kernels, which the context step after it keeps.
    assert windowed["steps"] == whole["steps"]
    assert windowed["average"] == whole["average"]
    assert windowed["step_rules"] == whole["step_rules"]
    assert windowed["counts"] == whole["counts"]
    assert windowed["metadata"] == whole["metadata"]  # the file's, as the scan read it whole


def _rows(data, key):
    return {json.dumps(r, sort_keys=True) for r in data[key]}


@pytest.mark.parametrize(
    "table", ["kernels", "kernel_ops", "operators", "operators_by_shape", "copies", "collectives", "ranges"]
)
def test_windowed_name_keyed_tables_equal_the_whole_trace(both, table):
    whole, windowed = both
    # Calls, totals, minima and maxima are sums and extremes of the same events, each counted in the
    # window that owns it; means and bandwidths are recomputed from them. The synthetic trace's
    # times are whole microseconds, so every sum is exact; a mean is the same quotient up to the
    # last bit of a double (rel 1e-12).
    assert len(windowed[table]) == len(whole[table])
    for w, h in zip(windowed[table], whole[table]):
        assert w.keys() == h.keys()
        for k in h:
            if isinstance(h[k], float):
                assert w[k] == pytest.approx(h[k], rel=1e-12), (table, k)
            else:
                assert w[k] == h[k], (table, k)


def test_collective_calls_and_critical_paths_are_every_steps_once_in_order(both):
    whole, windowed = both
    assert windowed["collective_calls"] == whole["collective_calls"]
    # Each step's critical path is drawn from its own events: the window that owns the step has
    # them all, its context included.
    assert windowed["critical_path"] == whole["critical_path"]


def test_the_report_says_it_was_windowed_and_what_it_cut(both, synthetic):
    # (both traces: 10,324 and 10,681 events, six windows each: a window keeps half the cap)
    whole, windowed = both
    (note,) = [w for w in windowed["warnings"] if w["kind"] == "windowed"]
    assert "more than 4,096 events, the cap from --max-memory 1 MiB at 256 bytes an event" in note["message"]
    assert "6 windows" in note["message"]
    assert "--max-memory SIZE" in note["message"]
    cut = windowed["source"]["windowed"]["cut"]
    assert "devices" in cut and "memory_curve" in cut and "step_views" in cut
    for key in cut:
        if key in CUT_SECTIONS:  # as a trace without events has them; FLOPs absent
            assert windowed.get(key, {}) in ([], {}), key
    assert "flops" not in windowed
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(windowed, schema())  # the report's schema (docs/schema.md) holds
    assert "windowed" not in whole["source"] and not whole["warnings"]
    # The terminal report shows the note; the command exits 0.
    proc = subprocess.run(
        [sys.executable, "-m", "gpuprof", "analyze", str(synthetic), "--max-memory", "1M"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())  # the warning is wrapped to the terminal's width
    assert "warning: this trace has more than 4,096 events" in text
    assert "analysed in 6 windows of consecutive steps" in text
    assert "116 steps, mean step time 17.140 ms" in text


def _differences(a, b, where: str, out: list) -> None:
    """Where two report sections differ: every value equal, floats to rel 1e-9 (a mean of the same
    sums divided in another order differs in its last bits)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            out.append((where, sorted(a.keys() ^ b.keys())))
            return
        for k in a:
            _differences(a[k], b[k], f"{where}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append((where, len(a), len(b)))
        for i, (x, y) in enumerate(zip(a, b)):
            _differences(x, y, f"{where}[{i}]", out)
    elif isinstance(a, float) and isinstance(b, (float, int)):
        if not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9):
            out.append((where, a, b))
    elif a != b:
        out.append((where, a, b))


@pytest.mark.parametrize(
    "name, windows",
    [("hta_2xv100_ddp", 5), ("hta_a100_nccl", 3), ("hta_v100_ns", 5), ("tb_resnet50_v100_nw0", 6)],
)
def test_stored_traces_read_in_windows_equal_their_whole_reports(shared_traces, name, windows):
    # The real traces (DDP on two V100s, NCCL on A100s, a ResNet-50 with its DataLoader...), each
    # forced into windows with a 1 MiB budget (2,048 events a window: 3 to 6 of them): every step,
    # the averages, every row of the name-keyed tables (ties in the native order), the collective
    # calls, the critical paths, the step rules, counts and metadata are the whole report's.
    path = sorted((shared_traces / name).glob("*.json.gz"))[0]
    whole = gpuprof.analyze(path, with_step_views=False).to_dict()
    windowed = gpuprof.analyze(path, max_memory=MIB).to_dict()
    assert windowed["source"]["windowed"]["windows"] == windows
    if "compiled" in whole:  # torch.compile's regions (the DDP sample's CompiledFunction): left out
        assert "compiled" not in windowed and "compiled" in windowed["source"]["windowed"]["cut"]
    out: list = []
    for key in (
        "steps",
        "average",
        "kernels",
        "kernel_ops",
        "operators",
        "operators_by_shape",
        "copies",
        "collectives",
        "ranges",
        "collective_calls",
        "critical_path",
        "step_rules",
        "counts",
        "metadata",
    ):
        _differences(whole[key], windowed[key], key, out)
    assert out == []


def test_a_trace_without_step_markers_is_still_refused(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": i, "dur": 1}
        for i in range(5000)
    ]
    path = tmp_path / "flat.json"
    path.write_text(json.dumps({"traceEvents": events}))
    with pytest.raises(
        gpuprof.traces.read.TraceImportError, match="no ProfilerStep markers to read it in windows"
    ):
        gpuprof.analyze(path, max_memory=MIB)
