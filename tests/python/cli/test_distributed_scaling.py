"""`gpuprof scaling` on real 1-, 2- and 4-rank gloo runs of one job, and `gpuprof check` gating on it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

JOB = Path(__file__).resolve().parents[1] / "_ddp_job.py"


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "gpuprof", *map(str, args)], capture_output=True, text=True, timeout=120
    )


def test_scaling_table_of_one_job_at_1_2_and_4_ranks(tmp_path):
    runs = []
    for world in (1, 2, 4):
        out = tmp_path / f"w{world}"
        res = subprocess.run(
            [sys.executable, str(JOB), str(out), "--world", str(world), "--steps", "4"],
            capture_output=True,
            text=True,
            timeout=150,
        )
        assert (out / "rank0.json").exists(), res.stderr[-3000:]
        runs.append(out / "rank0.json")
    table_json = tmp_path / "scaling.json"
    proc = cli("scaling", *reversed(runs), "--json", table_json)
    assert proc.returncode == 0, proc.stderr
    assert "parallel efficiency %" in proc.stdout
    rows = json.loads(table_json.read_text())["scaling"]
    assert [r["world_size"] for r in rows] == [1, 2, 4]  # sorted by size
    assert [r["global_batch"] for r in rows] == [16, 32, 64]  # DataLoader batch 16 per rank
    assert [r["nodes"] for r in rows] == [1, 1, 1]
    for r in rows:
        assert r["samples_per_s"] == pytest.approx(r["global_batch"] / (r["step_us"] / 1e6), rel=1e-3)
        # speedup is rounded to 3 decimals in the table
        assert r["speedup"] == pytest.approx(
            r["samples_per_s"] / rows[0]["samples_per_s"], rel=1e-3, abs=5e-4
        )
        assert r["efficiency_pct"] == pytest.approx(100 * r["speedup"] / r["world_size"], abs=0.1)
    assert rows[0]["speedup"] == 1.0 and rows[0]["efficiency_pct"] == 100.0
    # More ranks than cores and an allreduce per step: the 4-rank run has communication in its step.
    assert rows[2]["communication_pct"] > 0
    md = cli("scaling", *runs, "--format", "markdown")
    assert md.returncode == 0 and "| nodes | world size |" in md.stdout
    # gpuprof check gates on the table.
    ok = cli("check", table_json, "--min", "parallel_efficiency_pct=1")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = cli("check", table_json, "--min", "parallel_efficiency_pct=101")
    assert bad.returncode == 1 and "FAIL  parallel_efficiency_pct (world size 2)" in bad.stdout
    # TFLOP/s per rank: each rank's FLOPs per step are its model's, Linear(64, 256) -> Linear(256, 4)
    # on a batch of 16: forward 2*16*64*256 + 2*16*256*4 = 557,056; backward: the first layer's
    # weight gradient (524,288; no input gradient for the data), the second's input and weight
    # gradients (2 x 32,768): 1,146,880 FLOPs per step on every rank.
    for run in runs:
        report = json.loads(run.read_text())
        assert report["flops"]["per_step_flops"] == 1_146_880
        assert all(isinstance(r["tflops_per_s"], float) and r["tflops_per_s"] > 0 for r in report["ranks"])
    assert all(r["tflops_per_rank"] > 0 for r in rows)
    assert "TFLOP/s per rank" in proc.stdout
    assert cli("check", table_json, "--min", "tflops_per_rank=1e-9").returncode == 0
