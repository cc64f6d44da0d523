"""Reading a report's sections for the renderers, whether or not the report has them.

The report dict grows as collection and analysis grow (GPU summary, kernel and operator tables,
NVML samples, memory, advice); a report made on a CPU, or by an older gpuprof, has only some of
them. Every renderer asks here, gets an empty list for a missing section, and shows a short note
instead of failing. Nothing here computes a metric: it picks columns, orders rows and formats
numbers that the analysis already produced.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any, Optional

from ..analysis import CATEGORIES, section  # noqa: F401  (section: re-exported for renderers)
from ..analysis.fields import labelled, shown_tables, terminal_tables


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
# lone surrogates (a report's JSON may hold "\ud800"; no output encoding can write one).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: Any) -> str:
    """A string from outside as one inert line: each control character shown as its escape
    (\\n, \\x1b, \\u202e, \\ud800), everything else as it is. The result is also valid XML 1.0
    text (which allows no C0 control but tab, newline and carriage return, even escaped)."""
    s = str(text)
    if not _UNPRINTABLE.search(s):
        return s
    return _UNPRINTABLE.sub(lambda m: repr(m.group())[1:-1], s)


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


# ---- time series (NVML samples, memory) -------------------------------------------------------------
def time_key(rows: list[dict]) -> Optional[str]:
    for k in _TIME_KEYS:
        if rows and all(isinstance(r.get(k), (int, float)) for r in rows):
            return k
    return None


def series_keys(rows: list[dict], suffixes: tuple[str, ...]) -> list[str]:
    """Numeric columns (ending in one of ``suffixes``) to plot against time."""
    skip = set(_TIME_KEYS) | {"device", "id", "index", "pid"}
    keys: list[str] = []
    for row in rows:
        for k, v in row.items():
            if (
                k not in skip
                and k not in keys
                and k.endswith(suffixes)
                and isinstance(v, (int, float))
                and not isinstance(v, bool)
            ):
                keys.append(k)
    return keys


def seconds(key: str, value: float) -> float:
    if key.endswith("_ns"):
        return value / 1e9
    if key.endswith("_us"):
        return value / 1e6
    return float(value)


def by_device(rows: list[dict]) -> list[tuple[Any, list[dict]]]:
    groups: dict[Any, list[dict]] = {}
    for r in rows:
        groups.setdefault(r.get("device", r.get("device_id")), []).append(r)
    return list(groups.items())


# ---- modules ---------------------------------------------------------------------------------------
def modules(data: dict) -> list[dict]:
    """The module view's rows, depth first (analysis: docs/metrics.md, "Modules"); [] without."""
    return section(data, "modules")


def module_subtrees(data: dict) -> list[dict]:
    """Each module row's path and where its subtree ends among the rows (depth first: a row's
    descendants are the rows up to ``end``), for the timeline to show a module's work."""
    rows = modules(data)
    out = []
    for i, r in enumerate(rows):
        depth, end = r.get("depth") or 0, i + 1
        while end < len(rows) and (rows[end].get("depth") or 0) > depth:
            end += 1
        out.append({"path": r.get("path"), "end": end})
    return out


def steps_us(data: dict) -> float:
    """The summed time of the report's steps: what a module's share of the step is taken of."""
    return float(sum(s.get("total_us") or 0.0 for s in data.get("steps") or []))


def module_name_parts(row: dict) -> tuple[str, str]:
    """How a row reads in a tree: its name under its parent (its last path segments; the model: its
    class) and, when that name does not already say it, its class ("" otherwise)."""
    path = str(row.get("path") or "")
    parent = row.get("parent")
    kind = str(row.get("type") or "")
    if parent not in (None, "") and path.startswith(f"{parent}."):
        path = path[len(str(parent)) + 1 :]
    if not path:
        return kind, ""
    # torch.profiler's instance names (Conv2d_3) already carry the class.
    numbered = path.startswith(f"{kind}_") and path[len(kind) + 1 :].isdigit()
    return path, "" if path == kind or numbered else kind


def module_label(row: dict) -> str:
    own, kind = module_name_parts(row)
    return f"{own} ({kind})" if kind else own


def module_tree(data: dict, limit: int) -> tuple[list[dict], int]:
    """At most ``limit`` module rows as a tree: the heaviest by ``host_total_us`` and every
    ancestor of those (so each shown row hangs under its shown parent), in the rows' depth-first
    order; with each row's ``share_pct`` of the summed step time (None without steps), its
    ``label`` (``own`` name and ``kind``) and its index among all the rows (``row``). Returns
    (rows, how many were left out)."""
    rows = modules(data)
    if not rows:
        return [], 0
    index = {r.get("path"): i for i, r in enumerate(rows)}
    kept: set[int] = set()
    for i in sorted(range(len(rows)), key=lambda i: -(rows[i].get("host_total_us") or 0.0)):
        if len(kept) >= limit:
            break
        j: Optional[int] = i
        while j is not None and j not in kept:  # the row and its ancestors not yet kept
            kept.add(j)
            parent = rows[j].get("parent")
            j = index.get(parent) if parent is not None else None
    total = steps_us(data)
    out = []
    for i in sorted(kept):
        r = rows[i]
        share = 100.0 * (r.get("host_total_us") or 0.0) / total if total > 0 else None
        own, kind = module_name_parts(r)
        out.append({**r, "share_pct": share, "label": module_label(r), "own": own, "kind": kind, "row": i})
    return out, len(rows) - len(out)


# ---- memory -----------------------------------------------------------------------------------------
def memory_lines(data: dict) -> list[str]:
    """One line per GPU (its highest per-step peak, the step, against capacity) and one for the host
    (resident set size at the first and last step, and its peak): the memory table in a sentence."""
    lines = []
    for device, rows in by_device(section(data, "memory")):
        if device == -1:
            rss = [
                (r.get("step"), r["peak_rss_bytes"])
                for r in rows
                if isinstance(r.get("peak_rss_bytes"), (int, float))
            ]
            if rss:
                (_, first), (_, last) = rss[0], rss[-1]
                step, peak = max(rss, key=lambda x: x[1])
                growth = last - first
                lines.append(
                    f"Host RSS: {fmt_bytes(first)} at step {rss[0][0]}, {fmt_bytes(last)} at step "
                    f"{rss[-1][0]} ({'+' if growth >= 0 else '-'}{fmt_bytes(abs(growth))}), "
                    f"peak {fmt_bytes(peak)} (step {step})"
                )
            continue
        known = [r for r in rows if isinstance(r.get("peak_allocated_bytes"), (int, float))]
        if not known:
            continue
        top = max(known, key=lambda r: r["peak_allocated_bytes"])
        line = f"GPU {device}: peak allocated {fmt_bytes(top['peak_allocated_bytes'])}"
        cap = top.get("capacity_bytes")
        if isinstance(cap, (int, float)) and cap > 0:
            line += f" of {fmt_bytes(cap)} ({100.0 * top['peak_allocated_bytes'] / cap:.0f}%)"
            if top["peak_allocated_bytes"] > cap:
                line += " [above the device's memory: implausible, see the warning]"
        line += f" in step {top.get('step')}"
        if isinstance(top.get("peak_reserved_bytes"), (int, float)):
            line += f", reserved {fmt_bytes(top['peak_reserved_bytes'])}"
        lines.append(line)
    return lines


# ---- FLOPs, MFU and the roofline (docs/metrics.md) --------------------------------------------------
def flops(data: dict) -> dict:
    """The report's ``flops`` section; {} for a report made before gpuprof counted FLOPs."""
    f = data.get("flops")
    return f if isinstance(f, dict) else {}


def roofline(data: dict) -> list[dict]:
    return section(data, "roofline")


def _pct(v: Any) -> str:
    return f"{v:.1f}%" if isinstance(v, (int, float)) else "?"


def flops_lines(data: dict) -> list[str]:
    """The FLOPs section in sentences: FLOPs per step and achieved rate, MFU and HFU against which
    peak (or why there is none), and the roofline's memory-bound share. [] without the section."""
    f = flops(data)
    if not f:
        return []
    lines = []
    per_step = f.get("per_step_flops")
    if per_step is None:
        lines.append("FLOPs: not counted")
    else:
        parts = []
        if isinstance(f.get("matmul_flops_per_step"), (int, float)):
            parts.append(f"matrix {fmt_flops(f['matmul_flops_per_step'])}")
        if f.get("other_flops_per_step"):
            parts.append(f"other {fmt_flops(f['other_flops_per_step'])}")
        if f.get("recompute_flops_per_step"):
            parts.append(f"recomputed forward {fmt_flops(f['recompute_flops_per_step'])}")
        rate = f.get("tflops_per_s")
        lines.append(
            f"FLOPs per step: {fmt_flops(per_step)}"
            + (f" ({', '.join(parts)})" if parts else "")
            + (f"; achieved {rate:.4g} TFLOP/s" if isinstance(rate, (int, float)) else "")
        )
    peak = f.get("peak_tflops")
    if isinstance(peak, (int, float)) and isinstance(f.get("mfu_pct"), (int, float)):
        est = " (an estimate)" if f.get("peak_estimate") else ""
        lines.append(
            f"MFU {_pct(f['mfu_pct'])}, HFU {_pct(f.get('hfu_pct'))} of the "
            f"{printable(f.get('dtype'))} dense "
            f"peak {peak:.4g} TFLOP/s{est}: {printable(f.get('peak_source') or '')}"
        )
    ridge = f.get("ridge_flop_per_byte")
    if isinstance(ridge, (int, float)) and isinstance(f.get("memory_bound_pct"), (int, float)):
        bw = f.get("memory_bandwidth_gbps")
        lines.append(
            f"Roofline: {_pct(f['memory_bound_pct'])} of the time of operators with FLOPs is memory-bound "
            f"(ridge {ridge:.3g} FLOP/byte"
            + (f" = {peak:.4g} TFLOP/s / {bw:,.0f} GB/s" if isinstance(bw, (int, float)) else "")
            + ")"
        )
    if f.get("note"):
        lines.append(printable(f["note"]))
    return lines


# ---- the memory view: what fills memory at the peak, what grows, why a run ran out ------------------
COMPOSITION = (
    ("parameters", "parameters"),
    ("gradients", "gradients"),
    ("optimizer_state", "optimizer state"),
    ("activations", "activations"),
    ("temporary", "temporary"),
    ("unknown", "unknown"),
)
TOP_OWNERS = 3  # operators / modules named per line
MIN_PEAK_SHOWN_BYTES = 1 << 20  # a device peaking lower (a trace's few host bytes) is not worth a line


def device_name(device: Any) -> str:
    return "host" if str(device) == "-1" else f"GPU {device}"


def composition_parts(composition: dict) -> list[tuple[str, str, int, float]]:
    """(key, label, bytes, % of the total) of each part that holds bytes, in COMPOSITION's order."""
    total = sum(int(composition.get(k) or 0) for k, _ in COMPOSITION)
    return [
        (
            k,
            label,
            int(composition.get(k) or 0),
            100.0 * int(composition.get(k) or 0) / total if total else 0.0,
        )
        for k, label in COMPOSITION
        if composition.get(k)
    ]


def composition_text(composition: dict) -> str:
    return ", ".join(
        f"{label} {fmt_bytes(b)} ({pct:.0f}%)" for _, label, b, pct in composition_parts(composition)
    )


def owners_text(rows: list, key: str = "bytes", suffix: str = "", modules: bool = False) -> str:
    """The first TOP_OWNERS owners (``memory_owner`` rows) as "name bytes, ...": operators, or with
    ``modules`` module paths (the model itself "(model)", as the module tables show it)."""

    def name(r: dict) -> str:
        return module_owner_name(r.get("name")) if modules else r.get("name") or "(outside any operator)"

    return ", ".join(
        f"{printable(name(r))} {fmt_bytes(r.get(key) or 0)}{suffix}" for r in (rows or [])[:TOP_OWNERS]
    )


def module_owner_name(path: Any) -> str:
    """A module owner's name as shown: its path in ``modules``, the model's own ("") "(model)"."""
    return str(path) if path else "(model)"


def module_owners_note(data: dict) -> Optional[str]:
    """Why a report with memory owners names no module, and how to get them: the module view is
    off (live), or the trace has no module calls; None when the report has the module view (or is
    from before it)."""
    if modules(data) or "modules" not in data:
        return None
    live = (data.get("source") or {}).get("kind") in ("live", "out_of_memory")
    note = str((data.get("metadata") or {}).get("module_view") or "")
    if live and note.startswith("off: gpuprof.profile(with_modules=True)"):
        return (
            "by module: the module view is off; gpuprof.profile(with_modules=True) "
            "(gpuprof run --modules) names the modules that made this memory"
        )
    if live:
        return f"by module: module view {note}" if note else None
    return (
        "by module: this trace has no module calls; torch.profiler.profile(with_stack=True) "
        "writes them (or profile live with gpuprof.profile(with_modules=True))"
    )


def _steps_span(steps: list) -> str:
    return f"steps {steps[0]}..{steps[-1]}" if len(steps) > 1 else f"step {steps[0]}"


def memory_view_lines(data: dict) -> list[str]:
    """Each device's peak with what filled it and who made it, and memory that grows across steps."""
    lines = []
    composition = data.get("memory_composition") or {}
    for device, peak in sorted((data.get("memory_peak") or {}).items(), key=lambda kv: int(kv[0]) < 0):
        if (peak.get("bytes") or 0) < MIN_PEAK_SHOWN_BYTES:
            continue
        where = device_name(device)
        step = peak.get("step")
        head = f"{where[0].upper()}{where[1:]} at its peak ({fmt_bytes(peak.get('bytes') or 0)}" + (
            f" in step {step})" if step is not None else ")"
        )
        parts = composition_text(composition.get(device) or {})
        lines.append(head + (f": {parts}" if parts else ""))
        if peak.get("top_ops"):
            lines.append(f"  live at the peak, by operator: {owners_text(peak['top_ops'])}")
        if peak.get("top_modules"):
            lines.append(f"  live at the peak, by module: {owners_text(peak['top_modules'], modules=True)}")
        elif peak.get("top_ops") and module_owners_note(data):
            lines.append(f"  {module_owners_note(data)}")
    for device, g in sorted((data.get("memory_growth") or {}).items(), key=lambda kv: int(kv[0]) < 0):
        if not g.get("flagged"):
            continue
        steps = g.get("steps") or []
        line = (
            f"Memory grows on the {device_name(device)}: {g['mb_per_step']:+.3g} MB per step over "
            f"{_steps_span(steps)} ({g.get('rising_steps')} of {max(len(steps) - 1, 0)} step ends higher)"
        )
        if g.get("ops"):
            line += f"; left live by {owners_text(g['ops'], 'bytes_per_step', '/step')}"
        if g.get("modules"):
            line += f"; in modules {owners_text(g['modules'], 'bytes_per_step', '/step', modules=True)}"
        lines.append(line)
    return lines


def out_of_memory_lines(data: dict) -> list[str]:
    """The out-of-memory section in lines: the failure, what filled memory, the batch that fits and
    the fixes (the out_of_memory recommendation's)."""
    oom = data.get("out_of_memory")
    if not isinstance(oom, dict):
        return []
    where = device_name(oom.get("device"))
    head = f"gpuprof: out of memory on the {where} ({printable(oom.get('error') or 'error')})"
    facts = []
    if oom.get("requested_bytes") is not None:
        facts.append(f"tried to allocate {fmt_bytes(oom['requested_bytes'])}")
    if oom.get("allocated_bytes") is not None:
        held = f"{fmt_bytes(oom['allocated_bytes'])} allocated"
        if oom.get("capacity_bytes"):
            held += f" of {fmt_bytes(oom['capacity_bytes'])}"
        facts.append(held)
    if oom.get("free_bytes") is not None:
        facts.append(f"{fmt_bytes(oom['free_bytes'])} free")
    if oom.get("reserved_unallocated_bytes"):
        facts.append(f"{fmt_bytes(oom['reserved_unallocated_bytes'])} reserved but unallocated")
    lines = [head + (": " + ", ".join(facts) if facts else "")]
    for note in oom.get("notes") or []:
        lines.append(f"  note: {printable(note)}")
    if oom.get("composition"):
        lines.append(f"  at the failure: {composition_text(oom['composition'])}")
        if oom.get("composition_source"):
            lines.append(f"    (from {printable(oom['composition_source'])})")
    if oom.get("top_ops"):
        lines.append(f"  live allocations by operator: {owners_text(oom['top_ops'])}")
    if oom.get("top_modules"):
        lines.append(f"  live allocations by module: {owners_text(oom['top_modules'], modules=True)}")
    elif oom.get("top_ops") and module_owners_note(data):
        lines.append(f"  {module_owners_note(data)}")
    fits = oom.get("largest_batch_that_fits")
    if fits is not None:
        lines.append(
            f"  largest batch that fits: {fits} (now {oom.get('batch_size')}): "
            f"{fmt_bytes(oom['per_sample_bytes'])} per sample ({printable(oom.get('per_sample_source'))}), "
            f"{fmt_bytes(oom['fixed_bytes'])} that does not grow with the batch, "
            f"{fmt_bytes(oom['budget_bytes'])} the allocator could have had"
        )
    rec = next((a for a in data.get("advice") or [] if a.get("rule") == "out_of_memory"), None)
    if rec and rec.get("fix"):
        lines.append(f"  fixes: {printable(rec['fix'])}")
    return lines


# ---- energy per step (docs/metrics.md, "Energy") ------------------------------------------------------
_ENERGY_METHODS = {
    "counter": "NVML energy counter",
    "power": "power samples integrated",
    "counter and power": "NVML energy counter; power samples where its readings did not cover a step",
}


def energy_lines(data: dict) -> list[str]:
    """The energy per step in sentences, shown beside the GPU summary: the mean step's energy on the
    sampled GPUs, its mean power and energy per sample, then each GPU's (how it was measured, and why
    steps were not). [] when the report has no energy table: nothing is said on a CPU-only report."""
    rows = section(data, "energy")
    if not rows:
        return []
    avg = data.get("average") or {}
    joules = avg.get("energy_j")
    if isinstance(joules, (int, float)):
        line = f"Energy: {joules:.4g} J per step"
        if isinstance(avg.get("mean_power_w"), (int, float)):
            line += f", mean power {avg['mean_power_w']:.1f} W"
        if isinstance(avg.get("energy_per_sample_j"), (int, float)):
            line += f", {avg['energy_per_sample_j']:.4g} J per sample"
        lines = [line + " (the whole GPU, other processes' work included)"]
    else:
        lines = ["Energy: not measured"]
    for r in rows:
        where = f"GPU {r.get('device')}: "
        if isinstance(r.get("energy_per_step_j"), (int, float)):
            line = f"{where}{r['energy_per_step_j']:.4g} J per step"
            if isinstance(r.get("mean_power_w"), (int, float)):
                line += f", {r['mean_power_w']:.1f} W"
            line += f" ({_ENERGY_METHODS.get(r.get('method'), r.get('method'))}, {r.get('steps')} steps)"
        else:
            line = f"{where}not measured"
        if r.get("note"):
            line += f"; {r['note']}"
        lines.append(printable(line))
    return lines


# ---- end energy


# ---- the trace beside the report, and the "about" rows ------------------------------------------------
PERFETTO_URL = "https://ui.perfetto.dev"


def trace_note(data: dict) -> Optional[str]:
    """Where the Chrome trace of this report is and how to open it; None when none was written."""
    path = data.get("source", {}).get("trace_path")
    if not path:
        return None
    return (
        f'Trace: {path} (open it in {PERFETTO_URL} with "Open trace file", or in '
        'chrome://tracing with "Load")'
    )


def warning_lines(data: dict) -> list[str]:
    """The report's warnings (implausible input: docs/metrics.md), one message each, as they stand
    in ``warnings``; for a report from before warnings existed, what its step rules counted."""
    rows = data.get("warnings")
    if isinstance(rows, list):
        return [str(w["message"]) for w in rows if isinstance(w, dict) and w.get("message")]
    note = step_marker_note(data)
    return [note] if note else []


def span_end_note(data: dict) -> Optional[str]:
    """gpuprof's own time at a live span's end (building, then writing its report), which falls
    between two training steps and counts in neither; None when not recorded."""
    src = data.get("source") or {}
    build, write = src.get("report_build_s"), src.get("report_write_s")
    if not isinstance(build, (int, float)):
        return None
    parts = [f"{build:.3f} s building this report"]
    if isinstance(write, (int, float)):
        parts.append(f"{write:.3f} s writing it (on_trace_ready)")
    return "gpuprof at the span's end: " + ", ".join(parts) + " (between two steps, counted in neither)"


def step_marker_note(data: dict) -> Optional[str]:
    """What the step rules did with step markers that would have cut zero-length or overlapping
    steps (repeated or nested ``ProfilerStep#N``); None when there were none."""
    rules = data.get("step_rules") or {}
    parts = []
    if rules.get("duplicate_step_markers"):
        n = rules["duplicate_step_markers"]
        parts.append(f"{n} ProfilerStep markers repeated a step number: each number's became one step")
    if rules.get("nested_step_markers"):
        n = rules["nested_step_markers"]
        parts.append(
            f"{n} ProfilerStep marker{'s' if n > 1 else ''} inside another step (a nested profiler?) "
            f"{'were' if n > 1 else 'was'} dropped"
        )
    return "; ".join(parts) or None


def about_value(key: str, value: Any) -> str:
    """A source/metadata value for a person: a Unix time as a UTC date, the rest as text."""
    if key.endswith("_unix") and isinstance(value, (int, float)) and not isinstance(value, bool):
        import datetime

        return datetime.datetime.fromtimestamp(value, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return fmt(key, value) if not isinstance(value, str) else value


def about_label(key: str) -> str:
    return header(key[: -len("_unix")] if key.endswith("_unix") else key)


# ---- advice explanations, as HTML (the report is one file: docs/ is not installed) ----------------
def md_to_html(text: str) -> str:
    """A small Markdown subset (paragraphs, bullet lists, tables as rows, **bold**, *em*, `code`)
    to HTML. Every character of the input is escaped first; only the tags made here are markup."""
    import html as _html
    import re as _re

    def inline(s: str) -> str:
        s = _html.escape(s, quote=True)
        s = _re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
        s = _re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", s)
        s = _re.sub(r"(?<![*\w])\*([^*\s][^*]*)\*(?![*\w])", r"<i>\1</i>", s)
        s = _re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r"\1", s)  # links: their text (targets are docs/)
        return s

    out: list[str] = []
    para: list[str] = []
    items: list[str] = []
    rows: list[list[str]] = []

    def flush() -> None:
        if para:
            out.append("<p>" + inline(" ".join(para)) + "</p>")
            para.clear()
        if items:
            out.append("<ul>" + "".join(f"<li>{inline(i)}</li>" for i in items) + "</ul>")
            items.clear()
        if rows:
            out.append(
                "<table>"
                + "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>" for r in rows)
                + "</table>"
            )
            rows.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            flush()
        elif stripped.startswith("|"):
            if para or items:
                flush()
            cells = [c.strip() for c in stripped.strip("|").split("|")]
            if not all(_re.fullmatch(r":?-{2,}:?", c) for c in cells):
                rows.append(cells)
        elif _re.match(r"^[-*] ", stripped):
            if para or rows:
                flush()
            items.append(stripped[2:])
        elif items and line.startswith("  "):
            items[-1] += " " + stripped
        else:
            if items or rows:
                flush()
            para.append(stripped)
    flush()
    return "".join(out)


def advice_explanation_html(rule_id: Any) -> str:
    """The rule's explanation from the packaged docs/advice.md, as HTML; "" when there is none."""
    from ..advice.explain import explanation

    text = explanation(str(rule_id)) if rule_id else None
    return md_to_html(text) if text else ""


def step_views(data: dict) -> dict:
    """The drawn steps' events, per-step tops and outliers (analysis.step_views); {} when absent."""
    v = data.get("step_views")
    return v if isinstance(v, dict) else {}


# ---- the cross-rank section: one row per rank, and the stragglers ------------------------------------
RANK_HEADERS = [
    "rank",
    "host",
    "device",
    "steps",
    "step ms",
    "outside collectives ms",
    "waiting in collectives ms",
    "comm/compute overlap %",
]


def ranks_shown(data: dict) -> bool:
    """The cross-rank section is shown when the report holds more than one rank, names missing
    ranks or skipped files, or is one rank of a job. Its numbers come from analysis/ranks.py; this
    only formats them."""
    cr = data.get("cross_rank") or {}
    return (
        len(data.get("ranks") or []) > 1
        or bool(cr.get("missing_ranks") or cr.get("skipped_files"))
        or (cr.get("world_size") or 1) > 1
    )


def rank_rows(data: dict) -> list[list[str]]:
    out = []
    for r in data.get("ranks") or []:
        avg = r.get("average") or {}
        overlap = r.get("comm_comp_overlap_pct")
        out.append(
            [
                str(r.get("rank")),
                str(r.get("hostname", "")),
                str(r.get("device", "")),
                str(r.get("steps", "")),
                f"{(avg.get('total_us') or 0) / 1000:.2f}",
                f"{(r.get('busy_us') or 0) / 1000:.2f}",
                f"{(r.get('collective_wait_us') or 0) / 1000:.2f}",
                "-" if overlap is None else f"{overlap:.1f}",
            ]
        )
    return out


def _held(s: dict) -> str:
    """ "slower in 3 of 10 steps by more than 1.20 ms" (the straggler rule's evidence), or ""."""
    held, steps = s.get("steps_held"), s.get("matched_steps")
    if not isinstance(held, list) or not steps:
        return ""
    threshold_ms = float(s.get("threshold_us") or 0) / 1000
    return f"slower in {len(held)} of {steps} steps by more than {threshold_ms:.2f} ms"


def straggler_lines(data: dict) -> list[str]:
    lines = []
    for s in data.get("stragglers") or []:
        held, noise = _held(s), s.get("noise_us")
        lines.append(
            f"rank {s['rank']} is a straggler: {s['excess_us'] / 1000:.2f} ms per step more than the "
            f"other ranks outside collectives ({s['excess_pct']:.1f}% of the step), mostly "
            f"{str(s['category']).removesuffix('_us')}"
            + (f"; {held}" if held else "")
            + (f" (the others' noise: {noise / 1000:.2f} ms)" if isinstance(noise, (int, float)) else "")
        )
    return lines


def rank_summary_lines(data: dict) -> list[str]:
    cr = data.get("cross_rank") or {}
    if len(data.get("ranks") or []) == 1 and not cr.get("missing_ranks") and (cr.get("world_size") or 1) > 1:
        return [str(cr.get("note") or "this is one rank of a job: rank 0's report holds every rank")]
    lines = [
        f"{len(data.get('ranks') or [])} of {cr.get('world_size', '?')} ranks, "
        f"{cr.get('matched_steps', 0)} steps matched by number, load imbalance "
        f"{cr.get('imbalance_pct', 0):.1f}% of the step"
    ]
    if cr.get("missing_ranks") or cr.get("skipped_files"):
        missing = ", ".join(map(str, cr.get("missing_ranks") or [])) or "none known"
        lines.append(f"missing ranks: {missing}" + (f" ({cr['note']})" if cr.get("note") else ""))
    lines += straggler_lines(data)
    if not data.get("stragglers"):
        slow = cr.get("slowest_unnamed")
        if isinstance(slow, dict) and slow.get("excess_us", 0) > 0 and slow.get("steps_held"):
            # Slower, but not in a clear majority of steps by more than the noise: said as it is.
            lines.append(
                f"no straggler named: rank {slow['rank']} is {slow['excess_us'] / 1000:.2f} ms per step "
                f"above the others outside collectives, but {_held(slow)} only (a straggler is "
                "slower in at least 2 of 3 steps)"
            )
        else:
            lines.append("no straggler: no rank spends longer outside collectives than the others' noise")
    return lines


def summary_line(report) -> str:
    """One line of a report: its steps, the mean step and the three largest shares of it (what each
    rank of a job prints under a launcher, where every rank's output lands in one terminal)."""
    numbers = [s["step"] for s in report.steps]
    if not numbers:
        return "no complete step recorded"
    avg = report.average
    shares = sorted(
        ((avg.get(f"{k}_pct") or 0.0, name) for k, name in CATEGORIES if avg.get(f"{k}_pct")), reverse=True
    )
    top = ", ".join(f"{name} {pct:.1f}%" for pct, name in shares[:3])
    return f"steps {numbers[0]}..{numbers[-1]}, mean step {avg.get('total_us', 0.0) / 1000.0:.2f} ms" + (
        f" ({top})" if top else ""
    )


def merged_timeline(data: dict) -> Optional[dict]:
    """For a report of several ranks: how to get every rank on one timeline (``gpuprof export``) and,
    when the report's trace sits in a job folder's ``rank<N>/`` (gpuprof run, gpuprof.save), where
    that writes it: {"command", "path" or None}."""
    if len(data.get("ranks") or []) < 2:
        return None
    import os
    import shlex
    from pathlib import PurePath

    from ..traces.export import MERGED_TIMELINE_NAME

    trace = (data.get("source") or {}).get("trace_path")
    parent = PurePath(trace).parent if trace else None
    job = str(parent.parent) if parent is not None and re.fullmatch(r"rank\d+", parent.name) else None
    return {
        "command": f"gpuprof export {shlex.quote(job) if job else 'DIR'} --merged",
        "path": os.path.join(job, MERGED_TIMELINE_NAME) if job else None,
    }
