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
    code = ("import sys; from gpuprof.cli import main; rc = main(sys.argv[1:]); "
            "sys.stdout.flush(); print('TORCH_LOADED=' + str('torch' in sys.modules), file=sys.stderr); "
            "sys.exit(rc)")
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


def test_analyze_a_folder_writes_a_list(tmp_path):
    folder = TRACES / "tb_resnet50_v100_nw0"
    if not folder.exists():
        pytest.skip(f"shared traces not found at {folder}")
    out = tmp_path / "all.json"
    proc = gpuprof_cli("analyze", str(folder), "--json", str(out), "--html", str(tmp_path / "r.html"))
    assert proc.returncode == 0, proc.stderr
    assert "TORCH_LOADED=False" in proc.stderr   # HTML rendering loads no torch either
    # One HTML file per trace of the folder, each naming its trace.
    for i, name in enumerate(["worker0.1623143089861", "worker0.1623143566756"]):
        html = (tmp_path / f"r_{i}.html").read_text()
        assert html.startswith("<!DOCTYPE html>") and name in html
    data = json.loads(out.read_text())
    assert [Path(d["source"]["path"]).name for d in data] == [
        "worker0.1623143089861.pt.trace.json.gz", "worker0.1623143566756.pt.trace.json.gz"]
    assert proc.stdout.count("gpuprof step breakdown") == 2


def test_analyze_bad_file_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    proc = gpuprof_cli("analyze", str(bad))
    assert proc.returncode == 2
    lines = [l for l in proc.stderr.splitlines() if not l.startswith("TORCH_LOADED")]
    assert len(lines) == 1 and lines[0].startswith(f"gpuprof analyze: {bad}: invalid JSON at byte")
    proc = gpuprof_cli("analyze", str(tmp_path / "missing.json"))
    assert proc.returncode == 2 and "no such file or folder" in proc.stderr
