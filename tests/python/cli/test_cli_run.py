"""`gpuprof run`: an unmodified training script, steps from its optimizer; and the CLI's promise
that rendering verbs never load torch."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

TRAIN = textwrap.dedent("""
    import json, sys
    import torch

    # Written by the script itself, so the test sees what it was given.
    with open(sys.argv[1], "w") as f:
        json.dump({"argv": sys.argv, "name": __name__}, f)
    steps = int(sys.argv[2])
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        loss = model(torch.randn(4, 8)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("script done")
""")


def _gpuprof(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "gpuprof.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(TRAIN)
    return path


def test_run_records_the_requested_optimizer_steps(tmp_path, script):
    out = tmp_path / "out"
    seen = tmp_path / "seen.json"
    p = _gpuprof("run", "--steps", "2:5", "--out", out, script, seen, 8)
    assert p.returncode == 0, p.stderr
    # The script ran as __main__ with its own arguments.
    info = json.loads(seen.read_text())
    assert info["name"] == "__main__" and info["argv"] == [str(script), str(seen), "8"]
    assert "script done" in p.stdout
    report = json.loads((out / "report.json").read_text())
    # --steps 2:5 records optimizer steps 2, 3 and 4 (0-based, end excluded).
    assert [s["step"] for s in report["steps"]] == [2, 3, 4]
    assert all(s["cpu_exec_us"] > 0 for s in report["steps"])  # the ops ran inside the steps
    assert (out / "report.html").read_text().lstrip().startswith("<!DOCTYPE html>")
    assert "gpuprof step breakdown" in p.stdout and "recorded steps 2..4" in p.stderr


def test_run_with_modules_records_the_module_view(tmp_path, script):
    """--modules: the script's model gets its module rows (without it: none, and the report says
    how to get them)."""
    for flag, rows in (("--modules", [("", "Linear", 3)]), (None, [])):
        out = tmp_path / f"out{flag}"
        args = (
            ["run", "--steps", "2:5", "--out", out]
            + ([flag] if flag else [])
            + [script, tmp_path / "s.json", 8]
        )
        p = _gpuprof(*args)
        assert p.returncode == 0, p.stderr
        report = json.loads((out / "report.json").read_text())
        assert [(r["path"], r["type"], r["calls"]) for r in report["modules"]] == rows
        assert ("module_view" in report["metadata"]) == (flag is None)


def test_run_with_shapes_records_every_operators_input_shapes(tmp_path, script):
    """--shapes: the operators-by-shape table holds the script's linear layer with its shapes (batch
    4 of 8 features into 2), and the FLOPs note no longer says elementwise operators went uncounted;
    without it the table is empty and the note says so."""
    for flag in ("--shapes", None):
        out = tmp_path / f"out{flag}"
        args = (
            ["run", "--steps", "2:5", "--out", out]
            + ([flag] if flag else [])
            + [script, tmp_path / "s.json", 8]
        )
        p = _gpuprof(*args)
        assert p.returncode == 0, p.stderr
        report = json.loads((out / "report.json").read_text())
        shapes = {(r["name"], r["input_shapes"]) for r in report["operators_by_shape"]}
        note = report["flops"].get("note") or ""
        if flag:
            assert ("aten::linear", "[[4, 8], [2, 8], [2]]") in shapes
            assert "no recorded input shapes" not in note
        else:
            assert shapes == set()
            assert "no recorded input shapes" in note


def test_run_with_a_short_script_keeps_what_it_recorded(tmp_path, script):
    out = tmp_path / "out"
    p = _gpuprof("run", "--steps", "2:6", "--out", out, script, tmp_path / "seen.json", 4)
    assert p.returncode == 0, p.stderr
    report = json.loads((out / "report.json").read_text())
    # 4 optimizer steps: steps 2 and 3 complete; the rest of the range never came.
    assert [s["step"] for s in report["steps"]] == [2, 3]
    assert "the script ended after 4 steps" in p.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--steps", "5:3"], "--steps '5:3': write START:STOP"),
        (["--steps", "x"], "write START:STOP"),
    ],
)
def test_run_mistakes(tmp_path, script, args, message):
    p = _gpuprof("run", *args, "--out", tmp_path / "o", script, tmp_path / "s.json", 3)
    assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr


def test_run_before_the_range_is_reached(tmp_path, script):
    p = _gpuprof("run", "--steps", "5:8", "--out", tmp_path / "o", script, tmp_path / "s.json", 3)
    assert p.returncode == 2 and "ended after 3 steps (optimizer.step() calls), before step 5" in p.stderr
    assert "Traceback" not in p.stderr


def test_run_missing_script(tmp_path):
    p = _gpuprof("run", "--out", tmp_path / "o", tmp_path / "nope.py")
    assert p.returncode == 2 and "nope.py: no such script" in p.stderr


def test_rendering_verbs_do_not_import_torch(tmp_path):
    from report_samples import cpu_report_dict, with_gpu_sections

    import gpuprof

    path = tmp_path / "r.json"
    gpuprof.Report.from_dict(with_gpu_sections(cpu_report_dict())).to_json(path)
    code = textwrap.dedent(f"""
        import sys, io, contextlib
        from gpuprof.cli import main
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink):
            for argv in (["report", {str(path)!r}, "-f", "text"], ["report", {str(path)!r}, "-f", "html"],
                         ["report", {str(path)!r}, "-f", "md"], ["diff", {str(path)!r}, {str(path)!r}],
                         ["check", {str(path)!r}, "--max", "dataloader_pct=100"]):
                assert main(argv) == 0, argv
            try:
                main(["--help"])
            except SystemExit:
                pass
        loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
        print("TORCH", loaded)
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "TORCH []" in p.stdout


def test_a_script_that_fails_before_the_range_is_named_with_its_exit_code(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("import torch\nimport gpuprof_no_such_module_xyz\n")
    p = _gpuprof("run", "--out", tmp_path / "out", script)
    assert p.returncode == 1, p.stderr
    assert "ModuleNotFoundError" in p.stderr and "exit code 1" in p.stderr
    assert "nothing was recorded" in p.stderr
    exits = tmp_path / "exits.py"
    exits.write_text("import sys\nsys.exit(3)\n")
    p = _gpuprof("run", "--out", tmp_path / "out2", exits)
    assert p.returncode == 3 and "exited with code 3" in p.stderr, p.stderr


def test_run_stop_after_ends_the_script_once_the_window_is_recorded(tmp_path, script):
    out = tmp_path / "out"
    # 100000 steps would take minutes; --stop-after ends the script after step 4.
    p = _gpuprof(
        "run", "--steps", "2:5", "--stop-after", "--out", out, script, tmp_path / "seen.json", 100000
    )
    assert p.returncode == 0, p.stderr
    assert "script done" not in p.stdout  # the script did not run to its end
    assert "--stop-after" in p.stderr
    report = json.loads((out / "report.json").read_text())
    assert [s["step"] for s in report["steps"]] == [2, 3, 4]
    # The trace is beside the report, and the reports say where and how to open it.
    assert (out / "trace.json.gz").stat().st_size > 0
    assert report["source"]["trace_path"] == str(out / "trace.json.gz")
    assert "ui.perfetto.dev" in p.stdout and str(out / "trace.json.gz") in p.stdout
    assert 'id="trace-link"' in (out / "report.html").read_text()


def test_run_no_trace(tmp_path, script):
    out = tmp_path / "out"
    p = _gpuprof("run", "--steps", "1:2", "--no-trace", "--out", out, script, tmp_path / "seen.json", 3)
    assert p.returncode == 0, p.stderr
    assert not (out / "trace.json.gz").exists()
    assert "trace_path" not in json.loads((out / "report.json").read_text())["source"]
