"""`gpuprof analyze DIR --dask ADDRESS` where no scheduler listens: one line, exit 2."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import torch

import gpuprof


def _free_port() -> int:
    # A port nothing listens on: bound, never listened on, released.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_dask_scheduler_is_one_line_exit_2(tmp_path):
    pytest.importorskip("distributed", reason="python -m pip install distributed")
    with gpuprof.profile() as prof:
        for _ in range(2):
            torch.randn(16, 16) @ torch.randn(16, 16)
            prof.step()
    prof.export_chrome_trace(tmp_path / "rank0.pt.trace.json.gz")
    address = f"tcp://127.0.0.1:{_free_port()}"
    env = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"}  # dask's own setting
    p = subprocess.run(
        [sys.executable, "-m", "gpuprof.cli", "analyze", str(tmp_path), "--dask", address],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(f"gpuprof analyze: --dask {address}: cannot reach a dask scheduler there")
