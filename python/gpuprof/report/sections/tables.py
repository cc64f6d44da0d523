"""The result tables as the renderers draw them: which tables, their columns in order, the
rows sorted, each cell formatted; the GPU summary's rows and the advice's evidence."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any, Optional

from ...analysis import CATEGORIES, section
from ...analysis.fields import labelled, shown_tables, terminal_tables


class _DeclaredTables(Sequence):
    """Tables the reports draw as rows, in their order: (key, title), read from analysis/fields.py
    each time (a table declared there is drawn without a change here)."""

    def __init__(self, read) -> None:
        self._read = read

    def __getitem__(self, i):
        return self._read()[i]

    def __len__(self) -> int:
        return len(self._read())


TABLES: Sequence[tuple[str, str]] = _DeclaredTables(shown_tables)  # Markdown and HTML
TERMINAL_TABLES: Sequence[tuple[str, str]] = _DeclaredTables(terminal_tables)

# Columns shown first when present, then any other scalar column in the order the rows give it.
_LEADING = [
    "name",
    "kernel",
    "operator",
    "input_shapes",
    "kind",
    "device",
    "stream",
    "calls",
    "count",
    "total_us",
    "self_us",
    "mean_us",
    "min_us",
    "max_us",
    "total_pct",
    "pct",
    "bytes",
    "total_bytes",
]
_NAME_KEYS = ("name", "op", "kernel")
# Columns of text (names), left-aligned in every format.
TEXT_COLUMNS = (
    "name",
    "kernel",
    "operator",
    "input_shapes",
    "kind",
    "process_group",
    "pg_desc",
    "group_ranks",
    "timed_by",
    # the compiled section's rows (sections/compiled.py)
    "backend",
    "time_on",
    "ops",
    "source",
    "function",
    "changed",
    "values",
    "reason",
)
# The collectives table's columns in the order that reads best (what a short table keeps first):
# which collective in which group, how much, how long, how much of it waiting, at what bandwidth.
_COLLECTIVE_COLUMNS = (
    "name",
    "process_group",
    "calls",
    "bytes",
    "total_us",
    "wait_us",
    "busbw_gbps",
    "transfer_us",
    "algbw_gbps",
    "mean_us",
    "pg_desc",
    "group_size",
    "group_ranks",
    "timed_by",
)
# Longer text is cut to this many characters in a table cell (a 300-rank group's ranks).
_CELL_CHARS = 40
_SORT_KEYS = (
    "total_us",
    "device_total_us",
    "host_total_us",
    "self_us",
    "dur_us",
    "total_bytes",
    "bytes",
    "self_size_increase_bytes",  # memory_ops: the plugin's default order
    "calls",
    "count",
)

# GPU summary fields, with their display names (analysis/fields.py).
DEVICE_FIELDS: list[tuple[str, str]] = labelled("devices")

_TIME_KEYS = (
    "time_us",
    "t_us",
    "ts_us",
    "timestamp_us",
    "time_ns",
    "t_ns",
    "ts_ns",
    "timestamp_ns",
    "time_s",
    "t_s",
)


def devices(data: dict) -> list[dict]:
    return section(data, "devices")


def advice(data: dict) -> list[dict]:
    return section(data, "advice")


def gpu_samples(data: dict) -> list[dict]:
    """NVML samples (utilization, memory, power... over time); [] when the report has none."""
    return section(data, "gpu_samples")


def shown_categories(report) -> list[tuple[str, str]]:
    """Categories with time in some step (Other always: it is what the rest does not explain)."""
    return [(k, n) for k, n in CATEGORIES if k == "other" or any(s.get(f"{k}_us", 0) for s in report.steps)]


# ---- tables ---------------------------------------------------------------------------------------
def _is_dims(v: Any) -> bool:
    """A launch dimension, [x, y, z]: shown as one cell, ``160x1x1``."""
    return isinstance(v, list) and 0 < len(v) <= 3 and all(isinstance(x, int) for x in v)


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool)) or _is_dims(v)


def name_of(row: dict) -> str:
    for k in _NAME_KEYS:
        if k in row and row[k] is not None:
            return str(row[k])
    return ""


def columns(rows: list[dict], limit: Optional[int] = None) -> list[str]:
    """Scalar columns present in the rows: the well-known ones first, then the rest in order."""
    present: list[str] = []
    for row in rows:
        for k, v in row.items():
            if k not in present and _is_scalar(v):
                present.append(k)
    # Device-time columns that are zero in every row (a CPU-only run) say nothing: hidden; so does
    # tensor-core eligibility when no row has device time (no GPU ran anything).
    present = [k for k in present if not (k.startswith("device_") and all(not row.get(k) for row in rows))]
    if not any(k.startswith("device_") for k in present):
        present = [k for k in present if k != "tc_eligible"]
    leading = _COLLECTIVE_COLUMNS if "busbw_gbps" in present and "process_group" in present else _LEADING
    ordered = [k for k in leading if k in present] + [k for k in present if k not in leading]
    return ordered[:limit] if limit else ordered


# What a memory series is called in a chart's legend.
SERIES_NAMES = {
    "peak_rss_bytes": "peak resident set size",
    "rss_bytes": "resident set size",
    "peak_allocated_bytes": "peak allocated",
    "allocated_bytes": "allocated",
    "peak_reserved_bytes": "peak reserved",
    "reserved_bytes": "reserved",
    "capacity_bytes": "capacity",
    "memory_used_bytes": "memory used",
}


def series_name(key: str) -> str:
    return SERIES_NAMES.get(key) or header(key)


def sorted_rows(rows: list[dict]) -> list[dict]:
    """Heaviest first by the first time (or size, or count) column the rows carry."""
    for key in _SORT_KEYS:
        # The first measure that tells rows apart (device time is all zero in a CPU-only run).
        if any(isinstance(r.get(key), (int, float)) and r.get(key) for r in rows):
            return sorted(rows, key=lambda r: -(r.get(key) if isinstance(r.get(key), (int, float)) else 0))
    return list(rows)


def header(col: str) -> str:
    """``total_us`` -> ``total (us)``; ``utilization_pct`` -> ``utilization %``."""
    for suffix, unit in (
        ("_us", " (us)"),
        ("_ns", " (ns)"),
        ("_ms", " (ms)"),
        ("_pct", " %"),
        ("_bytes", " bytes"),
        ("_gbps", " (GB/s)"),
    ):
        if col.endswith(suffix) and col != suffix.lstrip("_"):
            return col[: -len(suffix)].replace("_", " ") + unit
    return col.replace("_", " ")


def fmt_bytes(n: float) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0
    return f"{n:.1f} TiB"


def fmt_flops(n: float, unit: str = "FLOP") -> str:
    """A FLOP count with an SI prefix: ``1.29 GFLOP`` (``unit=""``: ``1.29 G``)."""
    n = float(n)
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {prefix}{unit}".rstrip()
    return f"{n:.0f} {unit}".rstrip()


# Characters that would act instead of show when a string from outside (a trace name, a path, a
# data set's name) reaches a terminal or a log: C0 controls (a newline fakes a line, ESC starts an
# ANSI sequence), DEL, C1 controls, the bidirectional overrides that reorder what a reader sees, and
# lone surrogates (a report's JSON may hold "\ud800"; no output encoding can write one). Compiled
# (re's cache) only for a string that is not plain printable ASCII, which holds none of them.
_UNPRINTABLE = "[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"


def printable(text: Any) -> str:
    """A string from outside as one inert line: each control character shown as its escape
    (\\n, \\x1b, \\u202e, \\ud800), everything else as it is. The result is also valid XML 1.0
    text (which allows no C0 control but tab, newline and carriage return, even escaped)."""
    s = str(text)
    if (s.isascii() and s.isprintable()) or not re.search(_UNPRINTABLE, s):
        return s
    return re.sub(_UNPRINTABLE, lambda m: repr(m.group())[1:-1], s)


SHOWN_CHARS = 1024  # a string from outside shown longer than this is cut (the report keeps it)


def shown(text: Any) -> str:
    """A string from outside (a metadata value, a path) as shown: cut past SHOWN_CHARS, saying how
    long it is. Table names come shortened already (analysis: ``long_names``)."""
    s = str(text)
    if len(s) <= SHOWN_CHARS:
        return s
    return f"{s[: SHOWN_CHARS - 64]}... [{len(s):,} characters]"


def fmt(col: str, value: Any) -> str:
    """One cell, formatted by the unit its column name carries."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return str(value)
    if _is_dims(value):
        return "x".join(map(str, value))
    if isinstance(value, (int, float)):
        if col.endswith("_bytes") or col == "bytes":
            return fmt_bytes(value)
        if col == "flops" or col.endswith("_flops"):
            return fmt_flops(value, unit="")
        if col.endswith("_pct"):
            return f"{value:.1f}"
        if col.endswith(("_us", "_ns")):
            return f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"
        if isinstance(value, float):
            return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
        return f"{value:,}"
    text = printable(value)
    return text if col != "group_ranks" or len(text) <= _CELL_CHARS else text[: _CELL_CHARS - 1] + "\u2026"


def sort_value(value: Any) -> str:
    """What a sortable HTML cell sorts by: the raw number, or the text."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, (int, float)):
        return repr(float(value))
    if _is_dims(value):  # by the threads (or blocks) it stands for
        return repr(float(math.prod(value)))
    return "" if value is None else str(value)


def evidence_lines(evidence: Any) -> list[str]:
    """A recommendation's evidence as lines of text, whatever shape the rule gave it."""
    if evidence is None:
        return []
    if isinstance(evidence, str):
        return [evidence]
    if isinstance(evidence, dict):
        # The rules' one-line `summary` leads; the numbers follow on one line, and
        # unmeasured (None) numbers are left out
        lead = [str(evidence["summary"])] if evidence.get("summary") else []
        numbers = [
            f"{k} {fmt(k, v) if _is_scalar(v) else v}"
            for k, v in evidence.items()
            if k != "summary" and v is not None
        ]
        return lead + (["measured: " + ", ".join(numbers)] if numbers else [])
    if isinstance(evidence, Iterable):
        return [str(e) for e in evidence]
    return [str(evidence)]


def ranked_advice(data: dict) -> list[dict]:
    """Advice heaviest first by its bound on the saving (the rules' order breaks ties)."""
    items = advice(data)
    return sorted(
        items,
        key=lambda a: (
            -(a.get("saving_bound_pct") or 0) if isinstance(a.get("saving_bound_pct"), (int, float)) else 0
        ),
    )
