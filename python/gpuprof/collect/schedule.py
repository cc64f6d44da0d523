"""Which steps a profiling session records: the same semantics as ``torch.profiler.schedule``."""

from __future__ import annotations

import enum
from typing import Callable


class StepRangeError(ValueError):
    """A step range written wrong: the message says how to write it."""


def step_range(text: str, option: str = "--steps") -> tuple[int, int]:
    """``"10:15"`` -> (10, 15): steps 10 to 14 (0-based, end excluded, like a Python slice)."""
    first, sep, last = text.partition(":")
    try:
        start, stop = int(first), int(last)
    except ValueError:
        start = stop = -1
    if not sep or start < 0 or stop <= start:
        raise StepRangeError(
            f"{option} {text!r}: write START:STOP with 0 <= START < STOP, e.g. {option} 10:15 "
            "(records steps 10 to 14)"
        )
    return start, stop


class ProfilerAction(enum.Enum):
    NONE = 0  # hooks removed: the step runs at full speed
    WARMUP = 1  # hooks installed, events discarded (first-call costs stay out of the data)
    RECORD = 2  # hooks installed, events kept
    RECORD_AND_SAVE = 3  # last recorded step of a span: at its end the span is analysed and handed
    # to on_trace_ready


def schedule(
    *, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0
) -> Callable[[int], ProfilerAction]:
    """Return a function from step number (0-based, counted by ``prof.step()``) to action.

    The first ``skip_first`` steps do nothing. Then cycles of ``wait`` idle steps, ``warmup`` steps
    with hooks installed but data discarded, and ``active`` recorded steps repeat ``repeat`` times
    (``repeat=0``: until the profiled block ends). Each cycle's last active step closes a span.
    """
    for name, value in (
        ("wait", wait),
        ("warmup", warmup),
        ("active", active),
        ("repeat", repeat),
        ("skip_first", skip_first),
    ):
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"gpuprof.schedule: {name} must be a non-negative int, got {value!r}")
    if active < 1:
        raise ValueError("gpuprof.schedule: active must be at least 1 (a span needs a recorded step)")
    cycle = wait + warmup + active

    def action(step: int) -> ProfilerAction:
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        pos = step % cycle
        if pos < wait:
            return ProfilerAction.NONE
        if pos < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if pos < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    action.__doc__ = (
        f"gpuprof.schedule(wait={wait}, warmup={warmup}, active={active}, "
        f"repeat={repeat}, skip_first={skip_first})"
    )
    return action


def always_record(step: int) -> ProfilerAction:
    """No schedule: every step is recorded, in one span that ends with the profiled block."""
    return ProfilerAction.RECORD
