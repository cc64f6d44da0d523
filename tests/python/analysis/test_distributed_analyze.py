"""`gpuprof analyze DIR` over the per-rank traces torch.profiler wrote in a real gloo DDP run: the same
ranks and straggler as the live cross-rank report of that run; the folder of gpuprof's own saved
per-rank reports; the same work on a dask.distributed LocalCluster."""

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
DELAY_MS = 60.0


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    res = subprocess.run(
        [
            sys.executable,
            str(JOB),
            str(out),
            "--world",
            "2",
            "--slow-rank",
            "1",
            "--delay-ms",
            str(DELAY_MS),
            "--torch-traces",
            str(out / "traces"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert (out / "rank0.json").exists(), res.stdout[-3000:] + res.stderr[-3000:]
    return out


def analyze(*args):
    return subprocess.run(
        [sys.executable, "-m", "gpuprof", "analyze", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_trace_folder_gives_the_live_ranks_and_straggler(run, tmp_path):
    live = json.loads((run / "rank0.json").read_text())
    out = tmp_path / "ranks.json"
    proc = analyze(run / "traces", "--json", out, "--workers", 2)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(out.read_text())
    assert [r["rank"] for r in got["ranks"]] == [r["rank"] for r in live["ranks"]] == [0, 1]
    assert got["cross_rank"]["matched_steps"] == live["cross_rank"]["matched_steps"] == 6
    (a,), (b,) = got["stragglers"], live["stragglers"]
    assert (a["rank"], a["category"]) == (b["rank"], b["category"]) == (1, "dataloader_us")
    # torch.profiler's own overhead is in the trace, the injected 60 ms in both.
    assert abs(a["excess_us"] - DELAY_MS * 1000) <= 0.25 * DELAY_MS * 1000
    assert "Ranks" in proc.stdout and "rank 1 is a straggler" in proc.stdout
    assert "straggler" in [x["rule"] for x in got["advice"]]


def test_folder_of_saved_reports_is_a_cross_rank_report(run, tmp_path):
    folder = tmp_path / "reports"
    folder.mkdir()
    for r in (0, 1):
        (folder / f"rank{r}.json").write_text((run / f"rank{r}.json").read_text())
    out = tmp_path / "x.json"
    proc = analyze(folder, "--json", out, "--workers", 1)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(out.read_text())
    live = json.loads((run / "rank0.json").read_text())
    assert [r["rank"] for r in got["ranks"]] == [0, 1]
    assert [(s["rank"], s["category"]) for s in got["stragglers"]] == [
        (s["rank"], s["category"]) for s in live["stragglers"]
    ]
    # The same numbers: the per-step rows are the ones the ranks recorded.
    assert got["ranks"][1]["busy_us"] == pytest.approx(live["ranks"][1]["busy_us"], rel=1e-6)


def test_dask_local_cluster_gives_the_same_report(run, tmp_path):
    distributed = pytest.importorskip("distributed", reason="python -m pip install distributed")
    from gpuprof.report.build import cross_rank_report
    from gpuprof.report.inputs import summarize_files
    from gpuprof.traces.folders import rank_files

    files = rank_files(run / "traces")
    local = cross_rank_report(summarize_files(files, workers=1)).to_dict()
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        remote = cross_rank_report(summarize_files(files, dask_address=cluster.scheduler_address)).to_dict()
    assert remote["ranks"] == local["ranks"] and remote["stragglers"] == local["stragglers"]


def test_more_files_than_workers_retire_after_still_all_read(run, tmp_path):
    # Workers are replaced after tasks_per_worker files (every file a whole task here, however
    # small: file_unit_bytes=1). With ProcessPoolExecutor's own
    # max_tasks_per_child this hung for ever on Python 3.11/3.12 once a worker retired with files
    # still queued (CPython gh-115634): 2 workers, 1 file each before retiring, 7 files.
    from gpuprof.report.build import cross_rank_report
    from gpuprof.report.inputs import summarize_files

    folder = tmp_path / "many"
    folder.mkdir()
    files = []
    for k in range(7):
        f = folder / f"rank{k}.json"
        f.write_text((run / f"rank{k % 2}.json").read_text())
        files.append(f)
    done = []
    results = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, json; from gpuprof.report.inputs import summarize_files; "
            "r = summarize_files(sys.argv[1:], workers=2, tasks_per_worker=1, file_unit_bytes=1); "
            "print(json.dumps([s['source'] for s, _ in r]))",
            *map(str, files),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert results.returncode == 0, results.stderr
    assert json.loads(results.stdout) == [str(f) for f in files]  # every file, in order
    # And in this process, with the progress callback called once per file.
    got = summarize_files(
        files, workers=2, tasks_per_worker=2, file_unit_bytes=1, on_done=lambda: done.append(1)
    )
    assert len(done) == 7 and all(s is not None for s, _ in got)
    assert len(cross_rank_report(got).to_dict()["ranks"]) == 7
