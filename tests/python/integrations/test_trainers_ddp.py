"""The Hugging Face and Lightning adapters under real 2-rank DDP (gloo on the CPU), launched with
torchrun as their users launch them, with gradient accumulation: each rank writes its own folder,
rank 0 one cross-rank report, and the steps gpuprof records are the trainer's optimizer steps (one
optimizer.step() per recorded step, two micro-batches each, one DDP gradient all-reduce per step
where the trainer skips the sync of the first micro-batch). The script is
tests/python/frameworks/trainers_ddp.py."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

SCRIPT = (Path(__file__).resolve().parents[1] / "frameworks") / "trainers_ddp.py"
WORLD, STEPS, ACCUMULATION, RECORDED = 2, 6, 2, [2, 3, 4]  # the script's schedule: wait 1, warm up 1, 3


def _needs(*modules):
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(
        bool(missing), reason=f"{', '.join(missing)} not installed (pip install -r .ci/requirements.txt)"
    )


@pytest.mark.parametrize(
    "kind,forward",
    [
        pytest.param("hf", "DistributedDataParallel.forward", marks=_needs("transformers", "accelerate")),
        pytest.param("lightning", "DistributedDataParallel.forward", marks=_needs("lightning")),
    ],
)
def test_a_trainer_under_ddp_writes_each_rank_and_one_cross_rank_report(tmp_path, kind, forward):
    out = tmp_path / "out"
    out.mkdir()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={WORLD}",
            SCRIPT,
            kind,
            out,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    for r in range(WORLD):
        ran = json.loads((out / f"steps-rank{r}.json").read_text())
        # The trainer's optimizer steps, and the optimizer.step() calls that ran: the same 6.
        assert ran == {"trainer_steps": STEPS, "optimizer_steps": STEPS}
        for name in ("report.json", "report.html", "report.trace.json.gz"):
            assert (out / f"rank{r}" / name).is_file(), f"rank{r}/{name}"
        own = json.loads((out / f"rank{r}" / "report.json").read_text())
        assert own["distributed"]["rank"] == r and own["distributed"]["world_size"] == WORLD
        # gpuprof's steps are optimizer steps: 2, 3 and 4 of the trainer's 0..5, each holding one
        # optimizer.step() and two micro-batches' forwards.
        assert [s["step"] for s in own["steps"]] == RECORDED
        ranges = {row["name"]: row["calls"] for row in own["ranges"]}
        (opt_step,) = [n for n in ranges if n.startswith("Optimizer.step#")]
        assert ranges[opt_step] == len(RECORDED)
        assert ranges[forward] == len(RECORDED) * ACCUMULATION
        (reduce,) = [row for row in own["collectives"] if row["name"] == "all_reduce"]
        assert (reduce["process_group"], reduce["group_size"], reduce["group_ranks"]) == (
            "0",
            WORLD,
            "[0, 1]",
        )
        if kind == "lightning":  # DDP's no_sync on the first micro-batch: one gradient all-reduce a step
            assert reduce["calls"] == len(RECORDED)
    job = json.loads((out / "report.json").read_text())
    assert [row["rank"] for row in job["ranks"]] == list(range(WORLD))
    assert job["cross_rank"]["missing_ranks"] == [] and job["cross_rank"]["matched_steps"] == len(RECORDED)
    (reduce,) = [row for row in job["collectives"] if row["name"] == "all_reduce"]
    assert reduce["transfer_us"] is not None and reduce["wait_us"] is not None
    # Read back from the folder: the same two ranks, once each.
    subprocess.run(
        [sys.executable, "-m", "gpuprof.cli", "analyze", out, "--json", tmp_path / "a.json"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert [row["rank"] for row in json.loads((tmp_path / "a.json").read_text())["ranks"]] == [0, 1]


@_needs("transformers", "accelerate")
def test_the_hf_callback_watching_under_ddp_writes_every_rank_one_line_per_optimizer_step(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={WORLD}",
            SCRIPT,
            "hf-watch",
            out,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    for r in range(WORLD):
        ran = json.loads((out / f"steps-rank{r}.json").read_text())
        assert ran == {"trainer_steps": STEPS, "optimizer_steps": STEPS}
        lines = [json.loads(line) for line in (out / f"rank{r}" / "watch.jsonl").read_text().splitlines()]
        # Each rank its own file, knowing its rank in the gloo group; watching only: no report.
        assert (lines[0]["kind"], lines[0]["rank"], lines[0]["world"]) == ("start", r, WORLD)
        assert lines[-1]["kind"] == "end" and lines[-1]["steps"] == STEPS
        steps = [line for line in lines if line["kind"] == "step"]
        # One line per optimizer step (two micro-batches of 4 samples each), numbered 0..5.
        assert [s["step"] for s in steps] == list(range(STEPS)) and all(s["steps"] == 1 for s in steps)
        assert all(s["step_ms"] > 0 and s["cpu_ms"] > 0 for s in steps)
        assert sum(s["samples"] for s in steps) == STEPS * ACCUMULATION * 4
        assert not (out / f"rank{r}" / "report.json").exists()
