"""The report of a killed job's step journal (``traces/journal.py``) from the per-step summaries
its live session wrote (``_core.StepSummarizer``): each step's row as the live report makes it, the
operator table summed over the completed steps, and the memory per step; the advice is made again
over them. Nothing here imports torch."""

from __future__ import annotations

import logging
from typing import Optional

from .._native import _core
from ..analysis import CATEGORIES, average
from .build import build_report
from .model import Report

log = logging.getLogger("gpuprof")

# The operator table's bound (cpp tables.h, kMaxNameRows): the heaviest rows, then one row that
# holds the sums of the rest.
MAX_NAME_ROWS = 2000
# A summary's operator row: [name, calls, host_self_ns, host_total_ns, device_self_ns,
# device_total_ns, tc_self_ns, tc_total_ns, flops] (cpp/src/analysis/step_journal.cpp).
_OP_SUMS = 8


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


def _step_row(s: dict) -> dict:
    row = {"step": int(s["step"]), "total_us": _us(int(s["end_ns"]) - int(s["start_ns"]))}
    for key, _ in CATEGORIES:
        row[f"{key}_us"] = _us(int(s.get(f"{key}_ns", 0)))
    row["start_ns"] = int(s["start_ns"])
    row["end_ns"] = int(s["end_ns"])
    return row


def _memory_rows(s: dict) -> list[dict]:
    rows = []
    for device, allocated, reserved, capacity, rss in s.get("memory", []):
        rows.append(
            {
                "step": int(s["step"]),
                "ts_ns": int(s["start_ns"]),
                "device": int(device),
                "peak_allocated_bytes": allocated if allocated >= 0 else None,
                "peak_reserved_bytes": reserved if reserved >= 0 else None,
                "capacity_bytes": capacity if capacity > 0 else None,
                "peak_rss_bytes": rss if rss >= 0 else None,
            }
        )
    return rows


def _operator_row(name: str, sums: list) -> dict:
    calls, host_self, host_total, device_self, device_total, tc_self, tc_total, flops = sums
    return {
        "name": name,
        "calls": calls,
        "host_self_us": _us(host_self),
        "host_total_us": _us(host_total),
        "device_self_us": _us(device_self),
        "device_total_us": _us(device_total),
        "tc_eligible": bool(_core.is_tensor_core_eligible_op(name)),
        "tc_self_pct": round(100.0 * tc_self / device_self, 2) if device_self > 0 else None,
        "tc_total_pct": round(100.0 * tc_total / device_total, 2) if device_total > 0 else None,
        "flops": flops,
    }


def operator_rows(summaries: list[dict]) -> list[dict]:
    """The operator table of the steps: each name's sums over the steps' rows, the largest host
    total first (ties by name), bounded as the live table is."""
    sums: dict[str, list] = {}
    for summary in summaries:
        for row in summary.get("operators", []):
            name, values = str(row[0]), row[1 : 1 + _OP_SUMS]
            total = sums.setdefault(name, [0] * _OP_SUMS)
            for k, v in enumerate(values):
                total[k] += int(v)
    ordered = sorted(sums.items(), key=lambda kv: (-kv[1][2], kv[0]))
    if len(ordered) <= MAX_NAME_ROWS:
        return [_operator_row(name, s) for name, s in ordered]
    kept, rest = ordered[: MAX_NAME_ROWS - 1], ordered[MAX_NAME_ROWS - 1 :]
    other = [sum(s[k] for _, s in rest) for k in range(_OP_SUMS)]
    return [_operator_row(name, s) for name, s in kept] + [_operator_row(f"other names ({len(rest)})", other)]


def _add_flops(data: dict, summaries: list[dict], peak_tflops: Optional[float], same_host: bool) -> None:
    """The ``flops`` section and each step's ``flops``, as a live report makes them from its
    native pass's per-step rows (``analysis._add_flops``): on the host that wrote the journal, with
    this CPU's peak as the live report's; elsewhere MFU needs ``--peak-tflops``. The roofline needs
    the calls' input shapes, which the journal does not keep."""
    from ..analysis.flops import flops_section

    native = {
        "steps": [
            s["flop_counts"] for summary in summaries for s in summary.get("steps", []) if "flop_counts" in s
        ],
        "roofline": [],
        "counted_calls": sum(int(s.get("counted_calls", 0)) for s in summaries),
        "uncounted_calls": sum(int(s.get("uncounted_calls", 0)) for s in summaries),
    }
    for row in native["steps"]:
        row["backward_ran"] = bool(row.get("backward_ran"))
    section, roofline = flops_section(
        native,
        data["steps"],
        data["operators"],
        device_names=[],
        live=same_host,
        user_peak_tflops=peak_tflops,
    )
    per_step = {r["step"]: r["flops"] for r in native["steps"]}
    for s in data["steps"]:
        s["flops"] = per_step.get(s["step"]) if section["per_step_flops"] is not None else None
    data["flops"] = section
    data["roofline"] = roofline


def with_step_summaries(
    skeleton: Report, events: list[dict], peak_tflops: Optional[float] = None, same_host: bool = False
) -> Optional[Report]:
    """``skeleton``: the report of the journal's step events alone. Where every step carries a
    readable summary, the report of the summaries; else None (the skeleton stands: step times).
    ``same_host``: the journal was written on this host, so the FLOPs section may take this CPU's
    peak, as the live report would have."""
    summaries = [e.get("gpuprof") for e in events]
    if not summaries or not all(isinstance(s, dict) for s in summaries):
        return None
    try:
        return _from_summaries(skeleton, summaries, peak_tflops, same_host)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        log.warning(
            "gpuprof: the step journal's summaries cannot be read (%s); its step times are reported", e
        )
        return None


def _from_summaries(
    skeleton: Report, summaries: list[dict], peak_tflops: Optional[float], same_host: bool
) -> Report:
    data = skeleton.to_dict()
    steps, memory = [], []
    for summary in summaries:
        for s in summary.get("steps", []):
            steps.append(_step_row(s))
            memory.extend(_memory_rows(s))
    data["steps"] = steps
    data["average"] = average(steps)
    data["operators"] = operator_rows(summaries)
    _add_flops(data, summaries, peak_tflops, same_host)
    data["memory"] = memory
    data["counts"] = {
        **data.get("counts", {}),
        "events": sum(int(s.get("events", 0)) for s in summaries),
        "dropped": max(int(s.get("dropped", 0)) for s in summaries),
        "steps": len(steps),
    }
    data.pop("step_views", None)  # the timelines need the events, which the journal does not keep
    return build_report(analysed=data, with_step_views=False, peak_tflops=peak_tflops)
