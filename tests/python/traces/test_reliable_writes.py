"""Every file gpuprof writes is whole or absent, and a write that fails on the training thread is a
warning, never an end to the training run.

Tests run as root, so a read-only folder does not stop a write. The failures here are ones root
meets too: a path under a regular file, and the file-size limit (``ulimit -f``, RLIMIT_FSIZE), which
makes a write fail part-way through with EFBIG exactly as a full disk fails it with ENOSPC.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import gpuprof

TRAIN = textwrap.dedent("""
    import sys
    import torch

    steps = int(sys.argv[1])
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(steps):
        loss = model(torch.randn(4, 8)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {i} done", flush=True)
    print("script done")
""")


def _file_size_limit(n_bytes: int):
    """A preexec_fn: writes past n_bytes fail with EFBIG (SIGXFSZ ignored, so the write returns the
    error instead of killing the process; an ignored signal stays ignored across exec)."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (n_bytes, n_bytes))

    return limit


def _gpuprof(*args, limit_bytes=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuprof.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        preexec_fn=_file_size_limit(limit_bytes) if limit_bytes else None,
    )


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob(".*") if ".tmp" in p.name)


def _loop(steps: int, prof) -> int:
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    for _ in range(steps):
        loss = model(torch.randn(4, 8)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        prof.step()
        done += 1
    return done


def test_gpuprof_run_whose_report_cannot_be_written_finishes_the_script(tmp_path):
    # The folder is there (so --out is accepted), but every report file is larger than the file-size
    # limit: saving fails part-way, as on a full disk. The script runs all its steps and exits 0; one
    # warning names the files and why; the report is still printed from memory.
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    out = tmp_path / "out"
    p = _gpuprof("run", "--steps", "1:3", "--out", out, script, 6, limit_bytes=2048)
    assert p.returncode == 0, p.stderr
    done = [ln for ln in p.stdout.splitlines() if ln.startswith("step ") and ln.endswith(" done")]
    assert done == [f"step {i} done" for i in range(6)]
    assert "script done" in p.stdout
    warnings = [ln for ln in p.stderr.splitlines() if "could not write" in ln]
    assert len(warnings) == 1, p.stderr
    assert str(out / "report.json") in warnings[0] and "File too large" in warnings[0]
    assert "Traceback" not in p.stderr
    assert "gpuprof step breakdown" in p.stdout  # the report, from memory
    assert not (out / "report.json").exists() and not (out / "report.html").exists()
    assert _leftovers(out) == []


def test_gpuprof_save_into_an_impossible_folder_lets_the_loop_finish(tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    sched = gpuprof.schedule(wait=1, warmup=0, active=2, repeat=1)
    with caplog.at_level(logging.WARNING, logger="gpuprof"):
        with gpuprof.profile(schedule=sched, on_trace_ready=gpuprof.save(blocker / "runs")) as prof:
            done = _loop(6, prof)
    assert done == 6
    # (Only the save's warnings: a machine with a GPU driver may also note GPU collection.)
    warnings = [r.getMessage() for r in caplog.records if r.name == "gpuprof" and "save" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert str(blocker / "runs" / "span_000") in warnings[0] and "could not save span 0" in warnings[0]
    assert [s["step"] for s in prof.report().steps] == [1, 2]  # the span is still there


def test_gpuprof_save_writes_whole_files_and_no_temporaries(tmp_path):
    sched = gpuprof.schedule(wait=0, warmup=0, active=2, repeat=1)
    with gpuprof.profile(schedule=sched, on_trace_ready=gpuprof.save(tmp_path / "runs")) as prof:
        _loop(3, prof)
    folder = tmp_path / "runs" / "span_000"
    data = json.loads((folder / "report.json").read_text())
    assert data["source"]["trace_path"] == str(folder / "trace.json.gz")
    assert gpuprof.analyze(folder / "trace.json.gz").steps  # the trace reads back
    assert _leftovers(tmp_path) == []


def test_a_report_write_that_fails_part_way_keeps_the_old_file(tmp_path, monkeypatch):
    with gpuprof.profile() as prof:
        _loop(2, prof)
    report = prof.report()
    path = tmp_path / "report.json"
    report.to_json(path, trace=False)
    before = path.read_bytes()

    from gpuprof.report import renderers

    good = renderers.JSON.render

    def half_then_unencodable(rep, **options):
        text = good(rep, **options)
        return text[: len(text) // 2] + "\ud800" + text[len(text) // 2 :]  # the write fails midway

    monkeypatch.setattr(renderers.JSON, "render", half_then_unencodable)
    with pytest.raises(UnicodeEncodeError):
        report.to_json(path, trace=False)
    assert path.read_bytes() == before
    assert _leftovers(tmp_path) == []


def test_a_trace_export_that_fails_part_way_keeps_the_old_trace(tmp_path, monkeypatch):
    with gpuprof.profile() as prof:
        _loop(2, prof)
    path = tmp_path / "trace.json.gz"
    prof.export_chrome_trace(path)
    before = path.read_bytes()

    from gpuprof.traces import export

    def half_then_full(trace, where):
        Path(where).write_bytes(before[: len(before) // 2])
        raise OSError(f"{where}: writing the gzip stream failed (disk full?)")

    monkeypatch.setattr(export._core, "export_chrome_trace", half_then_full)
    with pytest.raises(OSError, match="disk full"):
        prof.export_chrome_trace(path)
    assert path.read_bytes() == before
    assert _leftovers(tmp_path) == []


def test_a_cli_output_that_cannot_be_written_is_one_line_and_no_truncated_file(tmp_path):
    with gpuprof.profile() as prof:
        _loop(3, prof)
    trace = tmp_path / "t.json.gz"
    prof.export_chrome_trace(trace)
    out = tmp_path / "outs"
    out.mkdir()
    for name in ("a.json", "a.html", "junit.xml"):
        (out / name).write_text("OLD")
    report = tmp_path / "report.json"
    prof.report().to_json(report, trace=False)
    runs = {
        "a.json": ("analyze", trace, "--json", out / "a.json"),
        "a.html": ("analyze", trace, "--html", out / "a.html"),
        "junit.xml": ("check", report, "--max", "total_us=1e12", "--junit", out / "junit.xml"),
    }
    for name, args in runs.items():
        p = _gpuprof(*args, limit_bytes=64)
        assert p.returncode == 2, (name, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "cannot write" in lines[0] and name in lines[0], (name, p.stderr)
        assert (out / name).read_text() == "OLD", name
    assert _leftovers(out) == []


def test_pieces_are_written_one_after_the_other_or_not_at_all(tmp_path):
    """write_text(path, *pieces): the pieces in order as the whole file (how a report's JSON and its
    final newline are written); a piece that cannot be written leaves the old file as it was."""
    from gpuprof.traces import atomic

    out = tmp_path / "r.json"
    atomic.write_text(out, '{"a": ', "", "1}", "\n")
    assert out.read_text() == '{"a": 1}\n'
    with pytest.raises(TypeError):
        atomic.write_text(out, '{"b": ', None, "\n")  # the second piece is not text
    assert out.read_text() == '{"a": 1}\n' and _leftovers(tmp_path) == []


def test_special_files_are_written_in_place(tmp_path):
    # /dev/stdout or a named pipe cannot be renamed onto: written directly, as before.
    fifo = tmp_path / "pipe"
    from gpuprof.traces import atomic

    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    atomic.write_text(fifo, "through the pipe\n")
    assert reader.communicate(timeout=30)[0] == b"through the pipe\n"
    assert fifo.is_fifo()


def test_a_symlinked_destination_keeps_its_link(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    from gpuprof.traces import atomic

    atomic.write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_a_write_that_fails_after_the_trace_names_the_trace_as_written(tmp_path):
    # The Chrome trace is written first (a few KB gzip), then report.json and report.html (larger):
    # with the file-size limit between the two, as a disk that fills after the trace, the trace is
    # whole on disk and the run must say so, not "wrote nothing".
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    free = tmp_path / "free"
    p = _gpuprof("run", "--steps", "1:3", "--out", free, script, 6)
    assert p.returncode == 0, p.stderr
    trace_size = (free / "trace.json.gz").stat().st_size
    report_size = min((free / "report.json").stat().st_size, (free / "report.html").stat().st_size)
    assert trace_size * 3 < report_size, (trace_size, report_size)  # room for a limit between them
    out = tmp_path / "out"
    p = _gpuprof(
        "run", "--steps", "1:3", "--out", out, script, 6, limit_bytes=(trace_size + report_size) // 2
    )
    assert p.returncode == 0, p.stderr
    assert (out / "trace.json.gz").is_file() and not (out / "report.json").exists()
    said = [ln for ln in p.stderr.splitlines() if "recorded steps" in ln]
    assert len(said) == 1 and said[0].endswith(f"wrote {out / 'trace.json.gz'}"), p.stderr
    (warning,) = [ln for ln in p.stderr.splitlines() if "could not write" in ln]
    assert str(out / "report.json") in warning and str(out / "report.html") in warning
    assert "File too large" in warning and "trace.json.gz" not in warning
