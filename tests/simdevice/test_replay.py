"""tests/simdevice/replay.py on the stored GPU traces (../shared/traces; skipped without them): each
trace's kernels, copies and sets replayed through the simulated device under the real CUPTI
collector give the same GPU tables as `gpuprof analyze` of the trace: per kernel name the same
calls and total time (to 1 ns a call: the stored microseconds rounded to the device's
nanoseconds), and the same copy and set calls and time. Every launch went through gpuprof's
buffers with its external correlation (none dropped)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TRACES = HERE.parents[1].parent / "shared" / "traces"
GPU_TRACES = [
    "hta_a100_nccl/rank0.json.gz",
    "hta_v100_ns/rank-0.pt.trace.json.gz",
    "hta_mi250_rocm/rank0.json.gz",
    "tb_resnet50_v100_nw0/worker0.1623143089861.pt.trace.json.gz",
]


@pytest.mark.parametrize("name", GPU_TRACES)
def test_replay_agrees_with_analyze(name, simdevice_libdir, tmp_path):
    trace = TRACES / name
    if not trace.is_file():
        pytest.skip(f"{trace} absent (the stored traces live in ../shared/traces beside the checkout)")
    out = tmp_path / "replay.json"
    r = subprocess.run(
        [sys.executable, str(HERE / "replay.py"), str(trace), "--json", str(out)],
        env=dict(os.environ, GPUPROF_CLOCK="monotonic"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.is_file(), f"replay wrote nothing:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    res = json.loads(out.read_text())
    assert res["differences"] == [], "\n".join(res["differences"][:20])
    assert r.returncode == 0, r.stderr[-3000:]
    st = res["stats"]
    assert res["gpu_collection"].startswith("on (CUPTI")
    assert res["dropped"] == "0" and st["dropped"] == 0
    # Every stored kernel, copy and set was launched once, each under its operator's external id.
    assert st["kernels"] + st["memcpys"] + st["memsets"] == res["launches"] > 0
    assert st["external_records"] == res["launches"]
    assert st["pushes"] == st["pops"]
    assert sum(c for c, _ in res["analyzed"]["kernels"].values()) == st["kernels"]
