"""A windowed read's per-step rows on disk (analysis/spill.py; docs/design.md, "Memory"): the steps,
critical paths, collective calls and per-step memory and FLOPs rows of a trace of many short steps
read in windows are written to an anonymous temporary file and read back through a Sequence. The
specification: the report is the whole read's; the JSON written by streaming the rows from the file
is byte for byte what the materialised report writes (the HTML too); the file is gone afterwards,
also when the read fails; and the rows cost a few bytes each in memory, not their size."""

import gc
import json
import os
import sys
import tracemalloc
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from synthetic_ranks import rank_trace  # noqa: E402

import gpuprof  # noqa: E402
from gpuprof.analysis.spill import RowFile, SpilledMapping, SpilledRows, by_step, materialized  # noqa: E402
from gpuprof.report.model import Report  # noqa: E402
from gpuprof.report.renderers import dumps_report, write_report_file  # noqa: E402
from gpuprof.traces.read import TraceImportError  # noqa: E402

MIB = 1 << 20
STEPS = 240
PER_STEP = ("steps", "collective_calls", "memory")


def _short_steps(steps: int) -> dict:
    # One rank of bench/synthetic_ranks.py's DDP job: 89 events a step of 17 ms (operators with
    # shapes, launches, kernels, a copy, all-reduces), and two allocator samples on GPU 0 a step
    # with Kineto's totals (per-step memory rows): 91 events a step.
    doc = rank_trace(0, 1, steps=steps, layers=8, buckets=4, factors=[1.0] * steps, slowest=[1.0] * steps)
    added = []
    for e in doc["traceEvents"]:
        if e.get("name", "").startswith("ProfilerStep#"):
            step = int(e["name"].split("#")[1])
            for i in range(2):
                args = {"Bytes": 1 << 20, "Device Type": 1, "Device Id": 0}
                args |= {"Total Allocated": (100 + step % 13 + i) << 20, "Total Reserved": 2048 << 20}
                added.append(
                    {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": e["pid"]}
                    | {"tid": e["tid"], "ts": round(e["ts"] + 20 + i * e["dur"] / 3, 3), "args": args}
                )
    doc["traceEvents"] += added
    return doc


@pytest.fixture(scope="module")
def short(tmp_path_factory):
    path = tmp_path_factory.mktemp("windowed_steps") / "short.json"
    path.write_text(json.dumps(_short_steps(STEPS)))
    return path


@pytest.fixture(scope="module")
def reports(short):
    return gpuprof.analyze(short), gpuprof.analyze(short, max_memory=MIB)


def test_the_per_step_rows_are_on_disk_and_the_report_is_the_whole_reads(reports):
    whole, windowed_report = reports
    data = windowed_report.data
    assert data["source"]["windowed"]["windows"] == 12  # (2,048 events a window: about 20 steps of 91)
    # Held as sequences over the file, not as lists of dicts.
    for key in PER_STEP:
        assert isinstance(data[key], SpilledRows), key
    assert isinstance(data["critical_path"]["steps"], SpilledRows)
    assert isinstance(data["step_views"]["per_step"], SpilledMapping)  # each step's top kernels
    assert len(data["step_views"]["per_step"]) == STEPS
    assert len(data["steps"]) == len(whole.steps) == STEPS
    assert len(data["memory"]) > 0 and len(data["collective_calls"]) > 0
    # What a user does with them: index, count, slice, iterate, compare, copy to JSON.
    assert data["steps"][3] == whole.steps[3] and data["steps"][-1] == whole.steps[-1]
    assert data["steps"][5:8] == whole.steps[5:8]
    assert [s["step"] for s in data["steps"]] == [s["step"] for s in whole.steps]
    assert data["steps"] == whole.steps and whole.steps == data["steps"]
    w, h = windowed_report.to_dict(), whole.to_dict()
    for key in (*PER_STEP, "critical_path", "average", "flops", "roofline", "counts", "step_views"):
        assert w[key] == h[key], key
    assert json.dumps(w["steps"]) == json.dumps(h["steps"])
    # The text report: the whole read's but for the windowed note and the source.
    assert windowed_report.to_text(color=False, width=120).count("Step ") == whole.to_text(
        color=False, width=120
    ).count("Step ")


def test_the_streamed_json_and_html_are_the_materialised_reports_bytes(reports, tmp_path):
    _whole, windowed_report = reports
    data = dict(windowed_report.data)
    streamed, materialised = tmp_path / "streamed.json", tmp_path / "materialised.json"
    write_report_file(streamed, data)
    materialised.write_text(dumps_report(materialized(data)) + "\n", encoding="utf-8")
    assert streamed.read_bytes() == materialised.read_bytes()
    assert json.loads(streamed.read_text())["steps"] == windowed_report.to_dict()["steps"]
    # The renderers' own text (Report.to_json, the HTML, the Markdown) too.
    copy = Report(materialized(windowed_report._data))
    assert windowed_report.to_json(trace=False) == copy.to_json(trace=False)
    assert windowed_report.to_html(trace=False) == copy.to_html(trace=False)
    assert windowed_report.to_markdown(trace=False) == copy.to_markdown(trace=False)


def test_the_cli_writes_the_streamed_json(short, tmp_path, capsys):
    from gpuprof.cli import main

    out = tmp_path / "out.json"
    assert main(["analyze", str(short), "--max-memory", "1M", "--json", str(out)]) == 0
    capsys.readouterr()
    report = gpuprof.analyze(short, max_memory=MIB, with_step_views=True)
    assert out.read_text(encoding="utf-8") == dumps_report(materialized(dict(report.data))) + "\n"


def test_the_html_is_written_a_piece_at_a_time_and_is_the_materialised_reports_bytes(reports, tmp_path):
    from gpuprof.traces.export import save_report_files

    _whole, windowed_report = reports
    out = tmp_path / "streamed.html"
    assert save_report_files(windowed_report, [(out, "html")], False) == ([str(out)], [])
    materialised = Report(materialized(windowed_report._data)).to_html(str(out), trace=False)
    assert out.read_text(encoding="utf-8") == materialised
    # The page's views (what its timeline and drill-down read) hold every step.
    views = materialised.split('<script type="application/json" id="gp-views">', 1)[1].split("</script>")[0]
    assert [s["step"] for s in json.loads(views)["steps"]] == [s["step"] for s in windowed_report.steps]
    assert len(windowed_report.steps) == STEPS


def _html_memory(path, steps: int, write: str) -> int:
    """Peak bytes tracemalloc sees while ``write`` ("_save_html": streamed, or "to_html": the text
    made whole first) writes the HTML of a windowed read of ``steps`` short steps."""
    trace = path / f"short_{steps}.json"
    trace.write_text(json.dumps(_short_steps(steps)))
    report = gpuprof.analyze(trace, max_memory=MIB)
    gc.collect()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    getattr(report, write)(path / f"{write}_{steps}.html", trace=False)
    peak = tracemalloc.get_traced_memory()[1] - start
    tracemalloc.stop()
    return peak


def test_the_html_of_many_short_steps_is_written_in_bounded_memory(tmp_path, monkeypatch):
    # 1,100 and 2,200 steps: the page grows by about 8 KB a step (its step chart's bars, its steps
    # table's rows, its views' steps and per-step tops), 9 MB for the 1,100 steps more when its text
    # is made whole (to_html). Written a piece at a time it holds a chunk of rows read back and a
    # piece of text (16 KB each here, so that neither hides a growth) and what is bounded whatever
    # the steps (the memory curve's 2,000 points a device, a chart's 1,332 points a line, both
    # reached at 1,100 steps): its peak grows by less than 256 KB (measured: 94 KB).
    import gpuprof.analysis.spill as spill
    import gpuprof.report.renderers as renderers

    monkeypatch.setattr(spill, "CHUNK_BYTES", 1 << 14)
    monkeypatch.setattr(renderers, "_WRITE_BYTES", 1 << 14)
    _html_memory(tmp_path, 20, "to_html")  # the template compiled and the modules imported first
    streamed, whole = [
        [_html_memory(tmp_path, n, write) for n in (1100, 2200)] for write in ("_save_html", "to_html")
    ]
    assert whole[1] - whole[0] > 4 * MIB
    assert streamed[1] - streamed[0] < MIB // 4


def _open_files() -> set:
    return {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd") if _link(fd)}


def _link(fd: str) -> bool:
    try:
        os.readlink(f"/proc/self/fd/{fd}")
        return True
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_the_rows_file_is_removed_when_the_read_fails_and_when_the_report_goes(short, monkeypatch):
    def rows_files():
        return {f for f in _open_files() if "gpuprof-steps-" in f or f.endswith("(deleted)")}

    gc.collect()
    before = rows_files()
    report = gpuprof.analyze(short, max_memory=MIB)
    held = rows_files() - before
    assert len(held) == 1  # one file, already unlinked: the OS removes it however the process ends
    (name,) = held
    assert name.endswith("(deleted)")
    del report
    gc.collect()
    assert rows_files() - before == set()

    # A read that fails after some windows were merged (the fourth window's analysis raises).
    from gpuprof import analysis

    calls = {"n": 0}
    original = analysis.report_dict

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise TraceImportError("a window that cannot be read")
        return original(*args, **kwargs)

    monkeypatch.setattr(analysis, "report_dict", failing)
    with pytest.raises(TraceImportError):
        gpuprof.analyze(short, max_memory=MIB)
    assert calls["n"] == 4
    gc.collect()
    assert rows_files() - before == set()
    # And when interrupted (Ctrl-C in the middle of the merge).
    calls["n"] = 0

    def interrupted(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(analysis, "report_dict", interrupted)
    with pytest.raises(KeyboardInterrupt):
        gpuprof.analyze(short, max_memory=MIB)
    gc.collect()
    assert rows_files() - before == set()


def _merge_memory(steps: int) -> int:
    """Bytes tracemalloc sees held by a merge of ``steps`` step rows of about 1 KB each (as a
    windowed read's steps and critical paths are), appended in windows of 50."""
    row = {"step": 0, "total_us": 17140.0, "top": [{"name": "aten::addmm" * 8, "us": 4728.0}] * 8}
    gc.collect()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    rows = SpilledRows(RowFile())
    for first in range(0, steps, 50):
        rows.extend({**row, "step": s} for s in range(first, first + 50))
    held = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.stop()
    assert len(rows) == steps and rows[steps - 1]["step"] == steps - 1
    return held


def test_a_row_costs_its_offset_in_memory_not_its_size():
    # 2,000 and 8,000 rows of about 1 KB (8 MB of JSON more): the 6,000 rows more hold their offsets
    # (8 bytes each, in arrays that grow by an eighth) and nothing of their text. Allowed: 16 bytes
    # a row (the arrays' growth); their text would be 1,000.
    small, large = _merge_memory(2_000), _merge_memory(8_000)
    assert large - small < 16 * 6_000


def test_by_step_answers_as_the_dict_does():
    rows = SpilledRows(RowFile())
    rows.extend([{"step": 1, "v": "a"}, {"step": 3, "v": "b"}, {"step": 3, "v": "c"}, {"step": 7, "v": "d"}])
    get = by_step(rows)
    # in order: one pass; the last of a repeated step, None for a step without a row
    got = [get(s) for s in (0, 1, 2, 3, 7, 8)]
    assert got == [None, {"step": 1, "v": "a"}, None, {"step": 3, "v": "c"}, {"step": 7, "v": "d"}, None]
    assert get(1) == {"step": 1, "v": "a"}  # asked out of order: the dict, from the rows again
    listed = by_step([{"step": 2, "v": "x"}])
    assert listed(2) == {"step": 2, "v": "x"} and listed(3) is None


def test_the_scan_keeps_each_steps_number_and_start(short):
    # The scan of the step markers (the core's step_marks: no row a step) keeps what the markers'
    # breakdown says: every step's number and host start, and the step rules.
    from gpuprof._native import _core
    from gpuprof.traces.windows import scan_steps

    scan = scan_steps(short)
    whole = _core.compute_breakdown(scan.trace, False)
    assert len(scan.steps) == len(whole["steps"]) == STEPS
    assert [s["step"] for s in scan.steps] == [s["step"] for s in whole["steps"]] == list(range(1, STEPS + 1))
    assert list(scan.steps.starts) == [s["host_start_ns"] for s in whole["steps"]]
    assert scan.steps[-1] == {"step": STEPS, "host_start_ns": whole["steps"][-1]["host_start_ns"]}
    assert scan.breakdown == {k: v for k, v in whole.items() if k != "steps"}
