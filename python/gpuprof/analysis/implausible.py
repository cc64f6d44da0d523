"""Implausible input, said in the report instead of shown as fact: the report's ``warnings``.

Each warning is one row, ``{"kind", "count", "message"}`` (docs/schema.md, docs/metrics.md,
"Implausible input"), made from what the analysis counted: the step rules (repeated, nested and
malformed ``ProfilerStep#N`` markers, device events shifted by clock skew), the native plausibility
checks (occupancy above 100%, allocator levels above the device's memory) and the importer's skip
reasons (a timestamp in the other unit than the file's). ``clamp_percentages`` brings every
percentage of the result tables (a field ``fields.py`` declares with a ``_pct`` key) into 0-100 (a
saved report or an NVML sample may hold one out of it) and says how many it moved.
"""

from __future__ import annotations

from typing import Any

from .fields import percent_fields

# The importer's skip reasons for a timestamp in the other unit than the file's (cpp/src/io).
_OTHER_UNIT_REASONS = (
    "timestamp in nanoseconds in a microsecond trace",
    "timestamp in microseconds in a nanosecond trace",
)

_EXAMPLE_CHARS = 60  # of a name quoted in a message


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def _example(name: str) -> str:
    return repr(name if len(name) <= _EXAMPLE_CHARS else name[:_EXAMPLE_CHARS] + "...")


def _row(kind: str, count: int, message: str) -> dict:
    return {"kind": kind, "count": int(count), "message": message}


def warnings_from(breakdown: dict, plausibility: dict, metadata: dict) -> list[dict]:
    """The warnings of one analysis: ``breakdown`` and ``plausibility`` as ``_core.gpu_tables``
    gives them, ``metadata`` the trace's (the importer's ``import.skipped.*`` counts)."""
    out = []
    n = int(breakdown.get("duplicate_step_markers") or 0)
    if n:
        out.append(
            _row(
                "duplicate_step_markers",
                n,
                f"{n} ProfilerStep markers repeated a step number: each number's became one step",
            )
        )
    n = int(breakdown.get("nested_step_markers") or 0)
    if n:
        out.append(
            _row(
                "nested_step_markers",
                n,
                f"{n} ProfilerStep {_plural(n, 'marker', 'markers')} inside another step (a nested "
                f"profiler?) {_plural(n, 'was', 'were')} dropped",
            )
        )
    n = int(breakdown.get("malformed_step_markers") or 0)
    if n:
        example = _example(str(breakdown.get("malformed_step_example") or ""))
        out.append(
            _row(
                "malformed_step_markers",
                n,
                f"{n} ProfilerStep {_plural(n, 'marker carries', 'markers carry')} no step number "
                f"({example}{'' if n == 1 else ', ...'}): numbered after the step before "
                f"{_plural(n, 'it', 'each')}",
            )
        )
    n = int(breakdown.get("skewed_device_events") or 0)
    if n:
        skew_s = int(breakdown.get("max_launch_skew_ns") or 0) / 1e9
        where = f"{skew_s:,.1f} s after" if skew_s > 0 else f"{-skew_s:,.1f} s before"
        out.append(
            _row(
                "clock_skew",
                n,
                f"{n} device {_plural(n, 'event starts', 'events start')} implausibly far from the "
                f"runtime call that launched {_plural(n, 'it', 'them')} (up to {where}): clock skew "
                "between the host and device records? They count as their steps' device work but "
                "do not stretch the steps",
            )
        )
    n = int(plausibility.get("occupancy_clamped_kernels") or 0)
    if n:
        out.append(
            _row(
                "occupancy_over_100",
                n,
                f"{n} kernel {_plural(n, 'launch records', 'launches record')} an occupancy above "
                f"100% (up to {float(plausibility.get('occupancy_max_pct') or 0):,.0f}%): taken as "
                "100%",
            )
        )
    n = int(plausibility.get("memory_over_capacity_samples") or 0)
    if n:
        device = plausibility.get("memory_over_capacity_device")
        out.append(
            _row(
                "memory_over_capacity",
                n,
                f"{n} allocator {_plural(n, 'sample is', 'samples are')} above GPU {device}'s memory "
                f"(up to {_gib(plausibility.get('memory_over_capacity_max_bytes') or 0)} of "
                f"{_gib(plausibility.get('memory_over_capacity_device_bytes') or 0)}): the memory "
                "figures cannot be right (a damaged trace, or another GPU's deviceProperties?)",
            )
        )
    for reason in _OTHER_UNIT_REASONS:
        try:
            n = int(metadata.get(f"import.skipped.{reason}") or 0)
        except (TypeError, ValueError):
            n = 0
        if n:
            out.append(
                _row(
                    "timestamp_unit",
                    n,
                    f"{n} {_plural(n, 'event has a', 'events have a')} {reason} (the unit is the "
                    "majority's of the first timestamps): skipped",
                )
            )
    return out


def clamp_percentages(data: dict) -> None:
    """Every percentage of the result tables into 0-100, in place; a warning (appended to
    ``data["warnings"]``) counts those moved. Null (unknown) stays null."""
    moved: dict[str, int] = {}
    for table, keys in percent_fields().items():
        rows = data.get(table)
        if not isinstance(rows, list):
            continue
        for row in rows:
            if not isinstance(row, dict):
                continue
            for key in keys:
                value: Any = row.get(key)
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                if value > 100.0 or value < 0.0:
                    row[key] = 100.0 if value > 100.0 else 0.0
                    moved[key] = moved.get(key, 0) + 1
    if moved:
        n = sum(moved.values())
        fields = ", ".join(f"{k} ({c})" for k, c in sorted(moved.items()))
        data.setdefault("warnings", []).append(
            _row(
                "percent_out_of_range",
                n,
                f"{n} {_plural(n, 'percentage was', 'percentages were')} outside 0-100 and "
                f"{_plural(n, 'was', 'were')} clamped: {fields}",
            )
        )
