"""Which span prof.report() gives, and the latest spans through prof.reports() (bounded to
keep_reports spans for long runs)."""

from __future__ import annotations

import gc
import weakref

import pytest

torch = pytest.importorskip("torch")

import gpuprof  # noqa: E402


def _loop(schedule, steps, **kwargs):
    torch.manual_seed(0)
    m = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with gpuprof.profile(schedule=schedule, **kwargs) as prof:
        for _ in range(steps):
            m(torch.randn(4, 8)).sum().backward()
            opt.step()
            prof.step()
    return prof


def test_partial_last_span_is_reported_and_names_the_complete_one():
    # wait=1, warmup=1, active=3, 8 steps: span 0 records steps 2-4; the second cycle waits at 5,
    # warms up at 6 and records step 7 when the block ends: a partial span, as torch.profiler ends.
    prof = _loop(gpuprof.schedule(wait=1, warmup=1, active=3), 8)
    spans = prof.reports()
    assert [[s["step"] for s in r.steps] for r in spans] == [[2, 3, 4], [7]]
    src = prof.report().to_dict()["source"]
    assert prof.report() is spans[-1]
    assert src["partial_span"] and (src["first_step"], src["last_step"]) == (7, 7)
    assert (
        src["complete_span"] == 0
        and "steps 2..4" in src["note"]
        and "prof.reports()[0] gives it" in src["note"]
    )
    assert src["note"] in prof.report().to_text(width=200)
    first = spans[0].to_dict()["source"]
    assert not first["partial_span"] and (first["first_step"], first["last_step"]) == (2, 4)
    assert "note" not in first


def test_repeat_zero_keeps_every_cycle_and_drops_old_traces():
    prof = _loop(gpuprof.schedule(wait=0, warmup=1, active=2), 12)  # cycles of 3: 4 spans
    spans = prof.reports()
    assert [[s["step"] for s in r.steps] for r in spans] == [[1, 2], [4, 5], [7, 8], [10, 11]]
    assert [r.to_dict()["source"]["span"] for r in spans] == [0, 1, 2, 3]
    assert not any(r.to_dict()["source"]["partial_span"] for r in spans)
    # Only the two latest spans keep their native trace (memory stays bounded on long runs).
    assert [r.trace is not None for r in spans] == [False, False, True, True]


def _spans(prof):
    return [r.to_dict()["source"]["span"] for r in prof.reports()]


def test_many_spans_keep_only_the_latest_reports_and_free_the_others():
    # active=1, repeat=0: every step is a span. 300 spans; reports() keeps the latest 8 (the default)
    # and every older Report is freed (a weak reference to each, taken in on_trace_ready, dies), so
    # a run of days with repeat=0 holds 8 reports, not one per step.
    refs = []
    steps = 300
    torch.manual_seed(0)
    m = torch.nn.Linear(8, 8)
    with gpuprof.profile(
        schedule=gpuprof.schedule(wait=0, warmup=0, active=1),
        on_trace_ready=lambda p: refs.append(weakref.ref(p.report())),
    ) as prof:
        for _ in range(steps):
            m(torch.randn(4, 8)).sum().backward()
            prof.step()
    assert len(refs) == steps
    assert gpuprof.profile().keep_reports == 8
    kept = prof.reports()
    assert len(kept) == 8 and _spans(prof) == list(range(steps - 8, steps))  # true span indices
    assert [r.steps[0]["step"] for r in kept] == list(range(steps - 8, steps))
    assert prof.report() is kept[-1]
    assert [r.trace is not None for r in kept] == [False] * 6 + [True, True]
    gc.collect()
    assert sum(ref() is not None for ref in refs) == 8


def test_keep_reports_none_keeps_every_span_and_a_bound_applies_to_any_schedule():
    every = _loop(gpuprof.schedule(wait=0, warmup=0, active=1), 20, keep_reports=None)
    assert _spans(every) == list(range(20))
    assert [r.trace is not None for r in every.reports()] == [False] * 18 + [True, True]
    three = _loop(gpuprof.schedule(wait=1, warmup=0, active=1), 20, keep_reports=3)  # 10 spans
    assert _spans(three) == [7, 8, 9] and [r.steps[0]["step"] for r in three.reports()] == [15, 17, 19]
    for bad in (0, -1, 2.5, True, "8"):
        with pytest.raises(ValueError, match="keep_reports"):
            gpuprof.profile(keep_reports=bad)


@pytest.mark.parametrize("keep, index", [(None, 4), (8, 4), (3, 1), (2, 0)])
def test_partial_span_note_points_at_a_report_that_is_kept(keep, index):
    # cycles of 3 (wait=1, warmup=0, active=2) over 17 steps: complete spans 0-4 record steps
    # 1-2, 4-5, ..., 13-14; step 16 starts span 5, cut short by the end of the block.
    prof = _loop(gpuprof.schedule(wait=1, warmup=0, active=2), 17, keep_reports=keep)
    src = prof.report().to_dict()["source"]
    assert src["partial_span"] and (src["first_step"], src["span"], src["complete_span"]) == (16, 5, 4)
    assert f"span 4 is complete (steps 13..14): prof.reports()[{index}] gives it" in src["note"]
    named = prof.reports()[index].to_dict()["source"]
    assert named["span"] == 4 and not named["partial_span"]


def test_partial_span_note_with_keep_reports_1_says_the_complete_span_is_not_kept():
    prof = _loop(gpuprof.schedule(wait=1, warmup=0, active=2), 17, keep_reports=1)
    assert _spans(prof) == [5]
    src = prof.report().to_dict()["source"]
    assert src["complete_span"] == 4
    assert (
        "span 4 is complete (steps 13..14) (not kept: keep_reports=1; on_trace_ready received it)"
        in src["note"]
    )


def test_report_writing_is_not_counted_in_the_next_step():
    # Every step is a span of its own; on_trace_ready takes 300 ms (a slow file system). The steps
    # themselves do a millisecond of work: none of them may hold the previous span's 300 ms.
    import time

    torch = pytest.importorskip("torch")
    spans = []

    def slow_save(prof):
        spans.append(prof.report())
        time.sleep(0.3)

    with gpuprof.profile(
        schedule=gpuprof.schedule(wait=0, warmup=0, active=1, repeat=0), on_trace_ready=slow_save
    ) as prof:
        for _ in range(4):
            torch.randn(64, 64).sum()
            prof.step()
    steps = [s for r in spans for s in r.steps]
    assert len(steps) >= 3
    assert all(s["total_us"] < 150_000 for s in steps), [s["total_us"] for s in steps]
    # The time is not hidden either: each report says what gpuprof took between the steps.
    for r in spans:
        src = r.source
        assert 0 <= src["report_build_s"] < 30
        assert src["report_write_s"] >= 0.3  # the 300 ms save, measured
        note = f"s building this report, {src['report_write_s']:.3f} s writing it"
        assert note in r.to_text(width=300) and note in r.to_markdown()
        assert "(between two steps, counted in neither)" in r.to_text(width=300)
