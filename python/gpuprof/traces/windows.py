"""Windows of a trace too large for its memory budget (docs/design.md, "Memory"): pass 1 reads the
file keeping only the step markers, and counts every other event by its start time; the steps are
then cut into windows, runs of consecutive steps whose events fit the budget, each read by its own
import (``read_window``) that keeps only the events overlapping it.

A window owns the events that start in its time: from its first step's host start to the next
window's (the first window from the trace's start, the last to its end). It also keeps, as context,
the step before it and the step after it (every event overlapping them): their step markers give
the owned steps their boundaries exactly as the whole trace's analysis draws them (a step starts
where the one before it ends, device work included; the last owned step's kernels may run into the
next step), and their launches join the owned kernels to the operators that launched them. Context
events carry the native ``kContextFlag`` and count in no name-keyed table of the window. Nothing here
imports torch.
"""

from __future__ import annotations

import bisect
import os
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from .._native import _core
from .read import display_path, import_settings

_LO, _HI = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class Window:
    """One window: its steps (indices into the scan's steps, ``first`` to ``last`` inclusive), the
    time it owns and the time it keeps (ns; the trace's ends as the int64 extremes)."""

    first: int
    last: int
    keep_from: int
    own_from: int
    own_to: int
    keep_to: int
    events: int  # the events it is expected to keep, from the scan's counts
    first_step: object = None  # the numbers of its first and last steps (what messages name)
    last_step: object = None

    @property
    def bounds(self) -> tuple[int, int, int, int]:
        return (self.keep_from, self.own_from, self.own_to, self.keep_to)


class StepMarks(Sequence):
    """The scan's steps as the windows need them: each step's number and host start (``step`` and
    ``host_start_ns`` of a small dict when indexed), 16 bytes a step rather than the breakdown's row."""

    def __init__(self, rows: list) -> None:
        try:
            self.numbers = array("q", (s["step"] for s in rows))
        except (TypeError, OverflowError):  # (a step number that is not a 64-bit integer: kept as it is)
            self.numbers = [s["step"] for s in rows]
        self.starts = array("q", (s["host_start_ns"] for s in rows))

    @classmethod
    def from_bytes(cls, numbers: bytes, starts: bytes, had_markers: bool) -> StepMarks:
        """From ``_core.step_marks``' native int64 arrays (none when the trace had no markers)."""
        marks = cls([])
        if had_markers:
            marks.numbers.frombytes(numbers)
            marks.starts.frombytes(starts)
        return marks

    def __len__(self) -> int:
        return len(self.numbers)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return {"step": self.numbers[i], "host_start_ns": self.starts[i]}


@dataclass
class Scan:
    """Pass 1's result: the steps (the native breakdown of the step markers alone, kept as their
    numbers and host starts: ``StepMarks``), the events counted per step (the events before the
    first step counted in it), its import stats and the markers' own breakdown (its step rules; its
    steps are ``steps``)."""

    steps: list
    counts: list
    stats: dict
    breakdown: dict
    trace: object


def scan_steps(path: Union[str, os.PathLike], import_cpus: int = 0, progress=None) -> Scan:
    """Pass 1 over ``path``: its step markers and its events counted per step, in memory in
    proportion to the steps (the start-time histogram has at most 65,536 buckets)."""
    settings = import_settings()
    if import_cpus and not settings["import_cpus"]:
        settings["import_cpus"] = import_cpus
    trace, stats = _core.import_trace(
        os.fsencode(Path(path)), 0, 0, **settings, progress=progress, scan_steps=True
    )
    marks = getattr(_core, "step_marks", None)
    if marks is not None:  # the markers' numbers and starts as bytes: no row a step, even for a moment
        bd = marks(trace)
        steps = StepMarks.from_bytes(bd.pop("step_numbers"), bd.pop("host_starts_ns"), bd["had_step_markers"])
    else:  # (a core built before step_marks)
        bd = _core.compute_breakdown(trace, False)
        steps = StepMarks(bd.pop("steps") if bd["had_step_markers"] else [])  # 16 bytes a step from here
    starts = steps.starts
    counts = [0] * len(steps)
    for bucket_start, n in stats.get("start_histogram", []) if steps else []:
        # A bucket counts in the step its start falls in (before the first step: the first one).
        counts[max(0, bisect.bisect_right(starts, bucket_start) - 1)] += n
    for i in range(len(steps)):
        counts[i] += 1  # its own marker
    return Scan(steps, counts, stats, bd, trace)


def plan_windows(scan: Scan, max_events: int) -> list[Window]:
    """The scan's steps cut into windows of consecutive steps, each keeping at most ``max_events``
    events where the steps allow (a window holds at least one step, whatever its size): a window's
    own steps and the context step on each side of it."""
    steps, counts = scan.steps, scan.counts
    n = len(steps)
    starts = steps.starts if isinstance(steps, StepMarks) else [s["host_start_ns"] for s in steps]

    def start(i: int, edge: int) -> int:
        return starts[i] if 0 <= i < n else edge

    windows: list[Window] = []
    a = 0
    while a < n:
        before = counts[a - 1] if a > 0 else 0
        b, held = a, before + counts[a]
        while b + 1 < n and held + counts[b + 1] + (counts[b + 2] if b + 2 < n else 0) <= max_events:
            b += 1
            held += counts[b]
        after = counts[b + 1] if b + 1 < n else 0
        windows.append(
            Window(
                first=a,
                last=b,
                keep_from=start(a - 1, _LO) if a > 0 else _LO,
                own_from=starts[a] if a > 0 else _LO,
                own_to=start(b + 1, _HI),
                keep_to=start(b + 2, _HI) if b + 1 < n else _HI,
                events=held + after,
                first_step=steps[a]["step"],
                last_step=steps[b]["step"],
            )
        )
        a = b + 1
    return windows


def read_window(
    path: Union[str, os.PathLike], window: Window, max_events: int = 0, import_cpus: int = 0, progress=None
):
    """One window's import: ``(trace, stats)`` of the events overlapping its kept time, its context
    marked. ``max_events`` bounds what it keeps (0: no bound); ``progress``: a ``_core.ImportProgress``
    the read keeps up to date."""
    settings = import_settings()
    if import_cpus and not settings["import_cpus"]:
        settings["import_cpus"] = import_cpus
    return _core.import_trace(
        os.fsencode(Path(path)), 0, max_events, **settings, window=window.bounds, progress=progress
    )


def read_numbered_window(
    path: Union[str, os.PathLike],
    source: Union[str, os.PathLike],
    windows: list[Window],
    i: int,
    max_events: int = 0,
    import_cpus: int = 0,
    progress=None,
):
    """``read_window`` of ``windows[i]`` from ``source`` (its spill file, or the trace at ``path``
    itself); a failure raised again as a ``TraceImportError`` that names the trace, the window and its
    steps (a spill file's name means nothing to the user)."""
    from .read import TraceImportError

    w = windows[i]
    try:
        return read_window(source, w, max_events=max_events, import_cpus=import_cpus, progress=progress)
    except TraceImportError as e:
        why = str(e).removeprefix(f"{display_path(source)}: ")
        raise TraceImportError(
            f"{display_path(path)}: window {i + 1} of {len(windows)} "
            f"(steps {w.first_step} to {w.last_step}): {why}"
        ) from None


def no_steps_message(path: Union[str, os.PathLike], cap: int, reason: str) -> str:
    """Why a trace past its event cap cannot be read in windows: it has no step markers to cut."""
    return (
        f"{display_path(path)}: more than {cap:,} events, {reason}, and no ProfilerStep markers to "
        "read it in windows of steps (if the memory is there: gpuprof analyze --max-memory SIZE, or "
        "for any verb GPUPROF_MAX_MEMORY=SIZE or GPUPROF_MAX_EVENTS=N)"
    )
