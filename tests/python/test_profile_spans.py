"""Which span prof.report() gives, and every span through prof.reports() (issue 16, item 7)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import gpuprof  # noqa: E402


def _loop(schedule, steps):
    torch.manual_seed(0)
    m = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with gpuprof.profile(schedule=schedule) as prof:
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
    assert src["complete_span"] == 0 and "steps 2..4" in src["note"] and "prof.reports()" in src["note"]
    assert src["note"] in prof.report().to_text(width=200)
    first = spans[0].to_dict()["source"]
    assert not first["partial_span"] and (first["first_step"], first["last_step"]) == (2, 4)
    assert "note" not in first


def test_repeat_zero_keeps_every_cycle_and_drops_old_traces():
    prof = _loop(gpuprof.schedule(wait=0, warmup=1, active=2), 12)   # cycles of 3: 4 spans
    spans = prof.reports()
    assert [[s["step"] for s in r.steps] for r in spans] == [[1, 2], [4, 5], [7, 8], [10, 11]]
    assert [r.to_dict()["source"]["span"] for r in spans] == [0, 1, 2, 3]
    assert not any(r.to_dict()["source"]["partial_span"] for r in spans)
    # Only the two latest spans keep their native trace (memory stays bounded on long runs).
    assert [r.trace is not None for r in spans] == [False, False, True, True]
