"""Chrome-trace export of a live session, and the ``on_trace_ready`` saver ``gpuprof.save(dir)``.

The JSON is written by the C++ core (cpp/src/analysis/chrome_export.cpp) in Kineto's dialect, so that
gpuprof, Perfetto and Holistic Trace Analysis read it back. Every file is written atomically
(``traces/atomic.py``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable, Optional, Union

from .._native import _core
from .atomic import failure_reason, replace_atomically

log = logging.getLogger("gpuprof")

# Where `gpuprof export DIR --merged` writes the merged timeline of a job's ranks by default (and where
# the job's HTML report links to it).
MERGED_TIMELINE_NAME = "merged.trace.json.gz"


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
    writers = {"json": report.to_json, "html": report._save_html, "markdown": report.to_markdown}
    for i, (path, fmt) in enumerate(files):
        path = os.fspath(path)
        with_trace = trace if i == 0 and report.writes_trace and not report.trace_path else False
        try:
            writers[fmt](path, trace=with_trace)
            written += [path] + ([report.trace_path] if with_trace is not False else [])
            continue
        except Exception as e:
            first_error = e
        if with_trace is not False and report.trace_path:
            written.append(report.trace_path)  # the trace went out whole before the file failed
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


def rank_traces(folder: Union[str, os.PathLike], unrecognised: Optional[list] = None) -> list[tuple]:
    """The Chrome traces of a folder of ranks, one per span of a rank: ``(path, rank or None)``,
    the rank as the saved report that wrote the trace says it (None for a torch.profiler trace:
    its distributedInfo says it once read). A report and its own trace are one (the job's copy of
    rank 0's report at the top of a ``gpuprof run`` folder names the same trace as rank 0's)."""

    from .folders import is_report, own_trace, rank_files
    from .read import read_json

    found: dict = {}
    for f in rank_files(folder, unrecognised):
        if is_report(f):
            trace = own_trace(f)
            if trace is None:
                continue  # a report saved without its trace has no events to draw
            try:
                rank = (read_json(f).get("distributed") or {}).get("rank")
            except (OSError, ValueError):
                rank = None
            key = trace.resolve()
            if found.get(key, (None, None))[1] is None:
                found[key] = (trace, rank if isinstance(rank, int) else None)
        else:
            found.setdefault(f.resolve(), (f, None))
    return sorted(found.values(), key=lambda t: str(t[0]))


def write_merged(out: Union[str, os.PathLike], ranks: list, metadata: dict) -> str:
    """Write the merged timeline of ``ranks`` (``(trace path, rank, offset_ns, label)`` each, read
    one at a time) to ``out`` (gzip when it ends in .gz), whole or not at all."""
    import json

    from .read import import_trace

    def write(tmp: str) -> None:
        merged = _core.MergedChromeTrace(tmp, json.dumps(metadata))
        for path, rank, offset_ns, label in ranks:
            trace, _stats = import_trace(path)
            merged.add(trace, rank, offset_ns, label)
            del trace
        merged.close()

    replace_atomically(Path(out), write)
    return str(out)


def rank_folders(out: Union[str, os.PathLike], rank: int, world: int) -> list[Path]:
    """Where the report of ``rank`` of a ``world``-rank job goes under ``out``: ``out`` itself in a
    one-process run; ``out/rank<N>`` for each rank of a job, and ``out`` too for rank 0, whose
    report holds every rank's row (the job's report, docs/distributed.md). ``gpuprof analyze out``
    reads the layout back: rank 0's two copies are one rank."""
    out = Path(out)
    if world <= 1:
        return [out]
    return [out / f"rank{rank}"] + ([out] if rank == 0 else [])


def save_rank_reports(
    report,
    out: Union[str, os.PathLike],
    *,
    rank: int,
    world: int,
    stem: str = REPORT_FILE[: -len(".json")],
    trace_name: str = TRACE_FILE,
    trace: bool = True,
    formats: tuple = ("json", "html"),
) -> tuple[list[str], list[str]]:
    """Write ``report`` as ``<stem>.json`` and ``<stem>.html`` (``formats``) into each of ``rank_folders(out,
    rank, world)``, with its Chrome trace (``trace_name``) in the first (the rank's own folder; the
    job's copy says where it is). For code on the training thread: nothing raises; returns (the
    files written, one "PATH: reason" per file or folder that could not be)."""
    written: list[str] = []
    failed: list[str] = []
    for i, folder in enumerate(rank_folders(out, rank, world)):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            failed.append(f"{folder}: {failure_reason(e)}")
            continue
        ends = {"json": ".json", "html": ".html", "markdown": ".md"}
        files = [(folder / f"{stem}{ends[fmt]}", fmt) for fmt in formats]
        w, f = save_report_files(report, files, folder / trace_name if trace and i == 0 else False)
        written += w
        failed += f
    return written, failed


def save_out_folder(
    report, folder: Union[str, os.PathLike], *, trace: bool = True, rank: int = 0, world: int = 1
) -> tuple[list[str], list[str]]:
    """Write ``report`` as an --out folder's files: ``report.json`` with its Chrome trace
    ``trace.json.gz`` (unless ``trace`` is False, or the report has none) and ``report.html``, into
    ``folder`` (made if needed), or for a rank of a job into ``rank_folders(folder, rank, world)``.
    For code on the training thread: nothing raises. Returns (the files written, one "PATH: reason"
    per file that could not be)."""
    return save_rank_reports(report, folder, rank=rank, world=world, trace=trace)


def save(directory: Union[str, os.PathLike], *, compress: bool = True) -> Callable:
    """An ``on_trace_ready`` callable that writes each completed span to
    ``<directory>/span_<N>/report.json`` and ``trace.json.gz`` (``trace.json`` when not
    ``compress``). ``gpuprof analyze <directory>`` reads them back, one report per span. In a job of
    several ranks each rank writes ``span_<N>/rank<R>/`` and rank 0 also ``span_<N>/report.json``,
    its cross-rank report (``rank_folders``): ``gpuprof analyze <directory>/span_<N>`` is that span's
    job.

    It runs on the training thread, so it never raises: a file that cannot be written (a full disk,
    a folder that went away) is one warning naming it and why, on the ``gpuprof`` logger (stderr by
    default); training goes on and ``prof.report()`` still holds the span. Each file is written
    whole or not at all.
    """
    root = Path(directory)

    def _save(prof) -> None:
        from .._host import job_rank

        report = prof.report()
        span = report.source.get("span", 0)
        rank, world, _how = job_rank()
        # The report says where its trace is.
        _written, failed = save_rank_reports(
            report,
            root / f"span_{int(span):03d}",
            rank=rank,
            world=world,
            trace_name="trace.json.gz" if compress else "trace.json",
            formats=("json",),
        )
        if failed:
            log.warning(
                "gpuprof: could not save span %s: %s; training goes on and prof.report() holds it",
                span,
                "; ".join(failed),
            )

    _save.directory = str(root)
    return _save
