"""A folder of ranks is read by what its files are, never by counting files: a saved report and the
Chrome trace it wrote beside itself are one rank, a rank given by both a report and a trace counts
once (the report), and files that are neither are named and skipped (docs/distributed.md)."""

from __future__ import annotations

import json
import subprocess
import sys

from gpuprof._native import _core
from gpuprof.report.build import build_report
from gpuprof.traces.folders import rank_files


def _rank_trace(rank: int, world: int, extra_us: int = 0):
    """Three steps of 10 ms (+ extra on this rank) of an operator and a 2 ms gloo allreduce."""
    t = _core.Trace()
    for i in range(3):
        start = i * 20_000_000
        busy = 10_000_000 + extra_us * 1000
        t.add_event("step", f"ProfilerStep#{i}", start, busy + 2_000_000)
        t.add_event("host_op", "aten::mm", start + 1000, busy - 2000)
        t.add_event("host_op", "gloo:all_reduce", start + busy, 2_000_000)
    t.metadata = {"distributedInfo": json.dumps({"rank": rank, "world_size": world, "backend": "gloo"})}
    return t


def _analyze(folder, *extra):
    code = "import sys; from gpuprof.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, "analyze", str(folder), *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_reports_saved_with_their_traces_are_one_rank_each(tmp_path):
    # report.to_json("rankN.json") writes rankN.trace.json.gz beside it: 4 files, 2 ranks.
    for r in range(2):
        build_report(_rank_trace(r, 2, extra_us=8000 if r == 1 else 0)).to_json(tmp_path / f"rank{r}.json")
    assert len(list(tmp_path.iterdir())) == 4
    assert [p.name for p in rank_files(tmp_path)] == ["rank0.json", "rank1.json"]
    out = tmp_path / "job.json"
    proc = _analyze(tmp_path, "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    job = json.loads(out.read_text())
    assert [r["rank"] for r in job["ranks"]] == [0, 1] and job["cross_rank"]["world_size"] == 2
    assert job["cross_rank"]["note"] == "" and [s["rank"] for s in job["stragglers"]] == [1]


def test_a_rank_given_by_a_report_and_a_trace_counts_once(tmp_path):
    # Rank 0 as a saved report (no trace beside it) and as an exported trace; rank 1 as a trace.
    build_report(_rank_trace(0, 2)).to_json(tmp_path / "rank0.json", trace=False)
    _core.export_chrome_trace(_rank_trace(0, 2), str(tmp_path / "rank0.pt.trace.json.gz"))
    _core.export_chrome_trace(_rank_trace(1, 2), str(tmp_path / "rank1.pt.trace.json.gz"))
    out = tmp_path / "job.json"
    proc = _analyze(tmp_path, "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    job = json.loads(out.read_text())
    assert [r["rank"] for r in job["ranks"]] == [0, 1]
    assert job["cross_rank"]["note"] == (
        "traces of ranks also given by gpuprof reports were left out: rank0.pt.trace.json.gz"
    )


def test_one_process_run_folder_is_one_report_and_other_json_is_named(tmp_path):
    # What gpuprof run --out and gpuprof.save write: report.json, its trace.json.gz; and a config
    # file that is neither a trace nor a report.
    report = build_report(_rank_trace(0, 1))
    report.to_json(tmp_path / "report.json", trace=tmp_path / "trace.json.gz")
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    assert [p.name for p in rank_files(tmp_path)] == ["report.json"]
    proc = _analyze(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "skipped 1 file(s) that are neither a trace nor a gpuprof report" in proc.stderr
    assert "config.json" in proc.stderr and "Ranks" not in proc.stdout
    code = "import sys; from gpuprof.cli import main; sys.exit(main(sys.argv[1:]))"
    scaling = subprocess.run(
        [sys.executable, "-c", code, "scaling", str(tmp_path), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert scaling.returncode == 0, scaling.stderr
    assert json.loads(scaling.stdout)["scaling"][0]["world_size"] == 1


def test_a_trailing_trace_with_no_work_in_its_steps_is_named_and_left_out(tmp_path):
    # torch.profiler's schedule with tensorboard_trace_handler writes, after the last full cycle, a
    # trace of the next cycle's warm-up only: a step marker and nothing in it. Beside a real trace
    # it is named on stderr and left out, instead of a report of "1 steps, Other 100%".
    _core.export_chrome_trace(_rank_trace(0, 1), str(tmp_path / "w.1.pt.trace.json.gz"))
    idle = _core.Trace()
    idle.add_event("step", "ProfilerStep#12", 0, 128_000)
    _core.export_chrome_trace(idle, str(tmp_path / "w.2.pt.trace.json.gz"))
    out = tmp_path / "all.json"
    proc = _analyze(tmp_path, "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "left out" in proc.stderr and "w.2.pt.trace.json.gz" in proc.stderr
    (only,) = json.loads(out.read_text())
    assert only["source"]["path"].endswith("w.1.pt.trace.json.gz")
    # Alone, it is still shown as it is (there is nothing else to show).
    alone = tmp_path / "alone"
    alone.mkdir()
    (tmp_path / "w.2.pt.trace.json.gz").rename(alone / "w.2.pt.trace.json.gz")
    (alone / "w.3.pt.trace.json.gz").write_bytes((alone / "w.2.pt.trace.json.gz").read_bytes())
    proc = _analyze(alone)
    assert proc.returncode == 0 and "left out" not in proc.stderr


def test_the_api_and_the_cli_give_one_report_of_a_folder(tmp_path):
    # gpuprof.analyze(folder) is the report `gpuprof analyze folder` prints: for the ranks of a job
    # one cross-rank Report (it returned a list of per-file reports before), for other files one
    # report each; the same JSON, byte for byte.
    import gpuprof

    job = tmp_path / "job"
    job.mkdir()
    for r in range(2):
        build_report(_rank_trace(r, 2, extra_us=8000 if r == 1 else 0)).to_json(job / f"rank{r}.json")
    report = gpuprof.analyze(job)
    assert isinstance(report, gpuprof.Report)
    assert [r["rank"] for r in report.data["ranks"]] == [0, 1] and [
        s["rank"] for s in report.data["stragglers"]
    ] == [1]
    out = tmp_path / "job.json"
    assert _analyze(job, "--json", str(out)).returncode == 0
    assert out.read_text() == report.to_json() + "\n"

    runs = tmp_path / "runs"  # two one-process runs: a report each, in path order
    runs.mkdir()
    for i in range(2):
        build_report(_rank_trace(0, 1, extra_us=1000 * i)).to_json(runs / f"run{i}.json")
    reports = gpuprof.analyze(runs)
    assert [r.average["total_us"] for r in reports] == [12_000, 13_000]
    out = tmp_path / "runs.json"
    assert _analyze(runs, "--json", str(out)).returncode == 0
    assert json.loads(out.read_text()) == [json.loads(r.to_json()) for r in reports]


def test_each_rank_row_has_its_communication_table_and_distributed_info_is_an_object(tmp_path):
    # Rank 1's allreduce takes 3 ms a call (rank 0's 2 ms): each rank's row carries its own table,
    # as the plugin's distributed view has one per worker; distributedInfo is the object torch
    # wrote, in each rank's report and in the job's (the job report held it as JSON text).
    import gpuprof

    for r in range(2):
        t = _rank_trace(r, 2)
        if r == 1:
            t = _core.Trace()
            for i in range(3):
                start = i * 20_000_000
                t.add_event("step", f"ProfilerStep#{i}", start, 13_000_000)
                t.add_event("host_op", "aten::mm", start + 1000, 9_998_000)
                t.add_event("host_op", "gloo:all_reduce", start + 10_000_000, 3_000_000)
            t.metadata = {"distributedInfo": json.dumps({"rank": 1, "world_size": 2, "backend": "gloo"})}
        rank_report = build_report(t)
        assert rank_report.data["metadata"]["distributedInfo"] == {
            "rank": r,
            "world_size": 2,
            "backend": "gloo",
        }
        rank_report.to_json(tmp_path / f"rank{r}.json")
        (tmp_path / f"rank{r}.json").unlink()  # the traces only
    job = gpuprof.analyze(tmp_path)
    assert job.data["metadata"]["distributedInfo"] == {"rank": 0, "world_size": 2, "backend": "gloo"}
    table = {
        row["rank"]: [(c["name"], c["calls"], c["total_us"], c["mean_us"]) for c in row["collectives"]]
        for row in job.data["ranks"]
    }
    assert table == {0: [("all_reduce", 3, 6000.0, 2000.0)], 1: [("all_reduce", 3, 9000.0, 3000.0)]}
    assert set(job.data["ranks"][0]["collectives"][0]) == {
        "name",
        "process_group",
        "pg_desc",
        "group_size",
        "calls",
        "bytes",
        "total_us",
        "mean_us",
    }


def test_the_stored_ddp_trace_as_a_job_keeps_its_rank_table(shared_traces):
    import gpuprof

    folder = shared_traces / "hta_2xv100_ddp"
    alone = gpuprof.analyze(folder / "rank0.json.gz", with_step_views=False).data
    job = gpuprof.analyze(folder, ranks=True).data
    assert isinstance(alone["metadata"]["distributedInfo"], dict)
    assert job["metadata"]["distributedInfo"] == alone["metadata"]["distributedInfo"]
    (row,) = job["ranks"]
    keys = ("name", "process_group", "pg_desc", "group_size", "calls", "bytes", "total_us", "mean_us")
    assert row["collectives"] == [{k: c[k] for k in keys} for c in alone["collectives"]]
    assert row["collectives"] and all(c["calls"] > 0 for c in row["collectives"])
