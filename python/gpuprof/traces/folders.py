"""Finding the files in a folder: trace files (for ``gpuprof.analyze(folder)``), gpuprof's own
saved reports, and both together (the ranks of one job). Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Optional, Union

from .read import display_path, is_report

_SNIFF = 1 << 12


def report_files(folder: Union[str, os.PathLike]) -> list[Path]:
    """gpuprof's own saved reports in ``folder`` (``*.json`` starting with a ``schema_version``),
    but for the reports of an out-of-memory error outside the recorded steps: a failure's record
    beside a run's reports, not a rank's steps (read them by their name)."""
    out = []
    for p in sorted(Path(folder).rglob("*.json")):
        try:
            if _is_regular(p) and is_report(p) and not _is_failure_report(p):
                out.append(p)
        except OSError:
            continue
    return out


_FAILURE_KIND = rb'"source":\s*\{\s*"kind":\s*"out_of_memory"'


def _is_failure_report(p: Path) -> bool:
    with open(p, "rb") as f:
        return re.search(_FAILURE_KIND, f.read(_SNIFF)) is not None


_TRACE_PATH = rb'"trace_path":\s*"((?:[^"\\]|\\.)*)"'
_HEAD = 1 << 16


def own_trace(report: Path) -> Optional[Path]:
    """The Chrome trace a saved report wrote beside itself (its ``source.trace_path``, near the
    top of the file), when that file is there: the same span as the report, not another rank. A
    folder that was moved is matched by the file's name beside the report."""
    try:
        with open(report, "rb") as f:
            m = re.search(_TRACE_PATH, f.read(_HEAD))
        written = Path(json.loads(b'"' + m.group(1) + b'"')) if m else None
    except (OSError, ValueError):
        return None
    if written is None:
        return None
    for candidate in (written, report.parent / written.name):
        if candidate.is_file():
            return candidate
    return None


def rank_files(folder: Union[str, os.PathLike], unrecognised: Optional[list] = None) -> list[Path]:
    """The files of a folder of ranks, by what they are: gpuprof's saved reports, and trace files
    (the folder rule of gpuprof.analyze) except the Chrome trace each report wrote beside itself
    (one span, counted once), and the step journals a killed job left (``traces/journal.py``).
    ``unrecognised``, when given, receives the ``*.json`` files that are
    neither."""
    from .journal import journal_files

    traces, reports = trace_files(folder), report_files(folder)
    written_by_reports = {t.resolve() for t in map(own_trace, reports) if t is not None}
    files = sorted(
        set(reports)
        | {t for t in traces if t.resolve() not in written_by_reports}
        | set(journal_files(folder))  # the completed steps of a span a killed job never closed
    )
    if unrecognised is not None:
        known = set(traces) | set(reports)
        unrecognised += [p for p in sorted(Path(folder).rglob("*.json")) if _is_regular(p) and p not in known]
    return files


def _is_regular(p: Path) -> bool:
    """A regular file (or a link to one): the only kind a folder scan opens. A FIFO, socket or
    device named ``*.json`` would block the open or never end the read."""
    try:
        return stat.S_ISREG(p.stat().st_mode)
    except OSError:
        return False


# Files in a folder that are not traces although they end in .json: gpuprof's own saved reports.
_NOT_TRACES = {"report.json"}
_SNIFF_BYTES = 1 << 16


def is_merged_timeline(path: Path) -> bool:
    """A merged timeline of several ranks (``gpuprof export DIR --merged``): its head names
    ``gpuprofMerged``. Not one process's trace, so folder scans leave it out."""
    try:
        if path.name.endswith(".gz"):
            import gzip

            with gzip.open(path, "rb") as f:
                head = f.read(256)
        else:
            with open(path, "rb") as f:
                head = f.read(256)
    except (OSError, EOFError, ValueError):
        return False
    return b'"gpuprofMerged"' in head


def _looks_like_trace(path: Path) -> bool:
    """Folder scan rule: every ``*.json.gz``, and a ``*.json`` whose first 64 KiB mention
    ``"traceEvents"`` or that starts with ``[`` (the Chrome "JSON Array Format"); not a merged
    timeline of several ranks. A ``*.json`` this user may not read is kept, so that reading it
    names the cause (permission denied) among the files that could not be read."""
    name = path.name
    if name in _NOT_TRACES:
        return False
    if name.endswith(".json.gz"):
        return not is_merged_timeline(path)
    if not name.endswith(".json"):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF_BYTES)
    except PermissionError:
        return True
    except OSError:
        return False
    if b'"gpuprofMerged"' in head[:256]:
        return False
    return b'"traceEvents"' in head or head.lstrip().startswith(b"[")


def trace_files(folder: Union[str, os.PathLike]) -> list[Path]:
    """The trace files under ``folder`` (recursively, sorted by path), by the rule above. A folder
    that cannot be read is an error when it hides every trace, a warning otherwise."""
    root = Path(folder)
    unreadable: list[str] = []
    found = []
    for here, _dirs, names in os.walk(root, onerror=lambda e: unreadable.append(display_path(e.filename))):
        for name in names:
            p = Path(here) / name
            if _is_regular(p) and _looks_like_trace(p):
                found.append(p)
    if unreadable and not found:
        raise PermissionError(f"{unreadable[0]}: permission denied (cannot list this folder)")
    for where in unreadable:
        print(f"gpuprof: skipped {where}: permission denied (cannot list this folder)", file=sys.stderr)
    return sorted(found)
