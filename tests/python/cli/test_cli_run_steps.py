"""`gpuprof run` finds the steps of loops that never call torch.optim (collect/autostep.py:
StepFinder), says in one line what ends them, and, when it finds none, says how to mark them while
the script still runs, not after it.

Before, a loop that updates its weights by hand (pytorch/examples' word_language_model) ran to its
end with nothing recorded, and then was told "Use --steps with a range below 1"."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

# word_language_model's update: no optimizer, p.data.add_(p.grad, alpha=-lr) after backward.
HAND_SGD = textwrap.dedent("""
    import sys
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    lr = 0.1
    for i in range(int(sys.argv[1])):
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        model.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
    print("trained", i + 1)
""")

# Inference: no backward, no optimizer. It runs until the test says stop (a file), at most 120 s.
INFERENCE = textwrap.dedent("""
    import os, sys, time
    import torch

    model = torch.nn.Linear(64, 64).eval()

    def predict(x):
        with torch.no_grad():
            return model(x).argmax(1)

    stop, started, n = sys.argv[1], time.monotonic(), 0
    while not os.path.exists(stop) and time.monotonic() - started < 120:
        predict(torch.randn(32, 64))
        n += 1
        if len(sys.argv) > 2 and n >= int(sys.argv[2]):
            break
        time.sleep(0.01)
    print("predicted", n)
""")


def gpuprof_run(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "gpuprof.cli", "run", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_hand_written_sgd_loop_is_stepped_by_its_backward_passes(tmp_path):
    script = tmp_path / "word_lm.py"
    script.write_text(HAND_SGD)
    out = tmp_path / "out"
    p = gpuprof_run("--steps", "2:5", "--out", out, "-q", script, 8)
    assert p.returncode == 0, p.stderr
    assert "trained 8" in p.stdout
    said = [line for line in p.stderr.splitlines() if "steps end where" in line]
    assert len(said) == 1 and "no torch.optim optimizer in this script" in said[0]
    assert "loss.backward()" in said[0] and "--step-marker" in said[0]
    report = json.loads((out / "report.json").read_text())
    assert [s["step"] for s in report["steps"]] == [2, 3, 4]
    # A step runs from one backward's end to the next: the hand-written update and clipping, the
    # forward and the backward are all in it.
    names = {row["name"] for row in report["operators"]}
    assert {"aten::add_", "aten::addmm", "aten::linalg_vector_norm"} <= names, names


def test_inference_without_steps_is_told_how_to_mark_them_while_it_runs(tmp_path):
    script = tmp_path / "infer.py"
    script.write_text(INFERENCE)
    stop = tmp_path / "stop"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuprof.cli", "run", "--step-hint-after", "3", "--out", tmp_path / "o"]
        + [str(script), str(stop)],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        hint = ""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            if "no training step found" in line:
                hint = line
                break
        # The hint came while the script was still running (it runs until `stop` exists).
        assert hint and proc.poll() is None, hint
        assert "in the first 3 s" in hint and "--step-marker NAME" in hint
        stop.write_text("")
        rest_err = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2
    assert "no training step was found" in rest_err and "gpuprof run --step-marker" in rest_err
    assert "range below" not in rest_err  # no --steps range could have helped


def test_step_marker_names_a_function_of_the_script(tmp_path):
    script = tmp_path / "infer.py"
    script.write_text(INFERENCE)
    out = tmp_path / "out"
    p = gpuprof_run(
        "--steps", "3:6", "--step-marker", "predict", "--out", out, "-q", script, tmp_path / "x", 10
    )
    assert p.returncode == 0, p.stderr
    said = [line for line in p.stderr.splitlines() if "steps end where" in line]
    assert said == ["gpuprof run: steps end where each call of predict() returns (--step-marker)"]
    report = json.loads((out / "report.json").read_text())
    assert [s["step"] for s in report["steps"]] == [3, 4, 5]
    assert any(row["name"] == "aten::addmm" for row in report["operators"])


def test_step_marker_names_a_range(tmp_path):
    script = tmp_path / "ranged.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        model = torch.nn.Linear(8, 8)
        for _ in range(6):
            with torch.profiler.record_function("my step"):
                model(torch.randn(4, 8)).sum()
    """)
    )
    out = tmp_path / "out"
    p = gpuprof_run("--steps", "1:4", "--step-marker", "my step", "--out", out, "-q", script)
    assert p.returncode == 0, p.stderr
    assert "steps end where each range named 'my step' ends (--step-marker)" in p.stderr
    report = json.loads((out / "report.json").read_text())
    assert [s["step"] for s in report["steps"]] == [1, 2, 3]


def test_a_marker_never_seen_is_named_at_the_end(tmp_path):
    script = tmp_path / "infer.py"
    script.write_text(INFERENCE)
    p = gpuprof_run("--step-marker", "train_step", "--out", tmp_path / "o", script, tmp_path / "x", 3)
    assert p.returncode == 2
    assert "no range named 'train_step' ended and no function train_step() returned" in p.stderr


# An LR scheduler sets its own `step` on the optimizer object, which calls the class's step as it was
# when the scheduler was made: gpuprof's wrapper on the class is never reached through it.
WITH_SCHEDULER = textwrap.dedent("""
    import sys
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    made_at = int(sys.argv[1])
    sched = None
    for step in range(14):
        if step == made_at:
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
        loss = model(torch.randn(8, 16)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
    print("script done")
""")


def test_an_lr_scheduler_leaves_every_optimizer_step_whole_in_its_step(tmp_path):
    """With the scheduler made before the first step and after it (at step 1): each of the 10
    recorded steps holds its own Optimizer.step range (torch's trace has 10; the boundary taken
    inside torch's post hook left the last one open at the span's end: 9), and the span's end inside
    that hook removed gpuprof's hooks while torch iterated them ("OrderedDict mutated during
    iteration": the script died)."""
    script = tmp_path / "sched.py"
    script.write_text(WITH_SCHEDULER)
    for made_at in (0, 1):
        out = tmp_path / f"out{made_at}"
        p = gpuprof_run("--steps", "2:12", "--out", out, script, made_at)
        assert p.returncode == 0, p.stderr
        assert "script done" in p.stdout
        report = json.loads((out / "report.json").read_text())
        assert [s["step"] for s in report["steps"]] == list(range(2, 12))
        calls = {r["name"]: r["calls"] for r in report["ranges"]}
        assert calls["Optimizer.step#Adadelta.step"] == 10, calls
        assert calls["Optimizer.zero_grad#Adadelta.zero_grad"] == 10, calls
