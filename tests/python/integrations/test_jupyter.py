"""`%load_ext gpuprof` and the `%%gpuprof` cell magic, in a real IPython shell."""

from __future__ import annotations

import pytest

pytest.importorskip("IPython", reason="IPython is needed for the Jupyter extension (pip install ipykernel)")

from IPython.testing.globalipapp import start_ipython  # noqa: E402

SETUP = """
import torch
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
def one_step():
    loss = model(torch.randn(4, 8)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython()
    shell.run_line_magic("load_ext", "gpuprof")
    shell.run_cell(SETUP)
    return shell


def _global_optimizer_hooks():
    from torch.optim.optimizer import _global_optimizer_post_hooks

    return len(_global_optimizer_post_hooks)


def test_steps_come_from_the_optimizer(ip):
    hooks_before = _global_optimizer_hooks()
    ip.run_cell_magic("gpuprof", "--quiet --name rep", "for _ in range(6):\n    one_step()\n")
    rep = ip.user_ns["rep"]
    # Six optimizer steps, all recorded; the code after the last one is not a whole step.
    assert [s["step"] for s in rep.steps] == [0, 1, 2, 3, 4, 5]
    assert all(s["cpu_exec_us"] > 0 for s in rep.steps)
    assert _global_optimizer_hooks() == hooks_before  # the hook is gone after the cell


def test_steps_range(ip):
    ip.run_cell_magic("gpuprof", "--quiet --steps 2:5 --name rep", "for _ in range(8):\n    one_step()\n")
    assert [s["step"] for s in ip.user_ns["rep"].steps] == [2, 3, 4]


def test_a_cell_that_calls_prof_step_keeps_control(ip):
    # Two optimizer steps per training step (e.g. gradient accumulation done by hand): the cell's
    # own prof.step() calls define 3 steps, not the 6 optimizer steps.
    cell = "for _ in range(3):\n    one_step()\n    one_step()\n    prof.step()\n"
    ip.run_cell_magic("gpuprof", "--quiet --name rep", cell)
    assert [s["step"] for s in ip.user_ns["rep"].steps] == [0, 1, 2]


def test_a_cell_without_steps_is_one_step(ip):
    ip.run_cell_magic("gpuprof", "--quiet --name rep", "x = torch.randn(64, 64) @ torch.randn(64, 64)\n")
    assert len(ip.user_ns["rep"].steps) == 1


def test_a_failing_cell_keeps_its_report_and_raises(ip):
    cell = "for _ in range(3):\n    one_step()\nraise ValueError('boom')\n"
    with pytest.raises(ValueError, match="boom"):
        ip.run_cell_magic("gpuprof", "--quiet --name failed", cell)
    rep = ip.user_ns["failed"]
    assert len(rep.steps) >= 3


def test_the_report_displays_as_html(ip, capsys):
    ip.run_cell_magic("gpuprof", "--name shown", "for _ in range(3):\n    one_step()\n")
    rep = ip.user_ns["shown"]
    ip.display_formatter.formatters["text/html"].enabled = True  # as in a notebook
    fmt = ip.display_formatter.format(rep)[0]
    assert fmt["text/html"].lstrip().startswith('<div class="gpuprof-report">')
    assert "mean step time" in fmt["text/html"]


def test_bad_steps_is_one_line(ip, capsys):
    ip.run_cell_magic("gpuprof", "--steps 9:1", "one_step()\n")
    assert "%%gpuprof: --steps '9:1': write START:STOP" in capsys.readouterr().out


def test_out_writes_the_files_gpuprof_run_writes(ip, tmp_path):
    # One naming for an --out folder: %%gpuprof --out DIR writes what `gpuprof run --out DIR` does
    # (report.json, report.html and trace.json.gz, the reports pointing at the trace). It wrote
    # report.trace.json.gz beside report.json, and failed on a folder that did not exist yet.
    import json

    from gpuprof.traces.export import HTML_FILE, REPORT_FILE, TRACE_FILE

    out = tmp_path / "new" / "folder"
    ip.run_cell_magic("gpuprof", f"--quiet --name rep --out {out}", "for _ in range(3):\n    one_step()\n")
    assert sorted(p.name for p in out.iterdir()) == sorted([REPORT_FILE, HTML_FILE, TRACE_FILE])
    assert (REPORT_FILE, HTML_FILE, TRACE_FILE) == ("report.json", "report.html", "trace.json.gz")
    saved = json.loads((out / "report.json").read_text())
    assert saved["source"]["trace_path"] == str(out / "trace.json.gz")
    assert [s["step"] for s in saved["steps"]] == [0, 1, 2]
