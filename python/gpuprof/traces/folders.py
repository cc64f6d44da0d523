"""Finding the files in a folder: trace files (for ``gpuprof.analyze(folder)``), gpuprof's own
saved reports, and both together (the ranks of one job). Nothing here imports torch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Union

from .read import display_path

_SNIFF = 1 << 12


def report_files(folder: Union[str, os.PathLike]) -> list[Path]:
    """gpuprof's own saved reports in ``folder`` (``*.json`` starting with a ``schema_version``)."""
    out = []
    for p in sorted(Path(folder).rglob("*.json")):
        try:
            with open(p, "rb") as f:
                head = f.read(_SNIFF)
        except OSError:
            continue
        if b'"schema_version"' in head and b'"traceEvents"' not in head:
            out.append(p)
    return out


def rank_files(folder: Union[str, os.PathLike]) -> list[Path]:
    """Every trace file (the folder rule of gpuprof.analyze) and every saved report in ``folder``."""
    return sorted(set(trace_files(folder)) | set(report_files(folder)))


def is_report(p: Path) -> bool:
    with open(p, "rb") as f:
        head = f.read(_SNIFF)
    return b'"schema_version"' in head and b'"traceEvents"' not in head


# Files in a folder that are not traces although they end in .json: gpuprof's own saved reports.
_NOT_TRACES = {"report.json"}
_SNIFF_BYTES = 1 << 16


def _looks_like_trace(path: Path) -> bool:
    """Folder scan rule: every ``*.json.gz``, and a ``*.json`` whose first 64 KiB mention
    ``"traceEvents"`` or that starts with ``[`` (the Chrome "JSON Array Format")."""
    name = path.name
    if name in _NOT_TRACES:
        return False
    if name.endswith(".json.gz"):
        return True
    if not name.endswith(".json"):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF_BYTES)
    except OSError:
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
            if p.is_file() and _looks_like_trace(p):
                found.append(p)
    if unreadable and not found:
        raise PermissionError(f"{unreadable[0]}: permission denied (cannot list this folder)")
    for where in unreadable:
        print(f"gpuprof: skipped {where}: permission denied (cannot list this folder)", file=sys.stderr)
    return sorted(found)
