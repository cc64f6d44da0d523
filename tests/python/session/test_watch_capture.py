"""A watched run seen from outside (session/watch_folder.py): a capture of N steps (session/capture.py,
the ranks' side; `gpuprof capture`), the straggler flag read from the ranks' files together, and
`gpuprof top`; in one process driven step by step, and in a real 2-rank gloo job under torchrun,
one rank of which has more work per step, asked by other processes while it runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuprof._errors import UserError
from gpuprof.session import watch_folder as wf
from gpuprof.session.capture import REQUEST_FILE, parse_request
from gpuprof.session.watch import Watcher

JOB = Path(__file__).resolve().parents[1] / "_watched_job.py"


def _cli(*args, cwd, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "gpuprof.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )


def _request(out: Path, **fields) -> None:
    req = {"id": 1, "start": 10, "steps": 3, "t": time.time()}
    req.update(fields)
    (out / REQUEST_FILE).write_text(json.dumps(req))


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_requests_are_checked():
    good = {"id": 2, "start": 40, "steps": 5, "t": 1.0}
    assert parse_request(json.dumps(good))["start"] == 40
    for bad in ({**good, "steps": 0}, {**good, "id": 0}, {**good, "start": -1}, {"id": 1}, [1, 2]):
        assert parse_request(json.dumps(bad)) is None
    assert parse_request("{not json") is None


def test_start_step_leaves_every_rank_time_to_see_the_request():
    # Rank 1 wrote step 99 two seconds ago at 10 ms a step: it is near step 300 now. The margin is
    # MARGIN_S (5 s) of the fastest rank's steps: 500 steps of 10 ms.
    now = 1000.0
    steps = [{"step": i, "steps": 1, "step_ms": 10.0} for i in range(80, 100)]
    states = [
        {"step": 99, "t": now - 2.0, "steps": steps},
        {"step": 90, "t": now, "steps": [{**s, "step_ms": 20.0} for s in steps]},
    ]
    assert wf.estimated_step(states[0], now) == 100 + 200
    assert wf.start_step(states, now) == 300 + 500
    # Slow steps (2 s each): the margin is MIN_MARGIN_STEPS, not a fraction of a step.
    slow = [{"step": 99, "t": now, "steps": [{**s, "step_ms": 2000.0} for s in steps]}]
    assert wf.start_step(slow, now) == 100 + wf.MIN_MARGIN_STEPS


def _watched_loop(out: Path, steps: int, before=None):
    """A real torch loop watched in this process, its steps the loop's own w.step() calls;
    ``before(i, watcher)`` runs before step i."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    w = Watcher(str(out)).start()
    try:
        for i in range(steps):
            if before is not None:
                before(i, w)
            loss = model(torch.randn(4, 8)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            w.step()
            w.flush()  # the once-a-second write, every step here (the test does not wait seconds)
    finally:
        w.close()
    return w


def test_a_capture_records_the_asked_steps_and_watching_goes_on(tmp_path):
    out = tmp_path / "run"

    def before(i, w):
        if i == 3:
            _request(out, id=1, start=8, steps=3)

    w = _watched_loop(out, 20, before)
    lines = _lines(out / "rank0" / "watch.jsonl")
    captures = [line for line in lines if line["kind"] == "capture"]
    assert [c["state"] for c in captures] == ["armed", "done"]
    assert captures[1]["recorded"] == [8, 10]
    report = json.loads((out / "capture-1" / "report.json").read_text())
    assert [s["step"] for s in report["steps"]] == [8, 9, 10]
    assert report["operators"]  # the full profiler: operator rows
    assert (out / "capture-1" / "trace.json.gz").is_file()
    # Every step was watched, the captured ones too, and the log ends with the run.
    assert [line["step"] for line in lines if line["kind"] == "step"] == list(range(20))
    assert lines[-1] == {**lines[-1], "kind": "end", "steps": 20} and w.step_num == 20


def test_a_request_seen_too_late_is_missed_and_old_ones_are_ignored(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    _request(out, id=1, start=2, steps=3, t=time.time() - 3600)  # before the run started

    def before(i, w):
        if i == 5:
            _request(out, id=2, start=3, steps=3)  # step 3 is over
        if i == 8:
            _request(out, id=2, start=30, steps=3)  # the same id again: one capture per id

    _watched_loop(out, 12, before)
    captures = [line for line in _lines(out / "rank0" / "watch.jsonl") if line["kind"] == "capture"]
    assert [(c["id"], c["state"]) for c in captures] == [(2, "missed")]
    # Written during step 5, seen at its end: the rank was about to start step 6.
    assert "at step 6" in captures[0]["reason"]
    assert not (out / "capture-1").exists() and not (out / "capture-2").exists()


def test_the_run_ending_inside_a_capture_leaves_a_partial_report(tmp_path):
    out = tmp_path / "run"

    def before(i, w):
        if i == 1:
            _request(out, id=1, start=4, steps=50)

    _watched_loop(out, 8, before)
    captures = [line for line in _lines(out / "rank0" / "watch.jsonl") if line["kind"] == "capture"]
    assert [c["state"] for c in captures] == ["armed", "partial"]
    report = json.loads((out / "capture-1" / "report.json").read_text())
    assert [s["step"] for s in report["steps"]] == [4, 5, 6, 7]
    assert report["source"]["partial_span"] is True


def test_the_scripts_own_session_takes_over_from_a_capture(tmp_path):
    # The loop enters its own gpuprof.profile in the middle of the capture: no error in the loop;
    # the capture reports the steps it had recorded and says why it ended.
    import gpuprof

    out = tmp_path / "run"
    own = []

    def before(i, w):
        if i == 1:
            _request(out, id=1, start=4, steps=20)
        if i == 8:
            own.append(gpuprof.profile())
            own[0].start()

    _watched_loop(out, 12, before)
    own[0].stop()
    captures = [line for line in _lines(out / "rank0" / "watch.jsonl") if line["kind"] == "capture"]
    assert [c["state"] for c in captures] == ["armed", "partial"]
    assert "started its own gpuprof.profile at" in captures[1]["reason"]
    report = json.loads((out / "capture-1" / "report.json").read_text())
    assert [s["step"] for s in report["steps"]] == [4, 5, 6, 7]


def test_capture_answers_in_one_line_when_there_is_nothing_to_ask(tmp_path):
    r = _cli("capture", tmp_path / "nope", "--steps", "3", cwd=tmp_path)
    assert r.returncode == 2 and "no such folder" in r.stderr and len(r.stderr.splitlines()) == 1
    (tmp_path / "empty").mkdir()
    r = _cli("capture", tmp_path / "empty", cwd=tmp_path)
    assert r.returncode == 2 and "nothing is watching" in r.stderr and len(r.stderr.splitlines()) == 1
    with pytest.raises(UserError, match="from 1 to"):
        wf.request_capture(tmp_path / "empty", 0)


# ---- a real job ------------------------------------------------------------------------------------
def _wait_for(predicate, timeout_s: float, what: str, job=None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        if job is not None and job.poll() is not None:
            raise AssertionError(f"the job ended while waiting for {what}: {job.communicate()}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def watched_job(tmp_path_factory):
    """A 2-rank gloo job under torchrun and gpuprof run --watch, rank 1 burning 15 ms more CPU time
    a step, asked for a capture of 5 steps by `gpuprof capture` while it runs, shown by
    `gpuprof top --once`, then stopped. Yields (out, the capture's answer, the job's exit status,
    stdout and stderr, top's answer while it ran)."""
    pytest.importorskip("torch")
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    cwd = tmp_path_factory.mktemp("job")
    out, stop = cwd / "out", cwd / "stop"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    job = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
        + ["-m", "gpuprof.cli", "run", "--watch", "--out", str(out), str(JOB), str(stop)]
        + ["--spin-rank", "1", "--spin-ms", "15"],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:

        def both_ranks_stepping():
            states = wf.rank_states(out)
            return len(states) == 2 and all((s["step"] or 0) >= 30 for s in states) and states

        _wait_for(both_ranks_stepping, 240, "both ranks to pass step 30", job)
        asked = _cli("capture", out, "--steps", "5", "--json", "--timeout", "240", cwd=cwd)
        running = _cli("top", out, "--once", cwd=cwd)
    finally:
        stop.touch()
        try:
            stdout, stderr = job.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            job.kill()
            stdout, stderr = job.communicate()
    yield out, asked, (job.returncode, stdout, stderr), running


def test_a_capture_of_a_running_job_gives_every_rank_the_same_steps(watched_job, tmp_path):
    out, asked, (code, stdout, stderr), _top = watched_job
    assert asked.returncode == 0, asked.stdout + asked.stderr
    answer = json.loads(asked.stdout)
    first = answer["start"]
    assert sorted(answer["ranks"]) == ["0", "1"] and answer["complete"]
    assert "asked of ranks 0, 1" in asked.stderr  # the progress, on stderr
    folder = Path(answer["folder"])
    assert folder == out / f"capture-{answer['id']}"
    for r in range(2):
        own = json.loads((folder / f"rank{r}" / "report.json").read_text())
        assert [s["step"] for s in own["steps"]] == list(range(first, first + 5))
        assert own["distributed"]["rank"] == r
    job = json.loads((folder / "report.json").read_text())
    assert [row["rank"] for row in job["ranks"]] == [0, 1]
    assert job["cross_rank"]["missing_ranks"] == [] and job["cross_rank"]["matched_steps"] == 5
    analyzed = _cli("analyze", folder, "--json", tmp_path / "a.json", cwd=tmp_path)
    assert analyzed.returncode == 0, analyzed.stderr
    assert [row["rank"] for row in json.loads((tmp_path / "a.json").read_text())["ranks"]] == [0, 1]
    # The job's own output and exit status, unchanged; every rank ran on after the capture.
    assert code == 0, stderr[-3000:]
    counts = sorted(int(n) for n in re.findall(r"rank \d steps (\d+)", stdout))
    assert len(counts) == 2 and counts[0] == counts[1] > first + 5, stdout


def test_a_capture_of_a_finished_job_is_one_line(watched_job, tmp_path):
    out = watched_job[0]
    r = _cli("capture", out, "--steps", "3", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and "has ended" in r.stderr and "rank 1 at step" in r.stderr


def _own_medians(stdout: str) -> dict:
    """rank -> the median of its last 20 steps as the job's loop timed them."""
    # Two ranks print to one stream: their lines may run into each other.
    return {int(r): float(ms) for r, ms in re.findall(r"rank (\d) steps \d+ median_ms ([\d.]+)", stdout)}


def test_top_shows_every_rank_and_the_straggler(watched_job, tmp_path):
    out, _asked, (_code, stdout, _stderr), top = watched_job
    # While the job ran: one row per rank, both running, rank 1 flagged as the straggler on its CPU
    # time (it burns 15 ms more a step; the other waits for it in the all-reduce, asleep).
    assert top.returncode == 0, top.stderr
    rows = [line.split() for line in top.stdout.splitlines()[2:4]]
    assert [(r[0], r[2]) for r in rows] == [("0", "running"), ("1", "running")]
    # (slow_steps may hold too: a loaded machine slows the steps against their baseline.)
    assert "straggler" not in rows[0][-1] and "straggler" in rows[1][-1]
    assert "rank 1: rank 1's CPU time is" in top.stdout
    assert "GPU" not in top.stdout  # no GPU readings: no GPU columns
    # The finished job's folder: step times as the loop itself timed its last 20 steps (within 20%).
    shown = _cli("top", out, "--json", cwd=tmp_path)
    ranks = json.loads(shown.stdout)["ranks"]
    own = _own_medians(stdout)
    assert [r["rank"] for r in ranks] == [0, 1] and sorted(own) == [0, 1]
    for r in ranks:
        assert r["state"] == "ended"
        assert abs(r["step_time_median_ms"] - own[r["rank"]]) <= 0.2 * own[r["rank"]], (r, own)
        assert 0.0 <= r["dataloader_wait_pct"] < 50.0 and r["rss_bytes"] > 0
    assert "straggler" in ranks[1]["flags"] and "straggler" not in ranks[0]["flags"]


def _state(rank: int, field_values: dict, steps=range(100, 130)) -> dict:
    lines = []
    for i, n in enumerate(steps):
        line = {
            "step": n,
            "steps": 1,
            "step_ms": 30.0 + (i % 3) * 0.2,
            "dataloader_wait_ms": 0.3,
            "cpu_ms": 2.0,
        }
        line.update({k: v(i) if callable(v) else v for k, v in field_values.items()})
        lines.append(line)
    return {"rank": rank, "steps": lines, "flags": {}}


def test_the_straggler_rule_on_the_ranks_files():
    # Three ranks, 30 steps each written one by one. Rank 2 spends 12 ms more CPU time a step (the
    # others 2.0-2.4 ms, their noise about 0.3 ms; the rule's floor is 1 ms, 10% of 2 ms and 5% of
    # the 30 ms step): named, on its CPU time. A rank 0.5 ms over the others is within the floor.
    noisy = lambda i: 2.0 + (i % 5) * 0.1  # noqa: E731
    states = [_state(0, {"cpu_ms": noisy}), _state(1, {"cpu_ms": noisy}), _state(2, {"cpu_ms": 14.0})]
    flags = wf.straggler_flags(states)
    assert list(flags) == [2] and flags[2]["what"] == "CPU time"
    assert flags[2]["excess_ms"] == pytest.approx(11.8, abs=0.2) and flags[2]["matched_steps"] == 30
    states[2] = _state(2, {"cpu_ms": lambda i: noisy(i) + 0.5})
    assert wf.straggler_flags(states) == {}
    # A rank whose batches come late (its DataLoader wait) is named on that.
    states[2] = _state(2, {"dataloader_wait_ms": 9.0})
    assert wf.straggler_flags(states)[2]["what"] == "DataLoader wait"
    # On a GPU the CPU time is not compared (a rank waiting for its GPU may spin).
    gpu = [_state(r, {"cpu_ms": 14.0 if r == 2 else noisy, "gpu_peak_allocated_bytes": 1}) for r in range(3)]
    assert wf.straggler_flags(gpu) == {}
    # Only the steps every rank wrote are compared; one rank: nothing to compare.
    states[1] = _state(1, {}, steps=range(0, 30))
    assert wf.straggler_flags(states) == {} and wf.straggler_flags(states[:1]) == {}


LOOP = """
import os, time, torch
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(100000):
    time.sleep(0.01)
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
print("steps", i + 1)
"""


def test_sigterm_inside_a_capture_leaves_a_partial_report(tmp_path):
    # The capture is asked by the watched process's PID (the run registered it).
    pytest.importorskip("torch")
    (tmp_path / "train.py").write_text(LOOP)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env["GPUPROF_CACHE_DIR"] = str(tmp_path / "cache")
    job = subprocess.Popen(
        [sys.executable, "-m", "gpuprof.cli", "run", "--watch", "--out", "run", "train.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    asker = None
    try:
        out = tmp_path / "run"
        _wait_for(lambda: wf.rank_states(out), 120, "the first step lines", job)
        pid = str(wf.rank_states(out)[0]["pid"])
        asker = subprocess.Popen(
            [sys.executable, "-m", "gpuprof.cli", "capture", pid, "--steps", "1000", "--json"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

        def recording():
            (s,) = wf.rank_states(out)
            armed = s["captures"].get(1)
            return armed and s["step"] >= armed["start"] + 3 and armed["start"]

        start = _wait_for(recording, 120, "the capture's first steps", job)
        job.send_signal(15)
        job.communicate(timeout=120)
        answer, err = asker.communicate(timeout=120)
    finally:
        for p in (job, asker):
            if p is not None and p.poll() is None:
                p.kill()
                p.communicate()
    assert job.returncode == -15  # the signal's own ending, as without gpuprof
    assert asker.returncode == 1, err
    got = json.loads(answer)["ranks"]["0"]
    assert got["state"] == "partial" and "inside the steps" in got["reason"]
    report = json.loads((out / "capture-1" / "report.json").read_text())
    numbers = [s["step"] for s in report["steps"]]
    assert numbers[0] == start and numbers == list(range(start, start + len(numbers))) and len(numbers) >= 3
    assert report["source"]["partial_span"] is True


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to give a folder away"
)
def test_another_users_run_folder_is_refused(tmp_path):
    out = tmp_path / "run"
    (out / "rank0").mkdir(parents=True)
    os.chown(out, 54321, 54321)
    with pytest.raises(UserError, match="belongs to another user"):
        wf.request_capture(out, 3)
    assert not (out / REQUEST_FILE).exists()


def test_a_watched_run_is_found_by_its_pid_and_its_slurm_job(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPROF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    out = tmp_path / "run"
    w = Watcher(str(out)).start()
    w.step()
    w.flush()
    assert wf.resolve_target("4242") == out.resolve()
    assert wf.resolve_target(str(os.getpid())) == out.resolve()
    assert wf.resolve_target(str(out)) == out  # a folder is a folder
    w.close()
    # The PID's name goes with the process; the job's stays and leads to its ended folder.
    with pytest.raises(UserError, match="no watched run is known by that SLURM job id or PID"):
        wf.resolve_target(str(os.getpid()))
    assert wf.resolve_target("4242") == out.resolve()
    with pytest.raises(UserError, match="has ended"):
        wf.request_capture(wf.resolve_target("4242"), 3)
