"""Cross-rank analysis: per-rank breakdowns, stragglers, time waiting in collectives, overlap and
load imbalance, from one small summary per rank (docs/distributed.md defines every number).

A rank summary is a dict (what ranks exchange at the end of a span, and what a worker returns for one
trace file of a folder)::

    {"rank", "local_rank", "world_size", "hostname", "device", "backend",
     "steps": [{"step", "total_us", "<category>_us", ...}],   # the report's step rows
     "average": {...},                                        # the report's average
     "comm_total_us": float | None}  # communication per step including the part hidden behind
                                     # compute (device collectives); None when not measured

In a synchronous job every rank's step lasts as long as the slowest rank's: the straggler spends
longer *outside* collectives, and every other rank shows that difference as time waiting inside them.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from typing import Optional

from . import CATEGORIES

COMM = "communication_us"
CATEGORY_KEYS = [f"{k}_us" for k, _ in CATEGORIES]
# A rank is a straggler when its time per step outside collectives exceeds the median rank's by at
# least STRAGGLER_MIN_PCT of it, STRAGGLER_MIN_STEP_PCT of the median rank's step and STRAGGLER_MIN_US:
# below that, run-to-run noise (a loaded host deschedules processes for a millisecond now and then).
STRAGGLER_MIN_PCT = 10.0
STRAGGLER_MIN_STEP_PCT = 5.0
STRAGGLER_MIN_US = 1000.0

_COMM_KERNEL = re.compile(r"nccl|rccl|nvshmem", re.IGNORECASE)


def summary_from_report(data: dict, *, rank_info: Optional[dict] = None) -> dict:
    """The rank summary of one report dict (``Report.to_dict()`` or ``Report._data``).

    ``rank_info`` gives rank, local_rank, world_size, hostname, device and backend when known (a live
    session knows them); otherwise they come from the trace's ``distributedInfo`` metadata."""
    info = dict(_dist_info(data))
    info.update({k: v for k, v in (rank_info or {}).items() if v is not None})
    steps = [{k: v for k, v in s.items() if k == "step" or k.endswith("_us")} for s in data.get("steps", [])]
    n = len(steps)
    comm_kernel_us = sum(
        float(k.get("total_us") or 0.0)
        for k in _rows(data.get("kernels"))
        if _COMM_KERNEL.search(str(k.get("name", "")))
    )
    return {
        "rank": _int(info.get("rank"), 0),
        "local_rank": _int(info.get("local_rank"), _int(info.get("rank"), 0)),
        "world_size": _int(info.get("world_size"), 1),
        "hostname": str(info.get("hostname") or ""),
        "device": str(info.get("device") or ""),
        "backend": str(info.get("backend") or ""),
        "batch_size": info.get("batch_size"),
        "steps": steps,
        "average": dict(data.get("average") or {}),
        "comm_total_us": (comm_kernel_us / n) if (n and comm_kernel_us > 0) else None,
        "source": str((data.get("source") or {}).get("path") or ""),
    }


def _rows(section) -> list:
    if isinstance(section, dict):
        section = section.get("rows")
    return [r for r in (section or []) if isinstance(r, dict)]


def _int(v, default: int) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _dist_info(data: dict) -> dict:
    raw = (data.get("metadata") or {}).get("distributedInfo")
    if isinstance(raw, str):
        import json

        try:
            raw = json.loads(raw)
        except ValueError:
            raw = None
    return raw if isinstance(raw, dict) else {}


def _mean(vals: list) -> float:
    return sum(vals) / len(vals) if vals else 0.0


def cross_rank(summaries: Iterable[dict], *, expected_world_size: Optional[int] = None) -> dict:
    """The cross-rank result: ``ranks`` rows, ``stragglers``, ``imbalance_pct``, ``matched_steps``,
    ``missing_ranks``. Steps are matched by step number: only steps every rank recorded count
    (when no step is common, each rank's own steps are used and ``matched_steps`` is 0)."""
    ranks = sorted(summaries, key=lambda s: s["rank"])
    world = max([expected_world_size or 0] + [s.get("world_size", 1) for s in ranks]) if ranks else 0
    present = {s["rank"] for s in ranks}
    missing = sorted(set(range(world)) - present)
    common = None
    for s in ranks:
        nums = {st["step"] for st in s["steps"]}
        common = nums if common is None else common & nums
    common = common or set()

    def steps_of(s):
        return [st for st in s["steps"] if st["step"] in common] if common else s["steps"]

    # Per rank and step: time outside collectives ("busy") and in them.
    per_rank = {}
    for s in ranks:
        st = steps_of(s)
        per_rank[s["rank"]] = {
            "busy": {x["step"]: x["total_us"] - x.get(COMM, 0.0) for x in st},
            "comm": {x["step"]: x.get(COMM, 0.0) for x in st},
            "avg": {k: _mean([x.get(k, 0.0) for x in st]) for k in ["total_us"] + CATEGORY_KEYS},
        }
    # Waiting in collectives: per step, a rank's collective time beyond the least any rank spent in
    # them in that step (the least is the transfer itself, seen by the rank that arrived last).
    wait = {r: [] for r in per_rank}
    for step in sorted(common):
        least = min(per_rank[r]["comm"][step] for r in per_rank)
        for r in per_rank:
            wait[r].append(per_rank[r]["comm"][step] - least)

    rows = []
    for s in ranks:
        pr = per_rank[s["rank"]]
        avg = {k: round(v, 3) for k, v in pr["avg"].items()}
        total = avg["total_us"]
        for k, _ in CATEGORIES:
            avg[f"{k}_pct"] = round(100.0 * avg[f"{k}_us"] / total, 2) if total > 0 else 0.0
        comm_total = s.get("comm_total_us")
        overlap = None
        if comm_total:
            exposed = min(avg[COMM], comm_total)
            overlap = round(100.0 * (comm_total - exposed) / comm_total, 2)
        rows.append(
            {
                "rank": s["rank"],
                "local_rank": s.get("local_rank", s["rank"]),
                "world_size": s.get("world_size", world),
                "hostname": s.get("hostname", ""),
                "device": s.get("device", ""),
                "steps": len(pr["busy"]),
                "average": avg,
                "busy_us": round(_mean(list(pr["busy"].values())), 3),
                "collective_wait_us": round(_mean(wait[s["rank"]]), 3) if len(ranks) > 1 and common else 0.0,
                "comm_comp_overlap_pct": overlap,
            }
        )

    # Per step, each rank's excess over that step's median rank: a straggler is slow in most steps,
    # not in one (a descheduled process on a loaded host is not a straggler).
    typical = {}
    for r, pr in per_rank.items():
        per_step = []
        for step, busy in pr["busy"].items():
            others = [per_rank[q]["busy"][step] for q in per_rank if step in per_rank[q]["busy"]]
            per_step.append(busy - statistics.median_low(others))
        typical[r] = statistics.median(per_step) if per_step else 0.0
    stragglers = find_stragglers(rows, typical)
    busy = [r["busy_us"] for r in rows]
    mean_step = _mean([r["average"]["total_us"] for r in rows])
    imbalance = 100.0 * (max(busy) - _mean(busy)) / mean_step if rows and mean_step > 0 else 0.0
    return {
        "ranks": rows,
        "stragglers": stragglers,
        "imbalance_pct": round(max(0.0, imbalance), 2),
        "matched_steps": len(common),
        "missing_ranks": missing,
        "world_size": world,
    }


def find_stragglers(rows: list[dict], typical_excess: Optional[dict] = None) -> list[dict]:
    """Ranks whose time outside collectives exceeds the median rank's (the lower median, so that with
    two ranks the fast one is the reference) by the thresholds above, both in
    the mean and in the typical (median) step when ``typical_excess`` {rank: us} is given.

    ``excess_us``: mean per step outside collectives minus the median rank's; ``excess_pct``: that as
    a share of the median rank's mean step; ``category``: the breakdown key whose excess over the
    median rank's carries most of it. Largest excess first."""
    if len(rows) < 2:
        return []
    ref = statistics.median_low([r["busy_us"] for r in rows])
    ref_row = next(r for r in rows if r["busy_us"] == ref)
    floor = max(
        STRAGGLER_MIN_US,
        ref * STRAGGLER_MIN_PCT / 100.0,
        ref_row["average"]["total_us"] * STRAGGLER_MIN_STEP_PCT / 100.0,
    )
    out = []
    for r in rows:
        excess = r["busy_us"] - ref
        if excess < floor or (typical_excess is not None and typical_excess.get(r["rank"], 0.0) < floor):
            continue
        by_key = {k: r["average"][k] - ref_row["average"][k] for k in CATEGORY_KEYS if k != COMM}
        step = ref_row["average"]["total_us"]
        out.append(
            {
                "rank": r["rank"],
                "excess_us": round(excess, 3),
                "excess_pct": round(100.0 * excess / step, 2) if step > 0 else 0.0,
                "category": max(by_key, key=by_key.get),
            }
        )
    return sorted(out, key=lambda s: -s["excess_us"])


def attach(data: dict, result: dict, *, note: str = "", skipped_files: Optional[list] = None) -> dict:
    """Put a cross-rank result into a report dict (the keys docs/schema.md documents);
    ``skipped_files``, the rank files that could not be read, only when there are some."""
    data["ranks"] = result["ranks"]
    data["stragglers"] = result["stragglers"]
    data["cross_rank"] = {
        "world_size": result["world_size"],
        "matched_steps": result["matched_steps"],
        "missing_ranks": result["missing_ranks"],
        "imbalance_pct": result["imbalance_pct"],
        "note": note,
    }
    if skipped_files:
        data["cross_rank"]["skipped_files"] = [dict(s) for s in skipped_files]
    return data
