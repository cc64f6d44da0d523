"""What torch.compile's Dynamo compiled, read from its own compilation records.

Dynamo keeps one ``CompilationMetrics`` record per frame it compiles
(``torch._dynamo.utils.get_compilation_metrics()``, the latest 64 by default): the frame's compile
id ("frame/compile"), its function, file and first line, the guard that failed when the frame was
compiled again (``recompile_reason``), the reasons tracing restarted at a graph break
(``restart_reasons``) and whether a graph was installed. A span marks the records that existed
when it started; at its end the records are copied as plain dicts, each saying whether it was
compiled inside the span. Nothing is read while the span runs, and torch._dynamo is never imported
by gpuprof: a process that never compiled has nothing to read.
"""

from __future__ import annotations

import logging
import sys
from typing import Optional

log = logging.getLogger("gpuprof")

_FIELDS = (
    "compile_id",
    "co_name",
    "co_filename",
    "co_firstlineno",
    "recompile_reason",
    "has_guarded_code",
    "fail_type",
    "fail_reason",
    "guard_latency_us",
    "entire_frame_compile_time_s",
)


def _metrics() -> Optional[list]:
    utils = sys.modules.get("torch._dynamo.utils")
    read = getattr(utils, "get_compilation_metrics", None)
    if read is None:
        return None
    return list(read())


class DynamoWatch:
    """The compilation records of one span: ``reset`` at its start, ``records`` at its end."""

    def __init__(self) -> None:
        self._before: list = []  # the records (objects) that existed when the span started

    def reset(self) -> None:
        try:
            self._before = _metrics() or []
        except Exception as e:  # the training run comes first
            log.debug("gpuprof: cannot read torch.compile's compilation records: %s", e)
            self._before = []

    def records(self) -> Optional[list[dict]]:
        """Every record Dynamo holds, oldest first, with ``in_span``; None when nothing was compiled
        in this process (or this torch keeps no records)."""
        try:
            now = _metrics()
        except Exception as e:
            log.debug("gpuprof: cannot read torch.compile's compilation records: %s", e)
            return None
        if not now:
            return None
        before = {id(m) for m in self._before}
        out = []
        for m in now:
            row = {k: _plain(getattr(m, k, None)) for k in _FIELDS}
            reasons = getattr(m, "restart_reasons", None) or ()
            row["restart_reasons"] = sorted(str(r) for r in reasons)
            row["in_span"] = id(m) not in before
            out.append(row)
        return out


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
