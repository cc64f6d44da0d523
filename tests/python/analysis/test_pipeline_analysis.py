"""The input_pipeline section from hand-built records (analysis/input_pipeline.py): the per-stage figures,
Little's law and its bounds, the slowest samples, and the advice and the reports that read them.
Every expected number is worked out in the test from the records it builds."""

import json
import math

import pytest

from gpuprof.advice import advise
from gpuprof.analysis import CATEGORIES
from gpuprof.analysis.input_pipeline import input_pipeline
from gpuprof.report.json_schema import SCHEMA
from gpuprof.report.model import Report

MS = 1_000_000  # ns


def steps(n=10, step_ms=14.0):
    return [
        {
            "step": i,
            "start_ns": int(i * step_ms * MS),
            "end_ns": int((i + 1) * step_ms * MS),
            "total_us": step_ms * 1e3,
        }
        for i in range(n)
    ]


def batch(worker, start_ms, load_ms, tr_ms=-1, col_ms=0.0, cpu_ms=1.0, runq_ms=0.0, samples=2, slowest=None):
    load = int(load_ms * MS)
    per = load / samples
    return {
        "worker": worker,
        "pid": 1000 + worker,
        "tid": 1000 + worker,
        "seq": 1,
        "start_ns": int(start_ms * MS),
        "idle_ns": int(0.5 * MS),
        "load_ns": load,
        "transform_ns": int(tr_ms * MS) if tr_ms >= 0 else -1,
        "collate_ns": int(col_ms * MS),
        "cpu_ns": int(cpu_ms * MS),
        "runq_ns": int(runq_ms * MS),
        "samples": samples,
        "sample_sum_ns": int(load),
        "sample_sumsq": float(samples * per * per),
        "slowest": slowest
        if slowest is not None
        else [(int(per), 2 * int(start_ms) + k) for k in range(samples)],
    }


def records(
    batches, *, n_steps=10, step_ms=14.0, wait_ms=2.0, ready=0, workers=1, pins=(), cpu_s=0.028, **settings
):
    return {
        "window_ns": [0, int(n_steps * step_ms * MS)],
        "process_cpu_ns": int(cpu_s * 1e9),
        "loaders": [
            {
                "settings": {
                    "dataset": "Images",
                    "num_workers": workers,
                    "batches_seen": n_steps,
                    **settings,
                },
                "batches": batches,
                "waits": [
                    {
                        "start_ns": int((i * step_ms + 0.1) * MS),
                        "wait_ns": int(wait_ms * MS),
                        "ready": ready,
                        "tid": 1,
                    }
                    for i in range(n_steps)
                ],
                "pins": list(pins),
                "errors": [],
                "workers": [],
                "unmeasured_iterators": 0,
                "dropped_records": 0,
            }
        ],
    }


HOST = {"cpu_budget": 2.0, "cpu_budget_source": "affinity mask", "cpus_available": 2}


def law_case():
    # 10 steps of 14 ms, each waiting 2 ms: T_step = (140 - 20) / 10 = 12 ms. One worker makes a
    # 40 ms batch (20 load + 12 transform + 8 collate) on 2 ms of CPU: share 0.05.
    bs = [batch(0, 14 * i, 20, 12, 8, cpu_ms=2) for i in range(10)]
    return records(bs), steps()


def test_littles_law_from_the_stages():
    recs, st = law_case()
    ip = input_pipeline(recs, st, HOST)
    assert ip["fetch_us"]["mean"] == 20_000 and ip["transform_us"]["mean"] == 12_000
    assert ip["collate_us"]["mean"] == 8_000 and ip["batch_us"]["mean"] == 40_000
    law = ip["law"]
    assert law["t_step_us"] == 12_000 and law["t_batch_us"] == 40_000
    assert law["workers_needed"] == math.ceil(40 / 12) == 4
    assert ip["recommended_num_workers"] == 4 and ip["bound"] == "workers"
    assert ip["wait_pct"] == pytest.approx(100 * 20 / 140, abs=0.01)
    assert ip["stage"] == "fetch" and ip["process"] == "workers"
    assert ip["queue_empty_pct"] == 100.0
    # When the training keeps both CPUs busy (0.28 s of CPU over the 0.14 s span), no room is left:
    # the limit is its floor, one worker.
    ip = input_pipeline(records(recs["loaders"][0]["batches"], cpu_s=0.28), st, HOST)
    assert ip["law"]["training_cpus"] == 2.0 and ip["law"]["cpu_limit"] == 1
    assert ip["recommended_num_workers"] == 1 and ip["bound"] == "cpu"


def test_other_processes_cpu_is_what_the_cpus_were_busy_with_beyond_this_process_and_its_workers():
    # Over the 0.14 s span the budget's CPUs were busy 0.238 s in all (/proc/stat): the training
    # process took 0.028 s and its worker's 10 batches 2 ms each, 0.02 s; other processes (and
    # steal) the rest, 0.19 s, which is 0.19 / 0.14 = 1.36 CPUs kept busy beside the run.
    bs = [batch(0, 14 * i, 20, 12, 8, cpu_ms=2) for i in range(10)]
    recs = records(bs)
    recs["cpus_busy_ns"] = int(0.238e9)
    law = input_pipeline(recs, steps(), HOST)["law"]
    assert law["other_cpus"] == 1.36
    # Busy time below what this process and its workers used (a /proc/stat tick is 10 ms): none.
    recs["cpus_busy_ns"] = int(0.03e9)
    assert input_pipeline(recs, steps(), HOST)["law"]["other_cpus"] == 0.0
    # Not measured (no /proc/stat): null, never a guess.
    del recs["cpus_busy_ns"]
    assert input_pipeline(recs, steps(), HOST)["law"]["other_cpus"] is None


def test_the_cpu_limit_counts_a_worker_by_its_cpu_share():
    bs = [batch(0, 14 * i, 20, 12, 8, cpu_ms=2) for i in range(10)]
    # Training busy 0.2 CPU (0.028 s over 0.14 s): 1.8 CPUs free; a worker needs 2 / 40 = 5% of one,
    # counted as at least 10%: floor(1.8 / 0.1) = 18 fit. The law's 4 stands.
    ip = input_pipeline(records(bs), steps(), HOST)
    law = ip["law"]
    assert law["worker_cpu_share"] == 0.05 and law["training_cpus"] == 0.2
    assert law["cpu_limit"] == 18 and ip["recommended_num_workers"] == 4
    assert ip["limits"] == ["workers"] and ip["bound"] == "workers"
    # CPU-bound loading (all 40 ms on a CPU, 10 of them waiting for one): share 30/30 = 1, so
    # floor(1.8 / 1) = 1 worker fits; the recommendation is that bound, not the law's 4.
    cpu_bound = [batch(0, 14 * i, 20, 12, 8, cpu_ms=30, runq_ms=10) for i in range(10)]
    ip = input_pipeline(records(cpu_bound), steps(), HOST)
    assert ip["law"]["worker_cpu_share"] == 1.0 and ip["law"]["cpu_limit"] == 1
    assert ip["recommended_num_workers"] == 1 and ip["limits"] == ["cpu"]
    assert ip["cpu_wait_us"]["mean"] == 10_000


def test_more_workers_than_the_cpus_run_is_a_cpu_limit():
    # Three CPU-bound workers, a law that asks for one (a 5 ms batch against a 12 ms step).
    bs = [batch(i % 3, 14 * i, 5, cpu_ms=5) for i in range(10)]
    ip = input_pipeline(records(bs, workers=3), steps(), HOST)
    assert ip["law"]["workers_needed"] == 1 and ip["law"]["cpu_limit"] == 1
    assert ip["limits"] == ["cpu"] and ip["recommended_num_workers"] == 1
    data = report_dict(ip)
    (a,) = advise(data)
    assert a["title"].startswith("More DataLoader workers than the CPUs can run")
    assert "num_workers=3 oversubscribes them" in a["fix"] and a["change"]["DataLoader"]["num_workers"] == 1


def test_prefetch_factor_from_the_spread_of_the_batches():
    # Batches of 10 and 70 ms in turn: mean 40, standard deviation 30: ceil(1 + 2 x 30 / 40) = 3.
    bs = [batch(0, 14 * i, 10 if i % 2 else 70, cpu_ms=1) for i in range(10)]
    ip = input_pipeline(records(bs), steps(), HOST)
    assert ip["batch_us"]["std"] == 30_000 and ip["recommended_prefetch_factor"] == 3
    # Steady batches keep torch's default.
    bs = [batch(0, 14 * i, 40, cpu_ms=1) for i in range(10)]
    assert input_pipeline(records(bs), steps(), HOST)["recommended_prefetch_factor"] == 2


def test_pinning_slower_than_a_step_is_the_bound():
    bs = [batch(0, 14 * i, 20, cpu_ms=1) for i in range(10)]
    pins = [{"tid": 7, "start_ns": int((14 * i + 5) * MS), "pin_ns": 15 * MS} for i in range(10)]
    ip = input_pipeline(records(bs, pins=pins), steps(), HOST)
    assert ip["pin_us"]["mean"] == 15_000 and ip["limits"][0] == "pin"
    (a,) = advise(report_dict(ip))
    assert a["title"] == "Pinning each batch takes longer than a step" and "change" not in a


def test_a_few_slow_samples_are_named():
    # 50 batches of 2 samples at 1 ms; sample 77 takes 200 ms: 200 / (99 + 200) = 67% of the
    # samples' time in 1% of them.
    bs = [batch(0, 14 * i, 2) for i in range(50)]
    bs[38] = batch(0, 14 * 38, 201, slowest=[(200 * MS, 77), (1 * MS, 76)])
    ip = input_pipeline(records(bs, n_steps=50, cpu_s=0.14), steps(50), HOST)
    assert ip["slowest_samples"][0] == {"index": 77, "us": 200_000.0, "worker": 0}
    assert ip["slowest_share_pct"] == pytest.approx(100 * 200 / 299, abs=0.01)
    assert "samples" in ip["limits"]
    # Even samples: none named.
    even = [batch(0, 14 * i, 2) for i in range(50)]
    assert input_pipeline(records(even, n_steps=50, cpu_s=0.14), steps(50), HOST)["slowest_samples"] == []


def test_the_transform_is_apart_only_where_it_was_timed():
    bs = [batch(0, 14 * i, 20, col_ms=8, cpu_ms=1) for i in range(10)]  # no transform attribute
    ip = input_pipeline(records(bs), steps(), HOST)
    assert ip["transform_us"] is None and ip["fetch_us"]["mean"] == 20_000


def test_waits_with_batches_ready_are_the_hand_over():
    bs = [batch(0, 14 * i, 5, cpu_ms=1) for i in range(10)]
    ip = input_pipeline(records(bs, workers=2, ready=3), steps(), HOST)
    assert ip["queue_empty_pct"] == 0.0 and ip["queue_depth_mean"] == 3 and ip["limits"] == []
    (a,) = advise(report_dict(ip))
    assert a["title"] == "Taking a ready batch from the workers is slow"


def test_no_wait_no_advice_and_no_loader_no_section():
    bs = [batch(0, 14 * i, 5, cpu_ms=1) for i in range(10)]
    ip = input_pipeline(records(bs, wait_ms=0.1, workers=2), steps(), HOST)
    assert ip["wait_pct"] < 1 and advise(report_dict(ip)) == []
    assert input_pipeline(None, steps(), HOST) is None
    assert input_pipeline({"window_ns": [0, 1], "process_cpu_ns": 0, "loaders": []}, steps(), HOST) is None


def test_the_batch_copy_per_step():
    recs, st = law_case()
    transfers = [
        {
            "batches": 1,
            "copy_ops": 2,
            "host_ns": 300_000,
            "device_copies": 2,
            "device_ns": 800_000,
            "overlap_ns": 200_000,
        }
        for _ in st
    ]
    ip = input_pipeline(recs, st, HOST, transfers)
    assert ip["transfer_us"]["mean"] == 300 and ip["transfer_device_us"]["mean"] == 800
    assert ip["transfer_overlap_pct"] == 25.0


def report_dict(ip):
    """A report of 14 ms steps, 2 ms of them waiting for the DataLoader, with this section."""
    us = {f"{k}_us": 0.0 for k, _ in CATEGORIES} | {"dataloader_us": 2000.0, "other_us": 12_000.0}
    pct = {f"{k}_pct": 100.0 * v / 14_000.0 for k, v in ((k[:-3], v) for k, v in us.items())}
    return {
        "schema_version": 4,
        "steps": [{"step": 0, "total_us": 14_000.0, **us}],
        "average": {"total_us": 14_000.0, **us, **pct},
        "dataloaders": [],
        "counts": {"events": 0},
        "host": HOST,
        "input_pipeline": ip,
    }


def test_the_advice_shows_the_arithmetic():
    bs = [batch(0, 14 * i, 20, 12, 8, cpu_ms=2) for i in range(10)]
    ip = input_pipeline(records(bs), steps(), HOST)
    (a,) = advise(report_dict(ip))
    assert a["rule"] == "dataloader" and a["title"] == "The input pipeline starves the training loop"
    assert "N = ceil(40.00 / 12.00) = 4 workers keep up" in a["fix"]
    assert "leave room for 18" in a["fix"] and "prefetch_factor=2" in a["fix"]
    assert a["change"] == {"DataLoader": {"num_workers": 4, "persistent_workers": True, "prefetch_factor": 2}}
    assert a["evidence"]["t_batch_us"] == 40_000 and a["evidence"]["workers_needed"] == 4


def test_cpus_other_processes_kept_busy_are_taken_out_of_the_cpu_bound_for_cpu_bound_workers():
    # num_workers=0: the training process loads each batch itself, 20 ms all on a CPU (share 1),
    # and the loop waits those 20 ms of each 32 ms step: T_step = 12 ms, N = ceil(20 / 12) = 2.
    # Its CPU time over the 0.32 s span is 0.264 s, 0.2 s of it loading: 0.064 / 0.32 = 0.2 CPUs
    # train. 8 CPUs: room for floor((8 - 0.2) / 1) = 7 with nothing else running.
    host = {"cpu_budget": 8.0, "cpu_budget_source": "affinity mask", "cpus_available": 8}
    span_s, mine_s = 0.32, 0.264
    bs = [batch(-1, 32 * i, 20, cpu_ms=20) for i in range(10)]
    recs = records(bs, step_ms=32.0, wait_ms=20.0, workers=0, cpu_s=mine_s)
    st = steps(step_ms=32.0)
    quiet = input_pipeline(recs, st, host)
    assert quiet["law"]["training_cpus"] == 0.2 and quiet["law"]["workers_needed"] == 2
    assert quiet["law"]["cpu_limit"] == 7 and quiet["law"]["other_cpus_subtracted"] is None
    assert quiet["wait_pct"] == 62.5
    (a,) = advise(report_dict(quiet))
    assert a["confidence"] == "high" and a["change"]["DataLoader"]["num_workers"] == 2
    # Other processes kept 4 CPUs busy (1.28 s of the CPUs' busy time beyond this process's 0.264 s):
    # 8 - 0.2 - 4 = 3.8 CPUs free, floor(3.8 / 1) = 3 workers fit; the law's 2 still do, and the
    # fix says the CPUs were counted.
    recs["cpus_busy_ns"] = int((mine_s + 4 * span_s) * 1e9)
    some = input_pipeline(recs, st, host)
    assert some["law"]["other_cpus"] == some["law"]["other_cpus_subtracted"] == 4.0
    assert (
        some["law"]["cpu_limit"] == 3 and some["recommended_num_workers"] == 2 and some["bound"] == "workers"
    )
    (a,) = advise(report_dict(some))
    assert a["confidence"] == "high" and a["change"]["DataLoader"]["num_workers"] == 2
    assert "less 0.2 busy with training and 4 that other processes kept busy over the run" in a["fix"]
    assert "leave room for 3" in a["fix"] and "the 4 CPUs other processes kept busy" in a["confidence_reason"]
    # They kept 7 busy: 8 - 0.2 - 7 = 0.8 CPUs free, less than a worker's whole CPU: no first worker
    # fits. The advice keeps num_workers=0 (no change, low confidence), keeps the wait as its upper
    # bound, and says how to free the CPUs and check before changing.
    recs["cpus_busy_ns"] = int((mine_s + 7 * span_s) * 1e9)
    busy = input_pipeline(recs, st, host)
    assert busy["law"]["other_cpus"] == 7.0 and busy["law"]["cpu_limit"] == 0
    assert busy["recommended_num_workers"] == 0 and busy["bound"] == "cpu"
    (a,) = advise(report_dict(busy))
    assert a["title"] == "Other processes hold the CPUs that DataLoader workers would need"
    assert a["confidence"] == "low" and "change" not in a and a["saving_bound_pct"] == 62.5
    assert "other processes kept 7 of the 8 CPUs busy" in a["confidence_reason"]
    assert a["fix"].startswith("keep num_workers=0 while the CPUs are this busy")
    assert "0.80 CPUs were left free, and a worker needs 1.00" in a["fix"] and "gpuprof diff" in a["fix"]
    # A loader that already has a worker keeps its floor of one (the worker that replaced the
    # training process's own loading): the CPUs bound it to 1, against the law's 2.
    workers = [batch(0, 14 * i, 20, cpu_ms=20) for i in range(10)]
    recs = records(workers)
    recs["cpus_busy_ns"] = int((0.028 + 0.2 + 7 * 0.14) * 1e9)
    one = input_pipeline(recs, steps(), host)
    assert one["law"]["other_cpus_subtracted"] == 7.0 and one["law"]["cpu_limit"] == 1
    assert one["recommended_num_workers"] == 1 and one["bound"] == "cpu"
    (a,) = advise(report_dict(one))
    assert a["title"] == "Loading the batches needs more CPUs than this process has"
    # Workers that mostly wait (2 ms of CPU per 20 ms batch) get their small share from a busy
    # scheduler: the other processes' CPUs are said, not taken out, and the confidence stands.
    idle = [batch(0, 14 * i, 20, cpu_ms=2) for i in range(10)]
    recs = records(idle)
    recs["cpus_busy_ns"] = int((0.028 + 0.02 + 7 * 0.14) * 1e9)
    ip = input_pipeline(recs, steps(), host)
    assert ip["law"]["other_cpus"] == 7.0 and ip["law"]["other_cpus_subtracted"] is None
    assert ip["law"]["cpu_limit"] == math.floor(7.8 / 0.1)
    (a,) = advise(report_dict(ip))
    assert a["confidence"] == "high" and "other processes kept 7 of them busy over the run" in a["fix"]


def test_every_format_shows_the_section_and_escapes_what_comes_from_outside():
    bs = [batch(0, 14 * i, 20, 12, 8, cpu_ms=2) for i in range(10)]
    recs = records(bs)
    recs["loaders"][0]["settings"]["dataset"] = "<script>x</script>\x1b[31m"
    recs["loaders"][0]["errors"] = [
        {
            "worker": 0,
            "pid": 1000,
            "batch": 3,
            "ts_ns": 0,
            "stage": "fetch",
            "error": "OSError: <b>|bad",
            "index": 5,
        }
    ]
    ip = input_pipeline(recs, steps(), HOST)
    report = Report(report_dict(ip))
    text = report.to_text()
    assert "Input pipeline" in text and "\x1b[31m" not in text and "\\x1b[31m" in text
    assert "raised in worker 0 (pid 1000) at sample 5, fetch: OSError: <b>|bad" in text
    md = report.to_markdown()
    assert "<script>" not in md and "&lt;script&gt;" in md and "<b>" not in md
    html = report.to_html()
    assert "<script>x</script>" not in html and "&lt;script&gt;x&lt;/script&gt;" in html
    assert "<b>|bad" not in html and 'id="pipeline-bar"' in html


def test_the_schema_validates_the_section():
    jsonschema = pytest.importorskip("jsonschema")
    bs = [batch(0, 14 * i, 20, 12, 8, cpu_ms=2) for i in range(10)]
    ip = input_pipeline(records(bs), steps(), HOST)
    data = json.loads(json.dumps(report_dict(ip)))
    jsonschema.validate(data, SCHEMA)
    bad = json.loads(json.dumps(data))
    bad["input_pipeline"]["fetch_us"] = "slow"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)


def test_a_copy_that_takes_a_fifth_of_the_step_is_a_limit():
    # The step's own work is 12 ms a batch; copying the batch takes 3 ms (a quarter) of it.
    recs, st = law_case()
    transfers = [
        {"batches": 1, "copy_ops": 2, "host_ns": 3 * MS, "device_copies": 0, "device_ns": 0, "overlap_ns": 0}
        for _ in st
    ]
    ip = input_pipeline(recs, st, HOST, transfers)
    assert ip["limits"] == ["copy", "workers"] and ip["bound"] == "copy"
    (a,) = advise(report_dict(ip))
    assert a["title"] == "Copying each batch to the device holds up the step"
    assert "non_blocking=True" in a["fix"] and "pin_memory=True" in a["fix"]


def test_the_schema_doc_has_the_generated_input_pipeline_block():
    """docs/schema.md's input_pipeline block is what analysis/fields.py declares; to update it, run
    python -m gpuprof.analysis.fields input_pipeline and paste it between the markers."""
    from pathlib import Path

    from gpuprof.analysis.fields import input_pipeline_markdown

    doc = (Path(__file__).resolve().parents[3] / "docs" / "schema.md").read_text(encoding="utf-8")
    begin = "<!-- input_pipeline: generated by `python -m gpuprof.analysis.fields input_pipeline` -->"
    block = doc.split(begin, 1)[1].split("<!-- input_pipeline: end -->", 1)[0]
    assert block.strip() == input_pipeline_markdown().strip()
    # and every key the analysis makes is declared there, in its order
    recs, st = law_case()
    ip = input_pipeline(recs, st, HOST)
    from gpuprof.analysis.fields import INPUT_PIPELINE

    assert [f.key for f in INPUT_PIPELINE] == [k for k in ip if k in {f.key for f in INPUT_PIPELINE}]
    assert set(ip) == {f.key for f in INPUT_PIPELINE}
