"""The demo's headline is what it measured: a speed-up is claimed only when every round of one
setting beat every round of the other."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from gpuprof.demo import compare, demo_threads, median, pipeline_lines
from gpuprof.report.model import Report


def test_median():
    assert median([3.0, 1.0, 2.0]) == 2.0 and median([4.0, 1.0, 2.0, 3.0]) == 2.5


def test_a_clear_speed_up_is_claimed():
    r = compare([43.0, 44.1, 42.7], [34.3, 35.0, 33.9])
    assert r["verdict"] == "faster" and "1.25x faster" in r["text"] and "43.0 ms" in r["text"]


def test_overlapping_rounds_are_noise_not_a_speed_up():
    # The runs on a loaded machine: one round each way says 11.73x, the next 0.07x.
    r = compare([486.5, 40.1, 34.3], [41.5, 597.8, 42.8])
    assert r["verdict"] == "noise" and "within noise" in r["text"] and "faster" not in r["text"]
    # One outlier round of the old setting does not make a speed-up either.
    assert compare([40.0, 41.0, 300.0], [39.0, 40.5, 41.5])["verdict"] == "noise"


def test_one_round_claims_nothing():
    r = compare([486.5], [41.5])
    assert r["verdict"] == "noise" and "too few" in r["text"]


def test_slower_is_said():
    r = compare([34.3, 34.9], [42.8, 44.0])
    assert r["verdict"] == "slower" and "slower" in r["text"]


def test_threads_leave_cpus_to_the_workers():
    assert demo_threads("cpu", 2) == 1 and demo_threads("cpu", 16) == 4 and demo_threads("cpu", 1) == 1
    assert demo_threads("cuda", 2) == 0


def _stats(mean_ms):
    return {"mean": mean_ms * 1000.0, "std": 0.0, "p50": mean_ms * 1000.0, "p95": 0, "max": 0, "count": 4}


def test_the_pipeline_lines_say_which_stage_dominates_and_what_the_law_gives():
    ip = {
        "process": "main",
        "stage": "fetch",
        "fetch_us": _stats(30.0),
        "transform_us": _stats(8.0),
        "collate_us": _stats(2.0),
        "batch_us": _stats(40.0),
        "recommended_num_workers": 1,
        "law": {
            "t_batch_us": 40_000.0,
            "t_step_us": 15_000.0,
            "workers_needed": 3,
            "cpu_limit": 1,
            "cpu_budget": 2.0,
            "training_cpus": 1.1,
            "worker_cpu_share": 0.95,
        },
    }
    first, law = pipeline_lines(Report({"steps": [], "average": {}, "input_pipeline": ip}))
    assert first == (
        "Input pipeline: a batch takes 40.0 ms to make in the training process: decode 30.0 ms (75%), "
        "transform 8.0 ms (20%), collate 2.0 ms (5%); decoding the PNG dominates"
    )
    assert law == (
        "Little's law: T_batch 40.0 ms / T_step 15.0 ms (the step's own work) -> N = 3 workers keep up; "
        "2 CPUs less 1.1 for training fit 1 at 95% of a CPU each: num_workers=1"
    )
    assert pipeline_lines(Report({"steps": [], "average": {}})) == []


def test_demo_runs_and_its_claim_matches_its_rounds(tmp_path):
    pytest.importorskip("torch")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuprof.demo",
            "--dir",
            str(tmp_path),
            "--steps",
            "3",
            "--rounds",
            "2",
            "--images-per-class",
            "16",
            "--batch-size",
            "16",
        ],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    # Run 1's input pipeline: the stage that dominates, and the law's count beside the effect.
    assert "Input pipeline: a batch takes" in p.stdout and "dominates" in p.stdout
    assert "decode" in p.stdout and "transform" in p.stdout  # its PNG data set: decode vs transform
    assert re.search(r"Little's law: T_batch .* -> N = \d+ workers? keeps? up", p.stdout)
    assert re.search(r"Little's law asked for \d+ workers?.*the loop's wait went from", p.stdout)
    rounds = [
        tuple(float(x) for x in re.findall(r"([\d.]+) ms", line))
        for line in p.stdout.splitlines()
        if line.startswith("round ")
    ]
    assert len(rounds) == 2
    before, after = [r[0] for r in rounds], [r[1] for r in rounds]
    # round 1's baseline is run 1 itself; the claim follows from the printed rounds, whatever the load
    verdict = compare(before, after)["verdict"]
    line = next(x for x in p.stdout.splitlines() if "median step time" in x)
    if verdict == "faster":
        assert "faster, every one of the rounds" in line
    else:
        assert "faster" not in line
