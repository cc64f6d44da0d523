"""`gpuprof analyze PATH [--json OUT] [--html OUT]` end to end, in a subprocess, without torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _traces import TRACES  # noqa: E402

ROCM = TRACES / "hta_mi250_rocm" / "rank0.json.gz"


def gpuprof_cli(*args, check_torch=True):
    # Runs the CLI's main() and then reports whether torch got imported along the way.
    code = (
        "import sys; from gpuprof.cli import main; rc = main(sys.argv[1:]); "
        "sys.stdout.flush(); print('TORCH_LOADED=' + str('torch' in sys.modules), file=sys.stderr); "
        "sys.exit(rc)"
    )
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_analyze_prints_the_report_writes_json_and_never_imports_torch(tmp_path):
    if not ROCM.exists():
        pytest.skip(f"shared traces not found at {ROCM}")
    out = tmp_path / "r.json"
    proc = gpuprof_cli("analyze", str(ROCM), "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "TORCH_LOADED=False" in proc.stderr
    assert "gpuprof step breakdown" in proc.stdout and str(ROCM) in proc.stdout
    data = json.loads(out.read_text())
    assert data["source"]["kind"] == "trace" and data["source"]["path"] == str(ROCM)
    assert data["counts"]["steps"] == len(data["steps"]) == 1
    # The file is written in pieces (the step views not copied into one string first): byte for
    # byte the report's to_json() and the file's newline.
    import gpuprof

    assert "step_views" in data
    assert out.read_text(encoding="utf-8") == gpuprof.analyze(ROCM).to_json() + "\n"


def test_analyze_a_folder_writes_a_list(tmp_path):
    folder = TRACES / "tb_resnet50_v100_nw0"
    if not folder.exists():
        pytest.skip(f"shared traces not found at {folder}")
    out = tmp_path / "all.json"
    proc = gpuprof_cli("analyze", str(folder), "--json", str(out), "--html", str(tmp_path / "r.html"))
    assert proc.returncode == 0, proc.stderr
    assert "TORCH_LOADED=False" in proc.stderr  # HTML rendering loads no torch either
    # One HTML file per trace of the folder, each naming its trace.
    for i, name in enumerate(["worker0.1623143089861", "worker0.1623143566756"]):
        html = (tmp_path / f"r_{i}.html").read_text()
        assert html.startswith("<!DOCTYPE html>") and name in html
    data = json.loads(out.read_text())
    assert [Path(d["source"]["path"]).name for d in data] == [
        "worker0.1623143089861.pt.trace.json.gz",
        "worker0.1623143566756.pt.trace.json.gz",
    ]
    assert proc.stdout.count("gpuprof step breakdown") == 2


def test_analyze_bad_file_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    proc = gpuprof_cli("analyze", str(bad))
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("TORCH_LOADED")]
    assert len(lines) == 1 and lines[0].startswith(f"gpuprof analyze: {bad}: invalid JSON at byte")
    proc = gpuprof_cli("analyze", str(tmp_path / "missing.json"))
    assert proc.returncode == 2 and "no such file or folder" in proc.stderr


def test_the_command_ends_without_teardown_only_after_a_one_file_analyze(tmp_path):
    """`gpuprof analyze FILE` (cli.entry) exits with os._exit once its output is flushed, skipping
    Python's teardown of the loaded modules (docs/performance.md): everything it printed and wrote
    is there, and the exit code is the command's. An atexit handler, which only a normal exit runs,
    tells the two exits apart: an error, a folder and the other verbs exit normally."""
    trace = tmp_path / "t.json"
    trace.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {
                        "ph": "X",
                        "cat": "user_annotation",
                        "name": f"ProfilerStep#{i}",
                        "pid": 1,
                        "tid": 1,
                        "ts": 100 * i,
                        "dur": 90,
                    }
                    for i in range(1, 4)
                ]
            }
        )
    )
    code = (
        "import atexit, sys; atexit.register(lambda: print('ATEXIT_RAN', file=sys.stderr))\n"
        "from gpuprof.cli import entry; entry(sys.argv[1:])"
    )

    def run(*args, stdout=subprocess.PIPE):
        return subprocess.run(
            [sys.executable, "-c", code, *args], stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120
        )

    out = tmp_path / "r.json"
    with open(tmp_path / "stdout.txt", "w") as f:  # a file, not a pipe: block-buffered output
        proc = run("analyze", str(trace), "--json", str(out), "--html", str(tmp_path / "r.html"), stdout=f)
    assert proc.returncode == 0, proc.stderr
    assert "ATEXIT_RAN" not in proc.stderr  # the quick exit
    text = (tmp_path / "stdout.txt").read_text()
    assert text.startswith("gpuprof step breakdown") and text.rstrip().endswith("events: 3")
    assert json.loads(out.read_text())["counts"]["steps"] == 3  # whole, closed
    assert (tmp_path / "r.html").read_text().rstrip().endswith("</html>")
    bad = run("analyze", str(tmp_path / "missing.json"))
    assert bad.returncode == 2 and "ATEXIT_RAN" in bad.stderr  # an error: the normal exit
    folder = run("analyze", str(tmp_path))
    assert folder.returncode == 0 and "ATEXIT_RAN" in folder.stderr  # a folder: the normal exit
    report = run("report", str(out))
    assert report.returncode == 0 and "ATEXIT_RAN" in report.stderr  # other verbs too
