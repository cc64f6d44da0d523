"""A long live run costs the same per step at its end as near its start, and holds no more memory
(reliability issue, item 5). With schedule(active=1, repeat=0) every step is a span of its own, so
each step starts a collector epoch, records a `ProfilerStep#N` name never seen before, drains and
builds a Report; the collector's name table used to keep every such name and each drain copied it
all, so a step cost 1.1 ms at the start and 6.5 ms after 20,000 steps.

CI affords 6,000 steps here; bench/long_run.py runs 100,000 (figures in docs/performance.md).
Margins are for a loaded 2-CPU machine: step times are compared as medians over 1,000-step windows
(a busy neighbour slows both windows alike, and a median ignores the slow minority), late/early must
stay under 1.5 (with the old table a step's cost grew by about 0.27 ms every 1,000 steps, without
bound; tests/cpp/collector_test.cpp checks the table itself exactly); memory is the
C heap in use (glibc's mallinfo2, exact, unlike /proc's RSS counters) and the resident set from
/proc/self/smaps_rollup (counted page by page), each allowed 2.5 MiB / 4 MiB over 5,000 steps:
a leak of 512 bytes a step fails, while a single allocation that a library makes once (a 1.8 MiB
block appears at some point in such runs, once) passes.
"""

from __future__ import annotations

import gc
import importlib.util
import statistics
import time
from array import array
from pathlib import Path

import pytest
import torch

import gpuprof

MiB = 1 << 20
_spec = importlib.util.spec_from_file_location(
    "long_run", Path(__file__).resolve().parents[2] / "bench" / "long_run.py")
long_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(long_run)


def test_per_step_cost_and_memory_stay_flat_over_6000_one_step_spans():
    if long_run.heap_bytes() < 0:
        pytest.skip("glibc's mallinfo2 is not available here")
    steps, window, early, late = 6_000, 1_000, 500, 5_000
    x = torch.zeros(4)
    y = torch.ones(4)
    times = array("q", bytes(8 * steps))
    memory = {}
    spans = []
    sched = gpuprof.schedule(wait=0, warmup=0, active=1, repeat=0)
    with gpuprof.profile(schedule=sched, on_trace_ready=lambda p: spans.append(len(p.report().steps))) as prof:
        t_prev = time.perf_counter_ns()
        for i in range(steps):
            if i in (early + window, steps - 1):
                gc.collect()
                memory[i] = (long_run.heap_bytes(), long_run.rss_bytes())
                t_prev = time.perf_counter_ns()
            x.add_(y)
            x.mul_(0.5)
            prof.step()
            now = time.perf_counter_ns()
            times[i] = now - t_prev
            t_prev = now
        last = prof.report()
    assert len(spans) == steps and set(spans) == {1}          # every step was its own span
    ops = {r["name"] for r in last.to_dict()["operators"]}
    assert {"aten::add_", "aten::mul_"} <= ops                 # and recorded its operators

    first = statistics.median(times[early:early + window])
    final = statistics.median(times[late:late + window])
    assert final / first < 1.5, (first, final)
    (heap0, rss0), (heap1, rss1) = memory[early + window], memory[steps - 1]
    assert heap1 - heap0 < 2.5 * MiB, (heap1 - heap0) / MiB
    assert rss1 - rss0 < 4 * MiB, (rss1 - rss0) / MiB
