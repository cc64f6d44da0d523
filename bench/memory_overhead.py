"""The cost of profile_memory=True per allocation, side by side with torch.profiler's, in one run.

    python bench/memory_overhead.py [--allocs 5000] [--json out.json]          # CPU instructions
    python bench/memory_overhead.py --wall [--allocs 200000] [--rounds 7]      # nanoseconds

One loop of `torch.empty(16)` (one aten::empty op, one 64-byte allocation by torch's CPU allocator and
its free when the result is dropped) runs unprofiled; under gpuprof without and with
profile_memory=True; under torch.profiler (CPU activity, no stack) without and with
profile_memory=True. What recording the allocations adds is the difference between each profiler's
two variants: for gpuprof, the allocator asking whether memory is profiled, torch's CPU allocator
keeping its table of live blocks under a lock (it does so only while a profiler listens), and
gpuprof's reporter appending one record per allocation and per free to its thread's buffer; for
torch.profiler the same table and its own records.

By default the loop is counted in CPU instructions under valgrind's callgrind (repeatable on a
loaded machine, as bench/overhead_callgrind.py does for operators: only the loop's own thread,
zeroed before it and dumped after it, each variant with N and 3N allocations so that costs paid once
per loop cancel). --wall times it instead (variants interleaved round by round, median ns per
allocation).

--side-costs times the two other things profile_memory=True does (collect/tensors.py): reading the
gradients' storages at every optimizer step (us per gradient, 160 parameters as in ResNet-50), and,
once a session, looking the models up among Python's objects (us per object the collector tracks).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _callgrind import callgrind_counts, per_unit  # noqa: E402

VARIANTS = ("none", "gpuprof", "gpuprof memory", "torch.profiler", "torch.profiler memory")


def _loop(n: int) -> None:
    import torch

    for _ in range(n):
        torch.empty(16)


def _run(name: str, n: int, body) -> None:
    """``body(n)`` inside the variant's profiler."""
    import torch

    import gpuprof

    if name == "none":
        body(n)
    elif name.startswith("gpuprof"):
        memory = name.endswith("memory")
        with gpuprof.profile(max_events=8 * n + 1000, gpu=False, profile_memory=memory) as prof:
            body(n)
            prof.step()
        report = prof.report()
        assert report.counts["dropped"] == 0
        if memory:  # every allocation and free of the loop was recorded
            assert (
                sum(r["self_alloc_count"] for r in report.data["memory_ops"] if r["name"] == "aten::empty")
                >= n
            )
    else:
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            profile_memory=name.endswith("memory"),
            with_stack=False,
        ):
            body(n)


def child(allocs: int) -> None:
    """Runs under callgrind: each variant's loop between the zero and dump markers."""
    import torch

    torch.set_num_threads(1)

    def measured(n):
        os.getppid()  # callgrind: --zero-before=getppid
        _loop(n)
        os.getpgrp()  # callgrind: --dump-before=getpgrp

    for name in VARIANTS:  # warm every path (first-use allocations, lazy imports)
        _run(name, 2000, _loop)
    measured(allocs)  # the first counted segment carries a one-off cost: not a variant's
    print("MEASURED discard", flush=True)
    for name in VARIANTS:
        for n in (allocs, 3 * allocs):
            _run(name, n, measured)
            print(f"MEASURED {name}@{n}", flush=True)


def callgrind(allocs: int) -> dict:
    counts, _ = callgrind_counts(__file__, ["--allocs", allocs])
    per = per_unit(counts, VARIANTS, allocs)
    return {"unit": "instructions per allocation (and its free)", "per_allocation": per}


def wall(allocs: int, rounds: int) -> dict:
    import torch

    torch.set_num_threads(1)

    def timed(n):
        t0 = time.perf_counter_ns()
        _loop(n)
        return time.perf_counter_ns() - t0

    samples = {v: [] for v in VARIANTS}
    for v in VARIANTS:
        _run(v, 2000, _loop)
    order = list(VARIANTS)
    for _ in range(rounds):
        random.shuffle(order)  # no variant always runs right after another
        for v in order:
            took: list = []
            _run(v, allocs, lambda n, took=took: took.append(timed(n)))
            samples[v].append(took[0] / allocs)
    return {
        "unit": "ns per allocation (and its free), median over rounds",
        "per_allocation": {v: statistics.median(s) for v, s in samples.items()},
    }


def side_costs(rounds: int) -> dict:
    import gc

    import torch

    from gpuprof._native import _core
    from gpuprof.collect.tensors import KnownTensors

    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(80)])  # 160 parameters
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 64)).sum().backward()
    opt.step()
    known = KnownTensors()
    known.every_step = True
    _core.collector_start(10_000_000)
    try:
        per_step = []
        for _ in range(rounds):
            t0 = time.perf_counter_ns()
            for _ in range(100):
                known._on_optimizer_step(opt, (), {})
            per_step.append((time.perf_counter_ns() - t0) / 100 / 1000)
        scans = []
        for _ in range(rounds):
            known._modules = None
            objects = len(gc.get_objects())
            t0 = time.perf_counter_ns()
            known._find_modules()
            scans.append((time.perf_counter_ns() - t0) / objects / 1000)
    finally:
        _core.collector_stop()
    step_us = statistics.median(per_step)
    return {
        "gradients_per_optimizer_step_us": step_us,
        "per_gradient_us": step_us / 160,
        "module_lookup_per_object_us": statistics.median(scans),
        "objects_tracked": objects,
    }


def summarize(r: dict) -> dict:
    per = r["per_allocation"]
    gp = per["gpuprof memory"] - per["gpuprof"]
    tp = per["torch.profiler memory"] - per["torch.profiler"]
    r["recording_added"] = {"gpuprof": gp, "torch.profiler": tp}
    r["ratio_gpuprof_to_torch_profiler"] = gp / tp if tp else None
    r["gpuprof_memory_vs_unprofiled"] = per["gpuprof memory"] - per["none"]
    return r


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--allocs", type=int, default=None)
    p.add_argument("--wall", action="store_true", help="time the loop instead of counting instructions")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--side-costs", action="store_true", help="also time the per-step and per-session costs")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.allocs)
        return
    import torch

    allocs = args.allocs or (200_000 if args.wall else 5_000)
    r = wall(allocs, args.rounds) if args.wall else callgrind(allocs)
    r = summarize(r)
    r.update(
        {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "allocs": allocs,
            "loop": "torch.empty(16): one aten::empty, one 64-byte CPU allocation and its free",
            "torch": torch.__version__,
            "machine": platform.processor() or platform.machine(),
            "tool": "time.perf_counter_ns" if args.wall else "valgrind --tool=callgrind",
        }
    )
    print(f"{r['loop']}; {r['unit']}; torch {r['torch']}")
    for v, x in r["per_allocation"].items():
        print(f"  {v:24} {x:10.1f}")
    added = r["recording_added"]
    print(
        f"recording allocations adds {added['gpuprof']:.1f} under gpuprof and {added['torch.profiler']:.1f} "
        f"under torch.profiler ({r['ratio_gpuprof_to_torch_profiler']:.2f}x); "
        f"gpuprof with profile_memory=True adds {r['gpuprof_memory_vs_unprofiled']:.1f} in all"
    )
    if args.side_costs:
        r["side_costs"] = side_costs(args.rounds)
        c = r["side_costs"]
        print(
            f"gradients read at an optimizer step: {c['gradients_per_optimizer_step_us']:.0f} us for 160 "
            f"({c['per_gradient_us']:.2f} us each); models looked up once a session: "
            f"{c['module_lookup_per_object_us']:.3f} us per tracked object ({c['objects_tracked']:,} here)"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2)


if __name__ == "__main__":
    main()
