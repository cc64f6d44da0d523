"""The default device-memory path of live sessions: torch's caching-allocator statistics read at
step boundaries (collect.gpu.AllocatorSampler), with the statistics torch.cuda would return fed in
(no CUDA here; tests/gpu checks the same against a real allocator).

Levels (MiB): every boundary sees 64 allocated. Step 1 peaks at 96 and step 2 at 192, each a new
high-water mark, so each row is that exact peak. Step 3 peaks at 72 (under the mark: the allocator's
statistics cannot show it), so its row is the larger of its boundary levels, 64, a lower bound,
and never the 192 of the step before: the peak of step 2 is stamped inside step 2 even where the
collector's clock ticks several times a nanosecond (the TSC), where one tick before the boundary
converts to the boundary's own nanosecond.
"""

from __future__ import annotations

import sys
import time
import types

from gpuprof._native import _core
from gpuprof.collect.gpu import AllocatorSampler
from gpuprof.report.build import build_report

MiB = 1 << 20


def _fake_torch(stats: dict):
    """torch.cuda's allocator statistics, nested as memory_stats_as_nested_dict() returns them."""

    def nested(device):
        return {
            kind: {"all": {"current": stats[f"{kind}.all.current"], "peak": stats[f"{kind}.all.peak"]}}
            for kind in ("allocated_bytes", "reserved_bytes")
        }

    cuda = types.SimpleNamespace(
        is_initialized=lambda: True,
        device_count=lambda: 1,
        current_device=lambda: 0,
        memory_stats_as_nested_dict=nested,
    )
    return types.SimpleNamespace(cuda=cuda)


def test_a_step_under_the_high_water_mark_does_not_take_the_previous_steps_peak(monkeypatch):
    stats = {
        "allocated_bytes.all.current": 64 * MiB,
        "reserved_bytes.all.current": 256 * MiB,
        "allocated_bytes.all.peak": 64 * MiB,
        "reserved_bytes.all.peak": 256 * MiB,
    }
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(stats))
    sampler = AllocatorSampler()
    _core.collector_start(1 << 16)
    try:
        start = _core.collector_ticks()
        sampler.sample(start)
        for step, peak in enumerate((96, 192, 72), start=1):
            time.sleep(0.002)
            stats["allocated_bytes.all.peak"] = max(stats["allocated_bytes.all.peak"], peak * MiB)
            end = _core.collector_ticks()
            sampler.sample(end, start)
            _core.collector_record("step", f"ProfilerStep#{step}", start, end)
            start = end
    finally:
        _core.collector_stop()
    trace = _core.collector_drain()
    rows = [r for r in build_report(trace).to_dict()["memory"] if r["device"] == 0]
    assert [r["peak_allocated_bytes"] // MiB for r in rows] == [96, 192, 64]
    assert all(r["peak_reserved_bytes"] == 256 * MiB for r in rows)
