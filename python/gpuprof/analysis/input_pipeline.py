"""The input pipeline's section of a report (``input_pipeline``, docs/metrics.md "Input pipeline"):
per-batch times of each stage, the workers' busy share, how often the loop found no batch ready,
the slowest samples when a few dominate, and the number of workers that keeps up (Little's law).

A pure function over plain data: the records a live span collected (``collect/dataloader.py``'s
``pipeline_records``), the report's steps, its host facts and the batch copies the native analysis
found in the trace. The records' layout::

    {"window_ns": [start, end],          # the span's recording epoch, CLOCK_MONOTONIC
     "process_cpu_ns": int,              # the training process's CPU time over that epoch
     "cpus_busy_ns": int or None,        # the busy time of the CPUs it may use (every process's)
     "loaders": [{
        "settings": {...},               # the loader's row of the report's `dataloaders`
        "batches": [{"worker", "pid", "tid", "seq", "start_ns", "idle_ns", "load_ns",
                     "transform_ns", "collate_ns", "cpu_ns", "runq_ns", "samples",
                     "sample_sum_ns", "sample_sumsq", "slowest": [(ns, index), ...], "gc_ns"}],
                                         # worker -1: loaded in the training process;
                                         # idle_ns -1: not known; transform_ns -1: not timed apart;
                                         # runq_ns: waiting for a CPU while ready (-1: unknown);
                                         # sample_sumsq -1: the samples came in one call
                                         # gc_ns: the collector's pauses, not in the stages
        "waits": [{"start_ns", "wait_ns", "ready", "tid"}],   # ready -1: no queue to look at
        "pins": [{"tid", "start_ns", "pin_ns"}],
        "errors": [{"worker", "pid", "batch", "ts_ns", "stage", "error", "index"}],
        "workers": [{"worker", "pid", "status", "exitcode", "dropped"}],
        "unmeasured_iterators": int,     # multi-process iterators made before the session
        "dropped_records": int}]}
"""

from __future__ import annotations

import math
from typing import Optional

# A worker is charged at least this share of a CPU while it loads, however much of its time it
# waits on files or sleeps: Little's law's CPU bound then allows at most 10 such workers per free CPU.
MIN_WORKER_CPU_SHARE = 0.1
# A worker on a CPU at least this share of its time competes for CPUs: the CPUs other processes keep
# busy are taken out of what it may use. One that mostly waits (files, the network) still gets its
# small share from a busy scheduler, so for it they are not.
CPU_BOUND_WORKER_SHARE = 0.5
# The slowest 1% of samples (at least one) dominate when they hold at least this share of all the
# samples' time, and at least 10 times their fair share.
SLOW_SAMPLES_SHARE_PCT = 20.0
SLOW_SAMPLES_FACTOR = 10.0
SLOWEST_SHOWN = 8
MIN_SAMPLES_FOR_SKEW = 20
# The batch's copy to the device limits the step when it takes this share of the step's own time.
COPY_SHARE_OF_STEP = 0.2
# prefetch_factor: each worker holds enough batches to ride out one batch this many standard
# deviations slower than the mean.
PREFETCH_SIGMAS = 2.0
TORCH_DEFAULT_PREFETCH = 2


def _stats(values: list) -> Optional[dict]:
    """Mean and spread of per-batch times given in ns, in us; None for no values."""
    if not values:
        return None
    xs = sorted(v / 1000.0 for v in values)
    n = len(xs)
    mean = sum(xs) / n
    var = sum((x - mean) ** 2 for x in xs) / n
    return {
        "mean": round(mean, 3),
        "std": round(math.sqrt(var), 3),
        "p50": round(xs[(n - 1) // 2], 3),
        "p95": round(xs[min(n - 1, math.ceil(0.95 * n) - 1)], 3),
        "max": round(xs[-1], 3),
        "count": n,
    }


def _in_steps(ts: int, windows: list) -> bool:
    return any(a <= ts < b for a, b in windows)


def _pick_loader(loaders: list, windows: list) -> Optional[dict]:
    """The loader the steps drew most batches from."""
    if not loaders:
        return None

    def consumed(row: dict) -> tuple:
        return (
            sum(1 for w in row["waits"] if _in_steps(w["start_ns"], windows)),
            row["settings"].get("batches_seen") or 0,
        )

    return max(loaders, key=consumed)


def _batch_ns(b: dict) -> int:
    return b["load_ns"] + max(b["transform_ns"], 0) + b["collate_ns"] + b.get("gc_ns", 0)


def _slowest(batches: list) -> dict:
    """Per-sample time, and the slowest samples when a few dominate it."""
    n = sum(b["samples"] for b in batches)
    total = sum(b["sample_sum_ns"] for b in batches)
    per_sample = [b for b in batches if b["sample_sumsq"] >= 0]
    out: dict = {"sample_us": None, "slowest_share_pct": None, "slowest_samples": []}
    if n <= 0 or total <= 0:
        return out
    mean = total / n
    out["sample_us"] = {"mean": round(mean / 1000.0, 3), "count": n}
    if not per_sample:  # the samples came in one call each batch (__getitems__)
        return out
    m = sum(b["samples"] for b in per_sample)
    t = sum(b["sample_sum_ns"] for b in per_sample)
    sq = sum(b["sample_sumsq"] for b in per_sample)
    std = math.sqrt(max(0.0, sq / m - (t / m) ** 2)) if m else 0.0
    # A sample is slow by itself only by what its time exceeds its whole batch's CPU wait: a sample
    # that other processes held off the CPU for 40 ms is not a slow file. Ranked by that excess.
    tops = sorted(
        (
            (max(0, ns - max(b.get("runq_ns", -1), 0)), ns, idx, b["worker"])
            for b in per_sample
            for ns, idx in b["slowest"]
        ),
        key=lambda r: (-r[0], -r[1]),
    )
    longest = max((r[1] for r in tops), default=None)
    out["sample_us"].update(std=round(std / 1000.0, 3), max=round(longest / 1000.0, 3) if tops else None)
    k = max(1, math.ceil(0.01 * m))
    share = 100.0 * sum(r[0] for r in tops[:k]) / t if t > 0 else 0.0
    out["slowest_share_pct"] = round(share, 2)
    fair = 100.0 * k / m
    if m >= MIN_SAMPLES_FOR_SKEW and share >= SLOW_SAMPLES_SHARE_PCT and share >= SLOW_SAMPLES_FACTOR * fair:
        out["slowest_samples"] = [
            {"index": idx if idx >= 0 else None, "us": round(ns / 1000.0, 3), "worker": w}
            for _, ns, idx, w in tops[:SLOWEST_SHOWN]
        ]
    return out


def input_pipeline(
    records: Optional[dict], steps: list, host: Optional[dict] = None, transfers: Optional[list] = None
) -> Optional[dict]:
    """The ``input_pipeline`` section, or None when the span measured no loader."""
    if not records or not steps:
        return None
    windows = [(s["start_ns"], s["end_ns"]) for s in steps]
    loader = _pick_loader(records.get("loaders") or [], windows)
    if loader is None:
        return None
    host = host or {}
    settings = loader["settings"]
    num_workers = int(settings.get("num_workers") or 0)
    lo, hi = windows[0][0], windows[-1][1]
    span_ns = max(hi - lo, 1)

    waits = [w for w in loader["waits"] if _in_steps(w["start_ns"], windows)]
    batches = [b for b in loader["batches"] if lo <= b["start_ns"] < hi] or list(loader["batches"])
    pins = [p for p in loader["pins"] if lo <= p["start_ns"] < hi] or list(loader["pins"])
    step_ns = sum(s["end_ns"] - s["start_ns"] for s in steps)
    wait_ns = sum(w["wait_ns"] for w in waits)

    separable = [b for b in batches if b["transform_ns"] >= 0]
    timed_apart = len(separable) * 2 >= len(batches) and bool(batches)
    stage_batches = separable if timed_apart else batches
    fetch = _stats([b["load_ns"] + (0 if timed_apart else max(b["transform_ns"], 0)) for b in stage_batches])
    transform = _stats([b["transform_ns"] for b in separable]) if timed_apart else None
    collate = _stats([b["collate_ns"] for b in batches])
    batch = _stats([_batch_ns(b) for b in batches])
    idle = _stats([b["idle_ns"] for b in batches if b["idle_ns"] >= 0 and b["worker"] >= 0])
    cpu_wait = _stats([b["runq_ns"] for b in batches if b.get("runq_ns", -1) >= 0])
    gc_pause = _stats([b["gc_ns"] for b in batches if "gc_ns" in b])

    # The batch's copy to the device: per step, the copy operators after each batch arrived.
    transfer = transfer_device = None
    transfer_overlap_pct = None
    if transfers:
        per_batch = [t["host_ns"] / t["batches"] for t in transfers if t["batches"] > 0]
        transfer = _stats(per_batch) if any(t["copy_ops"] for t in transfers) else None
        copies = [t for t in transfers if t["device_copies"] > 0]
        if copies:
            transfer_device = _stats([t["device_ns"] / max(t["batches"], 1) for t in copies])
            dev = sum(t["device_ns"] for t in copies)
            transfer_overlap_pct = (
                round(100.0 * sum(t["overlap_ns"] for t in copies) / dev, 2) if dev else None
            )

    # Who loaded the batches: each worker's share of the span spent on them.
    rows: dict = {}
    for b in batches:
        r = rows.setdefault(
            b["worker"],
            {
                "worker": b["worker"],
                "pid": b["pid"],
                "process": "main" if b["worker"] < 0 else "worker",
                "batches": 0,
                "busy_us": 0.0,
                "status": "running",
                "exitcode": None,
            },
        )
        r["batches"] += 1
        start, end = max(b["start_ns"], lo), min(b["start_ns"] + _batch_ns(b), hi)
        r["busy_us"] += max(0, end - start) / 1000.0
    for w in loader["workers"]:
        r = rows.get(w["worker"])
        if r is None:
            if w["status"] != "died":
                continue  # a worker of another epoch, or one that loaded nothing in this span
            r = rows[w["worker"]] = {
                "worker": w["worker"],
                "pid": w["pid"],
                "process": "worker",
                "batches": 0,
                "busy_us": 0.0,
            }
        r["status"], r["exitcode"] = w["status"], w["exitcode"]
    workers = sorted(rows.values(), key=lambda r: r["worker"])
    for r in workers:
        r["busy_us"] = round(r["busy_us"], 3)
        r["busy_pct"] = round(100.0 * r["busy_us"] * 1000.0 / span_ns, 2)
    loading = [r for r in workers if r["batches"] > 0]
    busy_pct = round(sum(r["busy_pct"] for r in loading) / len(loading), 2) if loading else None

    readies = [w["ready"] for w in waits if w["ready"] >= 0]
    queue_empty_pct = round(100.0 * sum(1 for r in readies if r == 0) / len(readies), 2) if readies else None

    out: dict = {
        "dataset": settings.get("dataset"),
        "num_workers": num_workers,
        "workers": workers,
        "batches": len(batches),
        "steps": len(steps),
        "batches_consumed": len(waits),
        "stage": None,
        "process": None,
        "fetch_us": fetch,
        "transform_us": transform,
        "collate_us": collate,
        "batch_us": batch,
        "idle_us": idle,
        "cpu_wait_us": cpu_wait,
        "gc_us": gc_pause,
        "pin_us": _stats([p["pin_ns"] for p in pins]),
        "transfer_us": transfer,
        "transfer_device_us": transfer_device,
        "transfer_overlap_pct": transfer_overlap_pct,
        "wait_us": _stats([w["wait_ns"] for w in waits]),
        "wait_pct": round(100.0 * wait_ns / step_ns, 2) if step_ns > 0 else None,
        "worker_busy_pct": busy_pct,
        "queue_empty_pct": queue_empty_pct,
        "queue_depth_mean": round(sum(readies) / len(readies), 2) if readies else None,
    }
    out.update(_slowest(batches))
    stages = [(k, out[f"{k}_us"]["mean"]) for k in ("fetch", "transform", "collate") if out[f"{k}_us"]]
    if stages:
        out["stage"] = max(stages, key=lambda s: s[1])[0]
        out["process"] = "main" if all(b["worker"] < 0 for b in batches) else "workers"
    out.update(_law(out, records, loader, batches, waits, step_ns, wait_ns, host))
    out["errors"] = [
        {k: e.get(k) for k in ("worker", "pid", "batch", "index", "stage", "error")} for e in loader["errors"]
    ]
    out["notes"] = _notes(loader, out)
    return out


def _law(
    out: dict, records: dict, loader: dict, batches: list, waits: list, step_ns: int, wait_ns: int, host: dict
) -> dict:
    """Little's law: a step takes one batch every T_step (its time without the wait, per batch), a
    worker makes one every T_batch, so N = ceil(T_batch / T_step) workers keep up; bounded by the
    CPUs the process may use less what training takes (and, for workers that load on a CPU, less
    what other processes kept busy), shared by workers as their CPU share says.
    The limits, in the order the advice takes them: ``pin`` (one pin-memory thread pins slower than
    the steps use batches), ``copy`` (the batch's copy to the device takes a fifth of the step's own
    time or more), ``cpu`` (the workers needed, or those running, exceed what the CPUs run),
    ``samples`` (a few slow samples dominate), ``workers`` (more workers would keep up)."""
    law: dict = {
        "t_batch_us": None,
        "t_step_us": None,
        "workers_needed": None,
        "worker_cpu_share": None,
        "cpu_budget": None,
        "cpu_budget_source": None,
        "training_cpus": None,
        "other_cpus": None,
        "other_cpus_subtracted": None,
        "cpu_limit": None,
    }
    result = {
        "recommended_num_workers": None,
        "recommended_prefetch_factor": None,
        "bound": None,
        "limits": [],
        "law": law,
    }
    batch = out["batch_us"]
    if not batch or not waits or batch["mean"] <= 0:
        return result
    t_batch = batch["mean"]
    t_step = max((step_ns - wait_ns) / 1000.0 / len(waits), 1.0)
    needed = max(1, math.ceil(t_batch / t_step))
    # A worker's CPU need: its CPU time over the time it ran or could have run (a batch's time less
    # what it spent waiting for a CPU while ready: contention stretches a batch, not its need).
    busy = sum(_batch_ns(b) - max(b.get("runq_ns", -1), 0) for b in batches)
    share = min(1.0, sum(max(b["cpu_ns"], 0) for b in batches) / busy) if busy > 0 else 1.0
    budget = host.get("cpu_budget") or host.get("cpus_available")
    source = host.get("cpu_budget_source") or ("affinity mask" if host.get("cpus_available") else None)
    epoch = records.get("window_ns") or [0, 0]
    epoch_ns = max(epoch[1] - epoch[0], 1)
    main_load_cpu = sum(max(b["cpu_ns"], 0) for b in loader["batches"] if b["worker"] < 0)
    training = max(0.0, (records.get("process_cpu_ns", 0) - main_load_cpu) / epoch_ns)
    # Other processes' work on those CPUs over the span (steal included): their busy time less this
    # process's CPU time and its workers' (the batches' CPU time).
    other = None
    if records.get("cpus_busy_ns") is not None:
        workers_cpu = sum(max(b["cpu_ns"], 0) for b in loader["batches"] if b["worker"] >= 0)
        mine = records.get("process_cpu_ns", 0) + workers_cpu
        other = round(max(0.0, (records["cpus_busy_ns"] - mine) / epoch_ns), 2)
    law.update(
        t_batch_us=round(t_batch, 3),
        t_step_us=round(t_step, 3),
        workers_needed=needed,
        worker_cpu_share=round(share, 3),
        training_cpus=round(training, 2),
        other_cpus=other,
    )
    recommended = needed
    limits = []
    pin = out["pin_us"]
    if pin and pin["mean"] >= t_step:
        limits.append("pin")
    copy = out["transfer_us"]
    if copy and copy["mean"] >= COPY_SHARE_OF_STEP * t_step:
        limits.append("copy")
    if isinstance(budget, (int, float)) and budget > 0:
        # CPU-bound workers share what other processes left. One worker always fits (it takes over
        # the training process's own loading), except a first one where other processes left no CPU
        # for it: with num_workers=0 the limit is then 0.
        taken = other if other and share >= CPU_BOUND_WORKER_SHARE else None
        free = max(0.0, float(budget) - training - (taken or 0.0))
        limit = math.floor(free / max(share, MIN_WORKER_CPU_SHARE))
        limit = limit if taken and out["num_workers"] == 0 else max(1, limit)
        law.update(cpu_budget=budget, cpu_budget_source=source, other_cpus_subtracted=taken, cpu_limit=limit)
        if needed > limit:
            recommended = limit
            limits.append("cpu")
        elif out["num_workers"] > limit:  # more workers than the CPUs run: they slow each other
            limits.append("cpu")
    if out["slowest_samples"]:
        limits.append("samples")
    if needed > out["num_workers"] and "cpu" not in limits:
        limits.append("workers")
    sigma = batch["std"]
    result.update(
        recommended_num_workers=recommended,
        recommended_prefetch_factor=max(
            TORCH_DEFAULT_PREFETCH, math.ceil(1 + PREFETCH_SIGMAS * sigma / t_batch)
        ),
        bound=limits[0] if limits else None,
        limits=limits,
    )
    return result


def _notes(loader: dict, out: dict) -> list:
    notes = []
    if loader.get("unmeasured_iterators"):
        notes.append(
            "the workers of this loader started before gpuprof.profile did (a persistent_workers "
            "iterator from an earlier epoch): their stages are not measured; start the session before "
            "the first iter(loader) to see them"
        )
    if loader.get("dropped_records"):
        notes.append(
            f"{loader['dropped_records']} records of batches were not kept (a full pipe from a worker, "
            "or more than 200,000 in the span): the figures are over the rest"
        )
    died = [w for w in out["workers"] if w.get("status") == "died"]
    for w in died:
        code = w.get("exitcode")
        how = (
            f" (signal {-code})"
            if isinstance(code, int) and code < 0
            else f" (exit code {code})"
            if code
            else ""
        )
        notes.append(f"DataLoader worker {w['worker']} (pid {w['pid']}) died{how}")
    return notes
