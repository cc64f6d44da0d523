"""Inputs a user did not mean to give: every verb answers in one line (exit 2) or reads only what it
can, never hangs, never runs out of memory, never prints a traceback (docs/analyze.md, "Limits")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof._native import _core
from gpuprof.report.build import build_report

_CLI = "import sys; from gpuprof.cli import main; sys.exit(main(sys.argv[1:]))"


def _gpuprof(*args, env=None, limit_as=None, timeout=300):
    """`gpuprof ARGS` in a fresh process; ``limit_as`` bounds its address space (bytes)."""
    code = _CLI
    if limit_as:
        code = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit_as}, {limit_as})); " + code
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _one_line_refusal(proc, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def _rank_trace(rank: int, world: int):
    """Three 12 ms steps of an operator and a 2 ms gloo allreduce, on rank ``rank`` of ``world``."""
    t = _core.Trace()
    for i in range(3):
        start = i * 20_000_000
        t.add_event("step", f"ProfilerStep#{i}", start, 12_000_000)
        t.add_event("host_op", "aten::mm", start + 1000, 9_998_000)
        t.add_event("host_op", "gloo:all_reduce", start + 10_000_000, 2_000_000)
    t.metadata = {"distributedInfo": json.dumps({"rank": rank, "world_size": world, "backend": "gloo"})}
    return t


def _write_rank_traces(folder: Path, world: int) -> list[Path]:
    """One Kineto trace file per rank (what a saved report writes beside itself), the report removed."""
    out = []
    for r in range(world):
        report = folder / f"rank{r}.json"
        build_report(_rank_trace(r, world)).to_json(report)
        report.unlink()
        out.append(folder / f"rank{r}.trace.json.gz")
    return out


def test_a_fifo_named_json_in_a_folder_is_not_opened(tmp_path):
    # Opening a FIFO for reading blocks until a writer comes: the scan must not open it at all.
    _write_rank_traces(tmp_path, 2)
    os.mkfifo(tmp_path / "pipe.json")
    os.mkfifo(tmp_path / "pipe.json.gz")
    proc = _gpuprof("analyze", tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "2 ranks" in proc.stdout or "rank 1" in proc.stdout, proc.stdout
    assert "pipe.json" not in proc.stdout + proc.stderr


def _as_another_user():
    """(argv prefix, folder) to run a verb as a user a mode-000 file keeps out: this user when it is
    not root; as root, user 65534 (nobody) through setpriv, in a folder that user may enter."""
    import shutil
    import tempfile

    if os.geteuid() != 0:
        return [], None
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: a mode-000 file stays readable")
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    probe = subprocess.run(
        [*prefix, sys.executable, "-c", "import gpuprof"], capture_output=True, text=True, timeout=120
    )
    if probe.returncode != 0:
        # gpuprof (or Python itself) installed under a folder only root may read, as under /root.
        pytest.skip(
            "user 65534 cannot import gpuprof here: " + (probe.stderr.strip().splitlines() or ["?"])[-1]
        )
    folder = Path(tempfile.mkdtemp(prefix="gpuprof-perm-"))
    folder.chmod(0o777)
    return prefix, folder


def test_an_unreadable_rank_file_is_named_with_its_cause_and_listed_as_skipped(tmp_path):
    import shutil

    prefix, folder = _as_another_user()
    folder = folder or tmp_path
    try:
        files = _write_rank_traces(folder, 3)
        for f in files:
            f.chmod(0o644)
        bad = folder / "rank3.json"  # a rank file never made readable (what a job's umask can do)
        bad.write_text("{}")
        bad.chmod(0)
        out = folder / "job.json"
        proc = subprocess.run(
            [
                *prefix,
                sys.executable,
                "-c",
                _CLI,
                "analyze",
                str(folder),
                "--ranks",
                "--workers",
                "1",
                "--json",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if "permission denied" not in proc.stderr.lower() and proc.returncode == 0 and not prefix:
            pytest.skip("this user reads a mode-000 file: nothing to test")
        assert proc.returncode == 0, proc.stderr
        assert "neither a trace nor a gpuprof report" not in proc.stderr
        assert f"skipped {bad}: permission denied" in proc.stderr, proc.stderr
        job = json.loads(out.read_text())
        assert job["cross_rank"]["skipped_files"] == [{"path": str(bad), "error": "permission denied"}]
        assert [r["rank"] for r in job["ranks"]] == [0, 1, 2]
    finally:
        if prefix:
            shutil.rmtree(folder, ignore_errors=True)


_LIMIT_AS = 3 << 29  # 1.5 GiB of address space for each verb below


@pytest.fixture(scope="module")
def gzip_bomb(tmp_path_factory) -> Path:
    """A 9 MB gzip file inflating to 1.2 GB of real events: one torch.profiler CPU-op record
    repeated 11 million times (kept events cost at least 48 bytes each, about 530 MB, and a whole
    analysis several times that: more than the 1.5 GiB the verbs run in)."""
    import zlib

    path = tmp_path_factory.mktemp("bomb") / "bomb.json.gz"
    event = (
        b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1000, "dur": 5, '
        b'"args": {"External id": 7}},'
    )
    chunk, chunks = event * 4096, 11_000_000 // 4096
    z = zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 31: a gzip member
    with open(path, "wb") as f:
        f.write(z.compress(b'{"schemaVersion": 1, "traceEvents": ['))
        for _ in range(chunks):
            f.write(z.compress(chunk))
        f.write(z.compress(event[:-1] + b"]}"))
        f.write(z.flush())
    return path


def _verbs(path: Path, folder: Path, out: Path):
    """Every verb that reads an input, given ``path`` (``folder`` holds it as its only file)."""
    return {
        "analyze": ["analyze", path],
        "analyze DIR": ["analyze", folder],
        "report": ["report", path],
        "diff": ["diff", path, path],
        "check": ["check", path, "--max", "step_us=1"],
        "scaling": ["scaling", path],
        "export": ["export", folder, "--merged", out],
    }


@pytest.mark.parametrize("verb", list(_verbs(Path(), Path(), Path())))
def test_a_gzip_bomb_is_refused_in_one_line_by_every_verb(verb, gzip_bomb, tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    os.symlink(gzip_bomb, folder / "rank0.json.gz")
    args = _verbs(gzip_bomb, folder, tmp_path / "merged.json")[verb]
    line = _one_line_refusal(_gpuprof(*args, limit_as=_LIMIT_AS), ".json.gz")
    if verb.startswith(("analyze", "export")):  # the events are read: the cap and its setting
        assert "events" in line and "GPUPROF_MAX_EVENTS" in line, line
    else:  # a report is JSON text: a gzip file is not one
        assert "gpuprof analyze" in line or "not" in line, line


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
@pytest.mark.parametrize("verb", ["analyze", "report", "diff", "check", "scaling"])
def test_a_file_without_end_is_refused_in_one_line_by_every_verb(verb, tmp_path):
    args = _verbs(Path("/dev/zero"), tmp_path, tmp_path / "merged.json")[verb]
    line = _one_line_refusal(_gpuprof(*args, limit_as=_LIMIT_AS), "/dev/zero")
    if verb != "analyze":  # analyze's importer stops at the first byte that is not JSON
        assert "GPUPROF_MAX_REPORT_MIB" in line, line


def test_the_report_cap_is_a_setting(tmp_path):
    report = tmp_path / "report.json"
    build_report(_rank_trace(0, 1)).to_json(report, trace=False)
    assert _gpuprof("report", report).returncode == 0
    big = {**json.loads(report.read_text()), "padding": "x" * (1 << 20)}  # just over 1 MiB
    report.write_text(json.dumps(big))
    line = _one_line_refusal(
        _gpuprof("report", report, env={"GPUPROF_MAX_REPORT_MIB": "1"}), "larger than 1 MiB"
    )
    assert "GPUPROF_MAX_REPORT_MIB" in line
    assert _gpuprof("report", report, env={"GPUPROF_MAX_REPORT_MIB": "2"}).returncode == 0


def test_the_event_cap_is_a_setting(tmp_path):
    report = tmp_path / "r.json"
    build_report(_rank_trace(0, 1)).to_json(report)  # 9 events and 3 step markers
    trace = tmp_path / "r.trace.json.gz"
    line = _one_line_refusal(
        _gpuprof("analyze", trace, env={"GPUPROF_MAX_EVENTS": "5"}), "more than 5 events"
    )
    assert "the GPUPROF_MAX_EVENTS setting" in line
    assert _gpuprof("analyze", trace, env={"GPUPROF_MAX_EVENTS": "100"}).returncode == 0


def test_a_json_list_of_values_is_not_a_trace(tmp_path):
    # The Chrome "JSON Array Format" is a list of event objects; a list of numbers held none, and
    # its "0 steps" report exited 0, passing a CI gate on junk.
    junk = tmp_path / "junk.json"
    junk.write_text("[1, 2, 3]")
    line = _one_line_refusal(_gpuprof("analyze", junk), "junk.json")
    assert "a JSON list of 3 values, none of them an event object" in line
    events = tmp_path / "events.json"  # the same format with one event in it is read
    events.write_text(
        '[{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5, "dur": 2}]'
    )
    assert _gpuprof("analyze", events).returncode == 0


def test_analyze_of_a_gpuprof_report_points_to_gpuprof_report(tmp_path):
    report = tmp_path / "my report.json"
    build_report(_rank_trace(0, 1)).to_json(report, trace=False)
    line = _one_line_refusal(_gpuprof("analyze", report))
    assert line.endswith(f"a gpuprof report, not a trace: show it with `gpuprof report '{report}'`"), line
    assert _gpuprof("report", report).returncode == 0


@pytest.mark.parametrize("under", ["afile/x.json", "afile/deeper/x.json"])
def test_writing_under_a_file_names_the_file(tmp_path, under):
    (tmp_path / "afile").write_text("")
    report = tmp_path / "report.json"
    build_report(_rank_trace(0, 1)).to_json(report, trace=False)
    proc = subprocess.run(
        [sys.executable, "-c", _CLI, "report", "report.json", "-f", "json", "-o", under],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    line = _one_line_refusal(proc)
    assert line == f"gpuprof report: cannot write {under}: {tmp_path / 'afile'} is a file, not a folder", line


def test_a_steps_value_starting_with_a_dash_gets_the_tools_message(tmp_path):
    line = _one_line_refusal(_gpuprof("run", "--steps", "-1:3", tmp_path / "train.py"))
    assert line.startswith("gpuprof run: --steps '-1:3': write START:STOP with 0 <= START < STOP"), line


def test_only_the_verbs_own_options_are_joined():
    from gpuprof.cli import _negative_values_joined, build_parser

    run = build_parser(["run"]).get_default("verb_parsers")["run"]
    assert _negative_values_joined(["run", "--steps", "-1:3", "t.py"], run) == ["run", "--steps=-1:3", "t.py"]
    # After the script, every argument is the script's, as given.
    argv = ["run", "--out", "o", "--stop-after", "t.py", "--steps", "-1:3", "--lr", "-0.5"]
    assert _negative_values_joined(argv, run) == argv
    # A value that is one of the verb's options stays apart (argparse's message for the missing value).
    assert _negative_values_joined(["run", "--steps", "--out", "o"], run) == ["run", "--steps", "--out", "o"]
