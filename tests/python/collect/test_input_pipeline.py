"""The input pipeline seen from inside the DataLoader (docs/metrics.md, "Input pipeline"): real
DataLoaders with known costs slept in __getitem__, in a transform attribute and in the collate
function, under fork, spawn and forkserver, with 0 to 4 workers, persistent or not. Each stage
measured must be within 20% of what was injected; the worker count must be Little's law's from the
injected costs; a worker that raises or dies is reported while the user gets torch's own error;
workers do none of gpuprof's work while no span records.

What "injected" means on this shared 2-CPU machine: a 6 ms sleep takes 6.1 ms when the CPUs are
free and up to a third more while other builds hold them. So each batch's stages are compared with
what the injected code itself timed for that batch (within 20%), and the report's typical batch
with the nominal costs (never below them, at most 50% above). The training loop is a sleep too (a
model's step here varies 100-fold with the other processes' load).
"""

import contextlib
import json
import math
import os
import threading
import time

import pytest
from _pipeline_data import Burn, GcCollate, Injected, Probe, SleepCollate, Stream

torch = pytest.importorskip("torch")
import gpuprof  # noqa: E402
from gpuprof.collect import input_records as pipeline_module  # noqa: E402
from gpuprof.collect.dataloader import DataLoaderCapture  # noqa: E402

BATCH = 2
LOAD_S, TRANSFORM_S, COLLATE_S = 0.010, 0.006, 0.008  # per sample, per sample, per batch
STEP_S = 0.012
# Per batch: 20 ms loading, 12 ms transforming, 8 ms collating: T_batch = 40 ms; T_step = 12 ms.
INJECTED_US = {
    "fetch": BATCH * LOAD_S * 1e6,
    "transform": BATCH * TRANSFORM_S * 1e6,
    "collate": COLLATE_S * 1e6,
}
LAW = math.ceil(sum(INJECTED_US.values()) / (STEP_S * 1e6))  # 4


@pytest.fixture
def recorded(monkeypatch):
    """What each span collected inside the DataLoader (its per-batch records), as the session hands
    it to the report builder."""
    kept = []
    original = DataLoaderCapture.pipeline_records

    def keep(self):
        out = original(self)
        kept.append(out)
        return out

    monkeypatch.setattr(DataLoaderCapture, "pipeline_records", keep)
    return kept


def profile(loader, *, steps=8, step_s=STEP_S, on_batch=None, truth=None, after=0):
    """Profile `steps` recorded steps (after 1 idle and 1 warm-up step) of a loop that sleeps
    `step_s` per batch (epochs follow one another as needed), and `after` more steps unrecorded;
    returns the session. `truth` gets each sample's injected costs as the dataset timed them:
    index -> (load_s, transform_s, collate_s)."""
    prof = gpuprof.profile(schedule=gpuprof.schedule(wait=1, warmup=1, active=steps, repeat=1))
    total, done = steps + 2 + after, 0
    with prof:
        while done < total:
            for x in loader:
                if on_batch is not None:
                    on_batch(x, prof)
                if truth is not None:
                    for row in x.tolist():
                        truth[int(row[0])] = tuple(row[1:])
                time.sleep(step_s)
                prof.step()
                done += 1
                if done >= total:
                    break
    return prof


def within(measured: float, injected: float, rel: float = 0.2) -> bool:
    return abs(measured - injected) <= rel * injected


def check_stages(ip: dict, loader_records: dict, truth: dict) -> None:
    """Every measured batch that the loop took: each stage within 20% of what its injected code took
    (the batch's samples are named by their indices, the slowest kept of each batch: all of a
    2-sample batch), above it by no more than 20% plus the batch's measured CPU wait (the time its
    process was ready but other processes held the CPUs, which stretches the code around the
    sleeps); the report's typical batch against the nominal costs: never below them, and at most
    twice them (a sleep here takes up to half again as long as asked while builds run beside)."""
    matched = 0
    for b in loader_records["batches"]:
        idx = [i for _, i in b["slowest"]]
        if len(idx) != BATCH or any(i not in truth for i in idx):
            continue  # made ahead, not taken while recording
        injected = {
            "load_ns": sum(truth[i][0] for i in idx) * 1e9,
            "transform_ns": sum(truth[i][1] for i in idx) * 1e9,
            "collate_ns": truth[idx[0]][2] * 1e9,
        }
        for key, ns in injected.items():
            got = f"batch {idx}: {key} {b[key]:.0f} ns (CPU wait {b['runq_ns']}, GC {b['gc_ns']})"
            got += f", injected took {ns:.0f}"
            # (a collector's pause is taken out of the stage; it may have fallen inside the
            # injected code's own timing, so it counts toward the lower bound only)
            assert 0.8 * ns <= b[key] + b["gc_ns"] and b[key] <= 1.2 * ns + max(b["runq_ns"], 0), got
        matched += 1
    assert matched >= 2
    for stage, nominal in INJECTED_US.items():
        s = ip[f"{stage}_us"]
        assert s is not None, f"{stage} not measured"
        assert 0.95 * nominal <= s["p50"] <= 2 * nominal, f"{stage}: {s['p50']:.0f} us, nominal {nominal:.0f}"


@pytest.mark.parametrize(
    "context,workers,persistent",
    [
        ("fork", 0, False),
        ("fork", 1, False),
        ("fork", 2, True),
        ("fork", 4, False),
        ("spawn", 2, False),
        ("spawn", 1, True),
        ("forkserver", 2, True),
    ],
)
def test_each_stage_is_measured_as_injected(context, workers, persistent, recorded):
    loader = torch.utils.data.DataLoader(
        Injected(LOAD_S, TRANSFORM_S),
        batch_size=BATCH,
        num_workers=workers,
        collate_fn=SleepCollate(COLLATE_S),
        persistent_workers=persistent,
        multiprocessing_context=context if workers else None,
    )
    truth: dict = {}
    # (8 steps more take the batches the workers made during the span, which ran ahead of the loop.)
    report = profile(loader, truth=truth, after=8).report()
    ip = report.data["input_pipeline"]
    (loader_records,) = recorded[-1]["loaders"]
    check_stages(ip, loader_records, truth)
    assert ip["num_workers"] == workers and ip["batches"] >= 2
    # Who made the batches: each worker (by its process id), or the training process.
    ids = sorted(w["worker"] for w in ip["workers"] if w["batches"])
    if workers:
        assert set(ids) <= set(range(workers)) and ids and all(w["pid"] != os.getpid() for w in ip["workers"])
        assert ip["process"] == "workers" and ip["queue_empty_pct"] is not None
        assert ip["idle_us"] is not None  # a worker's time between its batches
    else:
        assert ids == [-1] and ip["workers"][0]["pid"] == os.getpid() and ip["process"] == "main"
        assert ip["queue_empty_pct"] is None  # no queue to look at
    assert 0 < ip["worker_busy_pct"] <= 100
    assert ip["wait_us"]["count"] == ip["steps"] == 8
    assert ip["stage"] == "fetch"  # 20 ms of loading against 12 and 8
    assert ip["errors"] == [] and ip["notes"] == []
    # The workers' batches are events of the trace, on a track per worker process.
    events = gpuprof._native._core.trace_events(report.trace, "input_stage")
    names = {e["name"] for e in events}
    assert names == {"DataLoader load", "DataLoader transform", "DataLoader collate"}
    devices = {e["device"] for e in events}
    assert devices == {-1} if not workers else set(ids) <= devices <= set(range(workers))


@pytest.mark.parametrize("workers", [0, 1])
def test_a_garbage_collection_inside_the_collate_is_reported_apart(workers, recorded):
    # The collate_fn sleeps 4 ms and runs a full collection of 200,000 cyclic lists (tens of ms
    # here): the collate stage is the collate_fn's own time less the collector's pause, and the
    # pause is the batch's gc_ns (gc.callbacks time it from inside the collection, so a little less
    # than the call to gc.collect() the collate_fn timed around it).
    loader = torch.utils.data.DataLoader(
        Injected(0.001), batch_size=BATCH, num_workers=workers, collate_fn=GcCollate(0.004)
    )
    truth: dict = {}
    report = profile(loader, steps=4, truth=truth, after=4 if workers else 0).report()
    (loader_records,) = recorded[-1]["loaders"]
    matched = 0
    for b in loader_records["batches"]:
        idx = [i for _, i in b["slowest"]]
        if len(idx) != BATCH or any(i not in truth for i in idx):
            continue
        whole_ns, collect_ns = truth[idx[0]][0] * 1e9, truth[idx[0]][1] * 1e9
        runq = max(b["runq_ns"], 0)
        got = f"batch {idx}: collate {b['collate_ns']} gc {b['gc_ns']} (CPU wait {runq})"
        got += f"; whole {whole_ns:.0f}, collect {collect_ns:.0f}"
        assert 0.8 * collect_ns <= b["gc_ns"] <= collect_ns + runq, got
        rest = whole_ns - collect_ns  # making the garbage, the sleep, the stacking
        assert 0.8 * rest <= b["collate_ns"] <= 1.2 * rest + runq, got
        matched += 1
    assert matched >= 2
    gc_us = report.data["input_pipeline"]["gc_us"]
    assert gc_us is not None and gc_us["p50"] > 0


def test_the_law_gives_the_workers_the_injected_costs_call_for(tmp_path):
    # One worker makes a 40 ms batch; a step uses one every 12 ms: ceil(40 / 12) = 4 workers keep
    # up. Sleeping needs almost no CPU, so the 2 CPUs allow far more: the law's count stands.
    loader = torch.utils.data.DataLoader(
        Injected(LOAD_S, TRANSFORM_S), batch_size=BATCH, num_workers=1, collate_fn=SleepCollate(COLLATE_S)
    )
    report = profile(loader).report()
    ip = report.data["input_pipeline"]
    law = ip["law"]
    assert abs(ip["recommended_num_workers"] - LAW) <= 1
    assert law["workers_needed"] == math.ceil(law["t_batch_us"] / law["t_step_us"])
    # Against the nominal costs: never below them, at most twice them (sleeps stretch under load).
    assert 0.95 * STEP_S * 1e6 <= law["t_step_us"] <= 2 * STEP_S * 1e6
    assert 0.95 * 40_000 <= law["t_batch_us"] <= 2 * 40_000
    assert law["worker_cpu_share"] < 0.5 and law["cpu_limit"] > LAW + 1
    assert law["other_cpus"] is not None and 0 <= law["other_cpus"] <= law["cpu_budget"] + 0.5  # /proc/stat
    assert ip["bound"] == "workers" and ip["queue_empty_pct"] > 50
    assert ip["recommended_prefetch_factor"] >= 2
    # The advice shows the arithmetic with the measured numbers, and its settings are the law's.
    (a,) = [x for x in report.advice if x["rule"] == "dataloader"]
    assert a["change"]["DataLoader"]["num_workers"] == ip["recommended_num_workers"]
    assert f"N = ceil({law['t_batch_us'] / 1000:.2f} / {law['t_step_us'] / 1000:.2f})" in a["fix"]
    assert "Little's law" in a["fix"] and a["confidence"] == "high"
    assert a["saving_bound_pct"] == pytest.approx(ip["wait_pct"], abs=0.1)
    # Following it: the loop stops waiting (most of the 40 ms per batch leaves the step).
    after = profile(
        torch.utils.data.DataLoader(
            Injected(LOAD_S, TRANSFORM_S),
            batch_size=BATCH,
            num_workers=ip["recommended_num_workers"],
            collate_fn=SleepCollate(COLLATE_S),
            persistent_workers=True,
        ),
        steps=12,
    ).report()
    assert after.data["input_pipeline"]["wait_pct"] < ip["wait_pct"] / 2


@contextlib.contextmanager
def cpus(n):
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, sorted(before)[:n])
    try:
        yield len(os.sched_getaffinity(0))
    finally:
        os.sched_setaffinity(0, before)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs os.sched_setaffinity")
def test_cpu_bound_loading_is_held_to_what_the_cpus_run():
    # 4 samples x 10 ms of CPU work per batch on one CPU, a 5 ms step: the law wants ~8 workers,
    # but each needs a whole CPU and the process has one: the recommendation is the CPU bound, 1.
    with cpus(1):
        loader = torch.utils.data.DataLoader(Burn(0.010), batch_size=BATCH, num_workers=1)
        report = profile(loader, steps=6, step_s=0.005).report()
    ip = report.data["input_pipeline"]
    law = ip["law"]
    assert law["cpu_budget"] == 1 and law["worker_cpu_share"] > 0.6
    assert law["workers_needed"] >= 3 and law["cpu_limit"] == 1
    assert ip["recommended_num_workers"] == law["cpu_limit"] == 1
    assert ip["bound"] == "cpu"
    (a,) = [x for x in report.advice if x["rule"] == "dataloader"]
    assert a["title"] == "Loading the batches needs more CPUs than this process has"
    assert "more CPUs per task" in a["fix"] and "a faster decoder" in a["fix"]


def test_a_loader_that_keeps_up_gets_no_input_advice():
    # Samples with no cost, loaded in the loop itself (num_workers=0), against a 100 ms step: the
    # loader takes well under 5% of the step (a few hundred us here, a few ms when other processes
    # hold the CPUs). The law asks for one worker; where other processes held the CPUs a first
    # worker would need, the CPUs fit none (cpu_limit 0) and that is the recommendation.
    loader = torch.utils.data.DataLoader(Injected(0.0), batch_size=BATCH, num_workers=0)
    report = profile(loader, steps=6, step_s=0.100).report()
    ip = report.data["input_pipeline"]
    assert ip["wait_pct"] < 5 and ip["law"]["workers_needed"] == 1
    assert ip["recommended_num_workers"] == min(1, ip["law"]["cpu_limit"])
    assert [a for a in report.advice if a["rule"] == "dataloader"] == []


def test_an_iterable_dataset_is_measured_per_next():
    # Its samples have no index: each stage's typical batch against what the injected code took
    # in the batches the loop received.
    loader = torch.utils.data.DataLoader(
        Stream(LOAD_S, TRANSFORM_S), batch_size=BATCH, num_workers=2, collate_fn=SleepCollate(COLLATE_S)
    )
    truth: dict = {}
    ip = profile(loader, truth=truth).report().data["input_pipeline"]
    took = {
        "fetch": sorted(BATCH * t[0] * 1e6 for t in truth.values()),
        "transform": sorted(BATCH * t[1] * 1e6 for t in truth.values()),
        "collate": sorted(t[2] * 1e6 for t in truth.values()),
    }
    for stage, values in took.items():
        assert within(ip[f"{stage}_us"]["p50"], values[len(values) // 2]), stage
    assert ip["dataset"] == "Stream" and ip["sample_us"]["count"] == BATCH * ip["batches"]


def test_slow_samples_are_named():
    # Two of the samples the recorded steps load take 80 ms more than the 2 ms of the others.
    slow = {25: 0.080, 36: 0.080}
    loader = torch.utils.data.DataLoader(Injected(0.002, slow=slow), batch_size=BATCH, num_workers=2)
    report = profile(loader, steps=20, step_s=0.004).report()
    ip = report.data["input_pipeline"]
    found = [s["index"] for s in ip["slowest_samples"][:2]]
    assert sorted(found) == [25, 36] and ip["slowest_share_pct"] >= 20
    assert all(within(s["us"], 82_000) for s in ip["slowest_samples"][:2])
    assert "samples" in ip["limits"]


def test_a_worker_that_raises_is_reported_and_the_user_gets_torchs_error():
    loader = torch.utils.data.DataLoader(Injected(0.002, fail_at=21), batch_size=BATCH, num_workers=2)
    prof = None

    def keep(x, p):
        nonlocal prof
        prof = p

    with pytest.raises(ValueError, match="Caught ValueError in DataLoader worker process"):
        profile(loader, steps=20, step_s=0.002, on_batch=keep)
    ip = prof.report().data["input_pipeline"]
    (e,) = ip["errors"]
    assert e["index"] == 21 and e["stage"] == "fetch"
    assert e["worker"] == (21 // BATCH) % 2  # the batches go to the workers in turn
    assert e["error"].startswith("ValueError: sample 21 is corrupt")
    text = prof.report().to_text()
    assert "sample 21 is corrupt <b>\\x1b[31m" in text  # the message, inert


def test_a_worker_that_dies_is_reported():
    loader = torch.utils.data.DataLoader(
        Injected(0.002, fail_at=21, kill=True), batch_size=BATCH, num_workers=2
    )
    prof = None

    def keep(x, p):
        nonlocal prof
        prof = p

    # torch says so from its SIGCHLD handler, or when the queue's get times out; or the batch the
    # dead worker was handing over fails to arrive (its fd server is gone): any of them.
    with pytest.raises((RuntimeError, ConnectionError), match="killed by signal|exited unexpectedly|reset"):
        profile(loader, steps=20, step_s=0.002, on_batch=keep)
    ip = prof.report().data["input_pipeline"]
    (dead,) = [w for w in ip["workers"] if w["status"] == "died"]
    assert dead["worker"] == (21 // BATCH) % 2 and dead["exitcode"] == -9
    assert f"DataLoader worker {dead['worker']} (pid {dead['pid']}) died (signal 9)" in ip["notes"]


def test_workers_do_no_gpuprof_work_while_no_span_records():
    # Each sample counts gpuprof's frames on its stack in the worker: 1 (the timed fetch) for a
    # batch made while a span recorded, 0 otherwise: before the span, between spans, after the
    # session (persistent workers made inside it go on, with torch's code back).
    # (A span of 6 steps outlasts the 4 batches the workers make ahead, so some of its batches are
    # taken within the epoch.)
    loader = torch.utils.data.DataLoader(Probe(), batch_size=2, num_workers=2, persistent_workers=True)
    seen = []
    sched = gpuprof.schedule(wait=4, warmup=1, active=6, repeat=2)
    with gpuprof.profile(schedule=sched) as prof:
        for _ in range(3):
            for i, x in enumerate(loader):
                seen.append((prof.current_action.name, set(x[:, 1].tolist())))
                time.sleep(0.01)
                prof.step()
                if i >= 14:
                    break
    after = [set(x[:, 1].tolist()) for _, x in zip(range(12), loader)]
    counts = [c for _, c in seen]
    assert {0} in counts and {1} in counts  # both states were seen
    assert all(c in ({0}, {1}) for c in counts)
    assert seen[0][1] == {0}  # made before any span
    assert all(c == {0} for c in after)  # torch's own code again
    assert len(prof.reports()) == 2
    assert not [t for t in threading.enumerate() if t.name.startswith("gpuprof")]
    assert pipeline_module._main is None


def test_workers_started_before_the_session_are_named_as_not_measured():
    loader = torch.utils.data.DataLoader(
        Injected(0.002), batch_size=BATCH, num_workers=2, persistent_workers=True
    )
    for i, _ in enumerate(loader):  # an epoch before profiling starts the workers
        if i >= 2:
            break
    ip = profile(loader, steps=4, step_s=0.005).report().data["input_pipeline"]
    assert ip["fetch_us"] is None and ip["wait_us"]["count"] == 4
    assert "started before gpuprof.profile did" in ip["notes"][0]


def test_the_batch_copy_after_it_arrives_is_measured():
    # The loop copies each batch (x.to(float64): a real copy on the CPU) before its step.
    loader = torch.utils.data.DataLoader(Injected(0.001, n=4096), batch_size=256, num_workers=0)

    def copy(x, prof):
        x.to(torch.float64)

    ip = profile(loader, steps=4, on_batch=copy).report().data["input_pipeline"]
    assert ip["transfer_us"]["count"] == 4 and ip["transfer_us"]["mean"] > 0
    assert ip["transfer_device_us"] is None and ip["pin_us"] is None  # no GPU here


def test_the_report_shows_the_pipeline_in_every_format(tmp_path):
    loader = torch.utils.data.DataLoader(
        Injected(LOAD_S, TRANSFORM_S), batch_size=BATCH, num_workers=2, collate_fn=SleepCollate(COLLATE_S)
    )
    prof = profile(loader, steps=6)
    report = prof.report()
    text = report.to_text()
    assert "Input pipeline" in text and "one batch: ■ load" in text and "Little's law" in text
    assert text.count("one batch") == 1  # the bar's legend is the stage line, said once
    md = report.to_markdown()
    assert "### Input pipeline" in md and "| load | worker |" in md
    html = report.to_html()
    assert 'id="pipeline-bar"' in html and 'id="pipeline-workers"' in html
    assert "load " in html and "(worker)</span>" in html  # the loading stages ran in the workers
    # The timeline draws each worker's batches on a lane of its own.
    lanes = {lane for t in report.data["step_views"]["timelines"] for lane in t["lanes"]}
    assert any(lane.startswith("DataLoader worker ") for lane in lanes)
    # The Chrome trace: one track (process) per worker, read back as input stages.
    path = tmp_path / "t.json"
    prof.export_chrome_trace(path)
    trace = json.loads(path.read_text())
    named = {e["args"].get("name") for e in trace["traceEvents"] if e.get("ph") == "M"}
    workers = {w["worker"] for w in report.data["input_pipeline"]["workers"] if w["batches"]}
    assert {f"DataLoader worker {w}" for w in workers} <= named
    pids = {e["pid"] for e in trace["traceEvents"] if e.get("cat") == "gpuprof_input"}
    assert {w["pid"] for w in report.data["input_pipeline"]["workers"] if w["batches"]} <= pids
    assert os.getpid() not in pids
    again = gpuprof.analyze(path)  # the same steps: the workers' events count in no category
    assert [s["total_us"] for s in again.steps] == [s["total_us"] for s in report.steps]
    kept = gpuprof._native._core.trace_events(again.trace, "input_stage")
    assert workers <= {e["device"] for e in kept}


def test_check_budgets_the_input_wait(tmp_path, capsys):
    from gpuprof.cli import main

    loader = torch.utils.data.DataLoader(Injected(0.004), batch_size=BATCH, num_workers=0)
    report = profile(loader, steps=4).report()
    path = tmp_path / "r.json"
    report.to_json(path)
    wait = report.data["input_pipeline"]["wait_pct"]
    assert wait > 30
    assert main(["check", str(path), "--max", "input_wait_pct=5"]) == 1
    assert f"FAIL  input_wait_pct = {wait:.4g}" in capsys.readouterr().out
    assert main(["check", str(path), "--max", f"input_wait_pct={wait + 1}"]) == 0
