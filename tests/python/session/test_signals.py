"""SIGTERM and SIGINT during a recorded span: the steps so far are saved, then the signal does what
it would have done (the previous handler runs; the default action ends the process with the same
status). Real processes, real signals, a CPU training loop."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import gpuprof

# A long profiled loop that says when it has finished 3 steps, so that the signal comes mid-span.
LOOP = textwrap.dedent("""
    import os, signal, sys, time
    import torch
    import gpuprof

    out, own_handler = sys.argv[1], sys.argv[2] == "own"
    os.makedirs(out, exist_ok=True)
    if own_handler:
        def handler(signum, frame):
            with open(os.path.join(out, "own-handler-ran"), "w") as f:
                f.write(str(signum))
            sys.exit(7)
        signal.signal(signal.SIGTERM, handler)

    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gpuprof.profile(on_trace_ready=gpuprof.save(out)) as prof:
        for i in range(100000):
            loss = model(torch.randn(4, 8)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.02)
            prof.step()
            if i == 3:
                print("ready", flush=True)
    print("loop ended", flush=True)
""")

TRAIN = textwrap.dedent("""
    import time
    import torch

    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(100000):
        loss = model(torch.randn(4, 8)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.02)
        if i == 5:
            print("ready", flush=True)
""")


def _signalled(cmd: list, signum: int, cwd) -> tuple[subprocess.CompletedProcess, float]:
    """Run cmd, send signum once it prints "ready", and wait for it to end."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    try:
        for line in p.stdout:
            if line.strip() == "ready":
                break
        else:
            pytest.fail(f"never ready: {p.stderr.read()}")
        p.send_signal(signum)
        t0 = time.monotonic()
        out, err = p.communicate(timeout=120)
        return subprocess.CompletedProcess(cmd, p.returncode, out, err), time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()


def _saved_steps(folder) -> list[int]:
    report = json.loads((folder / "span_000" / "report.json").read_text())
    assert report["source"]["partial_span"] is True
    return [s["step"] for s in report["steps"]]


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, -15), (signal.SIGINT, -2)])
def test_a_signal_mid_span_saves_the_steps_so_far_and_ends_as_it_would_have(tmp_path, signum, status):
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    out = tmp_path / "runs"
    p, _ = _signalled([sys.executable, str(script), str(out), "default"], signum, tmp_path)
    # The default action (SIGTERM) or Python's (SIGINT: KeyboardInterrupt, then the same signal) ends
    # the process: a shell sees 143 or 130.
    assert p.returncode == status, p.stderr
    assert "loop ended" not in p.stdout
    steps = _saved_steps(out)
    assert steps[:4] == [0, 1, 2, 3]
    assert (out / "span_000" / "trace.json.gz").is_file()


def test_the_programs_own_sigterm_handler_still_runs(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    out = tmp_path / "runs"
    p, _ = _signalled([sys.executable, str(script), str(out), "own"], signal.SIGTERM, tmp_path)
    assert p.returncode == 7, p.stderr  # the handler's sys.exit(7)
    assert (out / "own-handler-ran").read_text() == str(int(signal.SIGTERM))
    assert _saved_steps(out)[:4] == [0, 1, 2, 3]


def test_gpuprof_run_keeps_the_steps_recorded_before_sigterm(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "gpuprof.cli", "run", "--steps", "2:100000", "--out", str(out), str(script)]
    p, _ = _signalled(cmd, signal.SIGTERM, tmp_path)
    assert p.returncode == -signal.SIGTERM, p.stderr  # 143 in a shell, as without gpuprof
    report = json.loads((out / "report.json").read_text())
    steps = [s["step"] for s in report["steps"]]
    assert steps[:3] == [2, 3, 4] and report["source"]["partial_span"] is True
    assert (out / "report.html").is_file() and (out / "trace.json.gz").is_file()


def test_the_handlers_are_ours_only_while_a_session_is_active():
    def mine(signum, frame):
        pass

    before = signal.signal(signal.SIGTERM, mine)
    try:
        with gpuprof.profile() as prof:
            assert signal.getsignal(signal.SIGTERM) != mine
            prof.step()
        assert signal.getsignal(signal.SIGTERM) is mine
        ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            with gpuprof.profile():  # an ignored signal stays ignored
                assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        finally:
            signal.signal(signal.SIGINT, ignored)
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_session_on_another_thread_leaves_the_handlers_alone():
    before = signal.getsignal(signal.SIGTERM)
    seen = []

    def work():
        with gpuprof.profile() as prof:
            seen.append(signal.getsignal(signal.SIGTERM))
            prof.step()

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen == [before] and signal.getsignal(signal.SIGTERM) == before


def test_a_handler_that_returns_lets_the_loop_go_on_into_a_new_span(tmp_path):
    # The program's handler only takes note (a graceful stop later): the cut span is saved, the
    # program goes on, and the steps after it form a new span.
    calls = []
    previous = signal.signal(signal.SIGTERM, lambda s, f: calls.append(s))
    spans = []
    try:
        with gpuprof.profile(on_trace_ready=lambda p: spans.append(p.report())) as prof:
            for i in range(6):
                if i == 3:
                    signal.raise_signal(signal.SIGTERM)
                prof.step()
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert calls == [signal.SIGTERM]
    assert [[s["step"] for s in r.steps] for r in spans] == [[0, 1, 2, 3], [4, 5]]
    assert spans[0].source["partial_span"] is True
