"""Hugging Face Transformers: ``Trainer(..., callbacks=[GpuprofCallback()])``.

Steps are the Trainer's own: one optimizer step is one step (``on_step_end``), so with gradient
accumulation the micro-batches of one update are one step. When a span of the schedule ends, the
reports are written (``out``, per rank under torchrun / ``accelerate launch``) and the headline
numbers (mean step time, each category's share) go through ``Trainer.log``, so they reach whatever
``report_to`` set. transformers is imported only by this module, and only when it is used.
"""

from __future__ import annotations

import sys
import warnings

from transformers import TrainerCallback

from ._span import SpanOwner, TrainerSpan, watch_span


def _trainer_in_call_stack():
    """The Trainer whose loop is calling the callback: callbacks are not given it, and its ``log``
    is what reaches the loggers ``report_to`` set up (a callback's ``on_log`` runs after them)."""
    from transformers import Trainer

    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
        frame = frame.f_back
    return None


class GpuprofCallback(SpanOwner, TrainerCallback):
    """Profile the Trainer's steps with gpuprof.

    Args:
        schedule: which steps to record (``gpuprof.schedule(...)``; default: skip 2, warm up 1,
            record 5). Steps are optimizer steps.
        out: where the reports go (``OUT/report.json``, ``report.html`` and the Chrome trace; in a
            job of several processes ``OUT/rank<N>/`` each and rank 0's cross-rank report at
            ``OUT/``); None writes nothing (``callback.reports`` holds them).
        log: send the headline numbers through ``Trainer.log`` (default True).
        trace: write the Chrome trace beside the reports (default True).
        watch: watch every step instead (``gpuprof.watch()``'s always-on numbers, no profiler):
            ``OUT/rank<N>/watch.jsonl``, one line per optimizer step, for ``gpuprof top OUT`` and
            ``gpuprof capture OUT`` (docs/watch.md). Takes ``out`` and gpuprof.watch's
            ``openmetrics``, ``batch_size``, ``max_bytes``; no schedule, no profiler options.
        **profile_kwargs: passed to ``gpuprof.profile`` (``record_shapes``, ``profile_memory``...).
    """

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
            auto_steps=False,
            **profile_kwargs,
        ) or TrainerSpan(
            schedule=schedule, out=out, trace=trace, log=self._log if log else None, **profile_kwargs
        )

    def _log(self, metrics: dict) -> None:
        if self._trainer is None:
            warnings.warn(
                "gpuprof: the Trainer could not be found to log the profile's numbers; "
                "they are in the reports",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        self._trainer.log(dict(metrics))

    def on_train_begin(self, args, state, control, **kwargs):
        self._trainer = _trainer_in_call_stack()
        self._span.start()

    def on_step_end(self, args, state, control, **kwargs):
        self._span.step()

    def on_train_end(self, args, state, control, **kwargs):
        self._span.stop()
        self._trainer = None
