"""Chrome-trace export of a live session, and the ``on_trace_ready`` saver ``gpuprof.save(dir)``.

The JSON is written by the C++ core (cpp/src/io/chrome_export.cpp) in Kineto's dialect, so that
gpuprof, Perfetto and Holistic Trace Analysis read it back.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Union

from .._native import _core


def export_chrome_trace(trace, path: Union[str, os.PathLike]) -> str:
    """Write a native ``Trace`` (e.g. ``report.trace``) to ``path`` (gzip when it ends in .gz)."""
    if trace is None:
        raise ValueError(
            "this report has no trace attached (it was loaded from JSON); only a "
            "report made by a session or by gpuprof.analyze can be exported"
        )
    out = Path(path)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
    _core.export_chrome_trace(trace, str(out))
    return str(out)


def save(directory: Union[str, os.PathLike], *, compress: bool = True) -> Callable:
    """An ``on_trace_ready`` callable that writes each completed span to
    ``<directory>/span_<N>/report.json`` and ``trace.json.gz`` (``trace.json`` when not
    ``compress``). ``gpuprof analyze <directory>`` reads them back, one report per span.
    """
    root = Path(directory)

    def _save(prof) -> None:
        report = prof.report()
        span = report.source.get("span", 0)
        folder = root / f"span_{int(span):03d}"
        folder.mkdir(parents=True, exist_ok=True)
        trace_file = folder / ("trace.json.gz" if compress else "trace.json")
        report.to_json(folder / "report.json", trace=trace_file)  # the report says where its trace is

    _save.directory = str(root)
    return _save
