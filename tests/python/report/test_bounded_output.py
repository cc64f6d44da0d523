"""Bounded by design (docs/metrics.md, "Bounded tables and names"): a trace of very many distinct
names, or of very long ones, gives a report of bounded size, built in memory of the order of the
trace's, through `gpuprof analyze` as a user runs it.

Before: 1M distinct operator names (a 114 MB trace) took 1.7 GB for the text and 3.2 GB and a
289 MB JSON for --json; 20 names of 10 MiB took 2.6 GB and a 682 MB HTML (docs/performance.md,
bench/bounded_names.py). Here, smaller cases that still tell the two apart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from _rusage import run_fresh
from bounded_names import write_distinct, write_long  # noqa: E402  (the benchmark's own traces)

from gpuprof import _core_testing as builders

MAX_NAME_ROWS = 2000  # cpp/include/gpuprof/analysis/tables.h: kMaxNameRows
MAX_NAME_BYTES = 1024  # kMaxNameBytes


def analyze(*args) -> tuple[subprocess.CompletedProcess, float]:
    """`gpuprof analyze ...` in its own process: (the process, its peak resident set in MiB)."""
    return run_fresh([sys.executable, "-m", "gpuprof.cli", "analyze", *args])


def test_a_hundred_thousand_distinct_names_give_a_bounded_report(tmp_path):
    names = 100_000
    trace = tmp_path / "distinct.json"
    write_distinct(trace, names)
    trace_mib = trace.stat().st_size / 2**20  # about 11 MiB
    small = tmp_path / "small.json"
    write_distinct(small, 10)
    _, baseline_mib = analyze(small, "--json", tmp_path / "small.report.json")  # the interpreter, gpuprof

    out = tmp_path / "r.json"
    p, peak_mib = analyze(trace, "--json", out)
    assert p.returncode == 0, p.stderr
    report = json.loads(out.read_text())
    ops = report["operators"]
    # The heaviest rows, then one for the rest: every call is still counted.
    assert len(ops) == MAX_NAME_ROWS
    assert ops[-1]["name"] == f"other names ({names - MAX_NAME_ROWS + 1})"
    assert sum(r["calls"] for r in ops) == names
    assert ops[-1]["calls"] == names - MAX_NAME_ROWS + 1
    # The report is bounded (it was a row per name: ~29 MB for 100k names).
    assert out.stat().st_size < 2 * 2**20, out.stat().st_size
    # Memory: the analysis beyond the interpreter's own stays within 8x the trace file (the Trace in
    # memory is about 2x the file with a million distinct names; it was about 28x with --json).
    assert peak_mib - baseline_mib < 8 * trace_mib, (peak_mib, baseline_mib, trace_mib)


def test_long_names_are_shown_short_and_kept_once(tmp_path):
    trace = tmp_path / "long.json"
    write_long(trace, 5, 2)  # five operator names of 2 MiB
    html = tmp_path / "r.html"
    out = tmp_path / "r.json"
    p, _ = analyze(trace, "--html", html, "--json", out)
    assert p.returncode == 0, p.stderr
    # The HTML (and the text) show each name shortened: a bounded file (it was ~6x the names).
    assert html.stat().st_size < 512 * 1024, html.stat().st_size
    assert len(p.stdout) < 64 * 1024
    report = json.loads(out.read_text())
    shown = [r["name"] for r in report["operators"]]
    assert all(len(n.encode()) <= MAX_NAME_BYTES for n in shown)
    assert all("... [2097157 bytes, #" in n for n in shown)
    # The full text is in the report once, under the name it is shown by.
    assert sorted(report["long_names"]) == sorted(shown)
    full = report["long_names"][shown[0]]
    assert len(full) == 2097157 and full.startswith(shown[0].split("...")[0])
    text = out.read_text()
    # Each name holds 2 MiB of "x", two runs of 1 MiB: once in the whole JSON, 5 names, 10 runs.
    assert text.count("x" * 2**20) == 10


def test_the_memory_view_is_bounded_like_the_name_tables():
    # 2,500 operators of distinct names, each allocating once (operator k: 1000 + k bytes, live to the
    # end), and one more whose 5,000-byte name allocated the most (1 MB): memory_ops keeps the 1999
    # rows that allocated the most and sums the other 502 into "other names (502)", last; the long
    # name is shown short in memory_ops and among the peak's operators, its full text once in
    # long_names.
    from gpuprof._native import _core
    from gpuprof.report.build import build_report

    long_name = "aten::" + "x" * 4994
    t = _core.Trace()
    t.add_event("step", "ProfilerStep#0", 0, 10_000_000)
    level = 0
    for k in range(2501):
        name, size = (long_name, 1_000_000) if k == 2500 else (f"aten::op_{k}", 1000 + k)
        level += size
        t.add_event("host_op", name, 1000 * k + 10, 500)
        builders.add_memory_sample(
            t, 1000 * k + 20, level, -1, device=-1, bytes_delta=size, addr=0x1000 + 16 * k
        )
    data = build_report(t).to_dict()
    rows = data["memory_ops"]
    assert len(rows) == MAX_NAME_ROWS
    other = rows[-1]
    assert other["name"] == "other names (502)"
    # The rows left out are the 502 that allocated the least: operators 0 ... 501.
    assert other["alloc_bytes"] == sum(1000 + k for k in range(502)) and other["alloc_count"] == 502
    assert sum(r["alloc_bytes"] for r in rows) == level
    (shown,) = [r["name"] for r in rows if r["name"].startswith("aten::xxx")]
    assert len(shown.encode()) <= MAX_NAME_BYTES and "... [5000 bytes, #" in shown
    assert data["memory_peak"]["-1"]["top_ops"][0] == {"name": shown, "bytes": 1_000_000, "count": 1}
    assert data["long_names"] == {shown: long_name}
