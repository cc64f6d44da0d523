"""Memory in live sessions: the host's resident set size at every step boundary, and, with
profile_memory=True, the device allocator's levels as torch's caching allocator reports them
(c10::reportMemoryUsageToProfiler).

No CUDA here: the device levels are fed through the same c10 entry point the CUDA caching allocator
calls, with the values it would pass. tests/gpu checks them, and the default (allocator statistics
at step boundaries), against torch.cuda's own statistics.
"""

from __future__ import annotations

import mmap

import pytest
import torch

import gpuprof
from gpuprof.collect import hooks as _hooks_loader
from gpuprof.collect.schedule import schedule

MiB = 1 << 20


def _hooks():
    return _hooks_loader.hooks()


def _rows(report, device):
    return [r for r in report.to_dict()["memory"] if r["device"] == device]


def test_host_rss_per_step_shows_memory_a_loop_keeps():
    # Each of 8 steps keeps 32 MiB of new memory whose pages are all written, so the process's
    # resident set grows by 32 MiB a step. RSS is sampled at each step's start and end, so step k's
    # peak is its end's RSS. The kernel keeps RSS in per-CPU counters that /proc/self/statm reads
    # without summing exactly: a reading may lag by tens of MiB (64 MiB lumps were seen on this
    # 2-CPU VM), so the growth is checked over the run, 7 x 32 = 224 MiB within that slack, and
    # never negative step to step. The memory is a fresh anonymous mapping rather than a tensor:
    # malloc may hand a tensor pages an earlier test freed but left resident (then RSS rightly does
    # not grow), which would make the test depend on what ran before it.
    slack = 64 * MiB
    block = b"\x01" * MiB
    kept = []
    with gpuprof.profile() as prof:
        for _ in range(8):
            m = mmap.mmap(-1, 32 * MiB)
            for _ in range(32):
                m.write(block)
            kept.append(m)
            prof.step()
    host = _rows(prof.report(), -1)
    assert [r["step"] for r in host] == list(range(8))
    rss = [r["peak_rss_bytes"] for r in host]
    assert all(b >= a for a, b in zip(rss, rss[1:])), rss
    assert abs((rss[-1] - rss[0]) - 7 * 32 * MiB) <= slack, rss
    assert all(r["peak_allocated_bytes"] is None for r in host)  # no host allocator levels


def test_device_allocator_levels_become_per_step_peaks():
    # What the caching allocator reports on GPU 0 in three steps (size, allocated, reserved after):
    #   step 0: +100 MiB -> 100 / 128 reserved, +50 -> 150 / 256, -50 -> 100 / 256   peak 150 / 256
    #   step 1: +20 -> 120 / 256, -20 -> 100 / 256                                   peak 120 / 256
    #           (the 100 MiB carried in is below 120)
    #   step 2: nothing: the level carried in (100 / 256) is the step's peak
    # A host report without the block's address (torch's CPU allocator always gives one) gives the
    # host no level the per-step rows could take a peak of.
    levels = [[(100, 100, 128), (50, 150, 256), (-50, 100, 256)], [(20, 120, 256), (-20, 100, 256)], []]
    h = _hooks()
    with gpuprof.profile(profile_memory=True) as prof:
        for step in levels:
            for size, allocated, reserved in step:
                h.report_memory_usage(size * MiB, allocated * MiB, reserved * MiB, "cuda:0")
            h.report_memory_usage(4096, 4096, 0, "cpu")
            prof.step()
    report = prof.report()
    dev = _rows(report, 0)
    assert [(r["step"], r["peak_allocated_bytes"] // MiB, r["peak_reserved_bytes"] // MiB) for r in dev] == [
        (0, 150, 256),
        (1, 120, 256),
        (2, 100, 256),
    ]
    assert all(r["peak_allocated_bytes"] is None for r in _rows(report, -1))
    # The device summary's peak is the span's highest level.
    (summary,) = report.to_dict()["devices"]
    assert summary["id"] == 0 and summary["peak_allocated_bytes"] == 150 * MiB


def test_levels_are_kept_only_in_active_steps():
    # schedule(wait=1, active=1, repeat=1): step 0 waits, step 1 records. A level reported while
    # waiting is not in the report; the one in step 1 is.
    h = _hooks()
    with gpuprof.profile(
        schedule=schedule(wait=1, warmup=0, active=1, repeat=1), profile_memory=True
    ) as prof:
        for allocated in (700, 300):
            h.report_memory_usage(MiB, allocated * MiB, 1024 * MiB, "cuda:0")
            prof.step()
    assert [(r["step"], r["peak_allocated_bytes"] // MiB) for r in _rows(prof.report(), 0)] == [(1, 300)]
    assert not h.memory_reporter_installed()


def test_without_profile_memory_no_reporter_is_installed():
    # The default reads the allocator's statistics at step boundaries (nothing to read without
    # CUDA): the reporter is not installed, reports go nowhere, and torch.profiler may start inside.
    h = _hooks()
    x = torch.randn(16, 16)
    with gpuprof.profile() as prof:
        assert not h.memory_reporter_installed()
        h.report_memory_usage(MiB, MiB, MiB, "cuda:0")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as tp:
            torch.mm(x, x)
        prof.step()
    assert _rows(prof.report(), 0) == []
    assert any(e.key == "aten::mm" for e in tp.key_averages())


def test_reporter_is_invisible_to_torch_and_torch_profiler_refuses_to_start_on_top():
    # Our reporter sits where torch.profiler keeps its state, configured "disabled": torch says no
    # profiler is running. torch.profiler itself refuses to start on this thread while it is there
    # (torch's own rule, documented with profile_memory), and refusing leaves our session intact.
    h = _hooks()
    with gpuprof.profile(profile_memory=True) as prof:
        assert h.memory_reporter_installed()
        assert not torch.autograd._profiler_enabled()
        with pytest.raises(RuntimeError, match="already enabled"):
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
                pass
        h.report_memory_usage(MiB, 42 * MiB, 64 * MiB, "cuda:0")
        prof.step()
    assert not torch.autograd._profiler_enabled()
    assert [r["peak_allocated_bytes"] for r in _rows(prof.report(), 0)] == [42 * MiB]
    # Once the session is over, torch.profiler starts as usual.
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as tp:
        torch.ones(4).sum()
    assert any(e.key == "aten::sum" for e in tp.key_averages())


def test_session_inside_torch_profiler_falls_back_to_step_boundaries():
    # torch.profiler already runs: its state gets the allocator's reports, ours is not installed
    # (torch's callbacks would read it as theirs), torch.profiler goes on unharmed, and the report
    # says why in one line.
    h = _hooks()
    x = torch.randn(8, 8)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as tp:
        with gpuprof.profile(profile_memory=True) as prof:
            assert not h.memory_reporter_installed()
            torch.mm(x, x)
            prof.step()
        torch.mm(x, x)
    assert sum(e.count for e in tp.key_averages() if e.key == "aten::mm") == 2
    md = prof.report().to_dict()["metadata"]
    assert md["device_memory"].startswith("torch.profiler is active on this thread")
    assert "step boundaries" in md["device_memory"]
    assert _rows(prof.report(), 0) == []


def test_failing_block_removes_the_reporter():
    h = _hooks()
    with pytest.raises(RuntimeError, match="boom"):
        with gpuprof.profile(profile_memory=True):
            assert h.memory_reporter_installed()
            raise RuntimeError("boom")
    assert not h.memory_reporter_installed()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        pass


def test_text_and_markdown_reports_state_the_memory_in_a_sentence():
    # Steps 0-2 on GPU 0 (capacity 80 GiB) peak at 10, 30 and 20 GiB (reserved 32 GiB): the line
    # names step 1's 30 GiB, 38% of 80. Host RSS 1.0, 1.5, 1.25 GiB: +256 MiB from the first step to
    # the last, peak 1.5 GiB in step 1.
    GiB = 1 << 30
    d = _real_cpu_report().to_dict()
    d["memory"] = [
        {
            "step": s,
            "ts_ns": s,
            "device": 0,
            "peak_allocated_bytes": p * GiB,
            "peak_reserved_bytes": 32 * GiB,
            "capacity_bytes": 80 * GiB,
            "peak_rss_bytes": None,
        }
        for s, p in ((0, 10), (1, 30), (2, 20))
    ] + [
        {
            "step": s,
            "ts_ns": s,
            "device": -1,
            "peak_allocated_bytes": None,
            "peak_reserved_bytes": None,
            "capacity_bytes": None,
            "peak_rss_bytes": int(p * GiB),
        }
        for s, p in ((0, 1.0), (1, 1.5), (2, 1.25))
    ]
    rep = gpuprof.Report.from_dict(d)
    gpu_line = "GPU 0: peak allocated 30.0 GiB of 80.0 GiB (38%) in step 1, reserved 32.0 GiB"
    host_line = "Host RSS: 1.0 GiB at step 0, 1.2 GiB at step 2 (+256.0 MiB), peak 1.5 GiB (step 1)"
    for text in (rep.to_text(color=False), rep.to_markdown()):
        assert gpu_line in text and host_line in text


def _real_cpu_report():
    with gpuprof.profile() as prof:
        for _ in range(2):
            torch.ones(1000).sum()
            prof.step()
    return prof.report()
