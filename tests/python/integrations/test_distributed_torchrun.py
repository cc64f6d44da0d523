"""Real DDP jobs (gloo) launched as users launch them, with torchrun, by both routes the docs show:
`torchrun ... -m gpuprof run --out OUT train.py` (no gpuprof code in the script) and the context
manager with `on_trace_ready=gpuprof.save(OUT)`. Each rank writes its own folder, rank 0 also the
job's cross-rank report, each rank prints only its own line and rank 0 the job's report, and
`gpuprof analyze OUT` / `gpuprof scaling OUT` read the folder as the ranks it holds (before, every
rank wrote the same OUT/report.json: one rank's report was lost and the survivor printed twice).
The script is tests/python/_torchrun_job.py."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

JOB = Path(__file__).resolve().parents[1] / "_torchrun_job.py"


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
    # Read back from the saved reports, the collectives split again into transfer and waiting.
    (again,) = [r for r in analyzed["collectives"] if r["name"] == "all_reduce"]
    (live,) = [r for r in job["collectives"] if r["name"] == "all_reduce"]
    assert (again["transfer_us"], again["wait_us"]) == (live["transfer_us"], live["wait_us"])
    scaling = json.loads(gpuprof("scaling", out, "--format", "json", cwd=cwd).stdout)["scaling"]
    assert [(row["world_size"], row["nodes"]) for row in scaling] == [(world, 1)]
    check_collectives(job, world, len(steps))
    return job


# The job's model: Linear(64, 256) and Linear(256, 4): 64 x 256 + 256 + 256 x 4 + 4 parameters.
PARAMETERS = 64 * 256 + 256 + 256 * 4 + 4


def check_collectives(job: dict, world: int, steps: int) -> None:
    """What the live hooks record of gloo's collectives (docs/metrics.md, "Collectives"): DDP's
    gradient all_reduce, one bucket a step, in the job's only process group, sized by its input."""
    (row,) = [r for r in job["collectives"] if r["name"] == "all_reduce"]
    assert (row["process_group"], row["pg_desc"], row["group_size"]) == ("0", "default_pg", world)
    assert row["group_ranks"] == str(list(range(world)))
    assert row["calls"] == steps and row["bytes"] == steps * PARAMETERS * 4
    assert row["timed_by"] == "host"  # gloo works on the CPU, on the group's own thread
    # The job's report splits the time into moving data and waiting, and they add up.
    assert row["transfer_us"] is not None and row["wait_us"] is not None
    assert row["transfer_us"] + row["wait_us"] == pytest.approx(row["total_us"], abs=0.01)
    # nccl-tests' bandwidths over the transfer time: all_reduce busbw = algbw x 2(n-1)/n.
    algbw = row["bytes"] / (row["transfer_us"] * 1000)
    assert row["algbw_gbps"] == pytest.approx(algbw, rel=1e-6)
    assert row["busbw_gbps"] == pytest.approx(algbw * 2 * (world - 1) / world, rel=1e-6)


def _find_all(text: str, sub: str) -> list:
    return [m.start() for m in re.finditer(re.escape(sub), text)]


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
        # Ranks share the pipe: rank 0's long report is written in several chunks, and another
        # rank's one-line write (atomic: under PIPE_BUF) can land between two of them, mid-line.
        head = f"gpuprof run: rank {r} of {world}: "
        lines = [p.stdout[i:].split("\n", 1)[0] for i in _find_all(p.stdout, head)]
        assert len(lines) == 1 and "steps 2..5, mean step" in lines[0], p.stdout
    for r in range(world):
        assert (
            p.stderr.count(
                f"gpuprof run: rank {r} of {world}: recorded steps 2..5; wrote out/rank{r}/report.json"
            )
            == 1
        )


def test_one_merged_timeline_of_every_rank_linked_from_the_job_report(tmp_path):
    world = 2
    torchrun(
        world, "-m", "gpuprof", "run", "-q", "--steps", "2:6", "--out", "out", JOB, "--steps", 8, cwd=tmp_path
    )
    out = tmp_path / "out"
    p = gpuprof("export", out, "--merged", cwd=tmp_path)
    merged_path = out / "merged.trace.json.gz"
    with gzip.open(merged_path, "rt") as f:
        merged = json.load(f)
    meta = merged["gpuprofMerged"]
    assert [r["rank"] for r in meta["ranks"]] == [0, 1]
    # Live traces of one host share its clock: not shifted.
    assert {r["aligned_by"] for r in meta["ranks"]} == {"host clock"} and all(
        r["offset_us"] == 0 for r in meta["ranks"]
    )
    assert "rank 1: out/rank1/trace.json.gz, shifted +0.000 ms" in p.stdout
    events = merged["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}  # one process per rank
    # Every event of each rank's own trace is there, on its process, at its own time.
    for r in range(world):
        with gzip.open(out / f"rank{r}" / "trace.json.gz", "rt") as f:
            # The merged timeline does not draw each rank's critical path (docs/metrics.md).
            own = [
                e
                for e in json.load(f)["traceEvents"]
                if e.get("ph") == "X" and e.get("cat") not in ("Trace", "gpuprof_critical_path")
            ]
        mine = [e for e in events if e.get("ph") == "X" and e["pid"] == r]
        assert sorted((e["name"], e["ts"]) for e in mine) == sorted((e["name"], e["ts"]) for e in own)
    # The collectives' ends on the merged clock lie as far apart as the export says (its skew).
    # Calls are paired in the order the ranks issued them (by start): gloo runs them on two
    # threads, so a call can end after the next one (one of 24 ms held up under load ended after
    # its 0.3 ms successor), and pairing the ends sorted would pair different calls.
    ends = {
        r: [
            e["ts"] + e["dur"]
            for e in sorted(events, key=lambda e: e.get("ts", 0))
            if e.get("pid") == r and e.get("name") == "gloo:all_reduce"
        ]
        for r in range(world)
    }
    assert len(ends[0]) == len(ends[1]) == 4
    skew = max(abs(a - b) for a, b in zip(ends[0], ends[1]))
    assert skew == pytest.approx(meta["ranks"][1]["skew_us"], abs=0.01)
    # The job's report links to it, from the top of the folder and from rank 0's copy.
    assert 'href="merged.trace.json.gz"' in (out / "report.html").read_text()
    assert 'href="../merged.trace.json.gz"' in (out / "rank0" / "report.html").read_text()
    # The folder still reads as its two ranks: the merged timeline is no rank's trace.
    gpuprof("analyze", out, "--json", tmp_path / "again.json", cwd=tmp_path)
    assert [r["rank"] for r in json.loads((tmp_path / "again.json").read_text())["ranks"]] == [0, 1]


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
