"""The process's active profiling session, and the names every part of the session shares."""

from __future__ import annotations

from typing import Optional

from ..collect.schedule import ProfilerAction

RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
HOOKED = (ProfilerAction.WARMUP,) + RECORDING
_RECORDING, _HOOKED = RECORDING, HOOKED

active = None  # the gpuprof.profile between its start() and the end of its stop(), if any


class ProfilerError(RuntimeError):
    pass


def current() -> Optional[object]:
    """The active profiling session (a ``gpuprof.profile``), if any."""
    return active
