"""Schedule semantics, hook installation and clean-up, errors."""

import pytest
import torch

import gpuprof
from gpuprof import ProfilerAction as A
from gpuprof.collect import hooks as _hooks_loader


def hooks():
    return _hooks_loader.hooks()


@pytest.mark.parametrize(
    "kw",
    [
        dict(wait=1, warmup=1, active=3),
        dict(wait=0, warmup=0, active=1),
        dict(wait=2, warmup=1, active=2, repeat=2),
        dict(wait=1, warmup=2, active=3, repeat=1, skip_first=3),
        dict(wait=0, warmup=1, active=2, repeat=0, skip_first=1),
    ],
)
def test_schedule_matches_torch_profiler(kw):
    # torch.profiler.schedule is the semantics users know; ours must give the same action per step.
    theirs = torch.profiler.schedule(**kw)
    ours = gpuprof.schedule(**kw)
    for step in range(40):
        assert ours(step).name == theirs(step).name, (kw, step)


def test_schedule_rejects_bad_values():
    with pytest.raises(ValueError, match="active must be at least 1"):
        gpuprof.schedule(wait=1, warmup=1, active=0)
    with pytest.raises(ValueError, match="wait must be a non-negative int"):
        gpuprof.schedule(wait=-1, warmup=1, active=1)


def test_recorded_steps_follow_the_schedule():
    # skip_first=1: step 0 idle. Cycles of 4 (wait 1, warmup 1, active 2), twice:
    #   steps 1 wait, 2 warmup, 3-4 recorded -> span 1;  5 wait, 6 warmup, 7-8 recorded -> span 2;
    #   repeat=2 exhausted: steps 9.. idle.
    spans, hooked = [], []

    def ready(prof):
        spans.append([s["step"] for s in prof.report().steps])

    sched = gpuprof.schedule(wait=1, warmup=1, active=2, repeat=2, skip_first=1)
    with gpuprof.profile(schedule=sched, on_trace_ready=ready) as prof:
        for _step in range(12):
            hooked.append(hooks().aten_has_global_callbacks())
            torch.ones(2).add(1)
            prof.step()
    assert spans == [[3, 4], [7, 8]]
    # Hooks exist exactly in warmup and recorded steps: never in skipped or waiting ones.
    expected = [sched(s) in (A.WARMUP, A.RECORD, A.RECORD_AND_SAVE) for s in range(12)]
    assert hooked == expected
    assert prof.report().steps[-1]["step"] == 8


def test_a_session_started_mid_run_numbers_steps_as_the_run_does():
    # first_step=100: the session starts in step 100, the schedule is asked about 100, 101, ...:
    # wait=100 puts step 100 in warm-up, 101-102 recorded.
    spans = []
    sched = gpuprof.schedule(wait=100, warmup=1, active=2, repeat=1)
    with gpuprof.profile(
        schedule=sched, first_step=100, on_trace_ready=lambda p: spans.append(p.report())
    ) as prof:
        assert prof.step_num == 100
        for _step in range(4):
            torch.ones(2).add(1)
            prof.step()
    assert [[s["step"] for s in r.steps] for r in spans] == [[101, 102]]
    assert prof.step_num == 104
    with pytest.raises(ValueError, match="first_step"):
        gpuprof.profile(first_step=-1)


def test_no_schedule_records_every_step_in_one_span():
    spans = []
    with gpuprof.profile(on_trace_ready=lambda p: spans.append(p.report())) as prof:
        for _ in range(5):
            torch.ones(2).add(1)
            prof.step()
    assert len(spans) == 1
    assert [s["step"] for s in spans[0].steps] == [0, 1, 2, 3, 4]


def test_block_without_step_calls_is_one_step():
    with gpuprof.profile() as prof:
        torch.randn(32, 32).mm(torch.randn(32, 32))
    assert len(prof.report().steps) == 1


def test_decorator_form():
    prof = gpuprof.profile()

    @prof
    def run():
        torch.randn(16, 16).sum()

    run()
    assert len(prof.report().steps) == 1
    assert not hooks().aten_has_global_callbacks()


def test_nested_profile_raises_clearly():
    with gpuprof.profile():
        with pytest.raises(gpuprof.ProfilerError, match="already active .*nested sessions are not supported"):
            with gpuprof.profile():
                pass
    assert not hooks().aten_has_global_callbacks()


def test_no_callback_remains_after_the_block():
    import torch.utils.data.dataloader as dl

    original_next = dl._BaseDataLoaderIter.__next__
    with gpuprof.profile() as prof:
        for _x in torch.utils.data.DataLoader(list(range(8)), batch_size=4):
            prof.step()
        assert hooks().aten_has_global_callbacks()
    assert not hooks().aten_has_global_callbacks()
    assert not hooks().installed()
    assert dl._BaseDataLoaderIter.__next__ is original_next
    # And the collector is idle: ops after the block are not recorded anywhere.
    from gpuprof._native import _core

    before = _core.collector_stats()["events"]
    torch.ones(3).add(1)
    assert _core.collector_stats()["events"] == before


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_exception_removes_hooks_and_keeps_data(exc):
    seen = []
    with pytest.raises(type(exc)):
        with gpuprof.profile(on_trace_ready=lambda p: seen.append(p)) as prof:
            for step in range(5):
                torch.randn(16, 16).mm(torch.randn(16, 16))
                if step == 3:
                    raise exc
                prof.step()
    assert not hooks().aten_has_global_callbacks()
    report = prof.report()
    # Steps 0-2 completed, step 3 failed midway: all four are kept, the last one partial.
    assert [s["step"] for s in report.steps] == [0, 1, 2, 3]
    assert report.to_dict()["source"]["partial_span"] is True
    assert "aten::mm" in report.trace.event_names("host_op")
    assert len(seen) == 1  # what ran before the error was handed to on_trace_ready too
    # A new session starts cleanly afterwards.
    with gpuprof.profile() as again:
        torch.ones(1).add(1)
    assert len(again.report().steps) == 1


def test_on_trace_ready_error_does_not_mask_the_training_error(caplog):
    def bad(_):
        raise ValueError("saver failed")

    with pytest.raises(RuntimeError, match="training failed"):
        with gpuprof.profile(on_trace_ready=bad):
            torch.ones(1).add(1)
            raise RuntimeError("training failed")
    assert "on_trace_ready raised" in caplog.text
    assert not hooks().aten_has_global_callbacks()


def test_report_before_any_span_explains():
    with gpuprof.profile(schedule=gpuprof.schedule(wait=5, warmup=1, active=1)) as prof:
        prof.step()
        with pytest.raises(gpuprof.ProfilerError, match="no recorded span yet.*step 1, action NONE"):
            prof.report()


def test_step_outside_block_raises():
    prof = gpuprof.profile()
    with pytest.raises(gpuprof.ProfilerError, match="outside"):
        prof.step()


def test_a_block_without_prof_step_is_told_at_its_end(caplog):
    """No prof.step() in the block: said when the block ends (once, naming the block's line), not
    only at report() after the whole loop; with no schedule the block is reported as one step."""
    x = torch.randn(16, 16)
    with gpuprof.profile() as prof:
        for _ in range(3):
            x.mm(x)
    line = test_a_block_without_prof_step_is_told_at_its_end.__code__.co_firstlineno + 4
    said = [r.getMessage() for r in caplog.records if "without a prof.step() call" in r.getMessage()]
    assert len(said) == 1
    assert f"test_profile_lifecycle.py:{line} ended without a prof.step() call" in said[0]
    assert "reported as 1 step" in said[0] and len(prof.report().steps) == 1
    caplog.clear()
    # A schedule that waits first: nothing recorded, and the warning says why.
    with gpuprof.profile(schedule=gpuprof.schedule(wait=1, warmup=0, active=2)) as prof:
        x.mm(x)
    said = [r.getMessage() for r in caplog.records if "without a prof.step() call" in r.getMessage()]
    assert len(said) == 1 and "nothing was recorded: the schedule's step 0 is NONE" in said[0]
    with pytest.raises(gpuprof.ProfilerError, match="no recorded span yet"):
        prof.report()


def test_no_warning_when_the_block_steps_or_is_a_decorated_call(caplog):
    x = torch.randn(16, 16)
    with gpuprof.profile() as prof:
        for _ in range(3):
            x.mm(x)
            prof.step()
    prof_fn = gpuprof.profile()

    @prof_fn
    def one_step():  # the decorator form: the whole call is one step, by design
        return x.mm(x)

    one_step()
    # An error leaving the block is the news: no second line about steps.
    with pytest.raises(RuntimeError, match="boom"):
        with gpuprof.profile():
            raise RuntimeError("boom")
    assert "without a prof.step() call" not in caplog.text
    assert len(prof.report().steps) == 3 and len(prof_fn.report().steps) == 1
