"""A long live run costs the same per step at its end as near its start, and holds no more memory.
With schedule(active=1, repeat=0) every step is a span of its own, so
each step starts a collector epoch, records a `ProfilerStep#N` name never seen before, drains and
builds a Report; the collector's name table used to keep every such name and each drain copied it
all, so a step cost 1.1 ms at the start and 6.5 ms after 20,000 steps; prof.reports() used to keep
every span's Report; and a keyword call into the extension at every span churned Python's table of
interned strings until it doubled (+1.8 MiB, once, near span 7,600).

CI affords 6,000 steps here; bench/long_run.py runs 100,000 and times them (figures in
docs/performance.md); a test asserts no time. What made a late step slower is counted instead: the
strings each span's trace holds stay as many at the end as at the start (the old table made span N
carry N step names). Memory, over the last 4,500 steps: the C heap in use (glibc's mallinfo2, exact,
unlike /proc's RSS counters) under 1 MiB, the resident set from /proc/self/smaps_rollup (counted
page by page) under 2 MiB, and Python's allocated memory blocks (sys.getallocatedblocks) up by fewer
than 1,000: a leak of 240 bytes or of one Python object a step fails (measured here: +0.01 MiB,
+0.05 MiB and +14 blocks).
"""

from __future__ import annotations

import gc
import importlib.util
import sys
from array import array
from collections import Counter
from pathlib import Path

import pytest
import torch

import gpuprof

MiB = 1 << 20
_spec = importlib.util.spec_from_file_location(
    "long_run", Path(__file__).resolve().parents[3] / "bench" / "long_run.py"
)
long_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(long_run)


def test_per_step_cost_and_memory_stay_flat_over_6000_one_step_spans():
    if long_run.heap_bytes() < 0:
        pytest.skip("glibc's mallinfo2 is not available here")
    steps, window, early = 6_000, 1_000, 500
    x = torch.zeros(4)
    y = torch.ones(4)
    strings = array("q", bytes(8 * steps))  # each span's string table, by span
    memory = {}
    spans = Counter()  # steps per span -> spans (a list would grow by a step's worth itself)

    def ready(p):
        report = p.report()
        spans.update((len(report.steps),))
        strings[report.steps[0]["step"]] = report.trace.num_strings

    sched = gpuprof.schedule(wait=0, warmup=0, active=1, repeat=0)
    with gpuprof.profile(schedule=sched, on_trace_ready=ready) as prof:
        for i in range(steps):
            if i in (early + window, steps - 1):
                gc.collect()
                memory[i] = (long_run.heap_bytes(), long_run.rss_bytes(), sys.getallocatedblocks())
            x.add_(y)
            x.mul_(0.5)
            prof.step()
        last = prof.report()
    assert spans == {1: steps}  # every step was its own span
    assert len(prof.reports()) == 8  # of which the latest 8 are kept
    ops = {r["name"] for r in last.to_dict()["operators"]}
    assert {"aten::add_", "aten::mul_"} <= ops  # and recorded its operators

    # Every span holds the same few names (its step marker, the two ops, the thread's), the last as
    # the first: no name is carried from one span to the next.
    first, most = strings[early], max(strings[early:-1])
    assert 0 < first <= 16 and most == first, (first, most)
    (heap0, rss0, blocks0), (heap1, rss1, blocks1) = memory[early + window], memory[steps - 1]
    assert heap1 - heap0 < 1 * MiB, (heap1 - heap0) / MiB
    assert rss1 - rss0 < 2 * MiB, (rss1 - rss0) / MiB
    assert blocks1 - blocks0 < 1_000, blocks1 - blocks0


def test_steps_call_the_extension_without_keyword_arguments(monkeypatch):
    # Called with keywords, pybind11 interns the name of each parameter it looks up; names no Python
    # code holds were added to and removed from the interpreter's interned-string table at every
    # span, which made the table double once (+1.8 MiB, near span 7,600: too far for CI to reach).
    # Every call gpuprof makes into its extension during one-step spans is watched here (the real
    # functions run; the watcher only counts calls with keyword arguments).
    from gpuprof._native import _core

    keyword_calls = Counter()

    class Watch:
        def __getattr__(self, name):
            attr = getattr(_core, name)
            if not callable(attr) or isinstance(attr, type):
                return attr

            def call(*args, **kwargs):
                if kwargs:
                    keyword_calls[name] += 1
                return attr(*args, **kwargs)

            return call

    users = [
        m
        for n, m in list(sys.modules.items())
        if n.startswith("gpuprof") and getattr(m, "_core", None) is _core
    ]
    assert len(users) >= 2  # at least the session (session/) and collect/gpu.py
    for module in users:
        monkeypatch.setattr(module, "_core", Watch())
    x = torch.zeros(4)
    with gpuprof.profile(schedule=gpuprof.schedule(wait=0, warmup=0, active=1)) as prof:
        for _ in range(50):
            x.add_(1.0)
            prof.step()
    assert len(prof.reports()) == 8 and prof.report().to_dict()["source"]["span"] == 49
    assert keyword_calls == {}, dict(keyword_calls)
