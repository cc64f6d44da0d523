"""Chrome-trace export of a live session, and the ``on_trace_ready`` saver ``gpuprof.save(dir)``.

The JSON is written by the C++ core (cpp/src/io/chrome_export.cpp) in Kineto's dialect, so that
gpuprof, Perfetto and Holistic Trace Analysis read it back. Every file is written atomically
(``traces/atomic.py``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable, Union

from .._native import _core
from .atomic import failure_reason, replace_atomically

log = logging.getLogger("gpuprof")


def export_chrome_trace(trace, path: Union[str, os.PathLike]) -> str:
    """Write a native ``Trace`` (e.g. ``report.trace``) to ``path`` (gzip when it ends in .gz)."""
    if trace is None:
        raise ValueError(
            "this report has no trace attached (it was loaded from JSON); only a "
            "report made by a session or by gpuprof.analyze can be exported"
        )
    out = Path(path)
    replace_atomically(out, lambda tmp: _core.export_chrome_trace(trace, tmp))
    return str(out)


def save_report_files(report, files: list, trace) -> tuple[list[str], list[str]]:
    """Write ``report`` to each ``(path, format)`` of ``files`` (format: "json", "html" or
    "markdown"), the first with its Chrome trace (``trace``: a path, True for beside it, False for
    none), for code on the training thread: nothing raises. Returns (the files written, one
    "PATH: reason" per file that could not be). A trace that cannot be written does not cost the
    report files; each file is whole or absent."""
    written: list[str] = []
    failed: list[str] = []
    writers = {"json": report.to_json, "html": report.to_html, "markdown": report.to_markdown}
    for i, (path, fmt) in enumerate(files):
        path = os.fspath(path)
        with_trace = trace if i == 0 and report.trace is not None and not report.trace_path else False
        try:
            writers[fmt](path, trace=with_trace)
            written += [path] + ([report.trace_path] if with_trace is not False else [])
            continue
        except Exception as e:
            first_error = e
        if with_trace is False or report.trace_path:
            failed.append(f"{path}: {failure_reason(first_error)}")  # the file itself
            continue
        # The trace came first and failed: the report file without it.
        where = os.fspath(trace) if trace is not True else f"the Chrome trace beside {path}"
        try:
            writers[fmt](path, trace=False)
            written.append(path)
            failed.append(f"{where}: {failure_reason(first_error)}")
        except Exception as e:
            failed.append(f"{path} (and {where}): {failure_reason(e)}")
    return written, failed


# The files of an --out folder, the same for `gpuprof run --out DIR` and `%%gpuprof --out DIR` (and
# for each span folder of gpuprof.save): the report, its HTML, and its Chrome trace.
REPORT_FILE, HTML_FILE, TRACE_FILE = "report.json", "report.html", "trace.json.gz"


def save_out_folder(
    report, folder: Union[str, os.PathLike], *, trace: bool = True
) -> tuple[list[str], list[str]]:
    """Write ``report`` into ``folder`` (made if needed) as ``report.json`` with its Chrome trace
    ``trace.json.gz`` (unless ``trace`` is False, or the report has none) and ``report.html``.
    For code on the training thread: nothing raises. Returns (the files written, one "PATH: reason"
    per file that could not be)."""
    out = Path(folder)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return [], [f"{out}: {failure_reason(e)}"]
    files = [(out / REPORT_FILE, "json"), (out / HTML_FILE, "html")]
    return save_report_files(report, files, str(out / TRACE_FILE) if trace else False)


def save(directory: Union[str, os.PathLike], *, compress: bool = True) -> Callable:
    """An ``on_trace_ready`` callable that writes each completed span to
    ``<directory>/span_<N>/report.json`` and ``trace.json.gz`` (``trace.json`` when not
    ``compress``). ``gpuprof analyze <directory>`` reads them back, one report per span.

    It runs on the training thread, so it never raises: a file that cannot be written (a full disk,
    a folder that went away) is one warning naming it and why, on the ``gpuprof`` logger (stderr by
    default); training goes on and ``prof.report()`` still holds the span. Each file is written
    whole or not at all.
    """
    root = Path(directory)

    def _save(prof) -> None:
        report = prof.report()
        span = report.source.get("span", 0)
        folder = root / f"span_{int(span):03d}"
        trace_file = folder / (TRACE_FILE if compress else TRACE_FILE[: -len(".gz")])
        # The report says where its trace is.
        _written, failed = save_report_files(report, [(folder / REPORT_FILE, "json")], trace_file)
        if failed:
            log.warning(
                "gpuprof: could not save span %s: %s; training goes on and prof.report() holds it",
                span,
                "; ".join(failed),
            )

    _save.directory = str(root)
    return _save
