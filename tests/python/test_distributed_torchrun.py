"""Real DDP jobs (gloo) launched as users launch them, with torchrun, by both routes the docs show:
`torchrun ... -m gpuprof run --out OUT train.py` (no gpuprof code in the script) and the context
manager with `on_trace_ready=gpuprof.save(OUT)`. Each rank writes its own folder, rank 0 also the
job's cross-rank report, each rank prints only its own line and rank 0 the job's report, and
`gpuprof analyze OUT` / `gpuprof scaling OUT` read the folder as the ranks it holds (before, every
rank wrote the same OUT/report.json: one rank's report was lost and the survivor printed twice).
The script is tests/python/_torchrun_job.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

JOB = Path(__file__).with_name("_torchrun_job.py")


def torchrun(world: int, *args, cwd: Path, timeout: int = 400) -> subprocess.CompletedProcess:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={world}",
            *map(str, args),
        ],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def gpuprof(*args, cwd: Path) -> subprocess.CompletedProcess:
    p = subprocess.run(
        [sys.executable, "-m", "gpuprof.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def check_job_folder(
    out: Path, world: int, steps: list[int], cwd: Path, files=("report.json", "trace.json.gz")
):
    for r in range(world):
        for name in files:
            assert (out / f"rank{r}" / name).is_file(), f"rank{r}/{name}"
        own = json.loads((out / f"rank{r}" / "report.json").read_text())
        assert own["distributed"]["rank"] == r and own["distributed"]["world_size"] == world
        assert [s["step"] for s in own["steps"]] == steps
    assert not (out / "trace.json.gz").exists()  # each trace is in its rank's folder
    job = json.loads((out / "report.json").read_text())
    assert [row["rank"] for row in job["ranks"]] == list(range(world))
    assert job["cross_rank"]["missing_ranks"] == [] and job["cross_rank"]["matched_steps"] == len(steps)
    assert Path(job["source"]["trace_path"]).name == "trace.json.gz"
    assert Path(job["source"]["trace_path"]).parent.name == "rank0"
    # The folder read back: every rank once (rank 0's two copies are one rank, each report's own
    # trace is its report), no renumbering, no missing rank.
    gpuprof("analyze", out, "--json", cwd / "analyzed.json", cwd=cwd)
    analyzed = json.loads((cwd / "analyzed.json").read_text())
    assert [row["rank"] for row in analyzed["ranks"]] == list(range(world))
    assert analyzed["cross_rank"]["missing_ranks"] == [] and analyzed["cross_rank"]["note"] == ""
    assert analyzed["cross_rank"]["world_size"] == world
    scaling = json.loads(gpuprof("scaling", out, "--format", "json", cwd=cwd).stdout)["scaling"]
    assert [(row["world_size"], row["nodes"]) for row in scaling] == [(world, 1)]
    return job


@pytest.mark.parametrize("world", [2, 4])
def test_gpuprof_run_under_torchrun_writes_a_folder_per_rank_and_the_job_report(tmp_path, world):
    p = torchrun(
        world, "-m", "gpuprof", "run", "--steps", "2:6", "--out", "out", JOB, "--steps", 8, cwd=tmp_path
    )
    check_job_folder(
        tmp_path / "out", world, [2, 3, 4, 5], tmp_path, files=("report.json", "report.html", "trace.json.gz")
    )
    assert (tmp_path / "out" / "report.html").is_file()
    # One terminal for every rank: rank 0 prints the job's report once, each other rank one line.
    assert p.stdout.count("gpuprof step breakdown") == 1
    assert p.stdout.count(f"{world} of {world} ranks") == 1
    for r in range(1, world):
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith(f"gpuprof run: rank {r} of {world}: ")]
        assert len(lines) == 1 and "steps 2..5, mean step" in lines[0], p.stdout
    for r in range(world):
        assert (
            p.stderr.count(
                f"gpuprof run: rank {r} of {world}: recorded steps 2..5; wrote out/rank{r}/report.json"
            )
            == 1
        )


@pytest.mark.parametrize("world", [2, 4])
def test_the_context_manager_under_torchrun_saves_each_rank_and_the_job_report(tmp_path, world):
    torchrun(world, JOB, "--steps", 8, "--context", "out", cwd=tmp_path)
    # gpuprof.save(OUT) puts span N of every rank under OUT/span_N: one job's span per folder.
    check_job_folder(tmp_path / "out" / "span_000", world, [2, 3, 4, 5, 6, 7], tmp_path)


@pytest.mark.parametrize(
    "env,expected",
    [
        (
            {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"},
            (3, 4, "torchrun"),
        ),
        ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8"}, (5, 8, "mpirun (Open MPI)")),
        ({"PMI_RANK": "2", "PMI_SIZE": "3"}, (2, 3, "mpirun (MPICH, Intel MPI)")),
        ({"SLURM_PROCID": "7", "SLURM_NTASKS": "16"}, (7, 16, "srun")),
        ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, (1, 2, "LOCAL_RANK")),
        ({"RANK": "4", "WORLD_SIZE": "4"}, (0, 1, "")),  # not a rank of that world: ignored
        ({}, (0, 1, "")),
    ],
)
def test_the_rank_comes_from_the_launcher_before_the_process_group_is_up(env, expected):
    # torchrun's variables win over the srun that started torchrun; no process group here, so the
    # launcher's variables are all there is.
    from gpuprof.collect.exchange import job_rank

    assert job_rank(env) == expected
