"""SIGUSR2 asks one watched process for a capture (session/capture.py): the handler only sets a
flag, the next step boundary arms a capture of the next GPUPROF_CAPTURE_STEPS steps after one
warm-up step, written where a capture of the run folder goes; a handler the program set is kept."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from gpuprof.session.capture import DEFAULT_SIGNAL_STEPS, REQUEST_FILE, signal_steps
from gpuprof.session.watch import Watcher

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGUSR2"), reason="no SIGUSR2 on this platform")


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _loop(out, steps: int, before) -> Watcher:
    """A real torch loop watched in this process; ``before(i)`` runs before step i."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    w = Watcher(str(out)).start()
    try:
        for i in range(steps):
            before(i)
            loss = model(torch.randn(4, 8)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            w.step()
    finally:
        w.close()
    return w


def test_sigusr2_captures_the_next_steps_after_a_warm_up_one(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPROF_CAPTURE_STEPS", "4")
    out = tmp_path / "run"
    (out / "capture-2").mkdir(parents=True)  # an earlier capture of this folder: the next id is 3
    kills = []

    def before(i):
        if i in (5, 8):  # during step 5; again during the capture: that one is missed
            os.kill(os.getpid(), signal.SIGUSR2)
            kills.append(i)

    _loop(out, 16, before)
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL  # put back at the end
    captures = [line for line in _lines(out / "rank0" / "watch.jsonl") if line["kind"] == "capture"]
    # Seen at the end of step 5: step 6 is the warm-up step, 7..10 the recorded ones.
    assert [(c["id"], c["state"], c["by"]) for c in captures] == [
        (3, "armed", "SIGUSR2"),
        (None, "missed", "SIGUSR2"),  # no id taken: `gpuprof capture` would still use 4
        (3, "done", "SIGUSR2"),
    ]
    assert captures[0]["start"] == 7 and captures[0]["steps"] == 4
    assert captures[1]["reason"] == "capture 3 was still running"
    assert captures[2]["recorded"] == [7, 10]
    report = json.loads((out / "capture-3" / "report.json").read_text())
    assert [s["step"] for s in report["steps"]] == [7, 8, 9, 10]
    assert report["operators"] and (out / "capture-3" / "trace.json.gz").is_file()
    assert not (out / REQUEST_FILE).exists() and not (out / "capture-4").exists()


def test_the_programs_own_sigusr2_handler_is_kept_and_called(tmp_path, caplog):
    got = []

    def mine(signum, frame):
        got.append(signum)

    before = signal.signal(signal.SIGUSR2, mine)
    try:
        with caplog.at_level(logging.WARNING, logger="gpuprof"):
            _loop(tmp_path / "run", 6, lambda i: i == 2 and os.kill(os.getpid(), signal.SIGUSR2))
        assert signal.getsignal(signal.SIGUSR2) is mine
    finally:
        signal.signal(signal.SIGUSR2, before)
    assert got == [signal.SIGUSR2]
    said = [r.getMessage() for r in caplog.records if "SIGUSR2" in r.getMessage()]
    assert len(said) == 1 and "own SIGUSR2 handler, kept" in said[0]
    lines = _lines(tmp_path / "run" / "rank0" / "watch.jsonl")
    assert not [line for line in lines if line["kind"] == "capture"]


def test_capture_steps_from_the_environment(monkeypatch, caplog):
    monkeypatch.delenv("GPUPROF_CAPTURE_STEPS", raising=False)
    assert signal_steps() == DEFAULT_SIGNAL_STEPS == 10
    monkeypatch.setenv("GPUPROF_CAPTURE_STEPS", " 25 ")
    assert signal_steps() == 25
    for bad in ("0", "-3", "ten", "1001"):
        monkeypatch.setenv("GPUPROF_CAPTURE_STEPS", bad)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="gpuprof"):
            assert signal_steps() == 10
        assert f"GPUPROF_CAPTURE_STEPS={bad!r} is not a number of steps from 1 to 1000" in caplog.text


# Runs until the test drops a "stop" file (or 3000 steps), prints its own line, exits with 3.
LOOP = textwrap.dedent("""
    import os, sys, time, torch
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    i = 0
    while i < 3000 and not os.path.exists("stop"):
        time.sleep(0.005)
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
        i += 1
    print("loop done")
    sys.exit(3)
""")


def _wait_for(check, what, job, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        assert job.poll() is None, f"the job ended before {what}: {job.communicate()}"
        time.sleep(0.1)
    raise AssertionError(f"no {what} in {timeout} s")


def test_sigusr2_to_a_gpuprof_run_watch_process(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "train.py").write_text(LOOP)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.update(GPUPROF_CACHE_DIR=str(tmp_path / "cache"), GPUPROF_CAPTURE_STEPS="5")
    job = subprocess.Popen(
        [sys.executable, "-m", "gpuprof.cli", "run", "--watch", "--out", "run", "train.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    path = tmp_path / "run" / "rank0" / "watch.jsonl"

    def lines(kind):
        try:
            return [line for line in _lines(path) if line["kind"] == kind]
        except (OSError, ValueError):  # not there yet, or a line being written
            return []

    try:
        (start,) = _wait_for(lambda: lines("start"), "start line", job)
        os.kill(start["pid"], signal.SIGUSR2)
        done = _wait_for(lambda: [c for c in lines("capture") if c["state"] != "armed"], "capture's end", job)
        (tmp_path / "stop").touch()
        stdout, stderr = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode == 3, stderr  # the script's own status and output
    assert stdout == "loop done\n"
    assert done[0]["state"] == "done" and done[0]["id"] == 1, done
    first = done[0]["start"]
    report = json.loads((tmp_path / "run" / "capture-1" / "report.json").read_text())
    assert [s["step"] for s in report["steps"]] == list(range(first, first + 5))
    assert done[0]["recorded"] == [first, first + 4]
    # Every step was watched, the captured ones too.
    steps = [line["step"] for line in lines("step")]
    assert steps == list(range(len(steps))) and steps[-1] > first + 4
