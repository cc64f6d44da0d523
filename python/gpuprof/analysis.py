"""Analyse: from a stored trace to the report dict (the numbers; no advice, no rendering).

The package's data flow, one way only:

    collect (profiler.py, _native, C++ collectors) -> store (the native Trace, export.py)
      -> analyse (this module: one C++ pass, cpp/src/analysis) -> advise (advice/, reads the dict)
      -> report (report/: the Report model and its renderers, which show the dict and its advice)

Nothing downstream is imported here, and advice/ reads the dict through ``section`` below, never
through report/.
"""

from __future__ import annotations

from typing import Any, Optional

from . import _build_info
from ._native import _core

SCHEMA_VERSION = 1

# (JSON key stem, display name), in the breakdown's priority order.
CATEGORIES: list[tuple[str, str]] = [tuple(c) for c in _core.CATEGORIES]


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


def analyse(trace, *, dataloaders: Optional[list] = None, host: Optional[dict] = None,
            source: Optional[dict] = None, drop_incomplete_last_step: bool = True) -> dict:
    """The report dict (docs/schema.md) of a native Trace, without advice."""
    # One native pass: the breakdown, and the GPU summary and tables over the same steps.
    analysed = _core.gpu_tables(trace, drop_incomplete_last_step)
    bd = analysed["breakdown"]
    steps = []
    for s in bd["steps"]:
        row = {"step": s["step"], "total_us": _us(s["total_ns"])}
        for key, _ in CATEGORIES:
            row[f"{key}_us"] = _us(s[f"{key}_ns"])
        row["start_ns"] = s["start_ns"]
        row["end_ns"] = s["end_ns"]
        steps.append(row)
    data = {
        "schema_version": SCHEMA_VERSION,
        "gpuprof_version": _build_info.GPUPROF_VERSION,
        "source": dict(source or {}),
        "steps": steps,
        "average": _average(steps),
        "step_rules": {
            "had_step_markers": bd["had_step_markers"],
            "dropped_trailing_steps": bd["dropped_trailing_steps"],
            "dropped_incomplete_last": bd["dropped_incomplete_last"],
        },
        "dataloaders": list(dataloaders or []),
        "host": dict(host or {}),
        "counts": {"events": trace.num_events, "dropped": int(trace.dropped_events),
                   "skipped": int(trace.skipped_events), "steps": len(steps)},
        "metadata": dict(trace.metadata),
    }
    # ---- GPU metrics (issue 3): per-device summary and the detail tables ----------------------
    # Lists of rows computed in C++ (cpp/src/analysis/gpu_summary.cpp, tables.cpp); unknown
    # numbers are None. docs/metrics.md defines every field.
    for key in ("devices", "kernels", "operators", "copies", "syncs", "memory"):
        data[key] = analysed[key]
    # NVML samples of the span (utilization, memory used, power, SM clock, temperature); -1 is
    # "not reported by this device" and becomes None.
    data["gpu_samples"] = [_gpu_sample_row(row) for row in _core.gpu_samples(trace)]
    # ---- end GPU metrics -----------------------------------------------------------------------
    return data


def _gpu_sample_row(raw: dict) -> dict:
    row = {k: (None if v == -1 and k != "device" else v) for k, v in raw.items() if k != "power_mw"}
    power_mw = raw.get("power_mw", -1)
    row["power_w"] = None if power_mw == -1 else power_mw / 1000.0
    return row


def _average(steps: list[dict]) -> dict:
    """Mean of each category over the steps, and its share of the mean step."""
    keys = ["total_us"] + [f"{k}_us" for k, _ in CATEGORIES]
    if not steps:
        out = {k: 0.0 for k in keys}
        out.update({f"{k}_pct": 0.0 for k, _ in CATEGORIES})
        return out
    out = {k: round(sum(s[k] for s in steps) / len(steps), 3) for k in keys}
    total = out["total_us"]
    for k, _ in CATEGORIES:
        out[f"{k}_pct"] = round(100.0 * out[f"{k}_us"] / total, 2) if total > 0 else 0.0
    return out


def _list_of_dicts(value: Any) -> list[dict]:
    if isinstance(value, dict) and isinstance(value.get("rows"), list):
        value = value["rows"]
    if not isinstance(value, list):
        return []
    return [row for row in value if isinstance(row, dict)]


def section(data: dict, key: str) -> list[dict]:
    """A list-of-rows section of a report dict, found at the top level or under ``tables``; []
    when absent (a CPU-only report, or one from an older gpuprof, has only some sections)."""
    tables = data.get("tables")
    if isinstance(tables, dict) and key in tables:
        return _list_of_dicts(tables[key])
    return _list_of_dicts(data.get(key))
