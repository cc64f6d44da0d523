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
# HTA's tables, merged from the windows' parts (analysis/windowed_hta.py)
HTA_TABLES = (
    "idle_time",
    "launch_stats",
    "queue_length",
    "copy_bandwidth",
    "op_launch_delay",
    "kernel_sequences",
)


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


@pytest.fixture(scope="module")
def rich(tmp_path_factory):
    # The lagged job for 60 steps (its kernels 60% of a step late) with what the sections below
    # count: each step's forward in module calls (Model_0 around its 8 aten::linear, each one a
    # Linear_k), the addmm's shapes (2 x 64 x 512 x 256 FLOPs a call, 8 a step), a
    # cudaStreamSynchronize of 150 us inside the input copy, and three allocator samples a step
    # (64, 512 and 256 MiB plus the step's number in MiB): 6,120 events, four windows.
    steps = 60
    doc = rank_trace(0, 1, steps=steps, layers=8, buckets=4, factors=[1.0] * steps, slowest=[1.0] * steps)
    period = _step_len_us(1.0, 8, 4) + GAP_US
    added, step, linears = [], 0, []

    def modules():
        if linears:
            first, last = linears[0], linears[-1]
            span = round(last["ts"] + last["dur"] - first["ts"], 3)
            added.append(
                {**first, "cat": "python_function", "name": "nn.Module: Model_0", "dur": span, "args": {}}
            )
            for k, e in enumerate(linears):
                added.append({**e, "cat": "python_function", "name": f"nn.Module: Linear_{k}", "args": {}})
            linears.clear()

    for e in doc["traceEvents"]:
        name = e.get("name", "")
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            e["ts"] += 0.6 * period
        if name.startswith("ProfilerStep#"):
            modules()
            step += 1
        elif name == "aten::linear":
            linears.append(e)
        elif name == "aten::addmm":
            e["args"].update({"Input Dims": [[256], [64, 512], [512, 256]], "Input type": ["float"] * 3})
        elif name == "aten::copy_":
            sync = {**e, "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "args": {}}
            added.append({**sync, "ts": e["ts"] + 200, "dur": 150.0})
            for i, (dt, mib) in enumerate(((100, 64), (1500, 512), (9000, 256))):
                levels = {"Total Allocated": (mib + step) << 20, "Total Reserved": (1024 + step) << 20}
                args = {**levels, "Bytes": 1 << 20, "Device Type": 1, "Device Id": 0, "Addr": 4096 * step + i}
                added.append(
                    {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": e["pid"]}
                    | {"tid": e["tid"], "ts": e["ts"] + dt, "args": args}
                )
    modules()
    doc["traceEvents"] += added
    path = tmp_path_factory.mktemp("windowed") / "rich.json"
    path.write_text(json.dumps(doc))
    whole = gpuprof.analyze(path).to_dict()
    windowed = gpuprof.analyze(path, max_memory=MIB).to_dict()
    return whole, windowed


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
    assert cut == []  # every section merged
    for key in cut:
        if key in CUT_SECTIONS:  # as a trace without events has them
            assert windowed.get(key, {}) in ([], {}), key
    # merged, not cut (test_windowed_sections_equal_the_whole_trace)
    assert not {
        "devices",
        "syncs",
        "modules",
        "memory",
        "flops",
        "roofline",
        "memory_curve",
        "memory_ops",
        "memory_peak",
        "memory_composition",
    } & set(cut)
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


def _differences(a, b, where: str, out: list, rel: float = 1e-9) -> None:
    """Where two report sections differ: every value equal, floats to ``rel`` (a mean of the same
    sums divided in another order differs in its last bits)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            out.append((where, sorted(a.keys() ^ b.keys())))
            return
        for k in a:
            _differences(a[k], b[k], f"{where}.{k}", out, rel)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append((where, len(a), len(b)))
        for i, (x, y) in enumerate(zip(a, b)):
            _differences(x, y, f"{where}[{i}]", out, rel)
    elif isinstance(a, float) and isinstance(b, (float, int)):
        if not math.isclose(a, b, rel_tol=rel, abs_tol=1e-9):
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
    # calls, the critical paths, the step rules, counts and metadata are the whole report's; so are
    # the GPU timeline, torch.compile's regions (the DDP sample's CompiledFunction) and the step views.
    path = sorted((shared_traces / name).glob("*.json.gz"))[0]
    whole = gpuprof.analyze(path).to_dict()
    windowed = gpuprof.analyze(path, max_memory=MIB).to_dict()
    assert windowed["source"]["windowed"]["windows"] == windows
    assert ("compiled" in whole) == (name == "hta_2xv100_ddp")
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
        *HTA_TABLES,  # HTA's tables too, and the full text of every name the tables show shortened
        "long_names",
        "step_rules",
        "counts",
        "metadata",
        "devices",
        "syncs",
        "modules",
        "memory",
        "flops",
        "roofline",
        "gpu_timeline",
        "gpu_samples",
        *(["compiled"] if "compiled" in whole else []),
        "step_views",
        "memory_curve",  # (the DDP pair's 28,010 allocator samples thinned to 2,000 points on GPU 1)
        "memory_ops",
        "memory_peak",  # (the DDP pair's host and GPU 1: 6.6 GB in step 2, its top operators)
        "memory_composition",
        "memory_growth",
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


def _same(whole, windowed, keys, rel: float) -> None:
    out: list = []
    for key in keys:
        _differences(whole[key], windowed[key], key, out, rel)
    assert out == []


def test_windowed_gpu_summary_equals_the_whole_trace(both):
    whole, windowed = both
    # Each window summarises the time from its first own step's start to the next step's start:
    # the windows' spans tile the steps' window, so its length, the kernel time, busy time (a
    # union clipped to each span) and the communication overlap add up to the whole trace's to the
    # nanosecond; a kernel is counted once, in the window it started in. The percentages are the
    # summed SM-share and occupancy weights divided once: the same quotient of sums added in
    # another order (rel 1e-12).
    (device,) = windowed["devices"]
    assert device["kernels"] == whole["devices"][0]["kernels"] > 0
    assert device["window_us"] == whole["devices"][0]["window_us"]
    _same(whole, windowed, ["devices"], 1e-12)


def test_windowed_sections_equal_the_whole_trace(rich):
    whole, windowed = rich
    assert windowed["source"]["windowed"]["windows"] == 4
    sections = ["steps", "devices", "syncs", "modules", "memory", "flops", "roofline"]
    _same(whole, windowed, [*sections, "memory_peak", "memory_composition", "memory_growth"], 1e-12)
    # What they hold, so that the equality is not of empty sections:
    # one sync row, 60 calls of 150 us, each inside the input copy;
    assert windowed["syncs"] == [
        {"name": "cudaStreamSynchronize", "op": "aten::copy_", "count": 60, "total_us": 9000.0}
    ]
    # the module tree: the model and its 8 Linear children, 60 calls each, the forward's kernels
    # (450 us each, 8 a step) attributed to them, the model's own host time the 2 us gaps between
    # its children (7 a step);
    model, *linears = windowed["modules"]
    assert (model["path"], model["calls"], len(linears)) == ("", 60, 8)
    assert model["device_total_us"] == 60 * 8 * 450.0 and model["host_self_us"] == 60 * 7 * 2.0
    assert all(m["calls"] == 60 and m["parent"] == "" and m["device_self_us"] == 60 * 450.0 for m in linears)
    # each step's peak: a step starts where the one before it ends, its device work 60% of a step
    # late, after its own three samples: it starts with the level of its last (256 MiB plus its
    # number) and runs on into the next step's 512 MiB one (the last step: no next one);
    peaks = [m["peak_allocated_bytes"] >> 20 for m in windowed["memory"]]
    assert peaks == [512 + s + 1 for s in range(1, 60)] + [256 + 60]
    assert windowed["devices"][0]["peak_allocated_bytes"] == (512 + 60) << 20
    # the peak (step 60's second sample) and what was live then: each sample allocates 1 MiB at an
    # address of its own, never freed, so the 179 allocations so far, most of them windows earlier
    # (carried): the first of each step in the input copy, the second in the forward's Linear_1,
    # the third outside any operator (its composition's unknown, with the level's other 393 MiB);
    peak = windowed["memory_peak"]["0"]
    assert (peak["step"], peak["bytes"], peak["reserved_bytes"]) == (60, (512 + 60) << 20, (1024 + 60) << 20)
    assert [(o["name"], o["bytes"] >> 20, o["count"]) for o in peak["top_ops"]] == [
        ("aten::copy_", 60, 60),
        ("aten::linear", 60, 60),
        ("", 59, 59),
    ]
    assert peak["top_modules"] == [{"name": "Linear_1", "bytes": 60 << 20, "count": 60}]
    composition = windowed["memory_composition"]["0"]
    assert (composition["activations"] >> 20, composition["unknown"] >> 20) == (120 - 1, 512 + 60 - 119)
    # FLOPs: 8 addmm a step of 2 x 64 x 512 x 256.
    assert windowed["flops"]["per_step_flops"] == 8 * 2 * 64 * 512 * 256
    assert windowed["flops"]["counted_calls"] == 480
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(windowed, schema())


def test_the_restored_sections_render_as_for_the_whole_trace(rich, tmp_path):
    # Every format shows what the whole report shows of them: the GPU summary, the peak, the FLOPs,
    # the module tree and the syncs (the formats that draw each).
    whole, windowed = rich
    needles = (
        "GPU utilization",
        "77.8%",
        "Peak allocated",
        "572.0 MiB",
        "FLOPs per step",
        "Linear_7",
        "cudaStreamSynchronize",
    )
    shown: set = set()
    for fmt in ("to_text", "to_markdown", "to_html"):
        a = getattr(gpuprof.Report.from_dict(whole), fmt)()
        b = getattr(gpuprof.Report.from_dict(windowed), fmt)()
        for needle in needles:
            if needle in a:
                shown.add(needle)
                assert needle in b, (fmt, needle)
    assert shown == set(needles)


@pytest.mark.parametrize("table", HTA_TABLES)
def test_windowed_hta_tables_equal_the_whole_trace(both, table):
    whole, windowed = both
    # Each window counts the launches it owns within the whole trace's scope (before its last step's
    # start), and the merge joins what crosses its edges; the lagged trace's kernels run 60% of a
    # step late, so every edge has launches waiting, and each stream's gap across it counts once.
    # Kernel sequences need an operator of 3 kernels or more: these traces launch one an operator.
    assert windowed[table] == whole[table] or _close(windowed[table], whole[table]), table
    assert table == "kernel_sequences" or whole[table], table
    assert table not in windowed["source"]["windowed"]["cut"]
    (note,) = [w for w in windowed["warnings"] if w["kind"] == "windowed"]
    left_out = note["message"].partition("left out")[2]
    assert not any(
        words in left_out
        for words in ("idle time", "launch statistics", "queue length", "copy bandwidth", "launch delay")
    )


def _close(a, b) -> bool:
    out: list = []
    _differences(a, b, "", out)
    return out == []


def _window_parts(path, cap: int) -> list:
    """Each window's parts of HTA's tables, as windowed_report_dict reads them with ``cap``."""
    from gpuprof._native import _core
    from gpuprof.traces.windows import read_window

    scan = scan_steps(path)
    before = _core.last_step_start(scan.trace)
    out, carried = [], []
    for w in plan_windows(scan, cap // 2):
        trace, _stats = read_window(path, w)
        parts = _core.window_hta_parts(trace, w.own_from, w.own_to, before, carried)
        carried = [(c[0], *c[6:]) for c in parts["copy_bandwidth"]]
        out.append(parts)
    return out


def test_the_lagged_traces_edges_carry_waiting_launches_and_idle_gaps(lagged):
    # The lagged trace's windows (the 1 MiB budget's cap) each end with launches made and not yet
    # started: 11 on the main stream, 4 on the backward one, counted into the next window's queue
    # lengths; without them its points would read up to 11 too few.
    whole = gpuprof.analyze(lagged).to_dict()
    parts = _window_parts(lagged, 4096)
    assert len(parts) == 6
    assert [sorted(q[8] for q in p["queue_length"]) for p in parts[:-1]] == [[4, 11]] * 5
    # Each stream's idle time is its gaps inside the windows plus one gap at each of the 5 edges
    # (the windows' parts alone leave 0.2 ms an edge out on the main stream).
    for (device, stream), row in {(r["device"], r["stream"]): r for r in whole["idle_time"]}.items():
        inside = sum(
            i[3] + i[4] + i[5] for p in parts for i in p["idle_time"] if (i[0], i[1]) == (device, stream)
        )
        assert inside < round(row["idle_us"] * 1000)
        assert (
            sum(i[2] for p in parts for i in p["idle_time"] if (i[0], i[1]) == (device, stream))
            == (row["activities"])
        )


def _edge_trace(steps: int = 40, period: float = 1000.0, lag: float = 600.0) -> dict:
    """A hand-built Kineto trace whose device work runs 600 us into a 1,000 us step: per step an
    aten::mm launching 3 kernels (launch delays varying by step), an aten::linear whose aten::addmm
    launches 3 more, every tenth step (5, 15, ...) a top-level aten::addmm of 3 kernels, and two
    copies of one kind on two streams (1,000 + step and 3,000 + step bytes, 3 and 7 us) that overlap
    each other and run across the step's end into the next step."""
    events: list = []
    corr = [0]

    def x(cat, name, tid, ts, dur, pid=1, **args):
        events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}
        )

    def launch(ts, name, start, dur, stream, runtime="cudaLaunchKernel", nbytes=None):
        corr[0] += 1
        x("cuda_runtime", runtime, 1, ts, 4.0, correlation=corr[0])
        args = {"device": 0, "stream": stream, "correlation": corr[0]}
        if nbytes is not None:
            args["bytes"] = nbytes
        x("gpu_memcpy" if nbytes is not None else "kernel", name, stream, start, dur, pid=0, **args)

    for s in range(steps):
        t0 = 1_000_000.0 + s * period
        x("user_annotation", f"ProfilerStep#{s + 1}", 1, t0, period)
        x("cpu_op", "aten::mm", 1, t0 + 10, 100)
        for k, name in enumerate(("gemm_a", "gemm_b", "gemm_c")):
            call = t0 + 20 + 25 * k
            launch(call, name, call + 4 + lag + (s * (k + 1)) % 7, 20, 7)
        x("cpu_op", "aten::linear", 1, t0 + 150, 300)
        x("cpu_op", "aten::addmm", 1, t0 + 160, 280)
        for k, name in enumerate(("bias", "gemm_d", "relu")):
            call = t0 + 170 + 60 * k
            launch(call, name, call + 4 + lag + 40 * (s % 3), 15 + k, 7)
        if s % 10 == 5:
            x("cpu_op", "aten::addmm", 1, t0 + 700, 100)
            for k in range(3):
                launch(t0 + 710 + 20 * k, "gemm_e", t0 + 1350 + 20 * k, 10, 7)
        for k, stream in enumerate((8, 9)):
            launch(
                t0 + 500 + 10 * k,
                "Memcpy HtoD (Pageable -> Device)",
                t0 + period - 3 + k,
                3 + 4 * k,
                stream,
                "cudaMemcpyAsync",
                nbytes=1000 + 2000 * k + s,
            )
    return {"traceEvents": events}


@pytest.fixture(scope="module")
def edges(tmp_path_factory):
    path = tmp_path_factory.mktemp("windowed") / "edges.json"
    path.write_text(json.dumps(_edge_trace()))
    whole = gpuprof.analyze(path).to_dict()
    return path, whole


def test_hta_tables_across_window_edges_equal_the_whole_trace(edges):
    from gpuprof.analysis.windowed import windowed_report_dict

    path, whole = edges
    # A cap of 200 events: windows of 100, two or three steps of 20 to 26 events (17 windows).
    windowed = windowed_report_dict(path, cap=200, reason="a test's cap")
    assert windowed["source"]["windowed"]["windows"] == 17
    assert windowed["source"]["windowed"]["approximate"] == []
    for table in HTA_TABLES:
        assert windowed[table] == whole[table], table  # every number to the bit
    # HTA's scope ends at the last step's start: 39 steps of 6 kernels, 4 of 3 more, 2 copies.
    assert [(r["stream"], r["activities"]) for r in whole["idle_time"]] == [
        (7, 6 * 39 + 3 * 4),
        (8, 39),
        (9, 39),
    ]
    # The copies overlap across each step's end: the running sum of their bandwidths comes back to
    # a rounding residue, not 0, and every point after it counts (the whole trace's own arithmetic,
    # which the windows carry from one to the next: without the carry 106 points, not 149).
    (copies,) = whole["copy_bandwidth"]
    assert (copies["copies"], copies["samples"]) == (78, 149)
    assert 0 < copies["min_gb_per_s"] < 1e-15
    # aten::addmm is a root at depth 0 (steps 5, 15, 25, 35), so its calls inside aten::linear
    # (depth 1, in every window, the only ones in most) are not: three sequences.
    assert [(r["op"], r["count"]) for r in whole["kernel_sequences"]] == [
        ("aten::linear", 39),
        ("aten::mm", 39),
        ("aten::addmm", 4),
    ]
    assert whole["kernel_sequences"][2]["kernels"] == "gemm_e -> gemm_e -> gemm_e"
    # Every window but the last ends with both copies running (the lagged trace's edges carry the
    # waiting launches).
    parts = _window_parts(path, 200)
    assert [len(c[8]) for p in parts for c in p["copy_bandwidth"]] == [2] * 16 + [0]


def test_percentiles_past_the_distinct_value_bound_are_rounded_and_said(edges, monkeypatch):
    from gpuprof.analysis import windowed_hta
    from gpuprof.analysis.windowed import windowed_report_dict

    path, whole = edges
    # gemm_a's launch delays take 7 values (the step's number mod 7, in us, past 600 us): held to 3
    # distinct values a row, they are rounded to fewer significant bits, and the report says which
    # fields and by how much at most.
    monkeypatch.setattr(windowed_hta, "MAX_DISTINCT", 3)
    windowed = windowed_report_dict(path, cap=200, reason="a test's cap")
    listed = windowed["source"]["windowed"]["approximate"]
    approximate = {(a["section"], a["field"]): a for a in listed}
    assert len(listed) == len(approximate)  # one entry a field, its rows counted
    # gemm_a, gemm_b and gemm_c (7 delays each); the other rows hold 3 values or fewer
    assert approximate[("launch_stats", "delay_p50_us")]["rows"] == 3
    assert set(approximate) == {
        ("launch_stats", "delay_p50_us"),
        ("launch_stats", "delay_p95_us"),
        ("copy_bandwidth", "p50_gb_per_s"),
    }
    # The delays (600 to 606 us) fit 3 values at 8 significant bits (0.4%); the copies' levels span
    # 17 binary orders (a rounding residue of 5.6e-17 GB/s to 0.78), rounded down to 1 bit (100%).
    assert approximate[("launch_stats", "delay_p50_us")]["max_relative_error"] <= 2**-7
    for (section, field), a in approximate.items():
        assert 0 < a["max_relative_error"] <= 1
        for w, h in zip(windowed[section], whole[section]):
            assert w[field] == pytest.approx(h[field], rel=a["max_relative_error"], abs=1e-12), (
                section,
                field,
            )
    # Counts, sums and maxima stay exact.
    for w, h in zip(windowed["launch_stats"], whole["launch_stats"]):
        assert (w["name"], w["launches"], w["delay_total_us"], w["delay_max_us"]) == (
            h["name"],
            h["launches"],
            h["delay_total_us"],
            h["delay_max_us"],
        )


def test_a_percentile_from_counted_values_is_the_native_interpolation():
    from gpuprof.analysis.windowed_hta import _Values

    v = _Values()
    v.add([(10, 1), (0, 1)])  # two windows' values, in any order
    v.add([(50, 1), (10, 1), (20, 1)])
    # sorted 0, 10, 10, 20, 50: the median is rank 2 (10); the 95th is 3.8 between ranks 3 and 4.
    assert v.quantile(0.5) == 10
    assert v.quantile(0.95) == pytest.approx(20 + 0.8 * 30)
    assert v.error() is None
    assert _Values().quantile(0.5) == 0.0


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    # The lagged job for 70 steps (its kernels 60% of a step late, 1.9 ms each and 108 blocks on
    # the 108 SMs: full SM share) with NVML samples every 500 us over it: device 0 with an energy
    # counter and its power (200 W, 300 W every third sample), device 1 with its power alone; from
    # step 30 on, torch.compile's regions (a Torch-Compiled Region around a CompiledFunction in
    # each step), so that the first windows have none.
    steps = 70
    doc = rank_trace(0, 1, steps=steps, layers=8, buckets=4, factors=[1.0] * steps, slowest=[1.0] * steps)
    period = _step_len_us(1.0, 8, 4) + GAP_US
    compiled = []
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            e["ts"] += 0.6 * period
        name = e.get("name", "")
        if name.startswith("ProfilerStep#") and int(name.split("#")[1]) >= 30:
            region = {**e, "cat": "cpu_op", "name": "Torch-Compiled Region: 0/0", "args": {}}
            region.update(ts=e["ts"] + 1, dur=round(0.05 * period))
            inner = {**region, "name": "CompiledFunction", "ts": e["ts"] + 2, "dur": round(0.04 * period)}
            compiled += [region, inner]
    doc["traceEvents"] += compiled
    starts = [e["ts"] for e in doc["traceEvents"] if e.get("ph") == "X"]
    t0, t1 = min(starts), max(e["ts"] + e["dur"] for e in doc["traceEvents"] if e.get("ph") == "X")
    samples, energy = [], 0
    for k in range(int((t1 - t0) / 500) + 2):
        power = 300_000 if k % 3 == 0 else 200_000
        ts = round((t0 + 500 * k) * 1000)
        samples.append({"ts_ns": ts, "device": 0, "power_mw": power, "energy_mj": energy})
        samples.append({"ts_ns": ts, "device": 1, "power_mw": power // 2})
        energy += power // 2000  # mW over 500 us, in mJ
    doc["gpuprofGpuSamples"] = samples
    path = tmp_path_factory.mktemp("windowed") / "sampled.json"
    path.write_text(json.dumps(doc))
    whole = gpuprof.analyze(path).to_dict()
    windowed = gpuprof.analyze(path, max_memory=MIB).to_dict()
    return whole, windowed


def test_windowed_gpu_timeline_equals_the_whole_trace(both):
    whole, windowed = both
    # The bucket width is the whole trace's (2 s: 20 buckets of 100 ms), known after the last window;
    # each window gave its owned time's busy and SM-share time in the widths still possible (10 ms
    # while the span was under 1 s, 100 ms and 1 s): the utilization's numerators are unions of
    # whole nanoseconds, exact; the SM shares are sums of doubles added in another order (rel 1e-12).
    (device,) = whole["gpu_timeline"]
    buckets = whole["gpu_timeline"][device]
    assert len(buckets) == 20 and buckets[0]["dur_us"] == 100_000.0
    assert all(b["utilization_pct"] > 0 for b in buckets)
    assert [b["utilization_pct"] for b in windowed["gpu_timeline"][device]] == [
        b["utilization_pct"] for b in buckets
    ]
    _same(whole, windowed, ["gpu_timeline"], 1e-12)
    assert "gpu_timeline" not in windowed["source"]["windowed"]["cut"]


def test_windowed_gpu_timeline_of_short_windows_equals_the_whole_trace(edges):
    from gpuprof.analysis.windowed import windowed_report_dict

    path, whole = edges
    # 40 ms in 17 windows of 2 or 3 steps: buckets of 1 ms (a window spans 2 or 3 of them), the
    # device work 600 us late, so every window's last kernels and copies run past its owned time.
    windowed = windowed_report_dict(path, cap=200, reason="a test's cap")
    (buckets,) = whole["gpu_timeline"].values()
    assert len(buckets) == 40 and buckets[0]["dur_us"] == 1000.0
    assert windowed["gpu_timeline"] == whole["gpu_timeline"]


def test_windowed_gpu_samples_energy_and_compiled_regions_equal_the_whole_trace(sampled):
    whole, windowed = sampled
    assert windowed["source"]["windowed"]["windows"] == 4
    # The samples are a section of the file, not events: the scan keeps them all, and each step's
    # energy (device 0 from its counter, device 1 from its power) is drawn from them as for the
    # whole trace; the table of devices and the averages too.
    assert len(windowed["gpu_samples"]) == len(whole["gpu_samples"]) == 2 * 2448
    _same(whole, windowed, ["gpu_samples", "energy", "steps", "average", "compiled"], 1e-12)
    assert [r["method"] for r in windowed["energy"]] == ["counter", "power"]
    assert all(s["energy_j"] > 0 and set(s["device_energy_j"]) == {"0", "1"} for s in windowed["steps"])
    # torch.compile's regions from steps 30 to 70 (none in the first window), from the merged
    # operator rows: 41 region calls, in the report where a whole trace has them.
    assert windowed["compiled"]["region_calls"] == 41
    keys = [k for k in whole if k in windowed]
    assert list(windowed) == keys
    assert not {"gpu_samples", "energy", "compiled"} & set(windowed["source"]["windowed"]["cut"])


def test_windowed_step_views_equal_the_whole_trace(both, rich):
    # The slowest and the median step are chosen from the merged steps and drawn from the window
    # owning each, read again; every step's top kernels and operators come from the window owning
    # it; the rich trace's module rows are renumbered from its window's tree into the merged one.
    for whole, windowed in (both, rich):
        views = windowed["step_views"]
        assert [t["label"] for t in views["timelines"]] == ["slowest", "typical"]
        assert len(views["per_step"]) == len(windowed["steps"])
        _same(whole, windowed, ["step_views"], 1e-12)
        assert "step_views" not in windowed["source"]["windowed"]["cut"]
    assert any(r >= 0 for r in rich[1]["step_views"]["timelines"][0]["module_of"])


_OUTPUT_CODE = """
# kernel path: {add}
# Topologically Sorted Source Nodes: [x, y], Original ATen: [aten.add, aten.cos]
triton_poi_fused_add_cos_0 = async_compile.triton('triton_poi_fused_add_cos_0', '''
import triton
''', device_str='cuda')
"""


def test_windowed_triton_kernels_are_the_whole_traces(tmp_path):
    # 600 steps of a compiled graph launching two Triton kernels (12 events a step: 7,200, over the
    # 1 MiB budget's 4,096), one of them named in Inductor's output code beside its kernel_file, the
    # other's code gone: the compiled_kernels rows (calls, device time, operators, the null module,
    # source and FLOPs a trace's provenance leaves) and the note are the whole trace's.
    cache = tmp_path / "torchinductor_user"
    add = cache / "q3" / "cq3abc.py"
    add.parent.mkdir(parents=True)
    add.write_text("import triton\n")
    (cache / "zz").mkdir()
    (cache / "zz" / "czzout.py").write_text(_OUTPUT_CODE.format(add=add))
    gone = cache / "x9" / "cx9ghi.py"
    events = []

    def x(cat, name, ts, dur, pid=1, tid=1, **args):
        events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}
        )

    for s in range(600):
        t0 = 1000.0 * s

        x("user_annotation", f"ProfilerStep#{s + 1}", t0, 1000)
        x("cpu_op", "Torch-Compiled Region: 0/0", t0 + 10, 500)
        x("cpu_op", "## Call CompiledFxGraph fabc ##", t0 + 20, 400)
        for k, (name, file) in enumerate(
            (("triton_poi_fused_add_cos_0", add), ("triton_per_fused_mean_2", gone))
        ):
            corr = 2 * s + k + 1
            launch = {"kernel_backend": "triton", "kernel_file": str(file), "kernel_hash": file.stem}
            x("cpu_op", name, t0 + 30 + 40 * k, 8, **{"External id": corr, **launch, "grid": "grid(1024)"})
            x(
                "cuda_runtime",
                "cudaLaunchKernel",
                t0 + 32 + 40 * k,
                4,
                correlation=corr,
                **{"External id": corr},
            )
            x(
                "kernel",
                name,
                t0 + 600 + 50 * k,
                40 - 28 * k,
                pid=0,
                tid=7,
                device=0,
                stream=7,
                correlation=corr,
            )
    path = tmp_path / "compiled.json"
    path.write_text(json.dumps({"traceEvents": events}))
    whole = gpuprof.analyze(path).to_dict()
    windowed = gpuprof.analyze(path, max_memory=MIB).to_dict()
    assert windowed["source"]["windowed"]["windows"] > 1
    rows = {r["kernel"]: r for r in whole["compiled"]["compiled_kernels"]}
    assert rows["triton_poi_fused_add_cos_0"]["ops"] == ["aten.add", "aten.cos"]
    assert rows["triton_per_fused_mean_2"]["ops"] is None
    assert [r["calls"] for r in rows.values()] == [600, 600]
    _same(whole, windowed, ["compiled", "kernels", "operators"], 1e-12)


def test_a_timeline_width_reached_after_the_first_windows_equals_the_whole_trace(tmp_path):
    # Three steps of 100 us, then 37 of 10 ms, each launching one kernel of 108 blocks (the first
    # steps' 60 us long, the others' 6 ms, half of them a step late): 370 ms, buckets of 10 ms.
    # Read a step a window (a cap of 8 events), the first windows span well under 10 ms: that width
    # starts from everything before it, which lies in its first bucket.
    events, t, corr = [], 0.0, 0
    for s in range(40):
        period, kernel = (100.0, 60.0) if s < 3 else (10_000.0, 6_000.0)
        corr += 1
        late = period if s % 2 else 0.0
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s + 1}", "ts": t, "dur": period}
            | {"pid": 1, "tid": 1, "args": {}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t + 5, "dur": 4.0}
            | {"pid": 1, "tid": 1, "args": {"correlation": corr}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "ts": t + 20 + late, "dur": kernel, "pid": 0}
            | {"tid": 7, "args": {"device": 0, "stream": 7, "correlation": corr}},
        ]
        events[-1]["args"].update(grid=[108, 1, 1], block=[256, 1, 1])
        t += period
    doc = {"traceEvents": events, "deviceProperties": [{"id": 0, "name": "A100", "numSms": 108}]}
    path = tmp_path / "growing.json"
    path.write_text(json.dumps(doc))
    from gpuprof.analysis.windowed import windowed_report_dict

    whole = gpuprof.analyze(path).to_dict()
    windowed = windowed_report_dict(path, cap=8, reason="a test's cap")
    assert windowed["source"]["windowed"]["windows"] == 40
    (buckets,) = whole["gpu_timeline"].values()
    assert buckets[0]["dur_us"] == 10_000.0 and len(buckets) == 37
    assert buckets[0]["utilization_pct"] > 0 and buckets[0]["sm_efficiency_pct"] > 0
    _same(whole, windowed, ["gpu_timeline"], 1e-12)


def _allocator_trace(*, host_addresses: bool) -> dict:
    # The DDP rank for 60 steps with allocator samples spread over each step's host time: 40 a step
    # on GPU 0 (2,400: past the curve's 2,000, so it keeps each of 1,000 slices' lowest and highest
    # sample), their levels a saw of (100 + step + i mod 7) MiB recorded as Kineto's totals, every
    # tenth sample without a total (1 MiB more than the level before it: the level carried from
    # sample to sample, across window edges too); and 10 a step on the host with sizes only: the
    # first frees 3 MiB allocated before the trace, then +2, -1, +2, -1... MiB (the running sum's
    # lowest point -3 MiB: lifted to 0 at the end).
    steps = 60
    doc = rank_trace(0, 1, steps=steps, layers=8, buckets=4, factors=[1.0] * steps, slowest=[1.0] * steps)
    added, host = [], 0
    for e in doc["traceEvents"]:
        if not e.get("name", "").startswith("ProfilerStep#"):
            continue
        step = int(e["name"].split("#")[1])
        for i in range(40):
            args = {"Bytes": 1 << 20, "Device Type": 1, "Device Id": 0}
            if i % 10:
                args |= {"Total Allocated": (100 + step + i % 7) << 20, "Total Reserved": (1024 + step) << 20}
            added.append((e, e["ts"] + 10 + i * e["dur"] / 41, args))
        for i in range(10):
            size = -3 if host == 0 else (2 if host % 2 else -1)
            args = {"Bytes": size << 20, "Device Type": 0, "Device Id": -1}
            if host_addresses:
                args["Addr"] = 1 << 30 | host
            host += 1
            added.append((e, e["ts"] + 15 + i * e["dur"] / 11, args))
    doc["traceEvents"] += [
        {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": e["pid"]}
        | {"tid": e["tid"], "ts": round(ts, 3), "args": args}
        for e, ts, args in added
    ]
    return doc


@pytest.fixture(scope="module")
def allocator(tmp_path_factory):
    path = tmp_path_factory.mktemp("windowed") / "allocator.json"
    path.write_text(json.dumps(_allocator_trace(host_addresses=False)))
    return gpuprof.analyze(path).to_dict(), gpuprof.analyze(path, max_memory=MIB).to_dict()


def test_windowed_memory_curve_equals_the_whole_trace(allocator):
    whole, windowed = allocator
    # three windows, each starting at a step whose first GPU sample has no total
    assert windowed["source"]["windowed"]["windows"] == 3
    assert not {"memory_curve", "memory_ops"} & {
        *windowed["source"]["windowed"]["cut"],
        *windowed["source"]["windowed"],
    }
    _same(whole, windowed, ["memory_curve", "memory_ops", "memory_growth"], 0.0)
    gpu, host = windowed["memory_curve"]["0"], windowed["memory_curve"]["-1"]
    # GPU 0: 2,400 samples in 1,000 slices of 2 or 3, each slice's lowest and highest (one point
    # where they are the same sample), in time order: the levels built here from the definition.
    levels, level = [], 0
    for step in range(1, 61):
        for i in range(40):
            level = (100 + step + i % 7) << 20 if i % 10 else level + (1 << 20)
            levels.append(level)
    expected = []
    for k in range(1000):
        part = range(2400 * k // 1000, 2400 * (k + 1) // 1000)
        low = min(part, key=lambda j: (levels[j], j))
        high = min(part, key=lambda j: (-levels[j], j))
        expected += [levels[j] for j in sorted({low, high})]
    assert [p[1] for p in gpu] == expected and len(gpu) > 1000
    assert [p[0] for p in gpu] == sorted(p[0] for p in gpu)
    # reserved: each step's total, None for a sample without totals (the first one)
    assert gpu[0][2] is None and {p[2] for p in gpu} == {None} | {(1024 + s) << 20 for s in range(1, 61)}
    # The host: 600 samples, every one kept; no totals, so no reserved; the running sum lifted by
    # the 3 MiB freed first: it starts at 0 and ends at 3 - 3 + 300 x 2 - 299 x 1 MiB.
    assert len(host) == 600
    assert host[0][1] == 0 and min(p[1] for p in host) == 0
    assert host[-1][1] == (3 - 3 + 300 * 2 - 299) << 20
    assert all(p[2] is None for p in host)
    # memory_ops: each window counts the samples at its own times, and every window's calls of an
    # operator (the addmm's 8 a step, 480, from windows with samples in them or not).
    rows = {(r["name"], r["device"]): r for r in windowed["memory_ops"]}
    assert rows and all(r["calls"] == 480 for (name, _), r in rows.items() if name == "aten::addmm")
    assert sum(r["self_alloc_count"] for (_, dev), r in rows.items() if dev == 0) <= 2400
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(windowed, schema())


def test_a_curve_rebuilt_from_blocks_is_left_out_and_said(tmp_path):
    # The host's samples carry addresses and no totals: the whole trace levels them from the blocks
    # live across it (the 3 MiB freed first predates the trace), which no window sees whole.
    path = tmp_path / "blocks.json"
    path.write_text(json.dumps(_allocator_trace(host_addresses=True)))
    windowed = gpuprof.analyze(path, max_memory=MIB).to_dict()
    note = windowed["source"]["windowed"]
    assert "memory_curve" in note["cut"] and windowed["memory_curve"] == {}
    assert note["memory_curve"] == (
        "device -1's samples carry addresses and no allocator totals: its level is rebuilt from the "
        "blocks live across the whole trace"
    )
    (warning,) = [w for w in windowed["warnings"] if w["kind"] == "windowed"]
    assert note["memory_peak"] == note["memory_curve"]  # the peak's level is that curve's
    assert {"memory_peak", "memory_composition", "memory_growth"} <= set(note["cut"])
    assert windowed["memory_peak"] == {} and windowed["memory_growth"] == {}
    left = (
        "every event at once: the memory curve, the memory peak, its composition, the memory growth (gpuprof"
    )
    assert left in " ".join(warning["message"].split())
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(windowed, schema())


def test_memory_ops_past_the_row_bound_are_left_out_and_said(tmp_path, monkeypatch):
    # With a bound of 3 rows a device (the native 2,000, lowered here), the merged rows of GPU 0
    # (more than 3 operators allocate there) would need an "other names" row no window made.
    import gpuprof.analysis.windowed as windowed_module

    path = tmp_path / "allocator.json"
    path.write_text(json.dumps(_allocator_trace(host_addresses=False)))
    monkeypatch.setattr(windowed_module, "MAX_NAME_ROWS", 3)
    windowed = gpuprof.analyze(path, max_memory=MIB).to_dict()
    note = windowed["source"]["windowed"]
    assert "memory_ops" in note["cut"] and windowed["memory_ops"] == []
    assert note["memory_ops"] == "more than 3 operators with allocations on a device"
    assert "memory_curve" not in note["cut"]


def _blocks_trace() -> dict:
    # The DDP rank for 60 steps with GPU 0's allocations at addresses, each sample with the level
    # (100 MiB before the trace plus what is live) as Kineto's total but every 7th: each step's
    # input, 4 MiB in aten::copy_, freed 25 steps later at that step's start (so at any moment 25 of
    # them live, most made windows earlier); a 2 MiB temporary inside the first aten::addmm; 8 MiB
    # of activation in the second linear, freed in the backward; 1 MiB in the fourth linear at one
    # address, never freed (the next step's allocation there frees it unheard); in step 33 alone 256
    # MiB inside the second linear, freed 100 us later: the peak; and 3 MiB in step 59's input
    # copy, freed after the last step's end.
    steps = 60
    doc = rank_trace(0, 1, steps=steps, layers=8, buckets=4, factors=[1.0] * steps, slowest=[1.0] * steps)
    starts = {
        int(e["name"].split("#")[1]): e["ts"]
        for e in doc["traceEvents"]
        if e.get("name", "").startswith("ProfilerStep#")
    }
    samples = []  # (ts, bytes, addr)
    for s, t in starts.items():
        if s > 25:
            samples.append((t + 50, -(4 << 20), 0xA0000 + s - 25))
        samples += [
            (t + 100, 4 << 20, 0xA0000 + s),
            (t + 500, 2 << 20, 0xB0000),
            (t + 900, -(2 << 20), 0xB0000),
        ]
        samples += [(t + 1100, 8 << 20, 0xC0000 + s), (t + 6000, -(8 << 20), 0xC0000 + s)]
        if s == 33:
            samples += [(t + 1200, 256 << 20, 0xE0000), (t + 1300, -(256 << 20), 0xE0000)]
        samples.append((t + 2300, 1 << 20, 0xD0000))
    samples += [(starts[59] + 150, 3 << 20, 0xF0000), (starts[60] + 17300, -(3 << 20), 0xF0000)]
    samples.sort()
    level, added = 100 << 20, []
    for i, (ts, size, addr) in enumerate(samples):
        unheard = size == 1 << 20 and ts > starts[1] + 2300  # the block there before it
        level += size - ((1 << 20) if unheard else 0)
        args = {"Bytes": size, "Device Type": 1, "Device Id": 0, "Addr": addr}
        if i % 7:
            args |= {"Total Allocated": level, "Total Reserved": 2 << 30}
        added.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 10000})
        added[-1] |= {"tid": 10000, "ts": round(ts, 3), "args": args}
    doc["traceEvents"] += added
    return doc


def test_a_peak_of_blocks_made_windows_earlier_equals_the_whole_trace(tmp_path):
    path = tmp_path / "blocks.json"
    path.write_text(json.dumps(_blocks_trace()))
    whole = gpuprof.analyze(path).to_dict()
    windowed = gpuprof.analyze(path, max_memory=MIB).to_dict()
    note = windowed["source"]["windowed"]
    assert note["windows"] == 3 and note["steps_per_window"][0] < 33 <= sum(note["steps_per_window"][:2])
    assert {"memory_peak", "memory_composition"}.isdisjoint(note["cut"]) and "memory_peak" not in note
    _same(whole, windowed, ["memory_peak", "memory_composition", "memory_growth", "memory_curve"], 0.0)
    # The peak: step 33's 256 MiB, on top of the 100 MiB before the trace, the 25 inputs live (steps
    # 9 to 33: step 8's was freed at step 33's start; 9 to 12 made in the first window), the step's
    # activation and the fourth linear's block of step 32 (freed unheard later in step 33).
    peak = windowed["memory_peak"]["0"]
    assert (peak["step"], peak["bytes"] >> 20, peak["reserved_bytes"]) == (
        33,
        100 + 100 + 8 + 256 + 1,
        2 << 30,
    )
    assert [(o["name"], o["bytes"] >> 20, o["count"]) for o in peak["top_ops"]] == [
        ("aten::linear", 256 + 8 + 1, 3),
        ("aten::copy_", 100, 25),
    ]
    assert peak["top_modules"] == []
    # activations: the inputs, the activation and step 32's block (they outlive their operators);
    # temporary: the spike (freed inside its linear); unknown: the 100 MiB from before the trace.
    composition = {k: v >> 20 for k, v in windowed["memory_composition"]["0"].items()}
    assert composition == {
        "parameters": 0,
        "gradients": 0,
        "optimizer_state": 0,
        "activations": 109,
        "temporary": 256,
        "unknown": 100,
    }
    # The growth: the level at the end of steps 2 to 60; what steps 2 to 59 left live at step 60's
    # end: the inputs of steps 36 to 59 (never freed) and the 3 MiB freed after it, which only the
    # last window sees freed.
    growth = windowed["memory_growth"]["0"]
    assert growth["steps"] == list(range(2, 61)) and growth["steps_counted"] == 58
    per_step = round(((24 * 4 + 3) << 20) / 58, 1)
    assert growth["ops"] == [{"name": "aten::copy_", "bytes_per_step": per_step, "count": 25}]
