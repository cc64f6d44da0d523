"""What the trainer integrations share: a profiling session driven by a trainer's own hooks, the
reports written per rank when its spans end, and the headline numbers a trainer's loggers receive.

The trainers call in from their training loop: nothing here may end or alter the run, so a failed
write is one warning and the session's numbers stay in memory (``reports``).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Callable, Optional, Union

from ..collect.schedule import ProfilerAction
from ..collect.schedule import schedule as make_schedule
from ..session import profile

#: The default window: skip the first steps (data loader start-up, first-call costs), warm up one,
#: record five. A trainer run shorter than that records what it reaches.
DEFAULT_SCHEDULE = dict(wait=2, warmup=1, active=5, repeat=1)


def rank() -> tuple[int, int]:
    """(rank, world size) of this process: torch.distributed's when it is initialised, else the
    launcher's variables (torchrun, mpirun, SLURM: ``_host.job_rank``), else (0, 1)."""
    from .._host import job_rank

    r, world, _how = job_rank()
    return r, world


def headline(report) -> dict:
    """The numbers a trainer's loggers get at the end of a span: mean step time and each
    category's share of the step (the breakdown's names), under ``gpuprof/``."""
    avg = report.average
    out = {
        "gpuprof/step_time_ms": round(avg.get("total_us", 0.0) / 1000.0, 3),
        "gpuprof/steps": len(report.steps),
    }
    for key, value in avg.items():
        if key.endswith("_pct") and value:
            out[f"gpuprof/{key}"] = value
    return out


class TrainerSpan:
    """A gpuprof session opened and stepped by a trainer. ``out``: where each span's reports go
    (``OUT/report.json`` and ``.html`` in a one-process run; ``OUT/rank<N>/`` for each rank of a job,
    with rank 0's cross-rank report also at ``OUT/``). ``log``: called with the headline numbers."""

    def __init__(
        self,
        *,
        schedule: Optional[Callable[[int], ProfilerAction]] = None,
        out: Union[str, os.PathLike, None] = "gpuprof-out",
        trace: bool = True,
        log: Optional[Callable[[dict], None]] = None,
        **profile_kwargs,
    ) -> None:
        self.schedule = schedule or make_schedule(**DEFAULT_SCHEDULE)
        self.out = Path(out) if out is not None else None
        self.trace = trace
        self.log = log
        self.profile_kwargs = profile_kwargs
        self.prof: Optional[profile] = None
        self.reports: list = []  # every span's report, oldest first
        self.written: list[str] = []

    @property
    def active(self) -> bool:
        return self.prof is not None

    def start(self) -> None:
        if self.prof is not None:
            return
        self.prof = profile(schedule=self.schedule, on_trace_ready=self._span_ready, **self.profile_kwargs)
        self.prof.start()

    def step(self) -> None:
        if self.prof is not None:
            self.prof.step()

    def stop(self) -> None:
        prof, self.prof = self.prof, None
        if prof is not None:
            prof.stop()

    def _span_ready(self, prof) -> None:
        report = prof.report()
        self.reports.append(report)
        if self.log is not None:
            try:
                self.log(headline(report))
            except Exception as e:  # a logger's failure is not the training run's
                warnings.warn(
                    f"gpuprof: could not log the profile's numbers: {e}", RuntimeWarning, stacklevel=2
                )
        if self.out is not None:
            self._write(report)

    def _write(self, report) -> None:
        from ..traces.export import save_rank_reports

        r, world = rank()
        span = report.source.get("span", 0)
        stem = "report" if span == 0 else f"report_span{span}"
        written, failed = save_rank_reports(
            report,
            self.out,
            rank=r,
            world=world,
            stem=stem,
            trace_name=f"{stem}.trace.json.gz",
            trace=self.trace,
        )
        self.written += [w for w in written if not w.endswith(".trace.json.gz")]
        if failed:
            warnings.warn(
                f"gpuprof: could not write the profile: {'; '.join(failed)}; training goes on, the "
                "report stays in memory",
                RuntimeWarning,
                stacklevel=2,
            )


class SpanOwner:
    """What every trainer adapter exposes of its span: ``reports`` and ``written``."""

    _span: TrainerSpan

    @property
    def reports(self) -> list:
        """Every recorded span's Report, oldest first."""
        return self._span.reports

    @property
    def written(self) -> list:
        """The files written so far."""
        return self._span.written
