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
from ..session.watch import DEFAULT_MAX_BYTES, _Watching

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


#: What ``watch=True`` takes besides ``out``: gpuprof.watch's own options.
WATCH_OPTIONS = ("openmetrics", "batch_size", "max_bytes")


def watch_span(owner: str, *, watch: bool, schedule, out, trace: bool, auto_steps: bool, **kwargs):
    """A ``TrainerWatch`` for ``watch=True``, None otherwise. ``watch=True`` takes ``out`` and
    gpuprof.watch's options only: a profile schedule or profiler options have no meaning there
    (a capture's options come from ``gpuprof capture``). ValueError, raised where the trainer is
    set up (before training), when something else is given."""
    if not watch:
        return None
    other = sorted(k for k in kwargs if k not in WATCH_OPTIONS)
    if schedule is not None:
        other.insert(0, "schedule")
    if not trace:
        other.append("trace")
    if other:
        raise ValueError(
            f"{owner}(watch=True) watches every step without the profiler: it takes out= and "
            f"{', '.join(WATCH_OPTIONS)}, not {', '.join(other)}; ask for a capture of N steps with "
            "`gpuprof capture OUT --steps N [--modules] [--memory] [--shapes]` while it runs "
            "(docs/watch.md)"
        )
    if out is None:
        raise ValueError(
            f"{owner}(watch=True) needs a folder: out= is where OUT/rank<N>/watch.jsonl goes "
            "(gpuprof top OUT, gpuprof capture OUT read it)"
        )
    return TrainerWatch(out=out, auto_steps=auto_steps, **kwargs)


class TrainerWatch:
    """The always-on watcher (``gpuprof.watch()``'s) over a trainer's steps, in place of a
    profile's schedule: ``OUT/rank<N>/watch.jsonl``, read by ``gpuprof top OUT`` and answering
    ``gpuprof capture OUT`` (docs/watch.md). ``auto_steps``: the steps end where the optimizer
    steps (the finder ``gpuprof.watch()`` installs); otherwise only at ``step()``, the trainer's
    own step-end hook. No report is made while only watching: ``reports`` stays empty (a
    capture's reports are under ``OUT/capture-<id>/``)."""

    def __init__(
        self,
        *,
        out: Union[str, os.PathLike],
        auto_steps: bool,
        openmetrics: Optional[str] = None,
        batch_size: Optional[int] = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.out = Path(out)
        self.reports: list = []
        self.written: list[str] = []
        self._options = dict(openmetrics=openmetrics, batch_size=batch_size, max_bytes=max_bytes)
        self._auto_steps = auto_steps
        self.watching: Optional[_Watching] = None
        self._path: Optional[Path] = None

    @property
    def active(self) -> bool:
        return self.watching is not None

    @property
    def path(self) -> Optional[Path]:
        """``OUT/rank<N>/watch.jsonl``, once the first lines are written."""
        return self.watching.path if self.watching is not None else self._path

    def start(self) -> None:
        if self.watching is not None:
            return
        self.watching = _Watching(
            str(self.out), marker=None, backward_steps=False, auto_steps=self._auto_steps, **self._options
        ).start()

    def step(self) -> None:
        if self.watching is not None:
            self.watching.step()

    def stop(self) -> None:
        watching, self.watching = self.watching, None
        if watching is not None:
            watching.stop()
            self._path = watching.path
            if watching.path is not None and str(watching.path) not in self.written:
                self.written.append(str(watching.path))


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

    @property
    def watch_path(self):
        """With ``watch=True``: ``OUT/rank<N>/watch.jsonl`` once written (None before; None
        without ``watch``)."""
        return getattr(self._span, "path", None)
