"""PyTorch Lightning: ``Trainer(profiler=GpuprofProfiler())``, or ``callbacks=[GpuprofCallback()]``.

Steps are optimizer steps, found where the optimizer steps (``gpuprof.collect.autostep``): with
gradient accumulation the batches of one update are one step, and manual optimisation works the
same. Lightning runs forward and backward inside ``optimizer.step(closure)``; a step's boundary is
taken when that call returns, so each step is whole. When a span of the schedule ends, the reports
are written (``out``; per rank under Lightning's DDP strategies) and the headline numbers go to the
Trainer's loggers. With ``ranges=True`` the profiler form also marks Lightning's own actions
(``run_training_batch``, ``[LightningModule]...training_step``, ...) as gpuprof ranges, so the
report's ranges table says where each step's time went among Lightning's hooks. lightning is
imported only by this module.
"""

from __future__ import annotations

import sys
from typing import Optional

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.profilers import Profiler

from ._span import SpanOwner, TrainerSpan, watch_span


class _ToTrainerLoggers(SpanOwner):
    """The headline numbers go to every logger of the Trainer running the span."""

    _trainer = None

    def _log(self, metrics: dict) -> None:
        trainer = self._trainer
        for logger in (getattr(trainer, "loggers", None) or []) if trainer is not None else []:
            logger.log_metrics(dict(metrics), step=trainer.global_step)


def _trainer_in_call_stack():
    """The Trainer running the loop (a profiler is not given it; its loggers are what we log to)."""
    from lightning.pytorch import Trainer

    frame = sys._getframe(1)
    while frame is not None:
        for name in ("self", "trainer"):
            candidate = frame.f_locals.get(name)
            if isinstance(candidate, Trainer):
                return candidate
        frame = frame.f_back
    return None


class _OptimizerStepSpan(TrainerSpan):
    """A TrainerSpan whose steps are the optimizer's steps."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._steps = None

    def start(self) -> None:
        if self.active:
            return
        from ..collect.autostep import OptimizerSteps

        super().start()
        self._steps = OptimizerSteps(self.prof).install()

    def stop(self) -> None:
        steps, self._steps = self._steps, None
        if steps is not None:
            steps.remove()
        super().stop()


class GpuprofProfiler(_ToTrainerLoggers, Profiler):
    """``Trainer(profiler=GpuprofProfiler(...))``: profile the fit's optimizer steps with gpuprof.

    Args:
        schedule: which steps to record (``gpuprof.schedule(...)``; default: skip 2, warm up 1,
            record 5).
        out: where the reports go (``OUT/report.json``, ``report.html``, the Chrome trace; for each
            rank of a job ``OUT/rank<N>/`` and rank 0's cross-rank report at ``OUT/``); None keeps
            them in memory only (``profiler.reports``).
        log: send the headline numbers to the Trainer's loggers (default True).
        ranges: also mark Lightning's actions as gpuprof ranges (default False: they are user
            ranges, which the breakdown counts as CPU Exec, so the step's Other time moves there).
        watch: watch every optimizer step instead (``gpuprof.watch()``'s always-on numbers, no
            profiler): ``OUT/rank<N>/watch.jsonl`` for ``gpuprof top OUT`` and ``gpuprof capture
            OUT`` (docs/watch.md). Takes ``out`` and gpuprof.watch's ``openmetrics``,
            ``batch_size``, ``max_bytes``; no schedule, no profiler options, no ranges.
        **profile_kwargs: passed to ``gpuprof.profile``.
    """

    def __init__(
        self,
        schedule=None,
        out="gpuprof-out",
        *,
        log: bool = True,
        ranges: bool = False,
        trace: bool = True,
        watch: bool = False,
        **profile_kwargs,
    ) -> None:
        super().__init__(dirpath=None, filename=None)
        self._trainer = None
        self._open: dict = {}
        self._span = None  # Lightning's __del__ calls teardown() even when this __init__ raised
        if watch and ranges:
            raise ValueError(
                "GpuprofProfiler(watch=True) marks no ranges (no profiler runs while watching); "
                "drop ranges=True, or profile a schedule without watch=True"
            )
        self._ranges = ranges
        self._span = watch_span(
            "GpuprofProfiler",
            watch=watch,
            schedule=schedule,
            out=out,
            trace=trace,
            auto_steps=True,
            **profile_kwargs,
        ) or _OptimizerStepSpan(
            schedule=schedule, out=out, trace=trace, log=self._log if log else None, **profile_kwargs
        )

    def start(self, action_name: str) -> None:
        if action_name == "run_training_epoch" and not self._span.active:
            self._trainer = _trainer_in_call_stack()
            self._span.start()
        if self._ranges and self._span.active and action_name not in self._open:
            from ..collect.ranges import range as gp_range

            marker = gp_range(action_name)
            marker.__enter__()
            self._open[action_name] = marker

    def stop(self, action_name: str) -> None:
        marker = self._open.pop(action_name, None)
        if marker is not None:
            marker.__exit__(None, None, None)

    def summary(self) -> str:
        if self.watch_path is not None:
            return f"gpuprof: watched the steps, {self.watch_path} (gpuprof top {self._span.out})"
        if not self._span.reports:
            return "gpuprof: no span recorded"
        return self._span.reports[-1].to_text(color=False)

    def teardown(self, stage: Optional[str]) -> None:
        for marker in reversed(list(self._open.values())):
            marker.__exit__(None, None, None)
        self._open.clear()
        if self._span is not None:
            self._span.stop()
        self._trainer = None
        super().teardown(stage)


class GpuprofCallback(_ToTrainerLoggers, Callback):
    """``Trainer(callbacks=[GpuprofCallback(...)])``: the same profile as ``GpuprofProfiler``
    (optimizer steps, reports per rank, numbers to the loggers) without Lightning's action ranges,
    for a Trainer whose ``profiler`` is taken by another; ``watch=True`` as for the profiler."""

    def __init__(
        self,
        schedule=None,
        out="gpuprof-out",
        *,
        log: bool = True,
        trace: bool = True,
        watch: bool = False,
        **profile_kwargs,
    ) -> None:
        self._trainer = None
        self._span = watch_span(
            "GpuprofCallback",
            watch=watch,
            schedule=schedule,
            out=out,
            trace=trace,
            auto_steps=True,
            **profile_kwargs,
        ) or _OptimizerStepSpan(
            schedule=schedule, out=out, trace=trace, log=self._log if log else None, **profile_kwargs
        )

    def on_train_start(self, trainer, pl_module) -> None:
        self._trainer = trainer
        self._span.start()

    def on_train_end(self, trainer, pl_module) -> None:
        self._span.stop()
        self._trainer = None
