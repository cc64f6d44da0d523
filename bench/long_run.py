"""Cost of a long live run: does a step cost the same at step 100,000 as at step 1,000, and does
memory stay put?

    python bench/long_run.py [--steps 100000] [--window 1000] [--json out.json]

A training loop of a few tiny torch ops per step runs under
`gpuprof.profile(schedule=gpuprof.schedule(wait=0, warmup=0, active=1, repeat=0))`: every step is a
span of its own, so every step starts a collector epoch, records its ops and its `ProfilerStep#N`
marker, drains and builds a Report. Each step is timed whole (ops + prof.step()). The figure is the
median step time of the window starting at step 1,000 against the last window's, as a ratio, and
the growth of the resident set between those two points (read from /proc/self/smaps_rollup, which
counts pages exactly; /proc/self/statm can lag by tens of MiB), of the C heap (mallinfo2) and of the
number of Python objects' memory blocks (sys.getallocatedblocks). The same loop then runs again with
no session (the control): what grows there is the interpreter's and torch's, not gpuprof's.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import ctypes
import gc
import json
import platform
import statistics
import sys
import time

import torch

import gpuprof


def rss_bytes() -> int:
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Rss:"):
                return int(line.split()[1]) * 1024
    return -1


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_size_t)
        for n in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def heap_bytes() -> int:
    """Bytes malloc has handed out and not had back (glibc's mallinfo2), -1 where unavailable."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        m = libc.mallinfo2()
        return int(m.uordblks + m.hblkhd)
    except (OSError, AttributeError):
        return -1


def run(steps: int, window: int, marks: list[int], profiled: bool = True) -> dict:
    """Runs `steps` steps (under a session unless `profiled` is False); returns per-step times (ns)
    and (rss, heap, Python blocks) at each step in `marks`."""
    torch.set_num_threads(1)
    x = torch.zeros(4)
    y = torch.ones(4)
    times = array.array("q", bytes(8 * steps))  # preallocated: no allocation per step
    memory: dict[int, tuple[int, int]] = {}
    mark_set = set(marks)
    reports = 0

    def count(prof):
        nonlocal reports
        reports += 1

    sched = gpuprof.schedule(wait=0, warmup=0, active=1, repeat=0)
    prof = gpuprof.profile(schedule=sched, on_trace_ready=count) if profiled else None
    with prof if profiled else contextlib.nullcontext():
        t_prev = time.perf_counter_ns()
        for i in range(steps):
            if i in mark_set:
                gc.collect()
                memory[i] = (rss_bytes(), heap_bytes(), sys.getallocatedblocks())
                t_prev = time.perf_counter_ns()  # the reading itself is not a step's cost
            x.add_(y)
            x.mul_(0.5)
            x.sub_(y)
            if profiled:
                prof.step()
            now = time.perf_counter_ns()
            times[i] = now - t_prev
            t_prev = now
    if profiled:
        assert len(prof.report().steps) == 1
    return {
        "times": times,
        "memory": memory,
        "reports": reports,
        "reports_kept": len(prof.reports()) if profiled else 0,
    }


def summarise(times: list[int], memory: dict, early: int, late: int, window: int) -> dict:
    e = statistics.median(times[early : early + window])
    la = statistics.median(times[late : late + window])
    (rss0, heap0, blocks0), (rss1, heap1, blocks1) = memory[early], memory[late + window]
    return {
        "early_step": early,
        "late_step": late,
        "window": window,
        "early_median_us": e / 1e3,
        "late_median_us": la / 1e3,
        "late_to_early": la / e,
        "rss_growth_mib": (rss1 - rss0) / 2**20,
        "heap_growth_mib": (heap1 - heap0) / 2**20 if heap0 >= 0 else None,
        "python_blocks_growth": blocks1 - blocks0,
    }


def medians_by_step(times, steps: int, window: int) -> dict:
    """The median step time (us) of the window starting at every 20th of the run: the trend."""
    return {
        i: statistics.median(times[i : i + window]) / 1e3
        for i in range(0, steps - window + 1, max(1, steps // 20))
    }


def by_step(memory: dict) -> dict:
    return {
        i: {"rss_mib": m[0] / 2**20, "heap_mib": m[1] / 2**20, "python_blocks": m[2]}
        for i, m in sorted(memory.items())
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--window", type=int, default=1_000)
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--no-control", action="store_true", help="skip the run without a session")
    a = p.parse_args()
    early = min(1_000, a.steps // 4)
    window = min(a.window, a.steps // 4)
    late = a.steps - window - 1
    t0 = time.perf_counter()
    marks = sorted({early, late + window, *range(0, a.steps, max(1, a.steps // 20))})
    r = run(a.steps, window, marks)
    s = summarise(r["times"], r["memory"], early, late, window)
    s.update(
        {
            "median_us_by_step": medians_by_step(r["times"], a.steps, window),
            "memory_by_step": by_step(r["memory"]),
            "steps": a.steps,
            "spans": r["reports"],
            "reports_kept": r["reports_kept"],
            "seconds": time.perf_counter() - t0,
            "machine": f"{platform.processor() or platform.machine()}, torch {torch.__version__}",
        }
    )
    print(
        f"{a.steps} steps, schedule(active=1, repeat=0): {r['reports']} spans in {s['seconds']:.0f} s "
        f"({r['reports_kept']} reports kept)"
    )
    print(
        f"median step at step {early:,}: {s['early_median_us']:.0f} us; at step {late:,}: "
        f"{s['late_median_us']:.0f} us; late/early = {s['late_to_early']:.3f}"
    )
    print(
        f"growth from step {early:,} to step {late + window:,}: RSS {s['rss_growth_mib']:+.2f} MiB, "
        f"C heap {s['heap_growth_mib']:+.2f} MiB, Python blocks {s['python_blocks_growth']:+,}"
    )
    if not a.no_control:
        c = run(a.steps, window, marks, profiled=False)
        cs = summarise(c["times"], c["memory"], early, late, window)
        cs["memory_by_step"] = by_step(c["memory"])
        s["control"] = cs
        print(
            f"control (same loop, no session): median step {cs['early_median_us']:.1f} us -> "
            f"{cs['late_median_us']:.1f} us; RSS {cs['rss_growth_mib']:+.2f} MiB, C heap "
            f"{cs['heap_growth_mib']:+.2f} MiB, Python blocks {cs['python_blocks_growth']:+,}"
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(s, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
