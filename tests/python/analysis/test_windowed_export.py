"""The Chrome trace beside a report read in windows (analysis/windowed_export.py; docs/design.md,
"Memory"): the trace read again window by window, each window's own events written into one file.
The specification: the same trace analysed whole and forced into windows (a 1 MiB budget: windows
of 2,048 events) writes the same Chrome trace, entry for entry (in another order), but for the Est. SM
efficiency counter tracks (a running float sum over the whole trace's kernels), left out; and the
written trace reads back into the same steps."""

import collections
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from synthetic_ranks import GAP_US, _step_len_us, rank_trace  # noqa: E402
from trace_memory import write_trace  # noqa: E402  (the benchmark's own synthetic trace)

import gpuprof  # noqa: E402
from gpuprof.traces.export import save_report_files  # noqa: E402

MIB = 1 << 20


def _timeline_counter(entry: dict) -> bool:
    """One point of an Est. SM efficiency counter track ("GPU d Est. SM Efficiency"), left out of a
    windowed export."""
    name = entry.get("name", "")
    return entry.get("ph") == "C" and name.endswith(" Est. SM Efficiency")


def _entries(doc: dict) -> collections.Counter:
    return collections.Counter(json.dumps(e, sort_keys=True) for e in doc["traceEvents"])


def _exports(path: Path, tmp: Path, **whole_options):
    """The Chrome traces written beside the report of ``path`` read whole and read in windows:
    (whole document, windowed document, the windowed report, the whole report)."""
    whole = gpuprof.analyze(path, **whole_options)
    windowed = gpuprof.analyze(path, max_memory=MIB)
    assert windowed.data["source"]["windowed"]["windows"] > 1
    whole.to_json(tmp / "whole.json")
    windowed.to_json(tmp / "windowed.json")
    assert windowed.trace_path == str(tmp / "windowed.trace.json.gz")
    # The report says where its trace is, as a whole trace's does.
    assert json.loads((tmp / "windowed.json").read_text())["source"]["trace_path"] == windowed.trace_path
    with gzip.open(whole.trace_path) as f:
        a = json.load(f)
    with gzip.open(windowed.trace_path) as f:
        b = json.load(f)
    return a, b, windowed, whole


def _assert_same_export(a: dict, b: dict) -> int:
    """Every top-level value and every entry of traceEvents equal, each entry as many times, but the
    Est. SM efficiency counters (only in ``a``). Returns how many of those ``a`` had."""
    assert {k: v for k, v in a.items() if k != "traceEvents"} == {
        k: v for k, v in b.items() if k != "traceEvents"
    }
    only_whole = _entries(a) - _entries(b)
    only_windowed = _entries(b) - _entries(a)
    assert not only_windowed, list(only_windowed)[:3]
    left_out = [json.loads(k) for k in only_whole.elements()]
    assert all(_timeline_counter(e) for e in left_out), [e for e in left_out if not _timeline_counter(e)][:3]
    assert not any(_timeline_counter(e) for e in b["traceEvents"])
    assert len(a["traceEvents"]) - len(b["traceEvents"]) == len(left_out)
    return len(left_out)


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    # One rank of bench/synthetic_ranks.py's DDP job for 60 steps, its device work 60% of a step
    # late (each step's last kernels run in the next step's host time: every window's context holds
    # device work of steps it does not own), with three allocator samples a step: 4,860 events over
    # several windows. Each memory sample is kept by every window whose kept time holds it (up to
    # three) and must be written once; each kernel and launch too.
    steps = 60
    doc = rank_trace(0, 1, steps=steps, layers=8, buckets=4, factors=[1.0] * steps, slowest=[1.0] * steps)
    period = _step_len_us(1.0, 8, 4) + GAP_US
    added, step = [], 0
    for e in doc["traceEvents"]:
        name = e.get("name", "")
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            e["ts"] += 0.6 * period
        if name.startswith("ProfilerStep#"):
            step += 1
        elif name == "aten::copy_":
            for i, (dt, mib) in enumerate(((100, 64), (1500, 512), (9000, 256))):
                levels = {"Total Allocated": (mib + step) << 20, "Total Reserved": (1024 + step) << 20}
                args = {**levels, "Bytes": 1 << 20, "Device Type": 1, "Device Id": 0, "Addr": 4096 * step + i}
                added.append(
                    {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": e["pid"]}
                    | {"tid": e["tid"], "ts": e["ts"] + dt, "args": args}
                )
    doc["traceEvents"] += added
    path = tmp_path_factory.mktemp("windowed_export") / "samples.json"
    path.write_text(json.dumps(doc))
    return path, steps


def test_windowed_export_equals_the_whole_trace_export(samples, tmp_path):
    path, steps = samples
    a, b, windowed, whole = _exports(path, tmp_path)
    left_out = _assert_same_export(a, b)
    assert left_out > 0  # the one kernel device's utilization points
    kinds = collections.Counter((e["ph"], e.get("cat")) for e in b["traceEvents"])
    assert kinds[("i", "cpu_instant_event")] == 3 * steps  # each sample once, none from a context
    assert kinds[("X", "user_annotation")] >= steps  # the step markers (and the job's ranges)
    assert kinds[("f", "ac2g")] == kinds[("s", "ac2g")] > 0  # every launch's arrow, both ends
    assert kinds[("X", "gpuprof_critical_path")] > 0
    # The lanes are named once, as in the whole trace's export.
    names = [e for e in b["traceEvents"] if e["ph"] == "M"]
    assert (
        len(names)
        == len({json.dumps(e, sort_keys=True) for e in names})
        == len([e for e in a["traceEvents"] if e["ph"] == "M"])
    )
    # Read back whole, the written trace gives the original trace's steps.
    back = gpuprof.analyze(windowed.trace_path).to_dict()
    assert back["steps"] == whole.to_dict()["steps"]
    assert back["kernels"] == whole.to_dict()["kernels"]


def test_synthetic_trace_round_trip(tmp_path):
    # The benchmark's synthetic trace (116 steps, 10,324 events, six windows): the same export, and
    # `gpuprof analyze` reads it back into the same steps and the same number of events.
    path = tmp_path / "synthetic.json"
    write_trace(path, 2_000_000)
    (tmp_path / "out").mkdir()
    a, b, windowed, whole = _exports(path, tmp_path / "out")
    assert windowed.data["source"]["windowed"]["windows"] == 6
    _assert_same_export(a, b)
    back = gpuprof.analyze(windowed.trace_path).to_dict()
    assert back["steps"] == whole.to_dict()["steps"]
    assert back["counts"]["events"] == whole.to_dict()["counts"]["events"]


@pytest.mark.parametrize("name", ["hta_2xv100_ddp", "hta_a100_nccl", "hta_v100_ns", "tb_resnet50_v100_nw0"])
def test_stored_traces_windowed_export_equals_their_whole_export(shared_traces, tmp_path, name):
    # The real traces (DDP on two V100s, NCCL on A100s, a ResNet-50 with its DataLoader...) forced into
    # 3 to 6 windows: every kernel, operator, flow arrow, memory sample, GPU power point and critical
    # path piece of the whole trace's export, and its devices and metadata; only the GPU timeline's
    # counters are left out. Read back, the export gives the original's steps.
    path = sorted((shared_traces / name).glob("*.json.gz"))[0]
    a, b, windowed, whole = _exports(path, tmp_path, with_step_views=False)
    assert _assert_same_export(a, b) > 0
    back = gpuprof.analyze(windowed.trace_path, with_step_views=False).to_dict()
    assert back["steps"] == whole.to_dict()["steps"]


def test_a_failed_windowed_export_costs_no_report(samples, tmp_path):
    # A trace that cannot be written (its folder is a file) is one failure line; the report is
    # written without it, and says no trace path.
    path, _steps = samples
    report = gpuprof.analyze(path, max_memory=MIB)
    (tmp_path / "blocked").write_text("a file where the trace's folder would be")
    written, failed = save_report_files(
        report, [(tmp_path / "r.json", "json")], tmp_path / "blocked" / "t.json.gz"
    )
    assert written == [str(tmp_path / "r.json")]
    assert len(failed) == 1 and failed[0].startswith(str(tmp_path / "blocked" / "t.json.gz"))
    assert "trace_path" not in json.loads((tmp_path / "r.json").read_text())["source"]
    # The trace file changed since it was analysed: the windows would not be the report's. Nothing
    # is written in its place, and the report file still is.
    report = gpuprof.analyze(path, max_memory=MIB)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    try:
        written, failed = save_report_files(report, [(tmp_path / "s.json", "json")], True)
    finally:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert written == [str(tmp_path / "s.json")]
    assert "changed since it was analysed" in failed[0] and "gpuprof analyze" in failed[0]
    assert not (tmp_path / "s.trace.json.gz").exists()
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp.gz")]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="open files listed in /proc/self/fd")
def test_a_write_cut_short_lets_go_of_its_file_at_once(samples, tmp_path, monkeypatch):
    # The second window cannot be read: the write fails, its temporary file is removed, and the
    # file is closed while the caller still holds the error (whose traceback holds the writer's
    # frame): an unlinked, half-written trace does not keep its disk space until then.
    import gpuprof.traces.windows as windows
    from gpuprof.traces.read import TraceImportError, display_path
    from gpuprof.traces.windows import plan_windows, scan_steps

    path, _steps = samples
    report = gpuprof.analyze(path, max_memory=MIB)
    read = windows.read_window
    calls = []

    def second_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise TraceImportError("window 2 cannot be read")
        return read(*args, **kwargs)

    monkeypatch.setattr(windows, "read_window", second_fails)
    out = tmp_path / "t.trace.json.gz"
    with pytest.raises(TraceImportError) as failed:
        report.to_json(tmp_path / "r.json", trace=out)
    assert failed.value.__traceback__ is not None and len(calls) == 2
    # The error names the trace, not the window's spill file, and which window and steps failed.
    message = str(failed.value)
    assert message.startswith(f"{display_path(path)}: window 2 of ") and "gpuprof-windows-" not in message
    second = plan_windows(scan_steps(path), report.to_dict()["source"]["windowed"]["max_events"] // 2)[1]
    assert f"(steps {second.first_step} to {second.last_step}): window 2 cannot be read" in message
    assert not out.exists() and not [f for f in os.listdir(tmp_path) if f.endswith(".gz")]
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            held.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    assert not [f for f in held if f.startswith(str(tmp_path))], held


def test_cli_html_of_a_windowed_trace_writes_its_chrome_trace(samples, tmp_path):
    path, steps = samples
    out = tmp_path / "report.html"
    proc = subprocess.run(
        [sys.executable, "-m", "gpuprof", "analyze", str(path), "--max-memory", "1M", "--html", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.is_file()
    trace = tmp_path / "report.trace.json.gz"
    back = gpuprof.analyze(trace).to_dict()
    assert len(back["steps"]) == len(gpuprof.analyze(path).to_dict()["steps"])


def test_cli_html_kept_when_its_chrome_trace_cannot_be_written(samples, tmp_path):
    # A folder where the trace would go: the HTML is written, the trace is a warning, exit 0.
    path, _steps = samples
    out = tmp_path / "report.html"
    (tmp_path / "report.trace.json.gz").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "gpuprof", "analyze", str(path), "--max-memory", "1M", "--html", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.is_file() and "<html" in out.read_text()[:2000].lower()
    assert "gpuprof analyze: warning: the Chrome trace beside" in proc.stderr


def _hand_built(path: Path) -> None:
    """Three steps of 1 ms (host pid 100), each with one aten::mm launching one kernel (correlation
    1, 2, 3) that starts 600 us into the step and runs 600 us, into the next step's time, and one
    allocator sample 100 us into the step."""
    events = []
    for i in range(3):
        t0 = 1_000_000 + 1000 * i
        host = {"pid": 100, "tid": 100}
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i + 1}", "ts": t0, "dur": 1000}
            | host,
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": t0 + 10, "dur": 50} | host,
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t0 + 20, "dur": 10}
            | host
            | {"args": {"correlation": i + 1}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t0 + 600, "dur": 600}
            | {"args": {"correlation": i + 1, "device": 0, "stream": 7}},
            {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "ts": t0 + 100}
            | host
            | {
                "args": {"Total Allocated": (i + 1) << 20, "Bytes": 1 << 20, "Device Type": 1, "Device Id": 0}
            },
        ]
    path.write_text(json.dumps({"traceEvents": events}))


def test_each_window_writes_what_it_owns(tmp_path):
    # One step a window: each window also keeps the step before and after it (window 2 keeps kernel 1 as
    # context, window 1 keeps kernel 2, which starts in step 2's time), yet each kernel, launch arrow,
    # memory sample and critical-path piece is written once, by the window its start falls in, and each
    # lane is named once.
    from gpuprof._native import _core
    from gpuprof.analysis.windowed_export import WindowedExport
    from gpuprof.traces.windows import plan_windows, read_window, scan_steps

    path = tmp_path / "three.json"
    _hand_built(path)
    windows = plan_windows(scan_steps(path), 1)
    assert [(w.first, w.last) for w in windows] == [(0, 0), (1, 1), (2, 2)]
    # The neighbouring steps' marker, op, launch and kernel; window 3 also keeps kernel 1, which
    # runs into step 2's time.
    assert [read_window(path, w)[1]["context_events"] for w in windows] == [4, 8, 5]
    WindowedExport(path, cap=2).write(tmp_path / "w.json")  # windows of one event: one step each
    doc = json.loads((tmp_path / "w.json").read_text())
    kinds = collections.Counter((e["ph"], e.get("cat"), e.get("name")) for e in doc["traceEvents"])
    assert kinds[("X", "kernel", "gemm")] == kinds[("X", "cpu_op", "aten::mm")] == 3
    assert kinds[("s", "ac2g", "ac2g")] == kinds[("f", "ac2g", "ac2g")] == 3
    assert kinds[("i", "cpu_instant_event", "[memory]")] == 3
    kernels = sorted(e["ts"] for e in doc["traceEvents"] if e.get("cat") == "kernel")
    assert kernels == [1_000_600, 1_001_600, 1_002_600]
    named = sorted(
        (e["name"], str(e["pid"]), e["args"].get("name")) for e in doc["traceEvents"] if e["ph"] == "M"
    )
    assert ("process_name", "0", "GPU 0") in named and ("process_name", "100", "python") in named
    assert len(named) == len(set(named)) == 5  # the two processes, the critical path's three
    path_steps = collections.Counter(
        e["args"]["step"] for e in doc["traceEvents"] if e.get("cat") == "gpuprof_critical_path"
    )
    assert set(path_steps) <= {1, 2, 3} and path_steps
    # Entry for entry, the export of the whole trace (its kernels carry no SM share: no SM
    # efficiency track to leave out), the utilization track's 33 points of 100 us included.
    whole, _stats = gpuprof.traces.read.import_trace(path)
    _core.export_chrome_trace(whole, str(tmp_path / "whole.json"))
    assert _assert_same_export(json.loads((tmp_path / "whole.json").read_text()), doc) == 0
    assert kinds[("C", None, "GPU 0 Utilization")] == 33
