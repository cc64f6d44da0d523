"""`gpuprof run` over a script that profiles itself: the script's own `gpuprof.profile` takes over
(gpuprof run stands aside), the run ends with the script's exit code; and the lines a run cut short
prints agree on the steps its report holds."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

OWN_SESSION = textwrap.dedent("""
    import json, sys
    import torch
    import gpuprof

    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    nested = ""
    with gpuprof.profile(schedule=gpuprof.schedule(wait=1, warmup=1, active=3, repeat=1)) as p:
        for step in range(6):
            loss = model(torch.randn(4, 8)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step == 3:
                try:  # a second session inside the script's own: refused, the script goes on
                    with gpuprof.profile():
                        pass
                except gpuprof.ProfilerError as e:
                    nested = str(e)
            p.step()
    with open(sys.argv[1], "w") as f:
        json.dump({"steps": [s["step"] for s in p.report().steps], "nested": nested}, f)
    sys.exit(int(sys.argv[2]))
""")


def _gpuprof(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "gpuprof.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def test_run_stands_aside_for_the_scripts_own_session_and_keeps_its_exit_code(tmp_path):
    script = tmp_path / "own.py"
    script.write_text(OWN_SESSION)
    for status in (0, 3):
        out, seen = tmp_path / f"out{status}", tmp_path / f"seen{status}.json"
        p = _gpuprof("run", "--steps", "2:5", "--out", out, script, seen, status)
        # As under plain python: the script's exit code, no ProfilerError from gpuprof run's session.
        assert p.returncode == status, p.stderr
        assert "already active (entered at" not in p.stderr.replace(str(script), "")
        info = json.loads(seen.read_text())
        # The script's own schedule (wait 1, warmup 1, active 3) recorded its steps 2, 3 and 4.
        assert info["steps"] == [2, 3, 4]
        # Its own nested session is refused by its own, named at the script's line.
        assert f"entered at {script}:" in info["nested"]
        assert f"started its own gpuprof.profile (at {script}:" in p.stderr
        assert f"Exit code {status}, the script's" in p.stderr
        assert not (out / "report.json").exists()
        # gpuprof run's step finder left with its session: no line about steps it no longer counts.
        assert "steps end at" not in p.stderr and "no training step" not in p.stderr


SIGINT_AT_STEP = textwrap.dedent("""
    import os, signal, sys
    import torch

    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(20):
        loss = model(torch.randn(4, 8)).sum()
        opt.zero_grad()
        loss.backward()
        if step == int(sys.argv[1]):
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, inside step N
        opt.step()
""")


def test_an_interrupted_run_names_the_same_steps_in_every_line(tmp_path):
    """SIGINT inside step 8 of a run recording steps 2..9: the span is saved with the step the
    signal came in (2..8), and the line saying the report is short names the same steps."""
    script = tmp_path / "interrupted.py"
    script.write_text(SIGINT_AT_STEP)
    out = tmp_path / "out"
    p = _gpuprof("run", "--steps", "2:10", "--out", out, script, 8)
    assert p.returncode == 130, p.stderr
    report = json.loads((out / "report.json").read_text())
    assert [s["step"] for s in report["steps"]] == [2, 3, 4, 5, 6, 7, 8]
    assert "recorded steps 2..8" in p.stderr
    assert "the report covers steps 2..8 only" in p.stderr, p.stderr


LATE_SESSION = textwrap.dedent("""
    import torch
    import gpuprof

    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step():
        loss = model(torch.randn(4, 8)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(8):  # plain steps: gpuprof run counts them
        train_step()
    with gpuprof.profile() as p:  # then the script profiles 3 steps itself
        for _ in range(3):
            train_step()
            p.step()
    print("own steps", len(p.report().steps))
""")


def test_a_span_in_progress_when_the_script_starts_its_session_keeps_its_ended_steps(tmp_path):
    """gpuprof run records steps 2..11; the script starts its own session after 8 optimizer steps:
    the run's span is written with the steps it ended (2..7), the script's session then records its
    own 3 steps, and the lines on stderr name the same steps."""
    script = tmp_path / "late.py"
    script.write_text(LATE_SESSION)
    out = tmp_path / "out"
    p = _gpuprof("run", "--steps", "2:12", "--out", out, script)
    assert p.returncode == 0, p.stderr
    assert "own steps 3" in p.stdout
    report = json.loads((out / "report.json").read_text())
    assert [s["step"] for s in report["steps"]] == [2, 3, 4, 5, 6, 7]
    assert "recorded steps 2..7" in p.stderr
    assert "stood aside for the script's own gpuprof.profile" in p.stderr
    assert "the report covers steps 2..7 only" in p.stderr
