"""Real multi-process DDP jobs on the CPU (gloo) under gpuprof.profile, no code change for the
cross-rank report: rank 0's report holds every rank, names the straggler a real sleep made, and names
a rank that left. The job is tests/python/_ddp_job.py."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

JOB = Path(__file__).resolve().parents[1] / "_ddp_job.py"
DELAY_MS = 60.0


def run_job(out: Path, *args, timeout=150) -> list[dict]:
    res = subprocess.run(
        [sys.executable, str(JOB), str(out), *map(str, args)], capture_output=True, text=True, timeout=timeout
    )
    reports = {int(p.stem[4:]): json.loads(p.read_text()) for p in out.glob("rank*.json")}
    assert 0 in reports, res.stdout[-3000:] + res.stderr[-3000:]
    return reports


@pytest.mark.parametrize(
    "world,slow,where,category",
    [
        (4, 2, "dataset", "dataloader_us"),
        (2, 1, "forward", "cpu_exec_us"),  # DDP's forward is a recorded range: the sleep is inside it
    ],
)
def test_the_slow_rank_is_named_with_its_category_and_delay(tmp_path, world, slow, where, category):
    reports = run_job(
        tmp_path, "--world", world, "--slow-rank", slow, "--delay-ms", DELAY_MS, "--where", where
    )
    r0 = reports[0]
    assert [r["rank"] for r in r0["ranks"]] == list(range(world))
    assert r0["cross_rank"]["missing_ranks"] == [] and r0["cross_rank"]["matched_steps"] == 6
    assert all(r["world_size"] == world and r["steps"] == 6 for r in r0["ranks"])
    top = r0["stragglers"][0]
    assert (top["rank"], top["category"]) == (slow, category)
    assert abs(top["excess_us"] - DELAY_MS * 1000) <= 0.25 * DELAY_MS * 1000, top
    # The others wait for it inside the allreduce; the advice blames the rank, not the communication.
    waits = {r["rank"]: r["collective_wait_us"] for r in r0["ranks"]}
    assert all(waits[r] > waits[slow] for r in waits if r != slow)
    rules = [a["rule"] for a in r0["advice"]]
    assert "straggler" in rules and "communication" not in rules
    # Every other rank keeps its own report, with its own row; it says it is one rank of the job and
    # draws no cross-rank conclusion (no missing ranks, no straggler) from its own row alone.
    for r in range(1, world):
        assert [row["rank"] for row in reports[r]["ranks"]] == [r]
        cr = reports[r]["cross_rank"]
        assert cr["missing_ranks"] == [] and reports[r]["stragglers"] == []
        assert cr["note"].startswith(f"this is rank {r} of a {world}-rank job: rank 0's report holds")
        assert "straggler" not in [a["rule"] for a in reports[r]["advice"]]


def test_a_clean_run_names_no_straggler(tmp_path):
    r0 = run_job(tmp_path, "--world", 2)[0]
    assert len(r0["ranks"]) == 2 and r0["stragglers"] == []
    assert r0["distributed"]["world_size"] == 2 and r0["distributed"]["batch_size"] == 16


def test_a_rank_that_raises_is_named_missing_and_nobody_hangs(tmp_path):
    t0 = time.monotonic()
    reports = run_job(tmp_path, "--world", 3, "--raise-rank", 1, "--timeout", 8)
    assert time.monotonic() - t0 < 100  # the job ends: timeout 8 s, not torch's 30 minutes
    r0 = reports[0]
    assert r0["cross_rank"]["missing_ranks"] == [1]
    assert "rank 1 did not report" in r0["cross_rank"]["note"]
    assert [r["rank"] for r in r0["ranks"]] == [0, 2]
